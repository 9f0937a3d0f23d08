"""The domain's pure functions, one idea a module, and the thin mrjob shells over them (`mr_*`,
run by `runner`), whose mappers pre-aggregate a part each. May import crawl_io alone."""
