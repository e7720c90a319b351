"""Aggregates of finished runs over seeds: per track (with the pre-registered test of track C
against track B) and per sweep point."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.tracks import INPUT, WEIGHTS
from runners.studies import stats
from runners.studies.runs import RunRecord


@dataclass
class TrackStats:
    """Per-track aggregate over seeds: peak, final, sigma at peak."""

    track: str
    records: list[RunRecord]
    peak: stats.Summary
    final: stats.Summary
    sigma: stats.Summary
    peak_step: stats.Summary


def by_track(records: Iterable[RunRecord]) -> dict[str, TrackStats]:
    """Group runs with evaluations by track (sorted), each with its summaries."""
    groups: dict[str, list[RunRecord]] = {}
    for r in records:
        if r.has_evals:
            groups.setdefault(r.track, []).append(r)
    out = {}
    for track in sorted(groups):
        rs = sorted(groups[track], key=lambda r: (len(r.seed), r.seed))
        out[track] = TrackStats(
            track=track,
            records=rs,
            peak=stats.summarize([r.peak for r in rs]),
            final=stats.summarize([r.final for r in rs]),
            sigma=stats.summarize([r.sigma_at_peak for r in rs]),
            peak_step=stats.summarize([r.peak_step for r in rs]),
        )
    return out


def pre_registered(tracks: Mapping[str, TrackStats]) -> tuple[float, str]:
    """(delta, outcome) of track C vs track B on mean peak D_shift^{50}; (nan, "?") if missing."""
    if INPUT not in tracks or WEIGHTS not in tracks:
        return math.nan, "?"
    d = stats.delta(tracks[INPUT].peak.mean, tracks[WEIGHTS].peak.mean)
    return d, stats.outcome(d)


def group_table(records: Sequence[RunRecord], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Sweep aggregation: one row per combination of ``keys`` (seeds pooled), in first-seen order."""
    groups: dict[tuple[str, ...], list[RunRecord]] = {}
    for r in records:
        groups.setdefault(tuple(r.params.get(k, "") for k in keys), []).append(r)
    rows = []
    for combo, rs in groups.items():
        ok = [r for r in rs if r.has_evals]
        rows.append({
            **dict(zip(keys, combo, strict=True)),
            "runs": len(rs),
            "finished": sum(r.finished for r in rs),
            "peak": stats.summarize([r.peak for r in ok]),
            "final": stats.summarize([r.final for r in ok]),
            "sigma": stats.summarize([r.sigma_at_peak for r in ok]),
            "peak_step": stats.summarize([r.peak_step for r in ok]),
        })
    return rows
