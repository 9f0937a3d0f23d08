"""Run `sharecrawl` as users run it: the installed console script, in a child process.

The script's folder comes first on its sys.path, so a module of a dependency's script there
shadows a library of the same name (impacket's `smbclient.py` once shadowed smbprotocol's
`smbclient`); `python -m` or a call of `main` in the test's process would hide that. The one
way tests and benchmarks start the product (tests/test_console_script.py holds them to it).
A child also sees the environment of its own moment: fetch workers fork from a fork server
started once per process, so a variable a test sets later would never reach them in-process."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sharecrawl.crawl_io.processes import children, descendants

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "sharecrawl"


def console_script() -> str:
    """The path of the installed `sharecrawl` script; the test skips when it is absent."""
    if not SCRIPT.exists():
        pytest.skip(f"no console script {SCRIPT}: `make test` installs it (pip install -e .)")
    return str(SCRIPT)


def cli_argv(*args: str) -> list[str]:
    """The argv of `sharecrawl ARGS`, for a test that starts it with Popen itself."""
    return [console_script(), *args]


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    config: Path | None = None,
    timeout_s: float = 300,
    cwd: Path | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`sharecrawl ARGS` with os.environ plus `env` (and LUIGI_CONFIG_PATH=`config`), from
    `cwd` (the checkout when None), `stdin` its input (else none)."""
    full = {**os.environ, **(env or {})}
    if config is not None:
        full["LUIGI_CONFIG_PATH"] = str(config)
    return subprocess.run(
        cli_argv(*args),
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="surrogateescape",
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        cwd=cwd or REPO,
        env=full,
        timeout=timeout_s,
        start_new_session=True,
    )


def fork_server_workers(pid: int) -> set[int]:
    """The worker processes below process `pid` (a `sharecrawl` child, or this process): the
    children of the fork servers there (crawl_io.workers)."""
    found: set[int] = set()
    for below in descendants(pid):
        with contextlib.suppress(OSError):  # gone meanwhile
            if b"multiprocessing.forkserver" in Path(f"/proc/{below}/cmdline").read_bytes():
                found.update(c for c in children(below) if c not in found)
    return found
