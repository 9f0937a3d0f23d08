"""Audio and video tags: one dict of `media` columns per file, never an exception (`read_tags`).
Readers read only what the format needs from a seekable file (often a RangeFile over SMB); a
failed read keeps the fields found and sets a short `tag_error`. One module per container
family, plus the row (record), tag keys (fields), errors and names. May import crawl_io alone."""

from sharecrawl.crawl_io.tags.reader import read_tags
from sharecrawl.crawl_io.tags.record import TAG_COLUMNS, parse_int, parse_year

__all__ = ["TAG_COLUMNS", "parse_int", "parse_year", "read_tags"]
