"""Reading finished runs: one run folder's evaluation history (``run.zarr``'s ``eval`` group: a row
per periodic evaluation, ``eval/d_shift`` ``(E, len(ns))`` with the memory sizes in its attribute
``ns``), its peak (the lowest periodic D_shift^{50}) and its end (the last evaluation; settling =
final - peak); their aggregates over seeds, per track (``by_track``, ``pre_registered``) and per
sweep point (``group_table``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent.tracks import INPUT, WEIGHTS
from runners.cli import CliError
from runners.online.config import HEADLINE_N, flat
from runners.online.rundir import RunFolder
from runners.studies import stats


@dataclass
class RunRecord:
    """One run's evaluation history and where its peak is."""

    name: str
    run_dir: str
    config: dict[str, Any]
    params: dict[str, str]
    steps: np.ndarray  # (E,) learner steps at each evaluation
    d_shift: np.ndarray  # (E,) D_shift^{50}
    sigma: np.ndarray  # (E,) sigma_embed
    finished: bool = True
    # The collapse guard (docs/reproduce.md, "study paper"): evaluations with sigma_embed below
    # it are no candidates for the peak (none passes: all count); 0: the paper's plain peak.
    min_sigma: float = 0.0

    @property
    def track(self) -> str:
        return str(self.params.get("track", self.config.get("track", "?")))

    @property
    def seed(self) -> str:
        return str(self.params.get("seed", self.config.get("seed", "?")))

    @property
    def has_evals(self) -> bool:
        return bool(np.isfinite(self.d_shift).any())

    @property
    def peak_index(self) -> int:
        ok = np.isfinite(self.d_shift) & (self.sigma >= self.min_sigma)
        if not ok.any():
            return int(np.nanargmin(self.d_shift))
        return int(np.flatnonzero(ok)[np.argmin(self.d_shift[ok])])

    @property
    def excluded_by_guard(self) -> int:
        """Evaluations left out of the peak search by the sigma_embed guard."""
        return int((np.isfinite(self.d_shift) & (self.sigma < self.min_sigma)).sum())

    @property
    def peak(self) -> float:
        return float(self.d_shift[self.peak_index]) if self.has_evals else math.nan

    @property
    def peak_step(self) -> int:
        return int(self.steps[self.peak_index]) if self.has_evals else -1

    @property
    def sigma_at_peak(self) -> float:
        return float(self.sigma[self.peak_index]) if self.has_evals else math.nan

    @property
    def final(self) -> float:
        return float(self.d_shift[-1]) if self.has_evals else math.nan

    @property
    def final_step(self) -> int:
        return int(self.steps[-1]) if self.steps.size else -1

    @property
    def final_sigma(self) -> float:
        return float(self.sigma[-1]) if self.sigma.size else math.nan

    @property
    def settling(self) -> float:
        """Final - peak (the paper's Table 3 "settling delta")."""
        return self.final - self.peak

    def row(self) -> dict[str, Any]:
        """Plain numbers for JSON."""
        return {
            "name": self.name, "track": self.track, "seed": self.seed, "params": self.params,
            "peak": self.peak, "peak_step": self.peak_step, "sigma_at_peak": self.sigma_at_peak,
            "final": self.final, "final_step": self.final_step, "final_sigma": self.final_sigma,
            "settling": self.settling, "finished": self.finished,
            "min_sigma": self.min_sigma, "excluded_by_guard": self.excluded_by_guard,
        }


def load_run(run_dir: str | Path, params: Mapping[str, str] | None = None, n: int = HEADLINE_N,
             min_sigma: float = 0.0) -> RunRecord | None:
    """Read one run folder; None when it has no ``config.json`` (never started).
    ``min_sigma``: the peak's collapse guard (see ``RunRecord.min_sigma``)."""
    from runners.online.recorder import Recorder

    run_dir = Path(run_dir)
    folder = RunFolder(run_dir)
    if not folder.config.exists():
        return None
    try:
        config = flat(folder.read_config())
    except CliError as err:
        raise CliError(f"damaged: {err}") from None
    # the eval group; a damaged store raises DamagedStoreError (a CliError) naming its file
    evals = Recorder(run_dir, read_only=True).read_eval() if folder.store.exists() else {}
    steps = np.asarray(evals.get("step", np.zeros(0)), dtype=np.int64)
    nan = np.full(steps.shape[0], np.nan)
    ns = np.asarray(evals.get("ns", [])).tolist()
    params = {k: str(v) for k, v in (params or {}).items()}
    for key in ("track", "seed"):
        params.setdefault(key, str(config.get(key, "?")))
    return RunRecord(
        name=run_dir.name, run_dir=str(run_dir), config=config, params=params, steps=steps,
        d_shift=np.asarray(evals["d_shift"], np.float64)[:, ns.index(n)] if n in ns else nan,
        sigma=np.asarray(evals.get("sigma_embed", nan), dtype=np.float64),
        finished=folder.is_finished(), min_sigma=min_sigma)


# -- aggregates over seeds ------------------------------------------------------------------
@dataclass
class TrackStats:
    """Per-track aggregate over seeds: peak, final, sigma at peak."""

    track: str
    records: list[RunRecord]
    peak: stats.Summary
    final: stats.Summary
    sigma: stats.Summary
    peak_step: stats.Summary


def _summaries(rs: Sequence[RunRecord]) -> dict[str, stats.Summary]:
    """The runs' peak, final, sigma_embed at the peak and peak step, each over the runs."""
    return {"peak": stats.summarize([r.peak for r in rs]),
            "final": stats.summarize([r.final for r in rs]),
            "sigma": stats.summarize([r.sigma_at_peak for r in rs]),
            "peak_step": stats.summarize([r.peak_step for r in rs])}


def by_track(records: Iterable[RunRecord]) -> dict[str, TrackStats]:
    """Group runs with evaluations by track (sorted), each with its summaries."""
    groups = stats.group((r for r in records if r.has_evals), lambda r: r.track)
    out = {}
    for track in sorted(groups):
        rs = sorted(groups[track], key=lambda r: (len(r.seed), r.seed))
        out[track] = TrackStats(track=track, records=rs, **_summaries(rs))
    return out


def pre_registered(tracks: Mapping[str, TrackStats]) -> tuple[float, str]:
    """(delta, outcome) of track C vs track B on mean peak D_shift^{50}; (nan, "?") if missing."""
    if INPUT not in tracks or WEIGHTS not in tracks:
        return math.nan, "?"
    d = stats.delta(tracks[INPUT].peak.mean, tracks[WEIGHTS].peak.mean)
    return d, stats.outcome(d)


def group_table(records: Sequence[RunRecord], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Sweep aggregation: one row per combination of ``keys`` (seeds pooled), in first-seen order."""
    groups = stats.group(records, lambda r: tuple(r.params.get(k, "") for k in keys))
    return [{**dict(zip(keys, combo, strict=True)), "runs": len(rs),
             "finished": sum(r.finished for r in rs),
             **_summaries([r for r in rs if r.has_evals])} for combo, rs in groups.items()]
