"""`sharecrawl simulate`: its options, its table and its plot (the simulator's face)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from crawl_io.workers import WorkerDied
from pipeline.scheduling.policies import POLICY_HELP, POLICY_NAMES
from simulator.lan import HOUR, MINUTE, SimParams
from simulator.simulate import simulate

OPTIMUM = "optimum, true rates"  # what simulate()'s "bound" is (simulator.bound)


def plot(result_or_series: dict, path: str | Path) -> Path:
    """Draw freshness over time per policy (and the optimum at the true rates, when known)
    to a PNG file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = result_or_series.get("series", result_or_series)
    if not series or not all(isinstance(v, list) for v in series.values()):
        raise ValueError("plot: need a simulate(..., keep_series=True) result or its series")
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    for name, points in series.items():
        if points:
            t, f = zip(*points, strict=True)
            ax.plot(t, f, label=name, linewidth=1)
    if "bound" in result_or_series:
        ax.axhline(result_or_series["bound"], color="black", linestyle="--", label=OPTIMUM)
    ax.set_xlabel("time, hours")
    ax.set_ylabel("freshness (share of partitions up to date)")
    ax.set_title("sharecrawl simulate: freshness over time")
    ax.grid(alpha=0.3)
    ax.legend()
    path = Path(path)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


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
            _duration(m["staleness_min_s"]),
            _duration(m["staleness_mean_s"]),
            _duration(m["staleness_p95_s"]),
            _duration(m["staleness_max_s"]),
            f"{m['changes']:,}",
            f"{m['scans']:,}",
            f"{m['empty_scans']:,}",
            f"{m['tag_reads']:,}",
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


def _parser() -> argparse.ArgumentParser:
    d = SimParams()
    ap = argparse.ArgumentParser(
        prog="sharecrawl simulate",
        description="Compare the scheduling policies on a synthetic LAN (one trace, one seed). "
        "Progress goes to stderr when it is a terminal.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--hosts", type=int, default=d.hosts, help="hosts on the synthetic LAN")
    ap.add_argument("--days", type=float, default=d.days, help="measured days (after warm-up)")
    ap.add_argument("--crawlers", type=int, default=d.crawlers, help="hosts scanned at once")
    ap.add_argument(
        "--policies",
        default=",".join(POLICY_NAMES),
        help="comma separated, of: "
        + "; ".join(f"{name}: {text}" for name, text in POLICY_HELP.items()),
    )
    ap.add_argument("--seed", type=int, default=d.seed, help="the LAN and its trace")
    ap.add_argument(
        "--round-seconds",
        type=float,
        default=d.round_seconds,
        help="a round's budget: crawlers x this, and no host busier than this",
    )
    ap.add_argument(
        "--warmup-days", type=float, default=d.warmup_days, help="simulated, not measured"
    )
    ap.add_argument(
        "--min-round-s",
        type=float,
        default=d.min_round_s,
        help="fixed part of a round; rounds run back to back (= round-seconds: fixed rounds)",
    )
    ap.add_argument(
        "--notify-share",
        type=float,
        default=d.notify_share,
        help="share of hosts whose shares send change notifications (seen by sensors only)",
    )
    ap.add_argument(
        "--hint-crawlers",
        type=int,
        default=d.hint_crawlers,
        help="of the crawlers, kept by sensors for notified changes (0: they wait for a round)",
    )
    ap.add_argument(
        "--hinted-scan-folders",
        type=int,
        default=d.hinted_scan_folders,
        help="folders a hinted scan lists around a notified change (0: the whole partition)",
    )
    ap.add_argument("--plot", metavar="FILE.png", help="draw freshness over time")
    ap.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="policies replayed at once"
    )
    return ap


def run_cli(argv: list[str] | None) -> int:
    """`sharecrawl simulate [--json] [--hosts N] [--days D] [--crawlers K] [--policies a,b]
    [--seed S] [--plot FILE.png]`; 0 on success, 2 on bad arguments, 1 when a worker
    process died."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # argparse has printed its message (or the help)
        return int(e.code or 0)
    policies = [s.strip() for s in args.policies.split(",") if s.strip()]
    try:
        if not policies:
            raise ValueError("simulate: --policies names no policy")
        result = simulate(
            hosts=args.hosts,
            days=args.days,
            crawlers=args.crawlers,
            policies=policies,
            seed=args.seed,
            round_seconds=args.round_seconds,
            warmup_days=args.warmup_days,
            min_round_s=args.min_round_s,
            keep_series=bool(args.plot),
            workers=args.workers,
            notify_share=args.notify_share,
            hint_crawlers=args.hint_crawlers,
            hinted_scan_folders=args.hinted_scan_folders,
        )
        if args.plot:
            plot(result, args.plot)
    except (ValueError, OSError) as e:
        print(f"sharecrawl simulate: {e}", file=sys.stderr)
        return 2
    except WorkerDied as e:  # each worker holds a copy of the trace: fewer need less memory
        print(f"sharecrawl simulate: {e}: run it again, with fewer --workers", file=sys.stderr)
        return 1
    result.pop("series", None)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
        if args.plot:
            print(f"plot: {args.plot}")
    return 0
