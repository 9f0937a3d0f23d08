"""The outside world: sources (file://, SMB; liveness, change notifications), what they say
checked, tag reading (crawl_io.tags), the tables' Arrow schemas, the crawl directory's storage
(crawl_io.crawldb) and the processes a crawl starts. May import crawl_io alone."""
