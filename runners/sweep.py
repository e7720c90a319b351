"""Run a grid of configurations as ordinary, resumable run folders, then aggregate them.

    python -m runners.sweep --grid track=A,B,C seed=42,43,44 lambda_reg=0.05,0.1 \\
        --out runs/my-sweep --preset tiny --steps 2000 --no-switch

Every point of the cartesian product is one ``runners.train_online`` run in ``OUT/<name>``, the
name derived from the point (``track-C_seed-42_lambda_reg-0.05``). Finished runs are skipped,
interrupted ones resumed, so the same command finishes a sweep that was stopped. Options this
command does not know (``--preset``, ``--steps``, ``--source``, ``--data``, ``--set``, ...) go to
every run unchanged; fields in ``--grid`` go to ``train_online`` as ``--track``/``--seed``/
``--steps`` or as ``--set FIELD=VALUE``.

Backends: ``local`` (default: one worker process per core, ``cores // workers`` torch threads
each) or ``ray`` (``--backend ray --address auto``; the optional extra ``pip install -e ".[ray]"``).
The table (peak D_shift^{50} per point, seeds pooled into mean +- std and a bootstrap 95% CI)
is printed and written to ``OUT/sweep.md`` and ``OUT/sweep.json``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from runners.cli import CliError, run_main
from runners.studies import backends, grid, report

PROG = "python -m runners.sweep"
#: train_online options a sweep sets itself (per run), so a user may not pass them through.
RESERVED = ("out", "name", "resume")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Any other option is passed to every run of runners.train_online.",
    )
    add_backend_arguments(p)
    p.add_argument(
        "--grid", nargs="+", action="append", metavar="FIELD=V1,V2",
        help="fields to sweep (cartesian product), e.g. --grid track=A,C seed=42,43",
    )
    p.add_argument("--out", default="runs/sweep", help="folder of the run folders (default %(default)s)")
    p.add_argument("--prefix", default="", help="prefix of every run name")
    p.add_argument("--dry-run", action="store_true", help="list the runs and their state only")
    p.add_argument("--aggregate-only", action="store_true", help="do not run: only aggregate")
    return p


def add_backend_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by ``sweep`` and ``reproduce``."""
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local worker processes (default) or Ray tasks")
    p.add_argument("--address", default=None,
                   help="Ray address (auto, ray://HOST:10001); default: start a local Ray")
    p.add_argument("--workers", type=int, default=None,
                   help="concurrent runs (local default: cores; ray: cluster decides)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per run (default: cores // workers)")
    p.add_argument("--in-process", action="store_true",
                   help="local: call train_online in a worker process instead of a subprocess")
    p.add_argument("--ray-working-dir", default=None,
                   help="ship this folder (the repository) to Ray workers as their working_dir")


def make_backend(args: argparse.Namespace) -> backends.LocalBackend | backends.RayBackend:
    """The backend the options ask for (``CliError`` on nonsense)."""
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be at least 1, got {args.workers}")
    if args.threads is not None and args.threads < 1:
        raise CliError(f"--threads must be at least 1, got {args.threads}")
    if args.backend == "local":
        if args.address:
            raise CliError("--address is for --backend ray")
        return backends.LocalBackend(args.workers, args.threads, in_process=args.in_process)
    workers = args.workers or backends.default_workers()
    threads = args.threads or (1 if args.address else backends.threads_per_worker(workers))
    return backends.RayBackend(
        address=args.address, threads=threads,
        num_cpus=None if args.address else backends.default_workers(),
        working_dir=args.ray_working_dir,
    )


def check_passthrough(extra: Sequence[str]) -> list[str]:
    """Validate the options meant for ``train_online`` with its own parser; return them."""
    from runners.online import config as runconfig

    p = argparse.ArgumentParser(prog="runners.train_online (passed through)", add_help=False)
    runconfig.add_run_arguments(p)
    try:
        ns, unknown = p.parse_known_args(list(extra))
    except SystemExit:
        raise CliError(f"bad option for train_online in {' '.join(extra)!r}") from None
    if unknown:
        raise CliError(f"unknown option(s): {' '.join(unknown)}")
    for opt in RESERVED:
        if getattr(ns, opt, None) is not None:
            raise CliError(f"--{opt} is set by the sweep for each run; use the sweep's --out")
    return list(extra)


def check_fields(fields: Sequence[str]) -> None:
    """Every grid field must be a ``RunConfig`` or ``AgentConfig`` field."""
    from runners.online import config as runconfig

    try:
        import dataclasses

        from agent.config import AgentConfig

        known = set(runconfig.RUN_FIELDS) | {f.name for f in dataclasses.fields(AgentConfig)}
    except ImportError:  # pragma: no cover - the agent is part of the project
        known = set(runconfig.RUN_FIELDS)
    bad = [f for f in fields if f not in known]
    if bad:
        raise CliError(f"unknown --grid field(s): {', '.join(bad)} (not a run or agent field)")


def make_specs(
    points: Sequence[grid.Point], out: str | Path, common: Sequence[str] = ()
) -> list[backends.RunSpec]:
    """One ``RunSpec`` per point: folder ``out/<name>``, arguments = point's + ``common``."""
    out = Path(out).resolve()
    return [
        backends.RunSpec(name=p.name, run_dir=str(out / p.name),
                         args=tuple([*p.train_args(), *common]))
        for p in points
    ]


def run_specs(
    backend: backends.LocalBackend | backends.RayBackend,
    specs: Sequence[backends.RunSpec],
    log_dir: str | Path,
) -> list[backends.RunResult]:
    """Run (or skip) every spec on ``backend``, printing one line per run; shut Ray down after."""
    todo = {s: backends.run_state(s.run_dir) for s in specs}
    counts = {k: sum(v == k for v in todo.values()) for k in ("finished", "interrupted", "stale", "new")}
    print(
        f"{len(specs)} run(s): {counts['finished']} finished, {counts['interrupted']} to resume, "
        f"{counts['new'] + counts['stale']} to start; {backend.describe()}",
        flush=True,
    )
    try:
        return backend.run(specs, log_dir=str(log_dir))
    finally:
        if isinstance(backend, backends.RayBackend):
            backend.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and extra[0] == "--":
        extra = extra[1:]
    specs_grid = grid.parse_grid([s for group in args.grid or [] for s in group])
    check_fields(list(specs_grid))
    common = check_passthrough(extra)
    points = grid.expand(specs_grid, prefix=args.prefix)
    out = Path(args.out)
    specs = make_specs(points, out, common)
    if args.dry_run:
        for s in specs:
            print(f"{backends.run_state(s.run_dir):11s} {s.name}: train_online "
                  f"{' '.join(backends.command_for(s, 'new'))}")
        return 0
    failed: list[backends.RunResult] = []
    if not args.aggregate_only:
        results = run_specs(make_backend(args), specs, out / "logs")
        failed = [r for r in results if not r.ok]
    keys = [k for k in specs_grid if k != "seed"]
    records = [
        r for p, s in zip(points, specs, strict=True)
        if (r := report.load_run(s.run_dir, p.params)) is not None
    ]
    rows = report.group_table(records, keys)
    table = report.group_table_markdown(rows, keys)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.md").write_text(f"# Sweep {out}\n\n{table}")
    (out / "sweep.json").write_text(json.dumps(
        {"grid": specs_grid, "common": common, "runs": [r.row() for r in records],
         "groups": [{k: (vars(v) if hasattr(v, "__dataclass_fields__") else v)
                     for k, v in row.items()} for row in rows]},
        indent=2, default=str) + "\n")
    print()
    print(table)
    print(f"table: {out / 'sweep.md'}")
    if failed:
        print(f"{len(failed)} run(s) failed: " + ", ".join(
            f"{r.name} (exit {r.returncode}, log {r.log})" for r in failed))
        print("rerun the same command to retry them (finished runs are skipped)")
        return 1
    return 0


if __name__ == "__main__":
    run_main(main, PROG)
