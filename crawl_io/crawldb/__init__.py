"""The crawl directory's storage (docs/crawl-dir.md). May import crawl_io's top level and
itself; nothing above crawl_io, and the rest of crawl_io does not import it."""
