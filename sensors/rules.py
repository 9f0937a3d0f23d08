"""The crawl rules as the watcher applies them to hints, read as a round's Inject reads them
(pipeline.rules_store.RulesStore) and again when one of their files changes."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from sharecrawl.jobs.crawl_rules import Rules
from sharecrawl.pipeline.rules_store import RulesStore

log = logging.getLogger("sharecrawl")
REBUILD_S = 3600.0  # compiled rules cache every folder they were asked about: start afresh


class HintRules:
    def __init__(self, crawl_dir: str | Path, rules_file: str | None) -> None:
        self._store = RulesStore(crawl_dir, rules_file or None)
        self._signature: tuple | None = None
        self._error: str | None = None
        self._built = 0.0
        self.rules = Rules()
        self.check()

    def _files_signature(self) -> tuple:
        paths = (self._store.operator_path, self._store.auto_path, self._store.disabled_path)
        signature = []
        for path in paths:
            try:
                st = os.stat(path) if path else None
            except OSError:
                st = None
            signature.append(None if st is None else (st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(signature)

    def check(self) -> bool:
        """Read the rules again if a file changed (or an hour passed); True when read."""
        signature = self._files_signature()
        if signature == self._signature and time.monotonic() - self._built < REBUILD_S:
            return False
        if self._signature is not None and signature != self._signature:
            log.info("sharecrawl: watch: crawl rules read again")
        self._signature = signature
        self._built = time.monotonic()
        current = self._store.current()
        if current.error and current.error != self._error:
            log.warning("sharecrawl: watch: rules: %s", current.error)
        self._error = current.error
        self.rules = current.rules
        return True

    def excludes(self, host: str, share: str, path: str) -> bool:
        """Does the crawl never look at `path` (excluded above or itself)? A notification does
        not say file or folder: excluded as either drops it."""
        rules = self.rules.for_share(host, share)
        if rules.whole_share_excluded:
            return True
        if not path or not rules:
            return False
        if rules.excludes_subtree(path.rpartition("/")[0]):
            return True
        return rules.excludes(path, True) or rules.excludes(path, False)
