"""Sensors: `sharecrawl watch` (`watch`) keeps SMB change notifications from the hosts (`hosts`),
filtered by the crawl rules (`rules`), as hints, and starts rounds for them (`rounds`).
May import crawl_io, jobs, queries and pipeline; not simulator, web or demolan."""
