"""The `sharecrawl` command: its parser (`parser`) and dispatch (`main`); the commands that
write a crawl directory (`crawl`), read it (`read`), or run on their own (`services`); input
checks (`inputs`). May import every package; none imports it (tests/test_layout.py)."""
