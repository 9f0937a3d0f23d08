"""The staleness simulator behind `sharecrawl simulate`: a synthetic LAN and its trace (`lan`),
one policy's replay (`replay`, `hints`, `estimates`), the optimum at the true rates (`bound`),
all policies side by side (`simulate`). May import crawl_io, jobs, queries and pipeline."""
