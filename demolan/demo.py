"""`sharecrawl demo`: build a LAN of real tagged media as local folders, crawl it in three
rounds with changes in between (files added, retagged, deleted; a host switched off), print
each round's report and the answers to a few searches."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from crawl_io.crawldir import CrawlDir
from demolan.lan import build_lan, change_lan
from pipeline import settings as config
from pipeline.rounds import run_round
from queries.status import format_report, round_report

SEARCHES = (
    ("madonna music", {}),
    ("мумий тролль", {}),
    ("series:lost", {"latest": True}),
    ("kind:video", {"all_hosts": True}),
)


def run_demo(workdir: Path) -> int:
    from queries.search import format_results, search

    started = time.time()
    if workdir.exists():
        if not (workdir / "hosts.txt").exists():
            raise config_error(workdir)
        shutil.rmtree(workdir)
    hosts_file = build_lan(workdir)
    crawl = CrawlDir(workdir / "crawl")
    crawl.crawldb.mkdir(parents=True)
    config.override(hosts_file=hosts_file, crawl_dir=crawl.root)
    print(f"demo LAN written to {workdir}: hosts in {hosts_file}")
    print(
        f"scheduling policy: {config.sharecrawl().policy} (luigi.cfg; the default, optimal, "
        "revisits each partition as often as its change rate is worth under the crawlers' "
        "budget, which `sharecrawl simulate` measures least stale)"
    )
    for n in (1, 2, 3):
        for change in change_lan(workdir, n):
            print(f"  change: {change}")
        run_round(str(crawl.root), n)
        print(format_report(round_report(crawl)))
    for query, options in SEARCHES:
        flags = "".join(f" --{k.replace('_', '-')}" for k in options)
        print(f"\n$ sharecrawl search{flags} {query}")
        print(format_results(search(crawl.index, query, limit=5, **options)))
    print(f"\ndemo finished in {time.time() - started:.1f} s; try:")
    print(f"  sharecrawl search --crawl-dir {crawl.root} madonna")
    print(f"  sharecrawl sql --crawl-dir {crawl.root} 'SELECT host, online FROM hosts'")
    return 0


def config_error(workdir: Path) -> Exception:
    from crawl_io.sources import ConfigError

    return ConfigError(f"{str(workdir)!r} exists and is not a demo folder; choose another")
