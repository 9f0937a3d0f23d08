"""The `sharecrawl` command: the parser (`parser`, built of `options`) and its dispatch
(`main`); the commands that write a crawl directory (`crawl`), that read it (`read`), and the
long-running ones (`services`); input checks (`inputs`).

May import every package; none imports it (tests/test_layout.py).
"""
