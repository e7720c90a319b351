"""Launching the runs of a sweep or a study: backend options, the runs' validated arguments,
execution.

Shared by ``python -m runners.sweep`` and the studies (a command never imports another command):
``Backend`` (the backend options, nested into each command's options: local processes or Ray),
``check_passthrough`` (options meant for ``train_online``), ``check_specs`` (every run's typed
config built and resolved before anything starts), ``make_specs`` (one ``RunSpec`` per grid
point) or ``stacked_specs`` (a ``StackedSet`` per point but its seed), ``run_specs`` (run or
skip them, on either backend), ``run_study`` and ``report_failures``.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import tyro

from runners.cli import CliError, ensure_output_dir, writing
from runners.studies import backends, grid

if TYPE_CHECKING:
    from runners.online.config import RunConfig

#: train_online options a sweep sets itself (per run), so a user may not pass them through.
RESERVED = ("out", "name", "resume")


@dataclass
class Backend:
    """Options shared by ``sweep``, ``reproduce`` and ``worlds_study``: where the runs run."""

    kind: Annotated[Literal["local", "ray"], tyro.conf.arg(name="backend")] = "local"
    """local worker processes or Ray tasks"""
    address: str | None = None
    """Ray address (auto, ray://HOST:10001); default: start a local Ray"""
    workers: int | None = None
    """concurrent runs (local default: cores; ray: cluster decides)"""
    threads: int | None = None
    """torch threads per run (default: cores // workers)"""
    in_process: bool = False
    """local: call train_online in a worker process instead of a subprocess"""
    ray_working_dir: str | None = None
    """ship this folder (the repository) to Ray workers as their working_dir"""

    def make(self) -> backends.LocalBackend | backends.RayBackend:
        """The backend the options ask for (``CliError`` on nonsense)."""
        if self.workers is not None and self.workers < 1:
            raise CliError(f"--workers must be at least 1, got {self.workers}")
        if self.threads is not None and self.threads < 1:
            raise CliError(f"--threads must be at least 1, got {self.threads}")
        if self.kind == "local":
            if self.address:
                raise CliError("--address is for --backend ray")
            return backends.LocalBackend(self.workers, self.threads, in_process=self.in_process)
        workers = self.workers or backends.default_workers()
        threads = self.threads or (1 if self.address else backends.threads_per_worker(workers))
        return backends.RayBackend(
            address=self.address, threads=threads,
            num_cpus=None if self.address else backends.default_workers(),
            working_dir=self.ray_working_dir,
        )


#: How a command nests ``Backend``: its flags keep their names (``--backend``, ``--workers``).
BackendOptions = Annotated[Backend, tyro.conf.arg(name="")]


def check_passthrough(extra: Sequence[str]) -> list[str]:
    """Validate the options meant for ``train_online`` with its own (generated) parser; return
    them. ``CliError`` (one line) on a bad option or one the sweep sets itself."""
    from runners.online import command

    extra = list(extra)
    for token in extra:
        opt = token.split("=", 1)[0]
        if opt in {f"--{o}" for o in RESERVED}:
            raise CliError(f"{opt} is set by the sweep for each run; use the sweep's --out")
    command.parse_command(extra, prog="runners.train_online (passed through)")
    return extra


def check_specs(specs: Sequence[backends.RunSpec]) -> list[RunConfig]:
    """Build and resolve the typed ``RunConfig`` of every run from the exact command line it
    will get (the grid point's fields, the pass-through options, its --out/--name), touching
    no folder: a bad value anywhere fails here, as one line naming the run, before any run
    starts."""
    from runners.online import command

    configs = []
    for spec in specs:
        try:
            cfg = command.build_config(backends.command_for(spec, "new"))
        except CliError as err:
            raise CliError(f"run {spec.name}: {err}") from None
        if cfg.output.name is None or Path(cfg.output.out) / cfg.output.name != Path(spec.run_dir):
            raise CliError(
                f"run {spec.name}: --out and --name are set by the sweep"
            )
        configs.append(cfg)
    return configs


def check_fields(fields: Sequence[str]) -> None:
    """Every grid field must be an option of ``train_online`` (a run or agent field)."""
    from runners.online.command import option_type

    bad = [f for f in fields if f != "switches" and option_type(f.replace("-", "_")) is None]
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
    jobs: Sequence[backends.Job],
    log_dir: str | Path,
) -> list[backends.RunResult]:
    """Run (or skip) every job (a run, or a stacked set) on ``backend``, printing one line per
    run; shut Ray down after."""
    specs = [s for j in jobs for s in backends.runs_of(j)]
    todo = {s: backends.run_state(s.run_dir) for s in specs}
    counts = {k: sum(v == k for v in todo.values()) for k in ("finished", "interrupted", "stale", "new")}
    sets = sum(isinstance(j, backends.StackedSet) for j in jobs)
    what = f"{sets} stacked set(s) of {len(specs)} run(s)" if sets else f"{len(specs)} run(s)"
    print(
        f"{what}: {counts['finished']} finished, {counts['interrupted']} to resume, "
        f"{counts['new'] + counts['stale']} to start; {backend.describe()}",
        flush=True,
    )
    try:
        return backend.run(jobs, log_dir=str(log_dir))
    finally:
        if isinstance(backend, backends.RayBackend):
            backend.shutdown()


def stacked_specs(
    points: Sequence[grid.Point], out: str | Path, common: Sequence[str] = ()
) -> list[backends.StackedSet]:
    """The points as stacked sets (``train_online --stack-seeds``): points equal but for their
    seed form one set, whose runs live in ``out/<name without the seed>-s<seed>``; each
    run's arguments those of its run alone (its seed included), so ``check_specs`` checks
    each run."""
    out = Path(out).resolve()
    sets: dict[grid.Point, list[backends.RunSpec]] = {}
    for p in points:
        base, name = _unseeded(p), stacked_name(p)
        sets.setdefault(base, []).append(backends.RunSpec(
            name=name, run_dir=str(out / name), args=tuple([*p.train_args(), *common])))  # fmt: skip
    return [backends.StackedSet(tuple(runs)) for runs in sets.values()]


def _unseeded(p: grid.Point) -> grid.Point:
    return grid.Point(tuple((k, v) for k, v in p.items if k != "seed"), p.prefix, p.extra)


def stacked_name(p: grid.Point) -> str:
    """A stacked run's folder name: the point's without its seed, then ``-s<seed>`` (what
    ``train_online --stack-seeds --name`` gives)."""
    return f"{_unseeded(p).name}-s{p.params['seed']}"


def study_commands(out: str | Path, command: str) -> list[str]:
    """The commands that made a study's runs: those of its previous ``report.json``, then
    ``command`` (each once)."""
    import json

    try:
        before = json.loads((Path(out) / "report.json").read_text())["meta"]["commands"]
    except (OSError, ValueError, KeyError, TypeError):
        before = []
    return list(dict.fromkeys([*(str(c) for c in before), command]))


def run_study(
    prog: str,
    argv: Sequence[str] | None,
    out: str,
    specs: Sequence[backends.RunSpec],
    backend: BackendOptions,
    report_only: bool,
    build_report: Callable[[str], Path],
    jobs: Sequence[backends.Job] | None = None,
) -> int:
    """A study's command after its options are checked: every run's config validated before
    anything is written, the output folder made, the runs run on the backend (or skipped:
    finished, or ``report_only``), then ``build_report(command)`` (the command line as typed)
    inside the study's write guard; the exit code (``report_failures``). ``jobs``: what the
    backend runs, when not one job per spec (stacked sets)."""
    if not report_only:
        check_specs(specs)
    command = prog + " " + shlex.join(list(argv) if argv is not None else sys.argv[1:])
    t0 = time.perf_counter()
    ensure_output_dir(out, "--out")
    failed: list[backends.RunResult] = []
    if not report_only:
        results = run_specs(backend.make(), specs if jobs is None else jobs, Path(out) / "logs")
        failed = [r for r in results if not r.ok]
    with writing(out):
        path = build_report(command.strip())
    print(f"report: {path} ({time.perf_counter() - t0:.0f} s)")
    return report_failures(failed)


def report_failures(failed: Sequence[backends.RunResult]) -> int:
    """One line listing the failed runs (with their logs) and how to retry; the exit code."""
    if not failed:
        return 0
    print(f"{len(failed)} run(s) failed: " + ", ".join(
        f"{r.name} (exit {r.returncode}, log {r.log})" for r in failed))
    print("rerun the same command to retry them (finished runs are skipped)")
    return 1
