"""The comparison the paper could not make: tracks A-E and the oracle on the worlds protocol.

    python -m runners.worlds_study                      # tracks A-E + oracle x seeds 42 43 44
    python -m runners.worlds_study --tracks A B C --seeds 0 1 2 --workers 2
    python -m runners.worlds_study --report-only        # rebuild the report from the run folders
    python -m runners.worlds_study --device cuda --stack  # on a GPU: each arm's seeds stacked

Every arm is one ``python -m runners.train_online`` run of its default worlds protocol (training
across drawn worlds of the ``train`` family, every stream switched to a held-out world, the
weights frozen) with one track, and the oracle is track C's pathway fed the true physics
(``--oracle``). Each run's held-out adaptation curves (D^n on ``interp`` and ``extrap``
worlds with own, same-world and wrong-world memory) are collected into ``OUT/report.md``: the
curves over n, each memory track's drop and share of the oracle's gain, the wrong-world control
and the pre-registered delta = (D_B - D_C) / D_B at n = 50 with its outcome class. The paper's
protocol has its own report (``python -m runners.reproduce``).

Runs go through the sweep machinery (``runners.sweep``): one resumable folder per arm and seed
under ``OUT/runs/<preset>-<steps>/``; rerunning the command finishes only what is missing. With
``--stack`` each arm's seeds train as one stacked run (``train_online --stack-seeds``), in
folders ``<arm>-s<seed>``, a job of the backend as a single run is (``--workers N`` arms at
once, each a process of its own, or Ray tasks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agent.config import TRACKS, Track
from runners.cli import CliError, parse, run_main
from runners.online.config import Preset
from runners.studies import backends, grid, launch, worlds_report

PROG = "python -m runners.worlds_study"


@dataclass
class WorldsStudy:
    """Tracks A-E and the oracle on the worlds protocol (held-out worlds, own / same / wrong
    memory) through runners.sweep, then OUT/report.md. Any other option (e.g. --device cuda,
    --context-frames 3) is passed to every run of runners.train_online."""

    tracks: tuple[Track, ...] = TRACKS
    """tracks to run (default: all five)"""
    oracle_track: Literal["B", "C", "D", "E", "none"] = "C"
    """the pathway the oracle feeds the true physics into (none = no oracle arm)"""
    seeds: tuple[int, ...] = (42, 43, 44)
    """seeds of every arm"""
    steps: int | None = None
    """training steps per run (default: train_online's; the switch is at 2/3)"""
    preset: Preset = "cpu"
    """agent preset (the main job's)"""
    out: str = "worlds-study"
    """output folder"""
    report_only: bool = False
    """run nothing: rebuild the report from the existing run folders"""
    stack: bool = False
    """each arm's seeds as one stacked run (train_online --stack-seeds), each arm a job of the backend (--workers N arms at once, each a process of its own); for one GPU (with --device cuda); its runs live under names of their own (<arm>-s<seed>)"""
    backend: launch.BackendOptions = field(default_factory=launch.Backend)


def make_points(args: WorldsStudy) -> list[tuple[str, grid.Point]]:
    """(arm, grid point) of every run, arms in order, seeds inside."""
    seeds = [str(s) for s in dict.fromkeys(args.seeds)]
    out = []
    for track in dict.fromkeys(args.tracks):
        out += [(track, grid.Point((("track", track), ("seed", s)))) for s in seeds]
    if args.oracle_track != "none":
        out += [(worlds_report.ORACLE,
                 grid.Point((("track", args.oracle_track), ("seed", s), ("oracle", "true"))))
                for s in seeds]
    return out


def make_specs(args: WorldsStudy, passthrough: Sequence[str]
               ) -> list[tuple[str, grid.Point, backends.RunSpec]]:
    steps = [] if args.steps is None else ["--steps", str(args.steps)]
    group = Path(args.out) / "runs" / f"{args.preset}-{args.steps or 'default'}"
    # Track A and the oracle are arms of the study: no run trains its own floor and ceiling.
    common = ["--protocol", "worlds", "--preset", args.preset, "--no-bounds", *steps, *passthrough]
    points = make_points(args)
    if args.stack:  # stacked runs recompute every latent (no stream latent cache)
        sets = launch.stacked_specs([p for _, p in points], group,
                                    [*common, "--no-stream-cache"])  # fmt: skip
        specs = [s for one in sets for s in one.runs]  # the points' order: arms, seeds inside
    else:
        specs = launch.make_specs([p for _, p in points], group, common)
    return [(arm, p, s) for (arm, p), s in zip(points, specs, strict=True)]


def build_report(args: WorldsStudy, plan: Sequence[tuple[str, grid.Point, backends.RunSpec]],
                 command: str) -> Path:
    runs, missing = [], []
    out = Path(args.out).resolve()
    for arm, point, spec in plan:
        finished = backends.is_finished(spec.run_dir)
        run = worlds_report.load_worlds_run(spec.run_dir, arm, point.params["seed"]) \
            if finished else None
        if run is None:
            missing.append(Path(spec.run_dir).relative_to(out).as_posix())
        else:
            runs.append(run)
    meta = {
        "protocol": "worlds (train_online's default): training across worlds of the train "
                    "family, every stream switched to a held-out world, weights frozen",
        "preset": args.preset,
        "steps": args.steps or "train_online's default",
        "seeds": " ".join(str(s) for s in dict.fromkeys(args.seeds)),
        "arms": " ".join([*dict.fromkeys(args.tracks)]
                         + ([f"oracle (track {args.oracle_track})"]
                            if args.oracle_track != "none" else [])),
        "evaluation": "held-out interp / extrap worlds at the end of the run: D^n from an empty "
                      "memory plus n own / same-world / wrong-world entries",
        "commands": launch.study_commands(args.out, command),
    }
    return worlds_report.write_report(args.out, runs, meta, missing,
                                      title="EPM-JEPA worlds-protocol study")


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parse(WorldsStudy, argv, PROG, unknown=True)
    if args.steps is not None and args.steps < 1:
        raise CliError("--steps must be at least 1")
    passthrough = launch.check_passthrough(extra)
    for opt in ("--protocol", "--steps", "--preset", "--track", "--seed"):
        if opt in passthrough:
            raise CliError(f"{opt} is fixed by the study; use worlds_study's options")
    if any(t.startswith("oracle=") or t in ("--oracle", "--no-oracle") for t in passthrough):
        raise CliError("the oracle is an arm of the study; use --oracle-track")
    plan = make_specs(args, passthrough)
    specs = [s for _, _, s in plan]
    jobs = None
    if args.stack:
        by_arm: dict[str, list[backends.RunSpec]] = {}
        for arm, _, spec in plan:
            by_arm.setdefault(arm, []).append(spec)
        jobs = [backends.StackedSet(tuple(runs)) for runs in by_arm.values()]
    return launch.run_study(PROG, argv, args.out, specs, args.backend, args.report_only,
                            lambda command: build_report(args, plan, command), jobs)


if __name__ == "__main__":
    run_main(main, PROG)
