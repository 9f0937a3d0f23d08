"""The read side: the search index written and read, the query language and ranked search, the
analysts' SQL and the round report. May import crawl_io and jobs; never pipeline."""
