"""The optimal policy's solver against sources independent of it: an exhaustive grid search
of the same problem, and the worked example of Cho & Garcia-Molina, "Synchronizing a
database to improve freshness" (SIGMOD 2000).

The problem (pipeline.scheduling.optimal): maximise sum w_i F(l_i, f_i), where
F(l, f) = (f / l)(1 - e^{-l/f}) is the expected share of time a copy refreshed f times per
unit time is fresh under Poisson changes at rate l, subject to sum c_i f_i <= B and
f_i <= max_freq. F grows with f and is concave, so the optimum spends the budget and the
grid below, zoomed in around its best point, finds it."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from sharecrawl.pipeline.scheduling.optimal import optimal_frequencies


def freshness(lam: np.ndarray, f: np.ndarray) -> np.ndarray:
    """F(l, f), written out here rather than taken from the module under test."""
    with np.errstate(divide="ignore", invalid="ignore"):
        value = (f / lam) * (1.0 - np.exp(-lam / f))
    return np.where(f > 0, value, 0.0)


def objective(lam, cost, weight, budget, max_freq, shares: np.ndarray) -> np.ndarray:
    """sum w_i F(l_i, f_i) where partition i gets `shares[..., i]` of the budget."""
    f = np.minimum(shares * budget / cost, max_freq)
    return (weight * freshness(lam, f)).sum(axis=-1)


def brute_force(lam, cost, weight, budget, max_freq=math.inf, steps=24, zooms=8):
    """The best split of the budget over a grid of budget shares (the last partition gets
    what the others leave), the grid shrunk around its best point `zooms` times."""
    lam, cost, weight = (np.asarray(x, dtype=float) for x in (lam, cost, weight))
    n = lam.size
    lo, hi = np.zeros(n - 1), np.ones(n - 1)
    best = None
    for _ in range(zooms):
        axes = [np.linspace(a, b, steps + 1) for a, b in zip(lo, hi, strict=True)]
        grid = np.array(list(itertools.product(*axes)))
        shares = np.column_stack([grid, 1.0 - grid.sum(axis=1)])
        shares = shares[shares[:, -1] >= -1e-12].clip(0.0, 1.0)
        values = objective(lam, cost, weight, budget, max_freq, shares)
        best = shares[int(np.argmax(values))]
        width = 2 * (hi - lo) / steps
        lo, hi = (best[:-1] - width).clip(0, 1), (best[:-1] + width).clip(0, 1)
    assert best is not None
    return np.minimum(best * budget / cost, max_freq)


CASES = {
    # rates, costs, weights, budget, cap
    "weights and costs differ": ([0.2, 1.0, 3.0], [1.0, 2.0, 0.5], [1.0, 0.5, 2.0], 2.0, math.inf),
    "one changes too fast to be worth a scan": (
        [0.05, 0.5, 20.0],
        [1.0] * 3,
        [1.0] * 3,
        1.0,
        math.inf,
    ),
    "the cap binds for the cheap one": ([1.0] * 3, [0.1, 1.0, 1.0], [1.0] * 3, 2.0, 1.5),
    "four partitions": ([0.5, 1.0, 2.0, 4.0], [3.0, 1.0, 2.0, 1.0], [1.0] * 4, 3.0, math.inf),
}


@pytest.mark.parametrize("case", CASES)
def test_solver_agrees_with_exhaustive_search(case: str) -> None:
    lam, cost, weight, budget, cap = CASES[case]
    args = (np.array(lam), np.array(cost), np.array(weight), budget, cap)
    solved, _ = optimal_frequencies(
        np.array(lam), np.array(cost), budget, cap, weight=np.array(weight), tolerance=1e-9
    )
    searched = brute_force(*args)
    assert float(np.dot(cost, solved)) <= budget * (1 + 1e-9)
    best = objective(*args, searched * np.array(cost) / budget)
    got = objective(*args, solved * np.array(cost) / budget)
    assert got == pytest.approx(best, abs=1e-6)
    np.testing.assert_allclose(solved, searched, atol=1e-4)


def test_the_published_example() -> None:
    """Five elements changing 1, 2, 3, 4 and 5 times a day, five synchronisations a day:
    Cho & Garcia-Molina's table of optimal frequencies for freshness gives 1.15, 1.36,
    1.35, 1.14 and 0 (the fastest-changing element is never synchronised)."""
    lam = np.arange(1.0, 6.0)
    published = [1.15, 1.36, 1.35, 1.14, 0.0]
    solved, _ = optimal_frequencies(lam, np.ones(5), 5.0, tolerance=1e-9)
    assert np.round(solved, 2).tolist() == published
    assert np.round(brute_force(lam, np.ones(5), np.ones(5), 5.0), 2).tolist() == published
