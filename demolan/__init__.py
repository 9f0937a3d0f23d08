"""The demo LAN behind `sharecrawl demo`: what it holds (`catalog`), its hosts as local
folders of real tagged media (`lan`, with the media `templates` and their tag writer, which
the tests use too) and the three demo rounds (`demo`).

May import crawl_io, jobs, queries and pipeline; not sensors, simulator or web.
"""
