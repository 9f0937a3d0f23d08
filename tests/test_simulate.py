"""A small simulation runs, is deterministic for a seed, keeps its promised JSON shape, the
optimal policy beats plain round robin, no policy that knows only rates beats the bound at any
size, and the sensors policy turns change notifications into freshness."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from bench.progress import track
from sharecrawl.crawl_io.processes import alive
from sharecrawl.pipeline.scheduling.policies import POLICY_NAMES
from sharecrawl.simulator.bound import freshness_bound
from sharecrawl.simulator.lan import SimParams, build_lan, overlapping
from sharecrawl.simulator.simulate import simulate
from tests.cliproc import cli_argv, fork_server_workers, run_cli

SMALL = {"hosts": 50, "days": 1.0, "crawlers": 1, "seed": 7, "warmup_days": 0.5}
RATE_ONLY = [name for name in POLICY_NAMES if name != "sensors"]  # not told of changes
POLICY_KEYS = {
    "freshness",
    "staleness_min_s",
    "staleness_mean_s",
    "staleness_p95_s",
    "staleness_max_s",
    "scans",
    "empty_scans",
    "tag_reads",
}


def run_simulate(argv: list[str]) -> int:
    """`sharecrawl simulate ARGV`'s exit status; its output on this process's stdout, stderr."""
    done = run_cli("simulate", *argv)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


def without_time(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k not in ("seconds", "cpu_seconds")}


@pytest.fixture(scope="module")
def small_run() -> dict:
    return simulate(**SMALL)


def test_json_shape(small_run: dict) -> None:
    assert {"params", "bound", "policies"} <= set(small_run)
    assert set(small_run["policies"]) == set(POLICY_NAMES)
    for metrics in small_run["policies"].values():
        assert POLICY_KEYS <= set(metrics)
        assert 0.0 <= metrics["freshness"] <= 1.0
        assert metrics["empty_scans"] <= metrics["scans"]
        assert metrics["staleness_min_s"] <= metrics["staleness_mean_s"]
        assert metrics["staleness_mean_s"] <= metrics["staleness_max_s"]
    assert small_run["params"]["hosts"] == 50
    assert 0.0 < small_run["bound"] <= 1.0
    json.dumps(small_run)  # serialisable


def test_deterministic_for_a_seed(small_run: dict) -> None:
    again = simulate(**SMALL, policies=["optimal", "roundrobin"])
    for name in ("optimal", "roundrobin"):
        first = without_time(small_run["policies"][name])
        second = without_time(again["policies"][name])
        assert first == second
    other = simulate(**{**SMALL, "seed": 8}, policies=["roundrobin"])
    assert other["policies"]["roundrobin"]["scans"] != small_run["policies"]["roundrobin"]["scans"]


def test_optimal_beats_roundrobin(small_run: dict) -> None:
    pol = small_run["policies"]
    assert pol["optimal"]["freshness"] > pol["roundrobin"]["freshness"]
    assert pol["optimal"]["staleness_mean_s"] < pol["roundrobin"]["staleness_mean_s"]
    # No policy that knows only rates is fresher than the bound.
    assert all(pol[name]["freshness"] <= small_run["bound"] for name in RATE_ONLY)


def test_workers_give_the_same_results(small_run: dict) -> None:
    """Replayed in the crawl's worker processes (crawl_io.workers)."""
    names = ["poisson", "loss", "optimal"]
    parallel = simulate(**SMALL, policies=names, workers=2)
    assert list(parallel["policies"]) == names  # in the order asked, whichever ends first
    for name in names:
        a = without_time(small_run["policies"][name])
        b = without_time(parallel["policies"][name])
        assert a == b


def test_a_worker_killed_is_one_line_and_ends_the_others() -> None:
    """SIGKILL (as the kernel's out-of-memory killer sends) to one of the two workers of a
    long simulation: the command says so in one line and exits 1, at once, and no worker
    is left (the other one was ended, not waited for)."""
    argv = ["--hosts", "1000", "--days", "30", "--policies", "optimal,poisson", "--workers", "2"]
    command = subprocess.Popen(
        cli_argv("simulate", *argv),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(workers := fork_server_workers(command.pid)) < 2:
            if time.monotonic() > deadline or command.poll() is not None:
                break
            time.sleep(0.05)
        assert len(workers) == 2, "the simulation's two workers did not start within 120 s"
        time.sleep(0.5)  # into the replay
        os.kill(min(workers), signal.SIGKILL)
        _, err = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    assert command.returncode == 1, "the simulation went on after one of its workers was killed"
    err = err.strip()
    assert err.splitlines() == [err]
    assert "sharecrawl simulate: a worker process was killed by SIGKILL" in err
    assert "fewer --workers" in err
    assert not any(alive(pid) for pid in workers)


def test_synthetic_lan_has_the_promised_shape() -> None:
    lan = build_lan(SimParams(hosts=200, days=1.0, seed=3))
    parts = lan.host_of.size
    assert 1500 <= parts <= 2500  # about ten per host
    assert lan.n_folders.sum() == pytest.approx(200 * 2000, rel=0.01)
    assert lan.n_files.sum() == pytest.approx(200 * 20000, rel=0.1)
    assert (lan.rate == 0).mean() > 0.8  # most never change
    assert lan.rate.max() > 1 / 600  # an incoming folder changes every few minutes
    # Hosts go off: desktops are on well under all the time, servers nearly always.
    assert lan.online_share.min() < 0.8 and lan.online_share.max() > 0.95
    # Changes only while the host is on.
    assert lan.host_online(lan.host_of[lan.change_part], lan.change_time).all()
    bound, bound_changing = freshness_bound(lan)
    assert bound_changing <= bound <= 1.0


def test_cli_json_and_table(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--hosts", "20", "--days", "0.5", "--warmup-days", "0.25", "--crawlers", "1"]
    assert run_simulate([*args, "--json", "--policies", "roundrobin,optimal"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"roundrobin", "optimal"}
    assert run_simulate([*args, "--policies", "poisson", "--workers", "1"]) == 0
    table = capsys.readouterr().out
    assert "poisson" in table and "bound" in table


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "roundrobin,fifo"], "unknown policy 'fifo'"),
        (["--hosts", "0"], "--hosts"),
        (["--days", "-1"], "--days"),
        (["--hosts", "ten"], "invalid int value"),
    ],
)
def test_cli_rejects_bad_arguments(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_simulate(argv) == 2
    assert message in capsys.readouterr().err


def test_staleness_counts_every_change(small_run: dict) -> None:
    changes = small_run["params"]["changes"]
    for metrics in small_run["policies"].values():
        assert metrics["changes"] == changes
    assert np.isfinite(small_run["policies"]["optimal"]["staleness_p95_s"])


@pytest.mark.parametrize(
    ("hosts", "settings"),
    [
        # Seed 0 at 20 hosts is a LAN where round robin used to beat the bound: the bound
        # counted staleness over all the time, also the nights when desktops are off.
        (20, {"days": 1.0}),
        (100, {"days": 0.5, "warmup_days": 0.25}),
        (1000, {"days": 0.5, "warmup_days": 0.25, "partitions_per_host": 2.0}),
    ],
)
def test_no_rate_only_policy_beats_the_bound(hosts: int, settings: dict) -> None:
    result = simulate(hosts=hosts, seed=0, policies=RATE_ONLY, workers=2, **settings)
    assert result["bound"] < 1.0  # a bound with something to say
    for name, metrics in result["policies"].items():
        assert metrics["freshness"] <= result["bound"], name
        assert metrics["freshness_changing"] <= result["bound_changing"], name


def test_sensors_without_notifications_is_optimal() -> None:
    result = simulate(
        hosts=30,
        days=0.5,
        warmup_days=0.25,
        crawlers=2,
        seed=4,
        policies=["optimal", "sensors"],
        notify_share=0.0,
    )
    pol = result["policies"]
    assert without_time(pol["sensors"]) == without_time(pol["optimal"])


@pytest.mark.parametrize("hint_crawlers", [1, 0])
def test_sensors_with_notifications_beat_polling(hint_crawlers: int) -> None:
    """With 90 % of hosts notifying, sensors is far less stale than the best policy that only
    polls, whether notified changes are scanned as they come or wait for the next round."""
    result = simulate(
        hosts=60,
        days=1.0,
        crawlers=3,
        seed=5,
        policies=["optimal", "sensors"],
        notify_share=0.9,
        hint_crawlers=hint_crawlers,
    )
    sensors, optimal = result["policies"]["sensors"], result["policies"]["optimal"]
    assert sensors["changes"] == optimal["changes"]
    factor = 4.0 if hint_crawlers else 1.5
    assert sensors["staleness_mean_s"] <= optimal["staleness_mean_s"] / factor
    assert sensors["freshness"] > optimal["freshness"]
    assert sensors["scans"] < optimal["scans"]  # silence is information: fewer scans


def test_notifications_follow_the_watch() -> None:
    lan = build_lan(SimParams(hosts=200, days=1.0, seed=3, notify_share=0.5))
    w = lan.watch
    assert w is not None
    assert 0.35 < w.notify.mean() < 0.65
    assert w.notify[lan.host_of[w.hint_part]].all()  # only watched hosts notify
    delay = w.hint_arrival - w.hint_change
    assert delay.min() >= 1.0 and delay.max() <= 5.0
    assert np.all(np.diff(w.hint_arrival) >= 0)
    # A change made while its host's watch is broken (host off, connection dropped) is lost;
    # every other change on a watched host is notified, but for the ~1 % that overflow.
    c_host = lan.host_of[lan.change_part]
    broken = overlapping(w.break_start_key, w.break_end_key, lan.key(c_host, lan.change_time)) > 0
    expected = w.notify[c_host] & ~broken
    notified = set(zip(w.hint_part.tolist(), w.hint_change.tolist(), strict=True))
    lost = set(zip(lan.change_part[broken].tolist(), lan.change_time[broken].tolist(), strict=True))
    assert not notified & lost
    assert 0.97 * expected.sum() <= len(notified) < expected.sum()
    assert broken[w.notify[c_host]].any()  # the trace does lose some
    # Every break ends with an overflow hint ("rescan the share") once the watch is back.
    assert w.overflow_key.size == w.break_start_key.size > 0
    assert np.all(w.break_end_key >= w.break_start_key)
    # The changes do not depend on who notifies.
    other = build_lan(SimParams(hosts=200, days=1.0, seed=3, notify_share=0.9))
    assert np.array_equal(other.change_time, lan.change_time)


def test_nothing_on_stderr_but_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(track([1, 2, 3], "items")) == [1, 2, 3]  # the benchmarks' bars: not a terminal
    assert (
        run_simulate(
            [
                "--hosts",
                "10",
                "--days",
                "0.25",
                "--warmup-days",
                "0.1",
                "--json",
                "--policies",
                "optimal,sensors",
                "--workers",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    assert out.err == ""
    assert set(json.loads(out.out)["policies"]) == {"optimal", "sensors"}


def test_cli_lists_policies_and_checks_notify_share(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_simulate(["--help"]) == 0
    text = capsys.readouterr().out
    assert all(f"  {name} " in text for name in POLICY_NAMES) and "--notify-share" in text
    assert run_simulate(["--notify-share", "1.5"]) == 2
    assert "--notify-share" in capsys.readouterr().err


@pytest.mark.parametrize("hint_crawlers", [1, 2])
def test_hinted_scans_cut_the_staleness_of_notified_changes(hint_crawlers: int) -> None:
    """A hinted scan lists the folders around a notified change, not the whole partition: the
    crawlers kept for notifications serve them sooner than with hinted partitions listed whole.
    (With none kept, hints wait for a round, whose length the budget sets, not the listing.)"""
    runs = {
        folders: simulate(
            hosts=60,
            days=1.0,
            crawlers=3,
            seed=5,
            policies=["sensors"],
            notify_share=0.9,
            hint_crawlers=hint_crawlers,
            hinted_scan_folders=folders,
        )["policies"]["sensors"]
        for folders in (0, 2)
    }
    assert runs[2]["changes"] == runs[0]["changes"]
    assert runs[2]["staleness_mean_s"] < runs[0]["staleness_mean_s"]
    assert runs[2]["freshness"] >= runs[0]["freshness"]


def test_a_hinted_scan_costs_the_folders_around_the_change() -> None:
    lan = build_lan(SimParams(hosts=20, days=0.5, seed=1))
    parts = np.arange(lan.host_of.size)
    whole = lan.listing_cost(parts)
    hinted = lan.listing_cost(parts, np.ones(parts.size, dtype=bool))
    np.testing.assert_allclose(whole, lan.list_cost)
    per_folder = lan.list_cost / lan.n_folders
    np.testing.assert_allclose(hinted, np.minimum(lan.list_cost, 2 * per_folder))


def test_hint_crawlers_list_overflowed_shares_whole_after_single_changes() -> None:
    from sharecrawl.simulator.hints import HintBook, HintPath
    from sharecrawl.simulator.lan import KEY_OFFSET, KEY_SPAN

    lan = build_lan(SimParams(hosts=30, days=1.0, seed=2, watch_drops_per_day=4.0))
    n = lan.host_of.size
    assert lan.watch is not None and lan.watch.overflow_key.size > 0

    def plan(overflows: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        book = HintBook(lan, np.zeros(n))
        return HintPath(lan, 2, book, overflows=overflows).plan(lan.end, np.full(n, -1.0))

    parts, starts, listing = plan(True)
    o_host = (lan.watch.overflow_key // KEY_SPAN).astype(int)
    o_t = lan.watch.overflow_key - o_host * KEY_SPAN - KEY_OFFSET
    checked = 0
    for h, a in zip(o_host.tolist(), o_t.tolist(), strict=True):
        on = lan.host_online(np.array([h, h]), np.array([a, a + 600]))
        if not (0 < a < lan.end - 600 and on.all()):
            continue
        for i in np.flatnonzero(lan.host_of == h).tolist():
            after = (parts == i) & (starts >= a) & (starts <= a + 600)
            assert after.any(), f"partition {i} not listed after the overflow at {a:.0f}"
            assert np.isclose(listing[after], lan.list_cost[i]).any()  # listed whole
        checked += 1
    assert checked > 0
    singles_only, _, single_listing = plan(False)
    assert singles_only.size < parts.size
    assert (single_listing <= lan.list_cost[singles_only] + 1e-9).all()
