"""The staleness simulator behind `sharecrawl simulate`: a synthetic LAN and its event trace
(`lan`), one policy's replay with the real scheduling code (`replay`, `hints`, `estimates`),
the optimum at the true rates (`bound`), all policies side by side (`simulate`), the
command's face (`cli`) and the progress bars it shares with the benchmarks (`progress`).

May import crawl_io, jobs, queries and pipeline; not sensors, web or demolan.
"""
