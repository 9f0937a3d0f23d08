"""Audio and video tags: one dict of `media` columns per file, never an exception.

`read_tags` is given a seekable file object (often a RangeFile over SMB) and reads only what
the format needs: headers, tag blocks and, for some formats, the last page or frame. A file
that cannot be read still yields the fields found so far and a short `tag_error`.

One module per container family (mpeg, flac, ogg, mp4, asf, riff; id3 wherever ID3 tags
are), the row they fill (record), the tag keys per format (fields), the error messages
(errors), what a file's name says (audio_names, video_names), and the entry point (reader).

Part of crawl_io: may import crawl_io alone.
"""

from crawl_io.tags.reader import read_tags
from crawl_io.tags.record import TAG_COLUMNS, parse_int, parse_year

__all__ = ["TAG_COLUMNS", "parse_int", "parse_year", "read_tags"]
