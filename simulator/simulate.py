"""`simulate()`: one synthetic LAN replayed for every policy, side by side, with the optimum
at the true rates (its key "bound"), measured after a warm-up in which the estimates settle;
`print_table`, the table `sharecrawl simulate` prints."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from functools import partial
from typing import Any

import numpy as np

from sharecrawl.crawl_io.workers import run_calls
from sharecrawl.pipeline.scheduling.policies import POLICY_NAMES, get_policy
from sharecrawl.simulator.bound import freshness_bound
from sharecrawl.simulator.lan import DAY, HOUR, MINUTE, SimParams, build_lan
from sharecrawl.simulator.replay import replay

OPTIMUM = "optimum, true rates"  # what the result's "bound" is (simulator.bound)


def simulate(
    hosts: int = SimParams.hosts,
    days: float = SimParams.days,
    crawlers: int = SimParams.crawlers,
    policies: Sequence[str] = POLICY_NAMES,
    seed: int = SimParams.seed,
    *,
    workers: int = 1,
    **lan_settings: Any,
) -> dict:
    """The --json object of `sharecrawl simulate`. workers > 1 replays policies in that
    many of the crawl's worker processes (same results); other keyword arguments are
    `SimParams` fields (round_seconds, notify_share, ...)."""
    for name in policies:
        get_policy(name)  # unknown names fail before the long part
    params = SimParams(hosts=hosts, days=days, crawlers=crawlers, seed=seed, **lan_settings)
    built = time.perf_counter()
    lan = build_lan(params)
    build_s = time.perf_counter() - built
    bound, bound_changing = freshness_bound(lan)
    # Policies that choose only what is due run many short rounds: start them first. Each
    # worker gets the trace with its call (5 MiB pickled for 1,000 hosts and 7 days).
    names = sorted(policies, key=lambda n: n not in ("adaptive", "optimal", "sensors"))
    if min(workers, len(names)) <= 1:
        runs = [replay(lan, name) for name in names]
    else:
        runs = run_calls([partial(replay, lan, name) for name in names], min(workers, len(names)))
    by_name = dict(zip(names, runs, strict=True))
    changing_day = float(np.mean(1.0 - np.exp(-lan.rate * DAY * lan.online_share[lan.host_of])))
    return {
        "params": {
            **asdict(params),
            "partitions": int(lan.host_of.size),
            "folders": int(lan.n_folders.sum()),
            "files": int(lan.n_files.sum()),
            "changes": int(np.sum(lan.change_time >= lan.measure_from)),
            "changing_per_day": round(changing_day, 4),
            "full_crawl_s": round(float(lan.list_cost.sum() / crawlers), 1),
            "notifying_hosts": int(lan.watch.notify.sum()),
            "build_s": round(build_s, 2),
        },
        "bound": round(bound, 6),
        "bound_changing": round(bound_changing, 6),
        "policies": {name: by_name[name] for name in policies},
    }


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * HOUR:
        return f"{seconds / MINUTE:.1f} min"
    return f"{seconds / HOUR:.1f} h"


def print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    p = result["params"]
    table = Table(
        title=(
            f"{p['hosts']} hosts, {p['partitions']} partitions, {p['folders']:,} folders, "
            f"{p['files']:,} files; {p['crawlers']} crawlers, rounds of "
            f"{p['round_seconds']:.0f} s; {p['days']:g} days measured after "
            f"{p['warmup_days']:g} warm-up, seed {p['seed']}"
        )
    )
    table.add_column("policy", no_wrap=True)
    for col in ("freshness", "changing", "stale min", "mean", "p95", "max"):
        table.add_column(col, justify="right")
    for col in ("changes", "scans", "empty", "tag reads"):
        table.add_column(col, justify="right")
    for name, m in result["policies"].items():
        table.add_row(
            name,
            f"{m['freshness']:.4%}",
            f"{m['freshness_changing']:.2%}",
            *(_duration(m[f"staleness_{k}_s"]) for k in ("min", "mean", "p95", "max")),
            *(f"{m[k]:,}" for k in ("changes", "scans", "empty_scans", "tag_reads")),
        )
    table.add_row(OPTIMUM, f"{result['bound']:.4%}", f"{result['bound_changing']:.2%}", *[""] * 8)
    # Wide enough for every column when the output goes to a file or a pipe.
    console = Console(width=None if sys.stdout.isatty() else 150)
    console.print(table)
    console.print(
        "freshness: time-averaged share of partitions whose index matches the host "
        "('changing': of those that ever change); staleness: change to index; "
        f"{OPTIMUM}: the optimal policy's expected freshness given the rates the trace "
        "realised, the bound for a policy that knows only estimated rates (sensors is also "
        f"told of changes: {p['notifying_hosts']} of {p['hosts']} hosts notify)."
    )
