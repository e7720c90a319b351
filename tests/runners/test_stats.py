"""Statistics of the reports on fixed numbers: mean +- std, bootstrap CI, delta and outcome."""

import math

import numpy as np
import pytest

from runners.studies import stats

PAPER_C = [0.7776, 0.7838, 0.7931]  # the paper's Track C seeds (Appendix B)
PAPER_A = [0.8000, 0.8159, 0.8108]


def test_mean_std_matches_the_paper():
    mean, std = stats.mean_std(PAPER_C)
    assert round(mean, 4) == 0.7848
    assert round(std, 4) == 0.0078  # sample std (ddof=1), as the paper's +- 0.0078
    assert stats.mean_std([0.5]) == (0.5, 0.0)
    assert all(math.isnan(v) for v in stats.mean_std([]))


def test_bootstrap_ci_of_three_values_is_min_max_like_the_paper():
    assert stats.bootstrap_ci(PAPER_C) == pytest.approx((0.7776, 0.7931), abs=1e-12)
    assert stats.bootstrap_ci(PAPER_A) == pytest.approx((0.8000, 0.8159), abs=1e-12)
    assert round(float(np.mean(PAPER_A)), 4) == 0.8089


def test_bootstrap_ci_is_deterministic_and_brackets_the_mean():
    rng = np.random.default_rng(123)
    x = rng.normal(1.0, 0.1, size=40)
    a = stats.bootstrap_ci(x)
    assert a == stats.bootstrap_ci(x)  # fixed seed: bit-identical
    assert a != stats.bootstrap_ci(x, seed=1)
    assert a[0] < x.mean() < a[1]
    # About 2 standard errors each side for a normal sample.
    se = x.std(ddof=1) / math.sqrt(x.size)
    assert 1.5 * se < x.mean() - a[0] < 2.5 * se
    assert stats.bootstrap_ci([0.3]) == (0.3, 0.3)
    with pytest.raises(ValueError):
        stats.bootstrap_ci(x, level=1.5)


def test_summarize_drops_missing_runs():
    s = stats.summarize([*PAPER_C, float("nan")])
    assert s.n == 3
    assert s.fmt() == "0.7848 +- 0.0078 [0.7776, 0.7931]"


def test_delta_and_paper_outcome():
    d = stats.delta(0.8238, 0.7848)
    assert d == pytest.approx((0.8238 - 0.7848) / 0.8238)
    assert 0.047 < d < 0.048
    assert stats.outcome(d) == "C"
    assert math.isnan(stats.delta(float("nan"), 0.7))
    with pytest.raises(ValueError):
        stats.delta(0.0, 0.1)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.25, "A"), (0.20, "A"), (0.1999999, "B"),
        (0.05, "B"), (0.0499999, "C"), (0.0, "C"),
        (-0.0499999, "C"), (-0.05, "D"), (-0.3, "D"),
        (float("nan"), "?"),
    ],
)
def test_outcome_boundaries(value, expected):
    assert stats.outcome(value) == expected


def test_outcome_boundaries_survive_float_rounding():
    # (1.0 - 0.95) / 1.0 is 0.050000000000000044 and (1.0 - 0.8) / 1.0 is 0.19999999999999996:
    # exactly on the boundaries once rounded, so B and A.
    assert stats.outcome(stats.delta(1.0, 0.95)) == "B"
    assert stats.outcome(stats.delta(1.0, 0.8)) == "A"
    assert stats.outcome(stats.delta(1.0, 1.05)) == "D"
