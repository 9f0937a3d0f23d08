"""mrjob jobs over segment listings: subtree hashes, partition splits, per-prefix statistics.

A job's input is a manifest: one Parquet part file per line. Its mapper reads one part and
pre-aggregates it with pyarrow, so the shuffle carries summaries, not one record per file.
"""
