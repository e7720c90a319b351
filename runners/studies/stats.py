"""Statistics for multi-seed reports: mean +- std, bootstrap CIs, and the pre-registered outcome
(its classes and boundaries: docs/definitions.md#pre-registered-outcome).

Everything here is pure numpy on small arrays of per-seed numbers (one value per run), so a
report is reproducible bit for bit: the bootstrap uses its own seeded generator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

#: Default number of bootstrap resamples and the generator seed; fixed so reports are stable.
N_BOOT = 10_000
BOOT_SEED = 0

T = TypeVar("T")
K = TypeVar("K")

OUTCOME_TEXT = {
    "A": "strong confirmation (delta >= 0.20)",
    "B": "partial confirmation (0.05 <= delta < 0.20)",
    "C": "null result (|delta| < 0.05)",
    "D": "falsified (delta <= -0.05)",
}


@dataclass(frozen=True)
class Summary:
    """Mean, sample std (ddof=1; 0 for a single value), bootstrap 95% CI and count of a sample."""

    mean: float
    std: float
    ci_low: float
    ci_high: float
    n: int

    def ms(self, digits: int = 4) -> str:
        """``0.7848 +- 0.0078`` ("-" for no value)."""
        return f"{self.mean:.{digits}f} +- {self.std:.{digits}f}" if self.n else "-"

    def fmt(self, digits: int = 4) -> str:
        """``0.7848 +- 0.0078 [0.7776, 0.7931]`` (NaN-safe)."""
        return (f"{self.mean:.{digits}f} +- {self.std:.{digits}f} "
                f"[{self.ci_low:.{digits}f}, {self.ci_high:.{digits}f}]")


def group(items: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """``items`` by ``key``, keys in the order first seen."""
    out: dict[K, list[T]] = {}
    for item in items:
        out.setdefault(key(item), []).append(item)
    return out


def band(rows: Any) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample std (ddof=1; 0 for one row) over the rows of ``rows`` (runs, ...)."""
    arr = np.asarray(rows, dtype=np.float64)
    std = arr.std(axis=0, ddof=1) if arr.shape[0] > 1 else np.zeros(arr.shape[1:])
    return arr.mean(axis=0), std


def finite_mean(values: Sequence[float | None]) -> float:
    """The mean of the finite values (NaN without one)."""
    x = np.asarray([v for v in values if v is not None], dtype=np.float64)
    return float(x[np.isfinite(x)].mean()) if np.isfinite(x).any() else float("nan")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1, as the paper's 0.7848 +- 0.0078); one value
    gives std 0.0, none (nan, nan)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    return float(x.mean()), std


def bootstrap_ci(values: Sequence[float], *, level: float = 0.95, n_boot: int = N_BOOT,
                 seed: int = BOOT_SEED) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean (``n_boot`` resamples, deterministic with ``seed``);
    for three values the 95% interval is [min, max] (each extreme mean has probability 1/27 >
    2.5%), as the paper's CIs over three seeds read."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))  # (n_boot, n)
    means = x[idx].mean(axis=1)  # (n_boot,)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(low), float(high)


def summarize(values: Sequence[float], **boot_kwargs: float) -> Summary:
    """Mean +- std and bootstrap CI of finite values (NaNs, e.g. missing runs, are dropped)."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    mean, std = mean_std(x)
    low, high = bootstrap_ci(x, **boot_kwargs)  # type: ignore[arg-type]
    return Summary(mean=mean, std=std, ci_low=low, ci_high=high, n=int(x.size))


def ratio(num: float, den: float) -> float:
    """``num / den`` where both are finite and ``den`` > 0 (every ratio of the reports: a D, a
    gap below the floor), else NaN."""
    return float(num) / float(den) if np.isfinite(num) and np.isfinite(den) and den > 0 else float("nan")


def delta(d_b: float, d_c: float) -> float:
    """Pre-registered relative improvement of track C over track B: (D_B - D_C) / D_B."""
    if not np.isfinite(d_b) or not np.isfinite(d_c):
        return float("nan")
    if d_b == 0.0:
        raise ValueError("delta is undefined for D_B == 0")
    return (d_b - d_c) / d_b


def outcome(value: float) -> str:
    """Outcome class "A"/"B"/"C"/"D" of a delta (module docstring for the exact boundaries); NaN
    (a missing track) gives "?"."""
    if not np.isfinite(value):
        return "?"
    d = round(float(value), 12)
    if d >= 0.20:
        return "A"
    if d >= 0.05:
        return "B"
    if d > -0.05:
        return "C"
    return "D"


#: The paper's delta (Table 1): the equivalence margin of ``answer`` (docs/preregistration.md).
PAPER_DELTA = 0.0474

ANSWER_TEXT = {
    "C better": "the weights adapt better (the interval above 0)",
    "B better": "the input adapts better (the interval below 0)",
    "equivalent": "no difference as large as the paper's 4.74% (the interval inside +- 4.74%)",
    "inconclusive": "the interval holds 0 and a difference as large as the paper's",
}


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """The t-interval of the mean of finite ``values``: mean +- t(1 - alpha / 2, k - 1) * sd /
    sqrt(k) (sd with ddof 1); NaN for fewer than two values."""
    from scipy.stats import t as student_t

    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return float("nan"), float("nan")
    half = float(student_t.ppf(0.5 + level / 2.0, x.size - 1)) * float(x.std(ddof=1)) / np.sqrt(x.size)
    mean = float(x.mean())
    return mean - half, mean + half


def answer(low: float, high: float, margin: float = PAPER_DELTA) -> str:
    """The pre-registered outcome of an interval [low, high] of delta (docs/preregistration.md),
    the first that holds: "C better" (low > 0), "B better" (high < 0), "equivalent" (inside
    +- ``margin``), else "inconclusive"; "?" for an interval with NaN."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "?"
    low, high = round(float(low), 12), round(float(high), 12)
    if low > 0:
        return "C better"
    if high < 0:
        return "B better"
    if -margin <= low and high <= margin:
        return "equivalent"
    return "inconclusive"
