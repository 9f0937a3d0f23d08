"""The crawl directory's storage: its versions, their manifests and parts per host (in groups
of partitions), every file written whole (atomic), the lock, the hints store, integrity
checks, retention, the fetchlogs, temporary files and what a full disk means.

May import crawl_io's top level (schema, sources' ConfigError, processes) and itself; nothing
above crawl_io. The rest of crawl_io does not import it.
"""
