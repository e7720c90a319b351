"""Paired 95% intervals of a run's held-out numbers, from its heads scored on the same samples.

Every head of a run that settles (``agent.heads``) is scored on the same encoded windows of the
same held-out worlds through the same memories, so its numbers and the floor's and the
ceiling's are paired sample by sample. A bootstrap draws the held-out worlds again within each
family and the sequences again within each world (``REPLICATES`` times, the same draws for every
head and memory source), recomputes D per family exactly as the report does (each horizon's mean
over the counted samples, the mean over horizons, the mean over the family's worlds; pooled the
families' mean) and reads each statistic's 2.5% and 97.5% percentiles
(docs/definitions.md#paired-intervals):

- ``margin``: the oracle's margin below the floor, ``(D_A - D_oracle) / D_A``;
- per head that reads memory and per memory source: ``share``, the share of the oracle gap
  closed, ``(D_A - D^n) / (D_A - D_oracle)``; ``share_own``, the same from the head's own empty
  memory, ``(D^0 - D^n) / (D^0 - D_oracle)``; ``carried`` (wrong-world over peer memory,
  ``(D_wrong^n - D_peer^n) / (D_A - D_oracle)``); ``d0_vs_floor``, the head's empty memory
  against the floor, ``(D^0 - D_A) / D_A``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from agent.evaluation import Curve
from runners.online.bounds import POOLED

#: Bootstrap replicates of every interval.
REPLICATES = 2000
#: The interval's level.
LEVEL = 0.95

Samples = dict[str, tuple[np.ndarray, np.ndarray]]  # world -> (ratio (N, K), counted (N, K))


def _d(ratio: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """D of samples along axis -2 (ratio and ok (..., N, K)): the mean over horizons of each
    horizon's mean over the counted samples (NaN where a horizon counts none)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        per_h = (ratio * ok).sum(-2) / ok.sum(-2)
    return per_h.mean(-1)


class Resampled:
    """The bootstrap's draws over ``worlds`` ({family: [world names]}, each world's sequence
    count in ``sizes``): for each family ``REPLICATES`` x its world count world picks, for each
    world ``REPLICATES`` x its sequence count sequence picks (the first replicate the data as it
    is: the point estimate)."""

    def __init__(self, worlds: Mapping[str, Sequence[str]], sizes: Mapping[str, int], seed: int,
                 replicates: int = REPLICATES) -> None:  # fmt: skip
        rng = np.random.default_rng([seed, 0xB007])
        self.worlds = {f: list(ws) for f, ws in worlds.items()}
        self.pick_world = {}
        for fam, ws in self.worlds.items():
            picks = rng.integers(0, len(ws), (replicates + 1, len(ws)))
            picks[0] = np.arange(len(ws))
            self.pick_world[fam] = picks
        self.pick_seq = {}
        for ws in self.worlds.values():
            for w in ws:
                picks = rng.integers(0, sizes[w], (replicates + 1, sizes[w]))
                picks[0] = np.arange(sizes[w])
                self.pick_seq[w] = picks

    def d(self, samples: Samples) -> dict[str, np.ndarray]:
        """D of ``samples`` per family and ``pooled``, each (1 + replicates,): the point first."""
        out = {}
        for fam, ws in self.worlds.items():
            per_world = np.stack([_d(samples[w][0][self.pick_seq[w]], samples[w][1][self.pick_seq[w]])
                                  for w in ws], 1)  # fmt: skip
            out[fam] = np.take_along_axis(per_world, self.pick_world[fam], 1).mean(1)
        out[POOLED] = np.mean([out[f] for f in self.worlds], axis=0)
        return out


def interval(values: np.ndarray) -> dict[str, float | None]:
    """{"value": the point (values[0]), "low", "high": the replicates' percentiles at LEVEL}
    (None where not finite)."""
    reps = values[1:][np.isfinite(values[1:])]
    a = (1 - LEVEL) / 2

    def f(x: float) -> float | None:
        return float(x) if np.isfinite(x) else None

    if len(reps) == 0:
        return {"value": f(values[0]), "low": None, "high": None}
    lo, hi = np.quantile(reps, [a, 1 - a])
    return {"value": f(values[0]), "low": f(lo), "high": f(hi)}


def _by_family(fn: Callable[..., np.ndarray], *ds: dict[str, np.ndarray]) -> dict[str, Any]:
    return {fam: interval(fn(*(d[fam] for d in ds))) for fam in ds[0]}


def samples_of(curves: Sequence[Curve], memory: str, n: int) -> Samples:
    """{world: its samples' parts of D at n} of the curves of one memory source."""
    return {c.world: c.samples[n] for c in curves if c.memory == memory and n in c.samples}


def paired_intervals(curves: Mapping[str, Sequence[Curve]], n: int, seed: int,
                     replicates: int = REPLICATES) -> dict[str, Any] | None:  # fmt: skip
    """The module's intervals at memory size n from each head's held-out curves ({head name:
    curves}, with their samples at 0 and n: ``world_curves(samples=(0, n))``); None without
    the floor (``A``) and the ceiling (``oracle``)."""
    if "A" not in curves or "oracle" not in curves:
        return None
    floor = curves["A"]
    worlds: dict[str, list[str]] = {}
    for c in floor:
        if c.memory == "own":
            worlds.setdefault(c.family, []).append(c.world)
    sizes = {c.world: c.samples[0][0].shape[0] for c in floor if c.memory == "own"}
    draws = Resampled(worlds, sizes, seed, replicates)
    d_a, d_o = (draws.d(samples_of(curves[h], "own", 0)) for h in ("A", "oracle"))
    out: dict[str, Any] = {
        "n": n, "replicates": replicates, "level": LEVEL,
        "margin": _by_family(lambda a, o: (a - o) / a, d_a, d_o), "heads": {},
    }  # fmt: skip
    for name, head in curves.items():
        memories = sorted({c.memory for c in head} - {"own"})
        if not memories:  # reads no memory: the floor, the ceiling
            continue
        d0 = draws.d(samples_of(head, "own", 0))
        dn = {m: draws.d(samples_of(head, m, n)) for m in ("own", *memories)}
        row: dict[str, Any] = {
            "share": {m: _by_family(lambda a, x, o: (a - x) / (a - o), d_a, d, d_o)
                      for m, d in dn.items()},
            "share_own": {m: _by_family(lambda z, x, o: (z - x) / (z - o), d0, d, d_o)
                          for m, d in dn.items()},
            "d0_vs_floor": _by_family(lambda z, a: (z - a) / a, d0, d_a),
        }  # fmt: skip
        if "same" in dn and "wrong" in dn:
            row["carried"] = _by_family(lambda w, p, a, o: (w - p) / (a - o),
                                        dn["wrong"], dn["same"], d_a, d_o)  # fmt: skip
        out["heads"][name] = row
    return out
