"""The outside world and nothing else: the sources hosts are read through (file:// and SMB,
with liveness checks and change notifications) and what they say checked; tag reading
(crawl_io.tags); the Arrow schemas of the tables; the crawl directory's storage (versions,
their manifests and parts per host, atomic writes, the lock, hints, integrity, retention,
temporary files); and the processes a crawl starts (its workers).

May import crawl_io alone: every other package stands on it.
"""
