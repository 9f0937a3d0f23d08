"""Every scheduling policy obeys the round's budget and the priorities, and each ranks as its
source says it should."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from sharecrawl.pipeline.scheduling.choice import Budget, PartitionState
from sharecrawl.pipeline.scheduling.optimal import freshness_of, optimal_frequencies
from sharecrawl.pipeline.scheduling.policies import (
    POLICY_NAMES,
    AdaptivePolicy,
    expected_loss,
    get_policy,
)

NOW = 1_700_000_000.0
HOUR = 3600.0


def random_parts(seed: int, n: int = 400, hosts: int = 40) -> list[PartitionState]:
    rng = np.random.default_rng(seed)
    parts = []
    for i in range(n):
        never = rng.random() < 0.05
        last = None if never else NOW - rng.uniform(0, 2 * 86400)
        history = [] if never else [(last - 3600 * k, bool(rng.random() < 0.3)) for k in (2, 1)]
        history = sorted(history) + ([] if never else [(last, bool(rng.random() < 0.3))])
        parts.append(
            PartitionState(
                partition_id=f"p{i}",
                host=f"h{rng.integers(hosts)}",
                cost_s=float(rng.lognormal(1.0, 1.2)),
                last_scan=last,
                history=history,
                rate_per_h=None if rng.random() < 0.1 else float(rng.lognormal(-3, 2)),
                hinted=bool(rng.random() < 0.03),
                untagged=int(rng.random() < 0.03) * 5,
                online=bool(rng.random() < 0.85),
            )
        )
    return parts


def check_budget(parts: list[PartitionState], chosen: list[str], budget: Budget) -> None:
    by_id = {p.partition_id: p for p in parts}
    assert len(set(chosen)) == len(chosen)
    assert all(by_id[c].online for c in chosen)
    total = sum(by_id[c].cost_s for c in chosen)
    assert total <= budget.crawlers * budget.round_seconds + 1e-9
    per_host: dict[str, list[float]] = defaultdict(list)
    for c in chosen:
        per_host[by_id[c].host].append(by_id[c].cost_s)
    for costs in per_host.values():
        # Within round_seconds, or one oversized partition alone.
        assert sum(costs) <= budget.round_seconds + 1e-9 or len(costs) == 1


@pytest.mark.parametrize("name", POLICY_NAMES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_budget_hosts_offline_and_priorities(name: str, seed: int) -> None:
    parts = random_parts(seed)
    budget = Budget(crawlers=3, round_seconds=60.0)
    chosen = get_policy(name).choose(parts, NOW, budget)
    check_budget(parts, chosen, budget)
    by_id = {p.partition_id: p for p in parts}
    # Untagged first, then hinted: the priority classes never go backwards in the order.
    cls = [0 if by_id[c].untagged else 1 if by_id[c].hinted else 2 for c in chosen]
    assert cls == sorted(cls)
    assert any(c == 0 for c in cls)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_oversized_partition_goes_alone(name: str) -> None:
    parts = [
        PartitionState("big", "h1", 500.0, NOW - 86400, [(NOW - 86400, True)], 5.0, hinted=True),
        PartitionState("small", "h1", 1.0, NOW - 86400, [(NOW - 86400, True)], 5.0),
        PartitionState("other", "h2", 1.0, NOW - 86400, [(NOW - 86400, True)], 5.0),
    ]
    budget = Budget(crawlers=10, round_seconds=60.0)
    chosen = get_policy(name).choose(parts, NOW, budget)
    # Its host is then busy for the round; other hosts still get theirs.
    assert chosen == ["big", "other"]
    # When something of its host comes first, it waits for a later round.
    parts[0].hinted, parts[1].hinted = False, True
    assert "big" not in get_policy(name).choose(parts, NOW, budget)


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_nothing_online_or_no_parts(name: str) -> None:
    policy = get_policy(name)
    offline = [PartitionState("p", "h", 1.0, None, [], None, online=False)]
    assert policy.choose(offline, NOW, Budget(2, 60.0)) == []
    assert policy.choose([], NOW, Budget(2, 60.0)) == []


def test_get_policy_rejects_unknown_names_clearly() -> None:
    with pytest.raises(ValueError, match=r"unknown policy 'fifo'; choose one of roundrobin"):
        get_policy("fifo")
    with pytest.raises(ValueError, match="bad settings"):
        get_policy("loss", no_such_setting=1.0)
    assert get_policy("loss", threshold_s=600.0).name == "loss"


def state(pid: str, age_h: float, rate_per_h: float, cost: float = 1.0) -> PartitionState:
    last = NOW - age_h * HOUR
    return PartitionState(pid, f"host-{pid}", cost, last, [(last, False)], rate_per_h)


def test_roundrobin_oldest_first() -> None:
    parts = [state("a", 1, 10.0), state("b", 5, 0.0), state("c", 3, 1.0)]
    assert get_policy("roundrobin").choose(parts, NOW, Budget(10, 60.0)) == ["b", "c", "a"]


def test_poisson_highest_probability_first() -> None:
    # Thesis §3.5.1: 80 % after five minutes beats 40 % after a day.
    fast = state("fast", 5 / 60, -np.log(0.2) * 12)
    slow = state("slow", 24, -np.log(0.6) / 24)
    assert get_policy("poisson").choose([slow, fast], NOW, Budget(1, 1.0)) == ["fast"]


def test_expected_loss_grows_with_age_and_rate() -> None:
    ages = np.array([0.0, 600.0, 1800.0, 3600.0, 7200.0])
    loss = expected_loss(np.full(5, 1 / 3600), ages, threshold_s=1800.0, s=0.1, d=1.0)
    assert loss[0] == pytest.approx(0.1)  # not changed yet: only the wasted scan
    assert np.all(np.diff(loss) > 0)
    by_rate = expected_loss(np.array([1e-6, 1e-4, 1e-2]), np.full(3, 3600.0), 1800.0, 0.1, 1.0)
    assert np.all(np.diff(by_rate) > 0)
    # Numerical check of the closed form against the thesis' integral.
    lam, age, t_thr, s, d = 1 / 900, 2400.0, 1200.0, 0.2, 1.0
    tp = np.linspace(0, age, 200_001)
    integrand = lam * np.exp(-lam * tp) * (d + np.expm1((age - tp) / t_thr) - (age - tp) / t_thr)
    numeric = np.trapezoid(integrand, tp) + np.exp(-lam * age) * s
    closed = expected_loss(np.array([lam]), np.array([age]), t_thr, s, d)[0]
    assert closed == pytest.approx(numeric, rel=1e-4)


def test_adaptive_interval_follows_nutch() -> None:
    policy = AdaptivePolicy(initial_s=3600.0, inc_rate=0.4, dec_rate=0.2, min_s=60.0)
    history = [(0.0, False), (10.0, True), (20.0, True), (30.0, False)]
    p = PartitionState("p", "h", 1.0, 30.0, history, None)
    assert policy.interval(p) == pytest.approx(3600 * 0.8 * 0.8 * 1.4)
    # The memo resumes when the history grows, and gives the same as a full replay.
    p.history.append((40.0, True))
    assert policy.interval(p) == pytest.approx(3600 * 0.8 * 0.8 * 1.4 * 0.8)
    assert AdaptivePolicy().interval(p) == pytest.approx(policy.interval(p))
    fast = PartitionState("f", "h", 1.0, 0.0, [(float(i), True) for i in range(100)], None)
    assert policy.interval(fast) == 60.0  # clamped at min_s


def test_adaptive_chooses_only_due() -> None:
    due = state("due", 2, 0.0)  # one unchanged scan: interval 1 h, 2 h ago
    not_due = PartitionState("nd", "h", 1.0, NOW - 60, [(NOW - 60, False)], 0.0)
    assert get_policy("adaptive").choose([due, not_due], NOW, Budget(10, 60.0)) == ["due"]


def test_optimal_frequencies_use_budget_and_beat_uniform() -> None:
    rng = np.random.default_rng(5)
    rate = rng.lognormal(-9, 2, 500)
    cost = rng.lognormal(1, 1, 500)
    budget = 2.0
    freq, _ = optimal_frequencies(rate, cost, budget)
    assert float(np.dot(cost, freq)) == pytest.approx(budget, rel=1e-2)
    uniform = np.full(500, budget / cost.sum())
    assert freshness_of(rate, freq).mean() > freshness_of(rate, uniform).mean()
    # A partition changing much faster than it can pay for is not refreshed at all.
    freq2, _ = optimal_frequencies(np.array([1e-5, 10.0]), np.array([1.0, 1.0]), 1e-4)
    assert freq2[1] == 0.0 and freq2[0] > 0
    # The hint changes only the starting point, not the answer.
    again, _ = optimal_frequencies(rate, cost, budget, hint=-20.0)
    assert again == pytest.approx(freq, rel=1e-2)


def test_optimal_prefers_cheap_fast_changing() -> None:
    parts = [
        state("quiet", 3, 0.001, cost=2.0),
        state("busy", 3, 2.0, cost=2.0),
        state("busy-costly", 3, 2.0, cost=50.0),
    ]
    # A budget of 0.002 crawler-seconds per second cannot scan everything every minute.
    chosen = get_policy("optimal", utilisation=0.002).choose(parts, NOW, Budget(1, 10.0))
    assert chosen[0] == "busy"


def test_every_policy_chooses_through_the_one_packer() -> None:
    from sharecrawl.pipeline.scheduling.choice import ScoringPolicy

    for name in POLICY_NAMES:
        assert type(get_policy(name)).choose is ScoringPolicy.choose, name


def watched_state(pid: str, age_h: float, rate_per_h: float, **flags: bool) -> PartitionState:
    last = NOW - age_h * HOUR
    return PartitionState(pid, f"host-{pid}", 1.0, last, [(last, False)], rate_per_h, **flags)


def test_sensors_trusts_silence_of_watched_partitions() -> None:
    parts = [
        watched_state("silent", 3, 5.0, watched=True),  # busy, but watched and no hint
        watched_state("hinted", 0.01, 0.0, watched=True, hinted=True),
        watched_state("unwatched", 3, 5.0),
        watched_state("overdue", 25, 5.0, watched=True),  # past the safety interval
    ]
    chosen = get_policy("sensors").choose(parts, NOW, Budget(10, 60.0))
    assert chosen[0] == "hinted"
    assert set(chosen) == {"hinted", "unwatched", "overdue"}
    # Without the watch, the same busy partition is due for optimal and for sensors alike.
    parts[0].watched = False
    assert "silent" in get_policy("sensors").choose(parts, NOW, Budget(10, 60.0))
    assert "silent" in get_policy("optimal").choose(parts, NOW, Budget(10, 60.0))
    with pytest.raises(ValueError, match="safety_s"):
        get_policy("sensors", safety_s=0.0)


def test_sensors_gives_the_watched_budget_to_the_rest() -> None:
    """Watched partitions take no share of the optimal allocation: the unwatched ones get
    higher revisit rates, so they are due sooner."""
    rng = np.random.default_rng(9)
    parts = [
        watched_state(f"p{i}", 0.1, float(rng.lognormal(0, 1)), watched=i % 2 == 0)
        for i in range(200)
    ]
    budget = Budget(1, 60.0)
    sensors = get_policy("sensors", due_only=False)
    optimal = get_policy("optimal", due_only=False)
    from sharecrawl.pipeline.scheduling.choice import Candidates

    cands = Candidates.of(parts, NOW)
    s_score = sensors.score(cands, NOW, budget)
    o_score = optimal.score(cands, NOW, budget)
    unwatched = np.array([not p.watched for p in cands.parts])
    assert np.all(s_score[unwatched] > o_score[unwatched])


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_a_table_of_columns_chooses_as_the_rows_do(name: str) -> None:
    from sharecrawl.pipeline.scheduling.choice import PartitionTable

    parts = random_parts(4)
    for p in parts[::7]:
        p.watched = True
    hosts = sorted({p.host for p in parts})

    def column(attr: str, dtype: type = float) -> np.ndarray:
        return np.array([getattr(p, attr) for p in parts], dtype=dtype)

    table = PartitionTable(
        rows=parts,
        host=np.array([hosts.index(p.host) for p in parts], dtype=np.int64),
        cost_s=column("cost_s"),
        last_scan=column("last_scan"),
        rate_per_h=column("rate_per_h"),
        untagged=column("untagged"),
        hinted=column("hinted", bool),
        watched=column("watched", bool),
        online=column("online", bool),
    )
    budget = Budget(crawlers=3, round_seconds=60.0)
    assert get_policy(name).choose(table, NOW, budget) == get_policy(name).choose(
        parts, NOW, budget
    )
