"""The domain's pure functions, one idea a module: partitions (`membership`), the walk
(`walk`, `hinted_walk`), hashes (`subtree_hash`), B*-subtree split and re-partitioning
(`bstar_split`, `repartition_plan`, `scan_cost`), prefix statistics (`prefix_stats`),
hints against partitions (`hint_counts`), folder rows (`folder_update`), crawl rules
(`crawl_rules`); and the thin mrjob shells over them (`mr_*`, run by `runner`).

A job's input is a manifest (jobs.runner): one Parquet part, or one JSON record naming parts,
a line. Its mapper reads one part and pre-aggregates it with pyarrow or DuckDB, so the shuffle
carries summaries, not one record per file.

May import crawl_io alone.
"""
