"""Preloaded first by the fetch workers' fork server (pipeline.fetch.worker_context) and
imported nowhere else: the server dies with the crawl process that started it, even one
killed with SIGKILL, and its workers die with it (crawl_io.processes). It ignores Ctrl-C
from now on, not only once its preloads are in (as multiprocessing would): a Ctrl-C that
reaches the whole process group is the crawl process's to handle, and must not print a
traceback of the server's imports."""

import signal

from crawl_io.processes import die_with_parent

signal.signal(signal.SIGINT, signal.SIG_IGN)
die_with_parent()
