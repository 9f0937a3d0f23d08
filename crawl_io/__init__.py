"""The outside world and nothing else, in three rooms. At the top level: the sources hosts are
read through (file:// and SMB, with liveness checks and change notifications) and what they
say checked, tag reading (crawl_io.tags), and the Arrow schemas of the tables. In
crawl_io.crawldb: the crawl directory's storage (versions, their manifests and parts per
host, atomic writes, the lock, hints, integrity, retention, temporary files). And the
processes a crawl starts (workers, processes).

May import crawl_io alone: every other package stands on it.
"""
