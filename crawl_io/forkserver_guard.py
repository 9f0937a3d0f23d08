"""Preloaded first by the workers' fork server (crawl_io.workers.worker_context) and
imported nowhere else: the server dies with the crawl process that started it, even one
killed with SIGKILL, and its workers die with it (crawl_io.processes)."""

from crawl_io.processes import die_with_parent

die_with_parent()
