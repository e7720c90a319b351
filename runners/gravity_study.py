"""Where the world matters: the worlds protocol with every family's gravity scaled.

    python -m runners.gravity_study                          # gravity x 0.5 1 1.5 2 2.5, seed 0
    python -m runners.gravity_study --scales 1 2 --seeds 0 1 2 --workers 2
    python -m runners.gravity_study --report-only            # rebuild the report from the runs

One ``python -m runners.train_online`` run (the worlds protocol with its bounds: the floor,
the chosen track and the oracle on the same stream) per scale and seed, with the training, interp
and extrap families' gravity ranges and the mid-stream switch's gravity multiplied by the scale
(directions, restitution and friction as they are). ``OUT/report.md`` and
``OUT/figures/dose_response.png`` give, per scale, world-blind perfect physics in each run's own
latent, the floor, the oracle and its margin below the floor, peer against wrong-world memory
and the gravity probe (docs/definitions.md). Runs go through the sweep machinery
(``runners.sweep``): one resumable folder per scale and seed under ``OUT/runs/``; rerunning the
command finishes only what is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runners.cli import CliError, parse, run_main
from runners.online.config import DEFAULT_WORLD_SWITCH, PRESET_SCHEDULE, Preset, Schedule, Worlds
from runners.studies import backends, gravity_report, launch

PROG = "python -m runners.gravity_study"
#: The families whose gravity range the scale multiplies, by their train_online option.
FAMILIES = {"train": "--train-gravity", "interp": "--interp-gravity", "extrap": "--extrap-gravity"}


@dataclass
class GravityStudy:
    """The worlds protocol (floor, chosen track, oracle) with every family's gravity scaled, per
    scale and seed, then OUT/report.md and OUT/figures/dose_response.png. Any other option (e.g.
    --track D, --settle None) is passed to every run of runners.train_online."""

    scales: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 2.5)
    """factors on the train, interp and extrap families' gravity (and the switch's)"""
    seeds: tuple[int, ...] = (0,)
    """seeds, one run per scale each"""
    steps: int | None = None
    """training steps per run (default: train_online's; the switch is at 2/3)"""
    preset: Preset = "cpu"
    """agent preset (the main job's)"""
    out: str = "gravity-study"
    """output folder"""
    report_only: bool = False
    """run nothing: rebuild the report from the existing run folders"""
    backend: launch.BackendOptions = field(default_factory=launch.Backend)


def families(scale: float) -> dict[str, tuple[float, float]]:
    """The families' gravity ranges (px/frame^2) at ``scale``: the worlds protocol's, scaled."""
    base = Worlds()
    return {name: (round(lo * scale, 6), round(hi * scale, 6)) for name, (lo, hi) in (
        ("train", base.train_gravity), ("interp", base.interp_gravity),
        ("extrap", base.extrap_gravity))}


def scale_args(scale: float, steps: int) -> list[str]:
    """train_online's options for ``scale``: the families' ranges and the scaled switch."""
    args: list[str] = []
    for name, (lo, hi) in families(scale).items():
        args += [FAMILIES[name], f"{lo:g}", f"{hi:g}"]
    physics = dict(DEFAULT_WORLD_SWITCH)
    args += ["--switch", f"{steps * 2 // 3}:gravity={physics['gravity'] * scale:g},"
                         f"direction={physics['gravity_direction']:g}"]
    return args


def make_plan(args: GravityStudy, passthrough: Sequence[str]
              ) -> list[tuple[float, str, backends.RunSpec]]:
    """(scale, seed, run spec) of every run, scales in order, seeds inside."""
    steps = args.steps or PRESET_SCHEDULE.get(args.preset, {}).get("steps", Schedule.steps)
    group = (Path(args.out) / "runs" / f"{args.preset}-{args.steps or 'default'}").resolve()
    common = ["--protocol", "worlds", "--preset", args.preset, "--bounds", "--workers", "1",
              *([] if args.steps is None else ["--steps", str(args.steps)]), *passthrough]
    plan = []
    for scale in dict.fromkeys(args.scales):
        for seed in dict.fromkeys(str(s) for s in args.seeds):
            name = f"gravity-{scale:g}_seed-{seed}"
            spec = backends.RunSpec(name=name, run_dir=str(group / name), args=tuple(
                ["--seed", seed, *scale_args(scale, steps), *common]))
            plan.append((scale, seed, spec))
    return plan


def build_report(args: GravityStudy, plan: Sequence[tuple[float, str, backends.RunSpec]],
                 command: str) -> Path:
    runs, missing = [], []
    out = Path(args.out).resolve()
    for scale, seed, spec in plan:
        run = gravity_report.load_gravity_run(spec.run_dir, scale, seed) \
            if backends.is_finished(spec.run_dir) else None
        if run is None:
            missing.append(Path(spec.run_dir).relative_to(out).as_posix())
        else:
            runs.append(run)
    meta = {
        "protocol": "worlds (train_online's default) with its bounds, every family's gravity "
                    "range and the switch's gravity times the scale",
        "preset": args.preset,
        "steps": args.steps or "train_online's default",
        "seeds": " ".join(dict.fromkeys(str(s) for s in args.seeds)),
        "commands": launch.study_commands(out, command),
    }
    fams = {f"{s:g}": families(s) for s in sorted(dict.fromkeys(args.scales))}
    return gravity_report.write_report(args.out, runs, meta, fams, missing)


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parse(GravityStudy, argv, PROG, unknown=True)
    if args.steps is not None and args.steps < 3:
        raise CliError("--steps must be at least 3 (the switch is at 2/3)")
    if not args.scales or any(s <= 0 for s in args.scales):
        raise CliError("--scales must be positive numbers")
    passthrough = launch.check_passthrough(extra)
    owned = ("--protocol", "--steps", "--preset", "--seed", "--switch", "--no-switch",
             "--bounds", "--no-bounds", "--workers", *FAMILIES.values())
    for token in passthrough:
        if token.split("=", 1)[0] in owned:
            raise CliError(f"{token.split('=', 1)[0]} is set by the study; use its own options")
    plan = make_plan(args, passthrough)
    return launch.run_study(PROG, argv, args.out, [s for _, _, s in plan], args.backend,
                            args.report_only, lambda command: build_report(args, plan, command))


if __name__ == "__main__":
    run_main(main, PROG)
