"""`sharecrawl demo`: build the demo LAN, crawl it in three rounds with changes between, print
each round's report and a few searches. It takes the crawl lock as `crawl` does, before it
clears the folder, so a running crawl or demo is never pulled from under (exit 75)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from sharecrawl.crawl_io.config_error import ConfigError
from sharecrawl.crawl_io.crawldb.crawldir import CrawlDir
from sharecrawl.crawl_io.crawldb.lock import LOCK_NAME, CrawlLock
from sharecrawl.demolan.lan import build_lan, change_lan
from sharecrawl.pipeline.rounds import run_round
from sharecrawl.pipeline.settings import read_settings
from sharecrawl.queries.status import format_report, round_report

SEARCHES = (
    ("madonna music", {}),
    ("мумий тролль", {}),
    ("series:lost", {"latest": True}),
    ("kind:video", {"all_hosts": True}),
)


def _clear(workdir: Path, keep: Path) -> None:
    """Remove everything under `workdir` but the file `keep` (the held LOCK) and its folders."""
    for path in workdir.iterdir():
        if path == keep:
            continue
        if path.is_dir() and not path.is_symlink() and path in keep.parents:
            _clear(path, keep)
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _is_demo(workdir: Path, lock: Path) -> bool:
    """Is `workdir` a demo's (or not there yet, or left by a demo stopped at its start)?"""
    if not workdir.exists() or (workdir / "hosts.txt").exists():
        return True
    return workdir.is_dir() and all(p in (lock, *lock.parents) for p in workdir.rglob("*"))


def command_name() -> str:
    """How to type `sharecrawl` here: its name if PATH finds this one, else its path."""
    script = Path(sys.executable).parent / "sharecrawl"
    found = shutil.which("sharecrawl")
    if found and script.exists() and Path(found).resolve() == script.resolve():
        return "sharecrawl"
    if not script.exists():
        return "python -m sharecrawl"
    shown = os.path.relpath(script)
    return str(script) if shown.startswith("..") else shown


def run_demo(workdir: Path) -> int:
    from sharecrawl.queries.search import format_results, search

    started = time.time()
    crawl = CrawlDir(workdir / "crawl")
    if not _is_demo(workdir, crawl.root / LOCK_NAME):
        raise ConfigError(f"{str(workdir)!r} exists and is not a demo folder; choose another")
    crawl.root.mkdir(parents=True, exist_ok=True)
    with CrawlLock(crawl.root).acquire():  # before the old demo is cleared
        _clear(workdir, crawl.root / LOCK_NAME)
        hosts_file = build_lan(workdir)
        crawl.crawldb.mkdir(parents=True)
        settings = read_settings(hosts_file=hosts_file, crawl_dir=crawl.root)
        print(f"demo LAN written to {workdir}: hosts in {hosts_file}")
        print(
            f"scheduling policy: {settings.policy} (luigi.cfg's; "
            "`sharecrawl crawl --help` says what each one does)"
        )
        for n in (1, 2, 3):
            for change in change_lan(workdir, n):
                print(f"  change: {change}")
            run_round(settings, n)
            print(format_report(round_report(crawl)))
    for query, options in SEARCHES:
        flags = "".join(f" --{k.replace('_', '-')}" for k in options)
        print(f"\n$ sharecrawl search{flags} {query}")
        print(format_results(search(crawl.index, query, limit=5, **options)))
    me = command_name()
    print(f"\ndemo finished in {time.time() - started:.1f} s; try:")
    print(f"  {me} search --crawl-dir {crawl.root} madonna")
    print(f"  {me} status --crawl-dir {crawl.root}")
    print(f"  {me} sql --crawl-dir {crawl.root} 'SELECT host, online, status FROM hosts'")
    if me != "sharecrawl":
        print("(`. .venv/bin/activate` puts sharecrawl on PATH in this shell; see README.md)")
    return 0
