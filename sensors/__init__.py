"""Sensors: processes that tell the rounds where to look. `sharecrawl watch` (`watch`): SMB
change notifications from the hosts (`hosts`), the crawl rules applied to them (`rules`),
kept as hints, and the rounds it starts (`rounds`); its options (`options`).

May import crawl_io, jobs, queries and pipeline; not simulator, web or demolan.
"""
