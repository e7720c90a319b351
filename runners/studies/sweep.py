"""The study ``sweep``: a grid of configurations as ordinary, resumable run folders, aggregated
(peak D_shift^{50} per point, seeds pooled) into ``OUT/sweep.md`` and ``OUT/sweep.json``
(docs/reproduce.md, "study sweep").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import tyro

from runners.cli import CliError
from runners.online.command import option_type
from runners.studies import grid, launch, runs
from runners.style import table

#: The sweep sets no train_online option of its own but the run folders (``launch.RESERVED``).
OWNED: dict[str, str] = {}


@dataclass
class Options(launch.Options):
    """Run a grid of configurations as ordinary, resumable run folders, then aggregate them
    into OUT/sweep.md. Any other option is passed to every run of runners.train_online."""

    out: str = "runs/sweep"
    """folder of the run folders"""
    grid: Annotated[
        tuple[tuple[str, ...], ...], tyro.conf.UseAppendAction, tyro.conf.arg(metavar="FIELD=V1,V2")
    ] = ()
    """fields to sweep (cartesian product), e.g. --grid track=A,C seed=42,43"""
    prefix: str = ""
    """prefix of every run name"""
    stack: bool = False
    """points equal but for their seed as one stacked run (train_online --stack-seeds), each set a job of the backend (--workers N sets at once, each a process of its own); for one GPU (with --device cuda; the worlds protocol); its runs live in <name without the seed>-s<seed>"""


def plan(opts: Options, passthrough: Sequence[str]) -> launch.Plan:
    """A run per grid point, labelled by its point."""
    fields = grid.parse_grid([s for group in opts.grid for s in group])
    bad = [f for f in fields if f != "switches" and option_type(f.replace("-", "_")) is None]
    if bad:  # every field is an option of train_online (a run or agent field)
        raise CliError(f"unknown --grid field(s): {', '.join(bad)} (not a run or agent field)")
    # A sweep's points are its arms: no run fits its own floor and ceiling (unless --bounds:
    # then as heads on its latent).
    common = ["--no-bounds", *passthrough]
    points = grid.expand(fields, prefix=opts.prefix)
    specs, jobs = launch.plan_points(points, opts.out, common, opts.stack)
    return launch.Plan(list(zip(points, specs, strict=True)), jobs,
                       notes={"grid": fields, "common": common})


def report(opts: Options, plan: launch.Plan, commands: list[str]) -> Path:
    """``OUT/sweep.md`` and ``OUT/sweep.json``: a row per point, seeds pooled; the table printed."""
    keys = [k for k in plan.notes["grid"] if k != "seed"]
    records = [r for p, s in plan.runs if (r := runs.load_run(s.run_dir, p.params)) is not None]
    rows = runs.group_table(records, keys)
    table = group_table_markdown(rows, keys)
    out = Path(opts.out)
    path = launch.write_files(out, [f"# Sweep {out}", "", table],
                              {**plan.notes, "runs": [r.row() for r in records], "groups": rows},
                              name="sweep")
    print(f"\n{table}")
    return path


def group_table_markdown(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> str:
    """The sweep's table as Markdown."""
    return "\n".join(table(
        [*keys, "runs (done)", "peak D_shift^50 mean +- std [95% CI]", "peak step",
         "final D_shift^50", "sigma_embed at peak"],
        ([*(row[k] for k in keys), f"{row['runs']} ({row['finished']})",
          row["peak"].fmt() if row["peak"].n else "-",
          f"{row['peak_step'].mean:.0f}" if row["peak_step"].n else "-",
          row["final"].ms(), row["sigma"].ms()] for row in rows))) + "\n"
