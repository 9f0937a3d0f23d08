"""DuckDB over the crawldb: the search index, ranked search and the query language."""
