"""The domain's pure functions, one idea a module (membership, walk, subtree hash, B*-subtree
split, prefix statistics, crawl rules), and the thin mrjob shells over them (mr_*.py).

A job's input is a manifest (jobs.runner): one Parquet part, or one JSON record naming parts,
a line. Its mapper reads one part and pre-aggregates it with pyarrow or DuckDB, so the shuffle
carries summaries, not one record per file.
"""
