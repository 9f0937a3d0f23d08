"""A small simulation runs, is deterministic for a seed, keeps its promised JSON shape, and the
optimal policy beats plain round robin."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.policies import POLICY_NAMES
from pipeline.simulate import SimParams, build_lan, freshness_bound, plot, run_cli, simulate

SMALL = {"hosts": 50, "days": 1.0, "crawlers": 1, "seed": 7, "warmup_days": 0.5}
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


@pytest.fixture(scope="module")
def small_run() -> dict:
    return simulate(**SMALL, keep_series=True)


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
    json.dumps({k: v for k, v in small_run.items() if k != "series"})  # serialisable


def test_deterministic_for_a_seed(small_run: dict) -> None:
    again = simulate(**SMALL, policies=["optimal", "roundrobin"])
    for name in ("optimal", "roundrobin"):
        first = {k: v for k, v in small_run["policies"][name].items() if k != "seconds"}
        second = {k: v for k, v in again["policies"][name].items() if k != "seconds"}
        assert first == second
    other = simulate(**{**SMALL, "seed": 8}, policies=["roundrobin"])
    assert other["policies"]["roundrobin"]["scans"] != small_run["policies"]["roundrobin"]["scans"]


def test_optimal_beats_roundrobin(small_run: dict) -> None:
    pol = small_run["policies"]
    assert pol["optimal"]["freshness"] > pol["roundrobin"]["freshness"]
    assert pol["optimal"]["staleness_mean_s"] < pol["roundrobin"]["staleness_mean_s"]
    # No policy is fresher than the bound (by more than sampling noise).
    assert all(m["freshness"] <= small_run["bound"] + 0.01 for m in pol.values())


def test_workers_give_the_same_results(small_run: dict) -> None:
    parallel = simulate(**SMALL, policies=["poisson", "loss"], workers=2)
    for name in ("poisson", "loss"):
        a = {k: v for k, v in small_run["policies"][name].items() if k != "seconds"}
        b = {k: v for k, v in parallel["policies"][name].items() if k != "seconds"}
        assert a == b


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


def test_plot_writes_png(small_run: dict, tmp_path: Path) -> None:
    out = plot(small_run, tmp_path / "fresh.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        plot({}, tmp_path / "empty.png")


def test_cli_json_and_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["--hosts", "20", "--days", "0.5", "--warmup-days", "0.25", "--crawlers", "1"]
    png = tmp_path / "f.png"
    assert run_cli([*args, "--json", "--policies", "roundrobin,optimal", "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["policies"]) == {"roundrobin", "optimal"}
    assert png.exists()
    assert run_cli([*args, "--policies", "poisson", "--workers", "1"]) == 0
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
    assert run_cli(argv) == 2
    assert message in capsys.readouterr().err


def test_staleness_counts_every_change(small_run: dict) -> None:
    changes = small_run["params"]["changes"]
    for metrics in small_run["policies"].values():
        assert metrics["changes"] == changes
    assert np.isfinite(small_run["policies"]["optimal"]["staleness_p95_s"])
