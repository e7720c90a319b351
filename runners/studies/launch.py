"""Launching the runs of a study: backend options, the runs' validated arguments, execution.

Shared by ``python -m runners.sweep`` and ``python -m runners.reproduce`` (a command never imports
another command): ``Backend`` (the backend options, nested into each command's options:
local processes or Ray),
``check_passthrough`` (options meant for ``train_online``), ``check_specs`` (every run's typed
config built and resolved before anything starts), ``make_specs`` (one ``RunSpec`` per grid
point), ``run_specs`` (run or skip them) and ``report_failures``.
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
from runners.online.rundir import RunFolder
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
    from runners.online.command import FIELDS

    bad = [f for f in fields if f.replace("-", "_") not in FIELDS]
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


def stacked_specs(
    points: Sequence[grid.Point], out: str | Path, common: Sequence[str] = ()
) -> list[list[backends.RunSpec]]:
    """The points as stacked sets (``train_online --stack-seeds``): points equal but for their
    seed form one set, whose runs live in ``out/<name without the seed>-s<seed>``; each
    spec's arguments those of its run alone (its seed included), so ``check_specs`` checks
    each run."""
    out = Path(out).resolve()
    sets: dict[grid.Point, list[backends.RunSpec]] = {}
    for p in points:
        base, name = _unseeded(p), stacked_name(p)
        sets.setdefault(base, []).append(backends.RunSpec(
            name=name, run_dir=str(out / name), args=tuple([*p.train_args(), *common])))  # fmt: skip
    return list(sets.values())


def _unseeded(p: grid.Point) -> grid.Point:
    return grid.Point(tuple((k, v) for k, v in p.items if k != "seed"), p.prefix, p.extra)


def stacked_name(p: grid.Point) -> str:
    """A stacked run's folder name: the point's without its seed, then ``-s<seed>`` (what
    ``train_online --stack-seeds --name`` gives)."""
    return f"{_unseeded(p).name}-s{p.params['seed']}"


def run_stacked(
    sets: Sequence[Sequence[backends.RunSpec]],
    workers: int | None = None,
    threads: int | None = None,
    log_dir: str | Path | None = None,
) -> list[backends.RunResult]:
    """Run (or skip, or resume) each stacked set: a set whose runs are all finished is skipped,
    one whose runs hold checkpoints is resumed (``--resume`` of its first run continues all), a
    new one starts with ``--stack-seeds`` (stale folders moved aside). One set after another
    in this process, or with ``workers`` > 1 that many sets at once, each a ``train_online``
    subprocess with ``threads`` torch threads (default: cores // workers) and its output in
    ``log_dir/<set>.log`` (as ``backends.LocalBackend`` runs single runs). One line per set; a
    set that fails is reported, the rest run."""
    from concurrent.futures import ThreadPoolExecutor

    from runners import train_online

    workers = max(1, workers or 1)
    where = "in this process" if workers == 1 else f"{workers} at once, each in a process"
    print(f"{len(sets)} stacked set(s) of {sum(len(s) for s in sets)} run(s), {where}",
          flush=True)  # fmt: skip
    if workers == 1:
        results = [_run_set(specs, lambda argv, _: (_call(train_online.main, argv), ""))
                   for specs in sets]  # fmt: skip
        return [r for one in results for r in one]
    per = threads or backends.threads_per_worker(workers)
    logs = Path(log_dir) if log_dir is not None else None

    def run(argv: list[str], name: str) -> tuple[int, str]:
        cmd = [sys.executable, "-m", backends.TRAIN_MODULE, *argv]
        return backends.call(cmd, per, None if logs is None else str(logs / f"{name}.log"))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda specs: _run_set(specs, run), sets))
    return [r for one in results for r in one]


def _run_set(
    specs: Sequence[backends.RunSpec], run: Callable[[list[str], str], tuple[int, str]]
) -> list[backends.RunResult]:
    """One stacked set brought to completion (``run_stacked``): ``run(argv, set name)`` ->
    (exit code, log) starts or resumes it; its folders claimed meanwhile."""
    t0 = time.perf_counter()
    folders = [RunFolder(s.run_dir) for s in specs]
    states = [f.state() for f in folders]
    claims = [f.claim() for f in folders]
    log = ""
    try:
        if any(c is None for c in claims):
            action, code = "busy", 0
        elif all(st == "finished" for st in states):
            action, code = "skipped", 0
        else:
            try:
                action, argv = _stacked_command(specs, states)
            except CliError as err:
                print(f"error: {err}", flush=True)
                action, code = "started", 2
            else:
                print(f"{action} {' '.join(s.name for s in specs)}", flush=True)
                code, log = run(argv, Path(specs[0].run_dir).name.rsplit("-s", 1)[0])
    finally:
        for c in claims:
            if c is not None:
                c.release()
    seconds = time.perf_counter() - t0
    return [backends.RunResult(s.name, s.run_dir, action, code, seconds, log) for s in specs]


def _stacked_command(specs: Sequence[backends.RunSpec], states: Sequence[str]) -> tuple[str, list[str]]:
    """("resumed" | "started", the train_online arguments) of a stacked set not finished."""
    if all(st == "interrupted" for st in states):
        return "resumed", ["--resume", specs[0].run_dir]
    for spec, st in zip(specs, states, strict=True):
        if st == "stale":
            backends.move_aside(Path(spec.run_dir))
        elif st != "new":
            raise CliError(f"stacked runs {specs[0].name} ...: their folders are in different "
                           f"states ({', '.join(states)}); move them aside to start again")  # fmt: skip
    first = list(specs[0].args)
    seeds = [s.args[s.args.index("--seed") + 1] for s in specs]
    i = first.index("--seed")
    base = Path(specs[0].run_dir).name.rsplit("-s", 1)[0]
    argv = [*first[:i], *first[i + 2 :], "--seed", seeds[0], "--stack-seeds", *seeds[1:],
            "--out", str(Path(specs[0].run_dir).parent), "--name", base]  # fmt: skip
    return "started", argv


def _call(main: Callable[[list[str]], int], argv: list[str]) -> int:
    """``main(argv)``'s exit code; a ``CliError`` is one line and 2, anything else a traceback
    and 1 (the study goes on)."""
    import traceback

    try:
        return int(main(argv))
    except CliError as err:
        print(f"error: {err}", flush=True)
        return 2
    except Exception:  # noqa: BLE001 - one failed set must not stop the others
        traceback.print_exc()
        return 1


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
    stacked: Sequence[Sequence[backends.RunSpec]] | None = None,
) -> int:
    """A study's command after its options are checked: every run's config validated before
    anything is written, the output folder made, the runs run (or skipped: finished, or
    ``report_only``), then ``build_report(command)`` (the command line as typed) inside the
    study's write guard; the exit code (``report_failures``). ``stacked``: the specs as stacked
    sets (``run_stacked``: in this process, or ``--workers`` sets at once) instead of on the
    backend."""
    if not report_only:
        check_specs(specs)
    command = prog + " " + shlex.join(list(argv) if argv is not None else sys.argv[1:])
    t0 = time.perf_counter()
    ensure_output_dir(out, "--out")
    failed: list[backends.RunResult] = []
    if not report_only:
        if stacked is not None:  # the sets (``run_stacked``): here, or --workers at once
            results = run_stacked(stacked, backend.workers, backend.threads, Path(out) / "logs")
        else:
            results = run_specs(backend.make(), specs, Path(out) / "logs")
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
