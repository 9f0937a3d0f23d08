"""The outside world and nothing else: sources (file://, SMB), tag reading, Arrow schemas and
the crawl directory's storage (versions, manifests, the lock, hints)."""
