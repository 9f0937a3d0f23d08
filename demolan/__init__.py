"""The demo LAN behind `sharecrawl demo`: what it holds (`catalog`), its hosts as folders of
tagged media (`lan`, `templates`) and the three demo rounds (`demo`).
May import crawl_io, jobs, queries and pipeline; not sensors, simulator or web."""
