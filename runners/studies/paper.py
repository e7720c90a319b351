"""The study ``paper``: the paper's experiments end to end (its protocol, Section 4.1; the
ablations on request), ``reproduction/report.md`` beside the paper's numbers (``PAPER_*``): what
runs and what the report holds are in docs/reproduce.md, "study paper". The run records are
``runners.studies.runs``'; the checkpoints' deferred analyses, ``analysis``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

from agent.config import Track
from agent.tracks import FLOOR, INPUT, WEIGHTS
from runners.cli import CliError
from runners.online.rundir import RunFolder
from runners.studies import analysis, grid, launch, question, stats
from runners.studies.figures import fig_runs, fig_seed_bars, fig_trajectories
from runners.studies.runs import RunRecord, TrackStats, by_track, load_run, pre_registered
from runners.style import num, pct, table

#: The train_online options the study sets itself, with its own option to use instead.
OWNED = {"--protocol": "", "--source": "", "--switch": "", "--track": "--tracks",
         "--seed": "--seeds"}


@dataclass
class Options(launch.Seeded):
    """The paper's three-track comparison (and, on request, its ablations), then
    reproduction/report.md. Any other option (e.g. --device cuda, --precision bf16, --lr 1e-3)
    is passed to every run of runners.train_online."""

    out: str = "reproduction"
    """output folder"""
    steps: int = 10_000
    """training steps"""
    preset: Literal["paper", "tiny"] = "paper"
    """run preset (train_online's --preset; tiny is for smoke tests)"""
    data: Annotated[str | None, tyro.conf.arg(metavar="PATH.zarr")] = None
    """the paper's datasets (runners.make_dataset); default: generate OUT/data/paper.zarr if missing"""
    tracks: tuple[Track, ...] = ("A", "B", "C")
    """tracks of the main comparison"""
    eval_every: int = 500
    """steps between periodic evaluations"""
    ablations: bool = False
    """add Table 3 (dual freeze) and Table 4 (lambda) on --ablation-steps"""
    ablation_steps: int = 20_000
    """the paper's longer budget for the ablations"""
    freeze_steps: Annotated[tuple[int, int], tyro.conf.arg(metavar="EARLY LATE")] = (8000, 10000)
    """dual-freeze steps (EARLY gets two replicates)"""
    lambdas: tuple[float, ...] = (0.05, 0.10, 0.15)
    """lambda_reg values of the ablation sweep"""
    kappas: tuple[float, ...] = ()
    """beyond the paper: a kappa sweep on track C, first seed, --steps"""
    min_sigma: float = 0.2
    """collapse guard: evaluations with sigma_embed below this are not candidates for the peak (0 = the paper's plain lowest periodic evaluation)"""
    no_analysis: bool = False
    """skip the checkpoint analyses (SVD, attention, adaptation curve)"""
    dataset_sizes: Annotated[tuple[int, int] | None, tyro.conf.arg(metavar="BASE SHIFT")] = None
    """sequences when generating the datasets (default: the paper's 10000 1000)"""

    def data_path(self) -> Path:
        """``--data``, or the generated datasets ``OUT/data/paper.zarr``."""
        return Path(self.data) if self.data else Path(self.out) / "data" / "paper.zarr"


def _fmt(x: float) -> str:
    """A grid value as text: 0.1 -> "0.1", 2.0 -> "2.0" (stable run names)."""
    return repr(float(x))


def _c(seed: str, *items: tuple[str, str]) -> grid.Point:
    """Track C at ``seed`` with ``items``."""
    return grid.Point((("track", "C"), ("seed", seed), *items))


def _ablations(opts: Options, s0: str, s1: str) -> list[tuple[str, str, grid.Point]]:
    """(role, label, point) of Table 3's dual-freeze runs and Table 4's lambda sweep (the
    baseline doubles as lambda 0.05)."""
    early, late = opts.freeze_steps

    def freeze(seed: str, at: int) -> grid.Point:
        return _c(seed, ("freeze_buffer_at", str(at)), ("freeze_ema_at", str(at)))

    out = [("ablations", "baseline", _c(s0)), ("ablations", f"freeze-{early}-rep1", freeze(s0, early)),
           ("ablations", f"freeze-{early}-rep2", freeze(s1, early)),
           ("ablations", f"freeze-{late}", freeze(s0, late))]  # fmt: skip
    for lam in dict.fromkeys(opts.lambdas):
        point = _c(s0) if abs(lam - 0.05) < 1e-12 else _c(s0, ("lambda_reg", _fmt(lam)))
        out.append(("lambdas", f"{lam:.2f}", point))
    return out


def plan(opts: Options, passthrough: Sequence[str]) -> launch.Plan:
    """The main comparison (labelled ("main", track-seed)), then the ablations, the lambda
    and the kappa sweeps (labelled by their role and their row in the report); the options and
    the datasets a report-only run reads checked before anything runs."""
    if opts.steps < 1 or opts.ablation_steps < 1 or opts.eval_every < 1:
        raise CliError("--steps, --ablation-steps and --eval-every must be at least 1")
    if (opts.data or opts.report_only) and not opts.data_path().exists():
        raise CliError(f"--data {opts.data} does not exist (write it with runners.make_dataset)"
                       if opts.data else
                       f"--report-only needs the datasets: {opts.data_path()} is missing")
    common = ["--protocol", "paper", "--source", "dataset", "--data", str(opts.data_path()),
              "--no-switch", "--preset", opts.preset, "--eval-every", str(opts.eval_every),
              *passthrough]
    seeds = opts.seed_list()
    s0, s1 = seeds[0], seeds[1] if len(seeds) > 1 else str(int(seeds[0]) + 1)
    main = grid.expand({"track": list(dict.fromkeys(opts.tracks)), "seed": seeds})
    rows = [("main", p.name, p, opts.steps) for p in main]
    if opts.ablations:
        rows += [(*row, opts.ablation_steps) for row in _ablations(opts, s0, s1)]
    rows += [("kappas", _fmt(k), _c(s0, ("kappa", _fmt(k))), opts.steps)
             for k in dict.fromkeys(opts.kappas)]
    runs = []
    for role, label, point, n in rows:
        group = Path(opts.out) / "runs" / f"{opts.preset}-{n}"
        (spec,) = launch.make_specs([point], group, [*common, "--steps", str(n)])
        runs.append(((role, label, point), spec))
    prepare = None if opts.report_only or opts.data_path().exists() else lambda: write_data(opts)
    return launch.Plan(runs, prepare=prepare)


def write_data(opts: Options) -> None:
    """The paper's datasets generated into ``OUT/data/paper.zarr``."""
    from tqdm import tqdm

    import env

    config = env.PaperDatasetConfig()
    if opts.dataset_sizes:
        config = env.PaperDatasetConfig(base_sequences=opts.dataset_sizes[0],
                                        shift_sequences=opts.dataset_sizes[1])
    path = opts.data_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    total = config.base_sequences + config.shift_sequences
    with tqdm(total=total, desc=f"writing {path}", unit="seq") as bar:
        try:
            env.write_dataset(path, config, progress=bar.update)
        except (OSError, ValueError, env.DatasetError) as err:
            raise CliError(f"cannot write the datasets to {path}: {err}") from None


def _records(opts: Options, plan: launch.Plan, role: str) -> dict[str, RunRecord]:
    """The runs of one role that have a folder, by label (the sweeps': those evaluated)."""
    out = {}
    for (r, label, point), spec in plan.runs:
        rec = load_run(spec.run_dir, point.params, min_sigma=opts.min_sigma) if r == role else None
        if rec is not None and (role == "main" or rec.has_evals):
            out[label] = rec
    return out


def report(opts: Options, plan: launch.Plan, commands: list[str]) -> Path:
    """``OUT/report.md`` beside its figures, and ``report.json``: the runs beside the paper's
    numbers, the other experiments and the checkpoints' analyses."""
    main = list(_records(opts, plan, "main").values())
    out = Path(opts.out).resolve()
    missing = [Path(s.run_dir).relative_to(out).as_posix()
               for s in plan.specs if not RunFolder(s.run_dir).is_finished()]
    analyses = {}
    if not opts.no_analysis:
        analyses = analysis.analyse_runs([r for r in main if r.finished], opts.data_path(),
                                         Path(opts.out) / "analysis")  # fmt: skip
    eval_every = main[0].config.get("eval_every", opts.eval_every) if main else opts.eval_every
    meta = {
        "data": str(opts.data_path()), **opts.meta(), "tracks": " ".join(opts.tracks),
        "evaluation": f"D_shift^50 on the shift test split every {eval_every} steps; "
                      "peak = lowest periodic evaluation with sigma_embed >= "
                      f"{opts.min_sigma} (the collapse guard, --min-sigma)",
        "commands": commands,
    }
    if opts.ablations:
        meta["ablation steps"] = opts.ablation_steps
    figs = Path(opts.out) / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    tracks = by_track(main)
    d, oc = pre_registered(tracks)
    others = {role: _records(opts, plan, role) for role in ("ablations", "lambdas", "kappas")}
    body = _main_section(tracks, d, oc, figs)
    if others["ablations"]:
        body += _ablation_section(others["ablations"], figs)
    if others["lambdas"]:
        body += _lambda_section(others["lambdas"], figs)
    if others["kappas"]:
        body += _sweep_section("Kappa sweep (track C, beyond the paper)", "kappa",
                               others["kappas"], figs / "kappa_sweep.png")
    if analyses:
        body += analysis.report_section(analyses, figs)
    payload = {"runs": [r.row() for r in main],
               "tracks": {t: {"peak": ts.peak, "final": ts.final, "sigma": ts.sigma}
                          for t, ts in tracks.items()},
               "delta": d, "outcome": oc,
               **{role: {k: r.row() for k, r in recs.items()} for role, recs in others.items()},
               "analyses": analyses, "meta": meta, "missing": missing}
    return launch.write_report(opts.out, "EPM-JEPA reproduction report", meta, missing, body,
                               payload)


def paired(tracks: Mapping[str, TrackStats], attr: str) -> dict[str, object]:
    """delta = (D_B - D_C) / D_B seed by seed (``attr``: "peak" or "final" D_shift^50), over the
    seeds both tracks ran, as ``question.interval`` (the t-interval over seeds, the bootstrap)."""
    b = {r.seed: getattr(r, attr) for r in tracks[INPUT].records}
    c = {r.seed: getattr(r, attr) for r in tracks[WEIGHTS].records}
    return question.interval({s: stats.delta(b[s], c[s]) for s in b if s in c})


def paired_lines(tracks: Mapping[str, TrackStats]) -> list[str]:
    """The delta paired seed by seed with its 95% t-interval over seeds and its outcome by the
    interval, at the peak and at the last step (docs/preregistration.md's reading)."""
    out = []
    for attr in ("peak", "final"):
        iv = paired(tracks, attr)
        out.append(f"- {attr}: {question.interval_text(iv)}: {stats.answer(iv['low'], iv['high'])}")
    return ["Paired seed by seed, the delta's 95% t-interval over seeds and its outcome by the "
            "interval (C better, B better, equivalent within the paper's 4.74%, inconclusive: "
            "docs/preregistration.md):", "", *out, ""]


# -- the paper's numbers (Section 4, Tables 1, 3, 4; Appendix B), shown beside ours ---------
# Table 1 and Appendix B: peak D_shift^50 per track (mean, 95% CI, sigma_embed, seeds).
PAPER_MAIN = {
    "A": {"mean": 0.8089, "ci": (0.8000, 0.8159), "sigma": 0.5321,
          "seeds": (0.8000, 0.8159, 0.8108)},
    "B": {"mean": 0.8238, "ci": (0.8217, 0.8249), "sigma": 0.5324, "seeds": None},
    "C": {"mean": 0.7848, "std": 0.0078, "ci": (0.7776, 0.7931), "sigma": 0.4123,
          "seeds": (0.7776, 0.7931, 0.7838)},
}
PAPER_DELTA = stats.PAPER_DELTA  # the pre-registered (D_B - D_C) / D_B
PAPER_OUTCOME = "C"
PAPER_SECONDARY_DELTA = 0.0298  # (D_A - D_C) / D_A, not pre-registered
PAPER_ABLATION = {  # Table 3: (peak, final, settling)
    "baseline": (0.7776, 0.8349, 0.0573),
    "freeze-8000-rep1": (0.7994, 0.8051, 0.0057),
    "freeze-8000-rep2": (0.7882, 0.8097, 0.0215),
    "freeze-10000": (0.7996, 0.8205, 0.0209),
}
PAPER_LAMBDA = {  # Table 4: (peak, final, sigma at peak), by lambda with two decimals
    "0.05": (0.7776, 0.8349, 0.4123),
    "0.10": (0.8139, 0.8619, 0.4661),
    "0.15": (0.8009, 0.8595, 0.4760),
}


# -- the report ----------------------------------------------------------------------------------
def main_table_markdown(tracks: Mapping[str, TrackStats]) -> list[str]:
    """Per-run table and per-track table with the paper's numbers beside ours."""
    runs = ([track, f"{r.seed}{'' if r.finished else ' (unfinished)'}", num(r.peak, 4),
             r.peak_step, num(r.final, 4), r.final_step, num(r.sigma_at_peak, 4),
             num(r.settling, 4)] for track, ts in tracks.items() for r in ts.records)
    rows = []
    for track, ts in tracks.items():
        p = PAPER_MAIN.get(track)
        paper = ((f"{p['mean']:.4f}" + (f" +- {p['std']:.4f}" if "std" in p else ""),
                  f"[{p['ci'][0]:.4f}, {p['ci'][1]:.4f}]", f"{p['sigma']:.4f}")
                 if p else ("(not in paper)", "-", "-"))
        rows.append([track, ts.peak.n, ts.peak.ms(), f"[{ts.peak.ci_low:.4f}, "
                     f"{ts.peak.ci_high:.4f}]", ts.sigma.ms(), *paper])
    return ["### Per run", "", *table(
        ["track", "seed", "peak D_shift^50", "peak step", "final D_shift^50", "final step",
         "sigma_embed at peak", "settling (final - peak)"], runs),
        "", "### Per track, ours beside the paper (Table 1)", "", *table(
        ["track", "seeds", "ours: peak D_shift^50 mean +- std", "ours: 95% CI",
         "ours: sigma_embed at peak", "paper: D_shift", "paper: 95% CI", "paper: sigma_embed"],
        rows)]


def _main_section(tracks: Mapping[str, TrackStats], d: float, oc: str, figs: Path) -> list[str]:
    """The main result: the tables, the pre-registered test (delta ``d``, outcome ``oc``) and
    the secondary delta; draws its figures in ``figs``."""
    lines = ["## Main result: D_shift^50 at the peak (lowest periodic evaluation)", ""]
    if not tracks:
        return lines + ["No run has an evaluation yet.", ""]
    lines += main_table_markdown(tracks)
    lines += ["", "### Pre-registered test: track C vs track B", "",
              "| | delta = (D_B - D_C) / D_B | outcome |", "|---|---|---|",
              f"| ours | {pct(d, 2)} | {oc}: "
              f"{_escape(stats.OUTCOME_TEXT.get(oc, 'needs B and C'))} |",
              f"| paper | {pct(PAPER_DELTA, 2)} | {PAPER_OUTCOME}: "
              f"{_escape(stats.OUTCOME_TEXT[PAPER_OUTCOME])} |", ""]
    if INPUT in tracks and WEIGHTS in tracks:
        lines += paired_lines(tracks)
        question.figure({"C against B, D_shift^50 at the guarded peak": paired(tracks, "peak"),
                         "... at the last step": paired(tracks, "final")},
                        figs / "delta_per_seed.png")  # fmt: skip
        lines += ["![delta per seed with its interval, at the peak and at the last step]"
                  "(figures/delta_per_seed.png)", ""]
    if FLOOR in tracks and WEIGHTS in tracks:
        sec = stats.delta(tracks[FLOOR].peak.mean, tracks[WEIGHTS].peak.mean)
        lines += [f"Secondary (not pre-registered): (D_A - D_C) / D_A = {pct(sec, 2)} "
                  f"(paper: {pct(PAPER_SECONDARY_DELTA, 2)} against track A's mean).", ""]
    fig_seed_bars(tracks, figs / "fig2_seed_bars.png")
    fig_trajectories(tracks, figs / "fig3_trajectories.png")
    fig_trajectories(tracks, figs / "sigma_embed.png", attr="sigma", ylabel="sigma_embed")
    return lines + ["![per-seed peak D_shift^50 (Fig. 2)](figures/fig2_seed_bars.png)", "",
                    "![D_shift^50 trajectories, mean +- std per track (Fig. 3)]"
                    "(figures/fig3_trajectories.png)", "",
                    "![sigma_embed over training (Fig. 5)](figures/sigma_embed.png)", ""]


def _escape(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _ablation_section(runs: Mapping[str, RunRecord], figs: Path) -> list[str]:
    """Table 3 beside the paper's, and the runs' trajectories."""
    rows = []
    for label, r in runs.items():
        p = PAPER_ABLATION.get(label)
        rows.append([f"{label} (seed {r.seed})", r.params.get("freeze_ema_at", "-"),
                     f"{num(r.peak, 4)} ({r.peak_step})", num(r.final, 4), num(r.settling, 4, "+"),
                     num(r.final_sigma, 4),
                     *([f"{p[0]:.4f}", f"{p[1]:.4f}", f"+{p[2]:.4f}"] if p else ["-"] * 3)])
    fig_runs(list(runs.items()), figs / "ablation_trajectories.png", "dual-freeze ablation")
    return ["## Mechanism ablation: dual freeze of buffer and EMA target (Table 3)", "",
            *table(["experiment", "freeze step", "ours: peak (step)", "ours: final",
                           "ours: settling", "ours: sigma final", "paper: peak", "paper: final",
                           "paper: settling"], rows),
            "", "Settling = final - peak. The paper's two step-8000 replicates differed only by "
            "GPU nondeterminism; ours are bit-deterministic on a CPU, so replicate 2 uses the "
            "next seed.", "",
            "![ablation trajectories (Fig. 4)](figures/ablation_trajectories.png)", ""]


def _lambda_section(runs: Mapping[str, RunRecord], figs: Path) -> list[str]:
    """Table 4 beside the paper's, and the runs' trajectories."""
    rows = []
    for lam, r in runs.items():
        p = PAPER_LAMBDA.get(lam)
        rows.append([lam, f"{num(r.peak, 4)} ({r.peak_step})", num(r.final, 4),
                     num(r.sigma_at_peak, 4), *([f"{v:.4f}" for v in p] if p else ["-"] * 3)])
    fig_runs([(f"lambda {k}", r) for k, r in runs.items()], figs / "lambda_sweep.png",
             "lambda sweep (track C)")
    return ["## LoRA regularisation sweep, track C (Table 4)", "", *table(
        ["lambda", "ours: peak (step)", "ours: final", "ours: sigma at peak", "paper: peak",
         "paper: final", "paper: sigma at peak"], rows),
        "", "![lambda sweep](figures/lambda_sweep.png)", ""]


def _sweep_section(title: str, key: str, runs: Mapping[str, RunRecord], fig: Path) -> list[str]:
    """A sweep's runs (peak, final, sigma_embed at the peak) and their trajectories."""
    rows = ([value, f"{num(r.peak, 4)} ({r.peak_step})", num(r.final, 4), num(r.sigma_at_peak, 4)]
            for value, r in runs.items())
    fig_runs([(f"{key} {k}", r) for k, r in runs.items()], fig, title)
    return [f"## {title}", "", *table([key, "peak (step)", "final", "sigma at peak"], rows),
            "", f"![{title}](figures/{fig.name})", ""]
