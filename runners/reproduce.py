"""Reproduce the paper's experiments end to end and write ``reproduction/report.md``.

    python -m runners.reproduce                        # tracks A B C x seeds 42 43 44, 10,000 steps
    python -m runners.reproduce --ablations            # + Table 3 (dual freeze) and Table 4 (lambda)
    python -m runners.reproduce --tracks A B C D E --kappas 1.0 1.5 2.0 3.0   # beyond the paper
    python -m runners.reproduce --report-only          # rebuild the report from the run folders

The paper's protocol (Section 4.1): dataset mode (i.i.d. base-world training sequences, input
frame 0, targets 5/10/20), no mid-run switch, D_shift^{50} on the shift test split evaluated
periodically; the "peak" is the lowest periodic evaluation. Without ``--data`` the paper's
datasets are generated once into ``OUT/data/paper.zarr``.

Every run goes through the sweep machinery (``runners.sweep``): one resumable run folder per
configuration under ``OUT/runs/<preset>-<steps>/``, finished runs skipped, interrupted ones
resumed, so rerunning the command after a stop finishes only what is missing, and a complete
reproduction only rewrites the report. Afterwards the deferred analyses (SVD spectrum and
effective rank, buffer attention, adaptation curve) run on each main run's ``best`` and final
checkpoints, cached in ``OUT/analysis/``.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import tyro

from agent.config import Track
from runners.cli import CliError, ensure_output_dir, parse, run_main, writing
from runners.studies import backends, grid, launch, report
from runners.studies.runs import RunRecord, load_run

PROG = "python -m runners.reproduce"


@dataclass
class Reproduce:
    """The paper's three-track comparison (and, on request, its ablations) through runners.sweep,
    then reproduction/report.md. Any other option (e.g. --device cuda, --precision bf16,
    --lr 1e-3) is passed to every run of runners.train_online."""

    data: Annotated[str | None, tyro.conf.arg(metavar="PATH.zarr")] = None
    """the paper's datasets (runners.make_dataset); default: generate OUT/data/paper.zarr if missing"""
    steps: int = 10_000
    """training steps"""
    seeds: tuple[int, ...] = (42, 43, 44)
    """seeds of every configuration"""
    tracks: tuple[Track, ...] = ("A", "B", "C")
    """tracks of the main comparison"""
    out: str = "reproduction"
    """output folder"""
    preset: Literal["paper", "tiny"] = "paper"
    """agent preset (tiny is for smoke tests)"""
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
    report_only: bool = False
    """run nothing: rebuild the report from the existing run folders"""
    dataset_sizes: Annotated[tuple[int, int] | None, tyro.conf.arg(metavar="BASE SHIFT")] = None
    """sequences when generating the datasets (default: the paper's 10000 1000)"""
    backend: launch.BackendOptions = field(default_factory=launch.Backend)


@dataclass
class Plan:
    """The runs of a reproduction, with the role each plays in the report."""

    main: list[tuple[grid.Point, backends.RunSpec]]
    ablations: dict[str, tuple[grid.Point, backends.RunSpec]]
    lambdas: dict[str, tuple[grid.Point, backends.RunSpec]]
    kappas: dict[str, tuple[grid.Point, backends.RunSpec]]

    def specs(self) -> list[backends.RunSpec]:
        """Every distinct run (the ablation baseline doubles as lambda 0.05)."""
        seen: dict[str, backends.RunSpec] = {}
        for group in (self.main, *(g.values() for g in (self.ablations, self.lambdas, self.kappas))):
            for _, spec in group:
                seen.setdefault(spec.run_dir, spec)
        return list(seen.values())


def _fmt(x: float) -> str:
    """A grid value as text: 0.1 -> "0.1", 2.0 -> "2.0" (stable run names)."""
    return repr(float(x))


def make_plan(args: Reproduce, data: str, passthrough: Sequence[str]) -> Plan:
    """Run folders and arguments of every run the options ask for."""
    runs = Path(args.out) / "runs"
    common = ["--protocol", "paper", "--source", "dataset", "--data", str(data), "--no-switch",
              "--preset", args.preset,
              "--eval-every", str(args.eval_every), *passthrough]

    def specs_for(points: list[grid.Point], steps: int) -> list[tuple[grid.Point, backends.RunSpec]]:
        group = runs / f"{args.preset}-{steps}"
        made = launch.make_specs(points, group, [*common, "--steps", str(steps)])
        return list(zip(points, made, strict=True))

    tracks = list(dict.fromkeys(args.tracks))
    seeds = [str(s) for s in dict.fromkeys(args.seeds)]
    main = specs_for(grid.expand({"track": tracks, "seed": seeds}), args.steps)
    s0 = seeds[0]
    s1 = seeds[1] if len(seeds) > 1 else str(int(s0) + 1)
    ablations: dict[str, tuple[grid.Point, backends.RunSpec]] = {}
    lambdas: dict[str, tuple[grid.Point, backends.RunSpec]] = {}
    if args.ablations:
        early, late = args.freeze_steps

        def freeze(seed: str, at: int) -> grid.Point:
            return grid.Point((("track", "C"), ("seed", seed), ("freeze_buffer_at", str(at)),
                               ("freeze_ema_at", str(at))))

        base = grid.Point((("track", "C"), ("seed", s0)))
        labels = {"baseline": base, f"freeze-{early}-rep1": freeze(s0, early),
                  f"freeze-{early}-rep2": freeze(s1, early), f"freeze-{late}": freeze(s0, late)}
        made = specs_for(list(labels.values()), args.ablation_steps)
        ablations = dict(zip(labels, made, strict=True))
        lam_points = {}
        for lam in dict.fromkeys(args.lambdas):
            key = f"{lam:.2f}"
            lam_points[key] = (
                base if abs(lam - 0.05) < 1e-12
                else grid.Point((("track", "C"), ("seed", s0), ("lambda_reg", _fmt(lam))))
            )
        lambdas = dict(zip(lam_points, specs_for(list(lam_points.values()), args.ablation_steps),
                           strict=True))
    kappas: dict[str, tuple[grid.Point, backends.RunSpec]] = {}
    if args.kappas:
        k_points = {_fmt(k): grid.Point((("track", "C"), ("seed", s0), ("kappa", _fmt(k))))
                    for k in dict.fromkeys(args.kappas)}
        kappas = dict(zip(k_points, specs_for(list(k_points.values()), args.steps), strict=True))
    return Plan(main, ablations, lambdas, kappas)


def ensure_data(args: Reproduce) -> Path:
    """``--data`` checked, or the paper's datasets generated into ``OUT/data/paper.zarr``."""
    if args.data:
        path = Path(args.data)
        if not path.exists():
            raise CliError(f"--data {path} does not exist (write it with runners.make_dataset)")
        return path
    path = Path(args.out) / "data" / "paper.zarr"
    if path.exists():
        return path
    if args.report_only:
        raise CliError(f"--report-only needs the datasets: {path} is missing")
    from tqdm import tqdm

    import env

    config = env.PaperDatasetConfig()
    if args.dataset_sizes:
        config = env.PaperDatasetConfig(base_sequences=args.dataset_sizes[0],
                                        shift_sequences=args.dataset_sizes[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    total = config.base_sequences + config.shift_sequences
    with tqdm(total=total, desc=f"writing {path}", unit="seq") as bar:
        try:
            env.write_dataset(path, config, progress=bar.update)
        except (OSError, ValueError, env.DatasetError) as err:
            raise CliError(f"cannot write the datasets to {path}: {err}") from None
    return path


def _load(
    pairs: Sequence[tuple[grid.Point, backends.RunSpec]], min_sigma: float = 0.0
) -> list[RunRecord]:
    out = []
    for point, spec in pairs:
        rec = load_run(spec.run_dir, point.params, min_sigma=min_sigma)
        if rec is not None:
            out.append(rec)
    return out


def _load_map(
    group: dict[str, tuple[grid.Point, backends.RunSpec]], min_sigma: float = 0.0
) -> dict[str, RunRecord]:
    out = {}
    for label, (point, spec) in group.items():
        rec = load_run(spec.run_dir, point.params, min_sigma=min_sigma)
        if rec is not None and rec.has_evals:
            out[label] = rec
    return out


def build_report(args: Reproduce, plan: Plan, data: Path, command: str) -> Path:
    """Collect the run folders of ``plan`` (and analyses) into ``OUT/report.md``."""
    main = _load(plan.main, args.min_sigma)
    missing = [Path(s.run_dir).relative_to(Path(args.out).resolve()).as_posix()
               for s in plan.specs() if not backends.is_finished(s.run_dir)]
    analyses = {}
    if not args.no_analysis:
        from runners.studies import analysis

        analyses = analysis.analyse_runs(
            [r for r in main if r.finished], data, Path(args.out) / "analysis"
        )
    eval_every = main[0].config.get("eval_every", args.eval_every) if main else args.eval_every
    meta = {
        "data": str(data),
        "preset": args.preset,
        "steps": args.steps,
        "seeds": " ".join(str(s) for s in args.seeds),
        "tracks": " ".join(args.tracks),
        "evaluation": f"D_shift^50 on the shift test split every {eval_every} steps; "
                      "peak = lowest periodic evaluation with sigma_embed >= "
                      f"{args.min_sigma} (the collapse guard, --min-sigma)",
        "commands": [command],
    }
    if args.ablations:
        meta["ablation steps"] = args.ablation_steps
    inp = report.ReportInput(
        main=main, ablations=_load_map(plan.ablations, args.min_sigma),
        lambdas=_load_map(plan.lambdas, args.min_sigma),
        kappas=_load_map(plan.kappas, args.min_sigma), analyses=analyses, meta=meta,
        missing=missing,
    )
    return report.write_report(args.out, inp, title="EPM-JEPA reproduction report")


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parse(Reproduce, argv, PROG, unknown=True)
    if args.steps < 1 or args.ablation_steps < 1 or args.eval_every < 1:
        raise CliError("--steps, --ablation-steps and --eval-every must be at least 1")
    passthrough = launch.check_passthrough(extra)
    for opt in ("--protocol", "--source", "--switch", "--steps", "--preset", "--track", "--seed"):
        if opt in passthrough:
            raise CliError(f"{opt} is fixed by the reproduction protocol; use reproduce's options")
    if not args.report_only:  # every run's typed config is valid before anything is written
        data_path = Path(args.data) if args.data else Path(args.out) / "data" / "paper.zarr"
        launch.check_specs(make_plan(args, str(data_path), passthrough).specs())
    command = "python -m runners.reproduce " + shlex.join(
        list(argv) if argv is not None else sys.argv[1:])
    t0 = time.perf_counter()
    ensure_output_dir(args.out, "--out")  # before any dataset or run is written
    data = ensure_data(args)
    plan = make_plan(args, str(data), passthrough)
    failed: list[backends.RunResult] = []
    if not args.report_only:
        results = launch.run_specs(args.backend.make(), plan.specs(), Path(args.out) / "logs")
        failed = [r for r in results if not r.ok]
    with writing(args.out):  # a full disk names at least the output folder
        path = build_report(args, plan, data, command)
    print(f"report: {path} ({time.perf_counter() - t0:.0f} s)")
    return launch.report_failures(failed)


if __name__ == "__main__":
    run_main(main, PROG)
