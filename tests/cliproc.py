"""Run `sharecrawl` in a child process, as cron does.

Tests that set SMB credentials in the environment need this: fetch workers are forked from
a forkserver started once per process, with the environment of that moment, so a variable
set later by a test in the pytest process never reaches them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    config: Path | None = None,
    timeout_s: float = 300,
) -> subprocess.CompletedProcess[str]:
    """`python -m cli.main ARGS` with os.environ plus `env` (and LUIGI_CONFIG_PATH)."""
    full = {**os.environ, **(env or {})}
    if config is not None:
        full["LUIGI_CONFIG_PATH"] = str(config)
    return subprocess.run(
        [sys.executable, "-m", "sharecrawl.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=full,
        timeout=timeout_s,
        start_new_session=True,
    )
