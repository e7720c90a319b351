"""Multi-run reports: read run folders, aggregate per track, compare with the paper, draw figures.

A run folder (``runners.train_online``) holds ``config.json`` and ``run.zarr``, whose ``eval``
group has one row per periodic evaluation (``eval/step``; ``eval/d_shift`` is ``(E, len(ns))``
with the memory sizes in the attribute ``ns``; ``eval/sigma_embed``, ``eval/d_base``). From it:

- peak: the lowest periodic D_shift^{50} (the paper's "peak"), its step, sigma_embed there;
- final: the last evaluation (the end of the run), and the settling delta = final - peak.

``write_report`` turns these into ``report.md`` beside its figures (Fig. 2 per-seed bars, Fig. 3
trajectories with a mean +- std band per track, sigma_embed over training, the ablations, the
deferred analyses), always with the paper's numbers side by side.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from runners.cli import CliError, writing
from runners.online.rundir import RunFolder
from runners.studies import stats
from runners.style import TRACK_COLORS, pyplot

HEADLINE_N = 50

# The paper's numbers (Section 4, Tables 1, 3, 4; Appendix B), for side-by-side tables.
PAPER_MAIN = {
    "A": {"mean": 0.8089, "ci": (0.8000, 0.8159), "sigma": 0.5321, "seeds": (0.8000, 0.8159, 0.8108)},
    "B": {"mean": 0.8238, "ci": (0.8217, 0.8249), "sigma": 0.5324, "seeds": None},
    "C": {"mean": 0.7848, "std": 0.0078, "ci": (0.7776, 0.7931), "sigma": 0.4123,
          "seeds": (0.7776, 0.7931, 0.7838)},
}
PAPER_DELTA = 0.0474
PAPER_OUTCOME = "C"
PAPER_ABLATION = {  # Table 3: (peak, final, settling)
    "baseline": (0.7776, 0.8349, 0.0573),
    "freeze-8000-rep1": (0.7994, 0.8051, 0.0057),
    "freeze-8000-rep2": (0.7882, 0.8097, 0.0215),
    "freeze-10000": (0.7996, 0.8205, 0.0209),
}
PAPER_LAMBDA = {  # Table 4: (peak, final, sigma at peak)
    "0.05": (0.7776, 0.8349, 0.4123),
    "0.10": (0.8139, 0.8619, 0.4661),
    "0.15": (0.8009, 0.8595, 0.4760),
}


# -- reading run folders -------------------------------------------------------------------------
def load_evals(run_dir: str | Path) -> dict[str, np.ndarray]:
    """The ``eval`` group of ``run.zarr`` as numpy arrays (read only); {} when the run has no
    store or no evaluation yet. A damaged store raises ``DamagedStoreError`` (a ``CliError``)
    naming the damaged file: never an empty or wrong result."""
    from runners.online.recorder import Recorder

    if not RunFolder(run_dir).store.exists():
        return {}
    out = Recorder(run_dir, read_only=True).read_eval()
    if out:
        out["ns"] = np.asarray(out["ns"], dtype=np.int64)
    return out


def headline_column(evals: Mapping[str, np.ndarray], n: int = HEADLINE_N) -> np.ndarray:
    """D_shift^{n} per evaluation (E,), NaN where the run did not evaluate that n."""
    d = np.asarray(evals.get("d_shift", np.zeros((0, 0))), dtype=np.float64)
    ns = list(np.asarray(evals.get("ns", [])).tolist())
    if d.ndim == 1:  # a single-n store
        return d
    if n not in ns:
        return np.full(d.shape[0], np.nan)
    return d[:, ns.index(n)]


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
    d_base: np.ndarray  # (E,)
    finished: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    # Collapse guard: evaluations with sigma_embed below this are not candidates for the peak
    # (in a collapsed phase all predictions are alike and D reads low for a degenerate reason).
    # 0 = the paper's plain "lowest periodic evaluation"; if no evaluation passes, all count.
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


def load_run(
    run_dir: str | Path, params: Mapping[str, str] | None = None, n: int = HEADLINE_N,
    min_sigma: float = 0.0,
) -> RunRecord | None:
    """Read one run folder; None when it has no ``config.json`` (never started).
    ``min_sigma``: the peak's collapse guard (see ``RunRecord.min_sigma``)."""
    run_dir = Path(run_dir)
    folder = RunFolder(run_dir)
    if not folder.config.exists():
        return None
    try:
        config = folder.read_config()
    except CliError as err:
        raise CliError(f"damaged: {err}") from None
    evals = load_evals(run_dir)
    steps = np.asarray(evals.get("step", np.zeros(0)), dtype=np.int64)
    e = steps.shape[0]
    nan = np.full(e, np.nan)
    params = {k: str(v) for k, v in (params or {}).items()}
    for key in ("track", "seed"):
        params.setdefault(key, str(config.get(key, "?")))
    return RunRecord(
        name=run_dir.name,
        run_dir=str(run_dir),
        config=config,
        params=params,
        steps=steps,
        d_shift=headline_column(evals, n) if e else nan,
        sigma=np.asarray(evals.get("sigma_embed", nan), dtype=np.float64),
        d_base=np.asarray(evals.get("d_base", nan), dtype=np.float64),
        finished=folder.is_finished(),
        min_sigma=min_sigma,
    )


# -- aggregation ---------------------------------------------------------------------------------
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
    if "B" not in tracks or "C" not in tracks:
        return math.nan, "?"
    d = stats.delta(tracks["B"].peak.mean, tracks["C"].peak.mean)
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


def group_table_markdown(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> str:
    """The sweep's table as Markdown."""
    head = [*keys, "runs (done)", "peak D_shift^50 mean +- std [95% CI]", "peak step",
            "final D_shift^50", "sigma_embed at peak"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [str(row[k]) for k in keys] + [
            f"{row['runs']} ({row['finished']})",
            row["peak"].fmt() if row["peak"].n else "-",
            f"{row['peak_step'].mean:.0f}" if row["peak_step"].n else "-",
            _ms(row["final"]),
            _ms(row["sigma"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _ms(s: stats.Summary, digits: int = 4) -> str:
    if not s.n:
        return "-"
    return f"{s.mean:.{digits}f} +- {s.std:.{digits}f}"


def _f(x: float, digits: int = 4) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"


# -- figures -------------------------------------------------------------------------------------
def _band(records: Sequence[RunRecord], attr: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, std) over runs on the steps every run evaluated."""
    common = set(records[0].steps.tolist())
    for r in records[1:]:
        common &= set(r.steps.tolist())
    steps = np.array(sorted(common), dtype=np.int64)
    rows = []
    for r in records:
        idx = {int(s): i for i, s in enumerate(r.steps)}
        vals = getattr(r, attr)
        rows.append([vals[idx[int(s)]] for s in steps])
    arr = np.asarray(rows, dtype=np.float64)  # (runs, steps)
    std = arr.std(axis=0, ddof=1) if arr.shape[0] > 1 else np.zeros(arr.shape[1])
    return steps, arr.mean(axis=0), std


def fig_trajectories(tracks: Mapping[str, TrackStats], path: Path, attr: str = "d_shift",
                     ylabel: str = "D_shift^50 (shift test)") -> Path:
    """Paper Fig. 3: mean +- std band per track over training, full range and zoomed."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
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
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    with writing(path):
        fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def fig_seed_bars(tracks: Mapping[str, TrackStats], path: Path) -> Path:
    """Paper Fig. 2: one bar per run at its peak; mean +- std as line and whisker per track."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
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
    ax.set_ylabel("peak D_shift^50 (lower is better)")
    ax.set_title("per-seed peak D_shift^50 (line, whisker: mean +- std)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    with writing(path):
        fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def fig_runs(records: Sequence[tuple[str, RunRecord]], path: Path, title: str) -> Path:
    """Trajectories of named single runs (ablations, sweeps), each with its peak marked."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
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
    fig.tight_layout()
    with writing(path):
        fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# -- the report ----------------------------------------------------------------------------------
@dataclass
class ReportInput:
    """Everything ``write_report`` needs; only ``main`` is required."""

    main: list[RunRecord]
    ablations: dict[str, RunRecord] = field(default_factory=dict)  # label -> run (Table 3)
    lambdas: dict[str, RunRecord] = field(default_factory=dict)  # "0.05" -> run (Table 4)
    kappas: dict[str, RunRecord] = field(default_factory=dict)  # "1.5" -> run
    analyses: dict[str, Any] = field(default_factory=dict)  # from runners.studies.analysis
    meta: dict[str, Any] = field(default_factory=dict)  # commands, data, steps, seeds, device
    missing: list[str] = field(default_factory=list)  # runs that are not finished


def main_table_markdown(tracks: Mapping[str, TrackStats]) -> list[str]:
    """Per-run table and per-track table with the paper's numbers beside ours."""
    lines = ["### Per run", "",
             "| track | seed | peak D_shift^50 | peak step | final D_shift^50 | final step | "
             "sigma_embed at peak | settling (final - peak) |",
             "|---|---|---|---|---|---|---|---|"]
    for track, ts in tracks.items():
        for r in ts.records:
            flag = "" if r.finished else " (unfinished)"
            lines.append(
                f"| {track} | {r.seed}{flag} | {_f(r.peak)} | {r.peak_step} | {_f(r.final)} | "
                f"{r.final_step} | {_f(r.sigma_at_peak)} | {_f(r.settling, 4)} |"
            )
    lines += ["", "### Per track, ours beside the paper (Table 1)", "",
              "| track | seeds | ours: peak D_shift^50 mean +- std | ours: 95% CI | "
              "ours: sigma_embed at peak | paper: D_shift | paper: 95% CI | paper: sigma_embed |",
              "|---|---|---|---|---|---|---|---|"]
    for track, ts in tracks.items():
        p = PAPER_MAIN.get(track)
        paper = (
            (f"{p['mean']:.4f}" + (f" +- {p['std']:.4f}" if "std" in p else ""),
             f"[{p['ci'][0]:.4f}, {p['ci'][1]:.4f}]", f"{p['sigma']:.4f}")
            if p else ("(not in paper)", "-", "-")
        )
        lines.append(
            f"| {track} | {ts.peak.n} | {ts.peak.mean:.4f} +- {ts.peak.std:.4f} | "
            f"[{ts.peak.ci_low:.4f}, {ts.peak.ci_high:.4f}] | {_ms(ts.sigma)} | "
            f"{paper[0]} | {paper[1]} | {paper[2]} |"
        )
    return lines


def write_report(out_dir: str | Path, inp: ReportInput, title: str = "Reproduction report") -> Path:
    """Write ``out_dir/report.md``, ``out_dir/report.json`` and ``out_dir/figures/*.png``."""
    out_dir = Path(out_dir)
    figs = out_dir / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    tracks = by_track(inp.main)
    d, oc = pre_registered(tracks)
    lines = [f"# {title}", ""]
    meta = inp.meta
    if meta:
        lines += ["## Protocol", ""]
        for key, value in meta.items():
            if key == "commands":
                continue
            lines.append(f"- {key}: {value}")
        for cmd in meta.get("commands", []):
            lines += ["", "```", cmd, "```"]
        lines.append("")
    if inp.missing:
        lines += [f"**Unfinished or missing runs ({len(inp.missing)}):** "
                  + ", ".join(f"`{m}`" for m in inp.missing) + ". Rerun the same command to "
                  "finish them; numbers below use what exists.", ""]
    lines += ["## Main result: D_shift^50 at the peak (lowest periodic evaluation)", ""]
    if not tracks:
        lines += ["No run has an evaluation yet.", ""]
    else:
        lines += main_table_markdown(tracks)
        lines += ["", "### Pre-registered test: track C vs track B", ""]
        lines += [
            "| | delta = (D_B - D_C) / D_B | outcome |", "|---|---|---|",
            f"| ours | {_pct(d)} | {oc}: {_cell(stats.OUTCOME_TEXT.get(oc, 'needs B and C'))} |",
            f"| paper | {_pct(PAPER_DELTA)} | {PAPER_OUTCOME}: "
            f"{_cell(stats.OUTCOME_TEXT[PAPER_OUTCOME])} |",
            "",
        ]
        if "A" in tracks and "C" in tracks:
            sec = stats.delta(tracks["A"].peak.mean, tracks["C"].peak.mean)
            lines += [f"Secondary (not pre-registered): (D_A - D_C) / D_A = {_pct(sec)} "
                      "(paper: 2.98% against track A's mean).", ""]
        fig_seed_bars(tracks, figs / "fig2_seed_bars.png")
        fig_trajectories(tracks, figs / "fig3_trajectories.png")
        fig_trajectories(tracks, figs / "sigma_embed.png", attr="sigma", ylabel="sigma_embed")
        lines += ["![per-seed peak D_shift^50 (Fig. 2)](figures/fig2_seed_bars.png)", "",
                  "![D_shift^50 trajectories, mean +- std per track (Fig. 3)]"
                  "(figures/fig3_trajectories.png)", "",
                  "![sigma_embed over training (Fig. 5)](figures/sigma_embed.png)", ""]
    if inp.ablations:
        lines += _ablation_section(inp.ablations, figs)
    if inp.lambdas:
        lines += _lambda_section(inp.lambdas, figs)
    if inp.kappas:
        lines += _sweep_section("Kappa sweep (track C, beyond the paper)", "kappa", inp.kappas,
                                figs / "kappa_sweep.png")
    if inp.analyses:
        from runners.studies import analysis

        lines += analysis.report_section(inp.analyses, figs)
    with writing(out_dir / "report.md"):
        (out_dir / "report.md").write_text("\n".join(lines).rstrip() + "\n")
    payload = {
        "runs": [r.row() for r in inp.main],
        "tracks": {t: {"peak": vars(ts.peak), "final": vars(ts.final), "sigma": vars(ts.sigma)}
                   for t, ts in tracks.items()},
        "delta": d, "outcome": oc,
        "ablations": {k: r.row() for k, r in inp.ablations.items()},
        "lambdas": {k: r.row() for k, r in inp.lambdas.items()},
        "kappas": {k: r.row() for k, r in inp.kappas.items()},
        "analyses": inp.analyses, "meta": meta, "missing": inp.missing,
    }
    with writing(out_dir / "report.json"):
        (out_dir / "report.json").write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    return out_dir / "report.md"


def _jsonable(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _pct(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{100 * x:.2f}%"


def _ablation_section(runs: Mapping[str, RunRecord], figs: Path) -> list[str]:
    lines = ["## Mechanism ablation: dual freeze of buffer and EMA target (Table 3)", "",
             "| experiment | freeze step | ours: peak (step) | ours: final | ours: settling | "
             "ours: sigma final | paper: peak | paper: final | paper: settling |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, r in runs.items():
        p = PAPER_ABLATION.get(label)
        freeze = r.params.get("freeze_ema_at", "-")
        lines.append(
            f"| {label} (seed {r.seed}) | {freeze} | {_f(r.peak)} ({r.peak_step}) | {_f(r.final)} "
            f"| {_signed(r.settling)} | {_f(r.final_sigma)} | "
            + (" | ".join([f"{p[0]:.4f}", f"{p[1]:.4f}", f"+{p[2]:.4f}"]) if p else "- | - | -")
            + " |"
        )
    fig_runs(list(runs.items()), figs / "ablation_trajectories.png", "dual-freeze ablation")
    lines += ["", "Settling = final - peak. The paper's two step-8000 replicates differed only by "
              "GPU nondeterminism; ours are bit-deterministic on a CPU, so replicate 2 uses the "
              "next seed.", "",
              "![ablation trajectories (Fig. 4)](figures/ablation_trajectories.png)", ""]
    return lines


def _lambda_section(runs: Mapping[str, RunRecord], figs: Path) -> list[str]:
    lines = ["## LoRA regularisation sweep, track C (Table 4)", "",
             "| lambda | ours: peak (step) | ours: final | ours: sigma at peak | paper: peak | "
             "paper: final | paper: sigma at peak |", "|---|---|---|---|---|---|---|"]
    for lam, r in runs.items():
        p = PAPER_LAMBDA.get(_norm_num(lam))
        lines.append(
            f"| {lam} | {_f(r.peak)} ({r.peak_step}) | {_f(r.final)} | {_f(r.sigma_at_peak)} | "
            + (" | ".join(f"{v:.4f}" for v in p) if p else "- | - | -") + " |"
        )
    fig_runs([(f"lambda {k}", r) for k, r in runs.items()], figs / "lambda_sweep.png",
             "lambda sweep (track C)")
    return lines + ["", "![lambda sweep](figures/lambda_sweep.png)", ""]


def _sweep_section(title: str, key: str, runs: Mapping[str, RunRecord], fig: Path) -> list[str]:
    lines = [f"## {title}", "", f"| {key} | peak (step) | final | sigma at peak |",
             "|---|---|---|---|"]
    for value, r in runs.items():
        lines.append(f"| {value} | {_f(r.peak)} ({r.peak_step}) | {_f(r.final)} | "
                     f"{_f(r.sigma_at_peak)} |")
    fig_runs([(f"{key} {k}", r) for k, r in runs.items()], fig, title)
    return lines + ["", f"![{title}](figures/{fig.name})", ""]


def _norm_num(text: str) -> str:
    try:
        return f"{float(text):.2f}"
    except ValueError:
        return text


def _signed(x: float) -> str:
    return "-" if not np.isfinite(x) else f"{x:+.4f}"
