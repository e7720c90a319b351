"""The report's figures: per-seed peak bars (paper Fig. 2), trajectories with a mean +- std band
per track (Fig. 3, and sigma_embed over training), and named single runs (ablations, sweeps)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from runners.studies import stats
from runners.studies.runs import RunRecord, TrackStats
from runners.style import TRACK_COLORS, pyplot, save_figure


def _band(records: Sequence[RunRecord], attr: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, std) over runs on the steps every run evaluated."""
    common = set.intersection(*(set(r.steps.tolist()) for r in records))
    steps = np.array(sorted(common), dtype=np.int64)
    rows = []
    for r in records:
        idx = {int(s): i for i, s in enumerate(r.steps)}
        rows.append([getattr(r, attr)[idx[int(s)]] for s in steps])
    return (steps, *stats.band(rows))  # (runs, steps) -> over the runs


def fig_trajectories(tracks: Mapping[str, TrackStats], path: Path, attr: str = "d_shift",
                     ylabel: str = "D_shift^50 (shift test)") -> Path:
    """Paper Fig. 3: mean +- std band per track over training, full range and zoomed."""
    fig, axes = pyplot().subplots(1, 2, figsize=(11, 4))
    lows = []
    for track, ts in tracks.items():
        steps, mean, std = _band(ts.records, attr)
        color = TRACK_COLORS.get(track)
        for ax in axes:
            for r in ts.records:
                ax.plot(r.steps, getattr(r, attr), color=color, alpha=0.25, lw=0.8)
            ax.plot(steps, mean, color=color, lw=2, label=f"track {track} ({len(ts.records)} seeds)")
            ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2)
        # The zoom follows the peaks the report uses (collapse-guarded), not an early dip.
        lows += [r.peak for r in ts.records if r.has_evals]
    if attr == "d_shift":
        for ax in axes:
            ax.axhline(1.0, color="grey", ls=":", lw=1)
        if lows:
            lo = min(lows)
            axes[1].set_ylim(lo - 0.02, lo + 0.12)
        axes[1].set_title("convergence region")
    elif attr == "sigma":
        for ax in axes:
            ax.axhline(0.5, color="red", ls="--", lw=1, label="0.5 safety threshold")
    axes[0].set_title("full range")
    for ax in axes:
        ax.set(xlabel="training step", ylabel=ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    return save_figure(fig, path)


def fig_seed_bars(tracks: Mapping[str, TrackStats], path: Path) -> Path:
    """Paper Fig. 2: one bar per run at its peak; mean +- std as line and whisker per track."""
    fig, ax = pyplot().subplots(figsize=(7, 4))
    x = 0
    ticks, labels = [], []
    for track, ts in tracks.items():
        xs = []
        for r in ts.records:
            ax.bar(x, r.peak, color=TRACK_COLORS.get(track), alpha=0.8)
            ax.text(x, r.peak, f"{r.peak:.3f}", ha="center", va="bottom", fontsize=7)
            ticks.append(x)
            labels.append(f"{track}\ns{r.seed}")
            xs.append(x)
            x += 1
        m, s = ts.peak.mean, ts.peak.std
        ax.hlines(m, xs[0] - 0.4, xs[-1] + 0.4, color="k", lw=1.5)
        ax.errorbar((xs[0] + xs[-1]) / 2, m, yerr=s, color="k", capsize=4)
        x += 1
    vals = [r.peak for ts in tracks.values() for r in ts.records]
    if vals:
        ax.set_ylim(min(vals) - 0.05, max(vals) + 0.03)
    ax.set_xticks(ticks, labels, fontsize=8)
    ax.set(ylabel="peak D_shift^50 (lower is better)",
           title="per-seed peak D_shift^50 (line, whisker: mean +- std)")
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)


def fig_runs(records: Sequence[tuple[str, RunRecord]], path: Path, title: str) -> Path:
    """Trajectories of named single runs (ablations, sweeps), each with its peak marked."""
    fig, axes = pyplot().subplots(1, 2, figsize=(11, 4))
    for label, r in records:
        if not r.has_evals:
            continue
        (line,) = axes[0].plot(r.steps, r.d_shift, label=label)
        axes[0].plot(r.peak_step, r.peak, "o", color=line.get_color())
        axes[1].plot(r.steps, r.sigma, color=line.get_color(), label=label)
    axes[0].set_ylabel("D_shift^50")
    axes[1].set_ylabel("sigma_embed")
    axes[1].axhline(0.5, color="red", ls="--", lw=1)
    for ax in axes:
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title)
    return save_figure(fig, path)
