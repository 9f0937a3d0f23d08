"""`simulate()`: one synthetic LAN replayed for every policy, side by side, with the optimum
at the true rates (its key "bound").

Measured after a warm-up (half a day) in which the estimates settle. Policies replay in the
crawl's worker processes when asked (same results); progress goes to stderr when it is a
terminal.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from functools import partial
from typing import Any, cast

import numpy as np

from crawl_io.workers import report, run_calls
from pipeline.scheduling.policies import POLICY_NAMES, get_policy
from simulator.bound import freshness_bound
from simulator.lan import DAY, HOUR, Lan, SimParams, build_lan
from simulator.progress import Bars
from simulator.replay import PolicyRun, replay


def simulate(
    hosts: int = SimParams.hosts,
    days: float = SimParams.days,
    crawlers: int = SimParams.crawlers,
    policies: Sequence[str] = POLICY_NAMES,
    seed: int = SimParams.seed,
    *,
    round_seconds: float = SimParams.round_seconds,
    min_round_s: float = SimParams.min_round_s,
    warmup_days: float = SimParams.warmup_days,
    keep_series: bool = False,
    workers: int = 1,
    progress: bool | None = None,
    **lan_settings: Any,
) -> dict:
    """Replay one synthetic LAN for every policy; the --json object of `sharecrawl simulate`.

    With keep_series=True the result also holds "series": {name: [[t_h, freshness], ...]}
    for `plot`. workers > 1 replays policies in that many worker processes (same results).
    progress: bars on stderr (None: when stderr is a terminal). Other keyword arguments are
    `SimParams` fields (notify_share, ...).
    """
    for name in policies:
        get_policy(name)  # unknown names fail before the long part
    params = SimParams(
        hosts=hosts,
        days=days,
        crawlers=crawlers,
        seed=seed,
        round_seconds=round_seconds,
        min_round_s=min_round_s,
        warmup_days=warmup_days,
        **lan_settings,
    )
    check(params)
    with Bars(progress) as bars:
        task = bars.add("synthetic LAN", total=None, detail=f"{hosts} hosts")
        built = time.perf_counter()
        lan = build_lan(params)
        build_s = time.perf_counter() - built
        bound, bound_changing = freshness_bound(lan)
        bars.finish(task, detail=f"{hosts} hosts, {lan.host_of.size} partitions")
        runs = _replay_all(lan, list(policies), workers, bars)
    changing_day = float(np.mean(1.0 - np.exp(-lan.rate * DAY * lan.online_share[lan.host_of])))
    assert lan.watch is not None
    result: dict = {
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
        "policies": {name: run.summary() for name, run in runs.items()},
    }
    if keep_series:
        result["series"] = {
            name: [
                [round(t / HOUR, 4), f] for t, f in zip(run.series_t, run.series_fresh, strict=True)
            ]
            for name, run in runs.items()
        }
    return result


def _replay_reporting(lan: Lan, name: str) -> PolicyRun:
    """One policy's replay in a worker of run_calls, its progress sent as it goes."""
    run = replay(lan, name, lambda t: report((name, t, None)))
    report((name, lan.end, run.seconds))
    return run


def _replay_all(lan: Lan, names: list[str], workers: int, bars: Bars) -> dict[str, PolicyRun]:
    total_days = lan.end / DAY
    tasks = {name: bars.add(name, total=total_days, detail="") for name in names}

    def show(name: str, t: float) -> None:
        bars.update(tasks[name], completed=t / DAY, detail=f"day {t / DAY:.1f} of {total_days:g}")

    def done(name: str, seconds: float) -> None:
        bars.finish(tasks[name], detail=f"{seconds:.0f} s")

    workers = min(workers, len(names))
    if workers <= 1:
        runs = {}
        for name in names:
            runs[name] = replay(lan, name, lambda t, name=name: show(name, t))
            done(name, runs[name].seconds)
        return runs

    # The crawl's workers (crawl_io.workers): started by a fork server, never forked from
    # this process, whose threads (the progress bars') a fork would copy without their
    # owners; each with a pipe of its own, so a worker killed is seen at once. Each gets
    # the trace with its call (5 MiB pickled for 1,000 hosts and 7 days: milliseconds).
    def on_event(event: object) -> None:
        name, t, seconds = cast(tuple[str, float, float | None], event)
        if seconds is None:
            show(name, t)
        else:
            done(name, seconds)

    # Policies that choose only what is due run many short rounds: start them first.
    slow_first = sorted(names, key=lambda n: n not in ("adaptive", "optimal", "sensors"))
    calls = [partial(_replay_reporting, lan, name) for name in slow_first]
    results = run_calls(calls, workers, on_event=on_event if bars.enabled else None)
    by_name = dict(zip(slow_first, cast(list[PolicyRun], results), strict=True))
    return {name: by_name[name] for name in names}


def check(params: SimParams) -> None:
    """One clear line for settings that cannot be simulated."""
    if params.hosts < 1:
        raise ValueError("simulate: --hosts must be at least 1")
    if not params.days > 0:
        raise ValueError("simulate: --days must be positive")
    if params.crawlers < 1:
        raise ValueError("simulate: --crawlers must be at least 1")
    if not params.round_seconds > 0:
        raise ValueError("simulate: --round-seconds must be positive")
    if params.warmup_days < 0:
        raise ValueError("simulate: --warmup-days must not be negative")
    if not 0.0 <= params.notify_share <= 1.0:
        raise ValueError("simulate: --notify-share must be between 0 and 1")
    if params.hint_crawlers < 0:
        raise ValueError("simulate: --hint-crawlers must not be negative")
    if params.hinted_scan_folders < 0:
        raise ValueError("simulate: --hinted-scan-folders must not be negative")
