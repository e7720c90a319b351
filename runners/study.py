"""Many-run studies, one command: ``python -m runners.study KIND [options]`` (docs/reproduce.md).

A kind is a plug-in, the module ``runners.studies.<kind>``: its ``Options`` (extending
``launch.Options``), the ``train_online`` options it sets itself (``OWNED``), ``plan`` (its runs,
labelled for its report) and ``report``. The rest is this command's, the same for every kind:
the pass-through options checked, every run's config resolved before anything is written,
``--dry-run``, the runs on the backend (finished ones skipped, interrupted ones resumed), then
the report.
"""

from __future__ import annotations

import importlib
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from runners.cli import CliError, ensure_output_dir, parse, run_main, writing
from runners.online.rundir import RunFolder
from runners.studies import backends, launch

PROG = "python -m runners.study"
#: The kinds, each the module ``runners.studies.<kind>``, with its line of ``--help``.
KINDS = {
    "worlds": "tracks A-E and the oracle on the worlds protocol (docs/worlds_study.md)",
    "paper": "the paper's experiments and ablations beside its numbers (docs/reproduce.md)",
    "sweep": "a grid of train_online configurations, aggregated (docs/reproduce.md)",
}


def kind_of(argv: Sequence[str]) -> ModuleType:
    """The plug-in ``argv[0]`` names; ``--help`` lists the kinds and exits 0."""
    if argv[:1] in (["-h"], ["--help"]):
        print(f"usage: {PROG} KIND [options]\n\nOne command for every many-run study; "
              f"{PROG} KIND --help lists a kind's options.\n\nkinds:")
        for name, what in KINDS.items():
            print(f"  {name:8s} {what}")
        raise SystemExit(0)
    if not argv or argv[0] not in KINDS:
        got = f", got {argv[0]!r}" if argv else ""
        raise CliError(f"KIND: expected one of {', '.join(map(repr, KINDS))}{got}")
    return importlib.import_module(f"runners.studies.{argv[0]}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m runners.study KIND [options]`` on ``argv``; its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    kind = kind_of(argv)
    opts, extra = parse(kind.Options, argv[1:], f"{PROG} {argv[0]}", unknown=True)
    plan = kind.plan(opts, launch.check_passthrough(extra, kind.OWNED))
    if not opts.report_only:  # every run's typed config is valid before anything is written
        launch.check_specs(plan.specs)
    if opts.dry_run:  # each run's state, name and train_online arguments
        for s in plan.specs:
            print(f"{RunFolder(s.run_dir).state():11s} {s.name}: train_online "
                  f"{' '.join(backends.command_for(s, 'new'))}")
        return 0
    backend = None if opts.report_only else opts.backend.make()
    t0 = time.perf_counter()
    ensure_output_dir(opts.out, "--out")
    if plan.prepare is not None:
        plan.prepare()
    failed: list[backends.RunResult] = []
    if backend is not None:
        results = launch.run_specs(backend, plan.jobs or plan.specs, Path(opts.out) / "logs")
        failed = [r for r in results if not r.ok]
    commands = launch.study_commands(opts.out, f"{PROG} {shlex.join(argv)}")
    with writing(opts.out):  # a full disk names at least the output folder
        path = kind.report(opts, plan, commands)
    print(f"report: {path} ({time.perf_counter() - t0:.0f} s)")
    return launch.report_failures(failed)


if __name__ == "__main__":
    run_main(main, " ".join([PROG, *[k for k in sys.argv[1:2] if k in KINDS]]))
