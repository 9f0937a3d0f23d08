"""The domain's pure functions, one idea a module (partitions, walks, hashes, splits, prefix
statistics, hints, crawl rules), and the thin mrjob shells over them (`mr_*`, run by `runner`).
A job's input is a manifest (jobs.runner); its mapper pre-aggregates one part, so the shuffle
carries summaries, not one record per file. May import crawl_io alone."""
