"""Run a grid of configurations as ordinary, resumable run folders, then aggregate them.

    python -m runners.sweep --grid track=A,B,C seed=42,43,44 lambda_reg=0.05,0.1 \\
        --out runs/my-sweep --preset tiny --steps 2000 --no-switch

Every point of the cartesian product is one ``runners.train_online`` run in ``OUT/<name>``, the
name derived from the point (``track-C_seed-42_lambda_reg-0.05``). Finished runs are skipped,
interrupted ones resumed, so the same command finishes a sweep that was stopped. Options this
command does not know (``--preset``, ``--steps``, ``--source``, ``--data``, ``--lr``, ...) go to
every run unchanged; a field in ``--grid`` goes to ``train_online`` as its option (``lr=1e-3``
as ``--lr 1e-3``). With ``--stack`` the points that differ only in their
seed train as one stacked run (``train_online --stack-seeds``), a job of the backend as a
single run is (``--workers N`` sets at once, each a process of its own, or Ray tasks).

Backends: ``local`` (default: one worker process per core, ``cores // workers`` torch threads
each) or ``ray`` (``--backend ray --address auto``; the optional extra ``pip install -e ".[ray]"``).
The table (peak D_shift^{50} per point, seeds pooled into mean +- std and a bootstrap 95% CI)
is printed and written to ``OUT/sweep.md`` and ``OUT/sweep.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import tyro

from runners.cli import CliError, ensure_output_dir, parse, run_main, writing
from runners.studies import aggregate, backends, grid, launch, report, runs

if TYPE_CHECKING:
    pass

PROG = "python -m runners.sweep"


@dataclass
class Sweep:
    """Run a grid of configurations as ordinary, resumable run folders, then aggregate them.
    Any other option is passed to every run of runners.train_online."""

    grid: Annotated[
        tuple[tuple[str, ...], ...], tyro.conf.UseAppendAction, tyro.conf.arg(metavar="FIELD=V1,V2")
    ] = ()
    """fields to sweep (cartesian product), e.g. --grid track=A,C seed=42,43"""
    out: str = "runs/sweep"
    """folder of the run folders"""
    prefix: str = ""
    """prefix of every run name"""
    dry_run: bool = False
    """list the runs and their state only"""
    aggregate_only: bool = False
    """do not run: only aggregate"""
    stack: bool = False
    """points equal but for their seed as one stacked run (train_online --stack-seeds), each set a job of the backend (--workers N sets at once, each a process of its own); for one GPU (with --device cuda; the worlds protocol); its runs live in <name without the seed>-s<seed>"""
    backend: launch.BackendOptions = field(default_factory=launch.Backend)


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parse(Sweep, argv, PROG, unknown=True)
    specs_grid = grid.parse_grid([s for group in args.grid for s in group])
    launch.check_fields(list(specs_grid))
    # A sweep's points are its arms: no run trains its own floor and ceiling (unless --bounds:
    # then after it, as the sweep's workers fill the cores).
    passthrough = launch.check_passthrough(extra)
    common = ["--no-bounds", *(["--workers", "1"] if "--bounds" in passthrough else []),
              *passthrough]
    points = grid.expand(specs_grid, prefix=args.prefix)
    out = Path(args.out)
    if args.stack:
        if any("seed" not in p.params for p in points):
            raise CliError("--stack stacks the seeds of each point: add seed=... to --grid")
        jobs: list[backends.Job] = list(launch.stacked_specs(points, out,
                                                             [*common, "--no-stream-cache"]))
        by_dir = {s.run_dir: s for job in jobs for s in backends.runs_of(job)}
        specs = [by_dir[str(Path(out).resolve() / launch.stacked_name(p))] for p in points]
    else:
        jobs = specs = launch.make_specs(points, out, common)
    launch.check_specs(specs)  # every run's config is valid before anything starts or is created
    if args.dry_run:
        for s in specs:
            print(f"{backends.run_state(s.run_dir):11s} {s.name}: train_online "
                  f"{' '.join(backends.command_for(s, 'new'))}")
        return 0
    ensure_output_dir(out, "--out")  # before any run starts
    failed: list[backends.RunResult] = []
    if not args.aggregate_only:
        results = launch.run_specs(args.backend.make(), jobs, out / "logs")
        failed = [r for r in results if not r.ok]
    keys = [k for k in specs_grid if k != "seed"]
    records = [
        r for p, s in zip(points, specs, strict=True)
        if (r := runs.load_run(s.run_dir, p.params)) is not None
    ]
    rows = aggregate.group_table(records, keys)
    table = report.group_table_markdown(rows, keys)
    with writing(out / "sweep.md"):
        (out / "sweep.md").write_text(f"# Sweep {out}\n\n{table}")
    with writing(out / "sweep.json"):
        (out / "sweep.json").write_text(json.dumps(
            {"grid": specs_grid, "common": common, "runs": [r.row() for r in records],
             "groups": [{k: (vars(v) if hasattr(v, "__dataclass_fields__") else v)
                         for k, v in row.items()} for row in rows]},
            indent=2, default=str) + "\n")
    print()
    print(table)
    print(f"table: {out / 'sweep.md'}")
    return launch.report_failures(failed)


if __name__ == "__main__":
    run_main(main, PROG)
