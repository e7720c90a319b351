"""Where the runs of a sweep or a study execute: a local pool of worker processes, or Ray tasks
(docs/reproduce.md, "Where the runs run").

Both backends run the same function on each job, ``execute(job)``: a job is one run
(``RunSpec``) or a stacked set of runs equal but for their seed (``StackedSet``, trained as one
model by ``train_online --stack-seeds``). ``execute`` claims the job's folders
(``RunFolder.claim``: a point another sweep is running right now is ``busy``, not started
twice), then by their state (``finished``, ``interrupted``, ``stale`` or ``new``:
docs/reproduce.md) skips, resumes or starts it, a subprocess ``python -m runners.train_online
...`` (or its ``main`` in the worker process), and returns a ``RunResult`` per run.

``LocalBackend.stop()`` starts no more jobs and sends the running subprocesses a SIGTERM (each
stops with a checkpoint), as ``train_online``'s floor and ceiling follow their main run's stop
(``runners.online.beside``). A run also stops, with a checkpoint, when the process that started
it ends: ``StopRequest`` compares its parent with ``RUNNERS_LAUNCHER_PID``.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from runners.cli import CliError, usable_cores
from runners.online.rundir import LAUNCHER_PID, RunFolder

#: The repository root (the folder holding ``runners/``): subprocesses run there.
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: its folder and the ``train_online`` arguments that create it (never
    ``--out``/``--name``/``--resume``: ``execute`` adds them)."""

    name: str
    run_dir: str
    args: tuple[str, ...]
    module: str = "runners.train_online"


@dataclass(frozen=True)
class StackedSet:
    """Runs equal but for their seed (each ``RunSpec`` with its own ``--seed`` and folder
    ``<name>-s<seed>``), trained as one model: ``train_online --stack-seeds``."""

    runs: tuple[RunSpec, ...]

    @property
    def name(self) -> str:
        """The set's name: its runs' folder name without the seed."""
        return Path(self.runs[0].run_dir).name.rsplit("-s", 1)[0]


Job = RunSpec | StackedSet


def runs_of(job: Job) -> tuple[RunSpec, ...]:
    """The runs a job brings to completion."""
    return job.runs if isinstance(job, StackedSet) else (job,)


@dataclass
class RunResult:
    """What happened to one run: ``action`` is ``skipped``, ``started``, ``resumed`` or ``busy``
    (another sweep is running it)."""

    name: str
    run_dir: str
    action: str
    returncode: int
    seconds: float
    log: str = ""

    @property
    def ok(self) -> bool:
        """True when the run is finished now (skipped because done, or exited 0 and complete)."""
        return self.returncode == 0 and RunFolder(self.run_dir).is_finished()


def move_aside(run_dir: Path) -> Path:
    """Rename a stale run folder to ``<name>.stale-<k>`` (first free k) and return the new path."""
    k = 1
    while (target := run_dir.with_name(f"{run_dir.name}.stale-{k}")).exists():
        k += 1
    run_dir.rename(target)
    return target


def command_for(spec: RunSpec, state: str) -> list[str]:
    """The ``train_online`` argument list (without the interpreter) for a run in ``state``."""
    run_dir = Path(spec.run_dir)
    if state == "interrupted":
        return ["--resume", str(run_dir)]
    return [*spec.args, "--out", str(run_dir.parent), "--name", run_dir.name]


def job_command(job: Job, states: Sequence[str]) -> tuple[str, list[str]]:
    """("resumed" | "started", the ``train_online`` arguments) of a job whose runs' folders are in
    ``states``: ``--resume`` of its first run continues all; else its stale folders are moved
    aside and it starts (a set with ``--stack-seeds``); ``CliError`` where a set's disagree."""
    specs = runs_of(job)
    if all(st == "interrupted" for st in states):
        return "resumed", command_for(specs[0], "interrupted")
    for spec, st in zip(specs, states, strict=True):
        if st == "stale":
            move_aside(Path(spec.run_dir))
        elif st != "new":
            raise CliError(f"stacked runs {specs[0].name} ...: their folders are in different "
                           f"states ({', '.join(states)}); move them aside to start again")  # fmt: skip
    if isinstance(job, RunSpec):
        return "started", command_for(job, "new")
    first = list(specs[0].args)
    i = first.index("--seed")
    seeds = [s.args[s.args.index("--seed") + 1] for s in specs]
    return "started", [*first[:i], *first[i + 2 :], "--seed", seeds[0], "--stack-seeds",
                       *seeds[1:], "--out", str(Path(specs[0].run_dir).parent),
                       "--name", job.name]  # fmt: skip


def execute(job: Job, threads: int = 1, log_dir: str | None = None, in_process: bool = False,
            live: set[subprocess.Popen[bytes]] | None = None) -> list[RunResult]:
    """Bring a job to completion: skip, resume or start it (module docstring); a result per run.
    Its output goes to ``log_dir/<job name>.log`` (appended: a resumed run keeps its history; no
    ``log_dir``: this process's output), the subprocess in ``live`` while it runs."""
    t0 = time.perf_counter()
    specs = runs_of(job)
    for spec in specs:
        Path(spec.run_dir).parent.mkdir(parents=True, exist_ok=True)
    claims = [RunFolder(s.run_dir).claim() for s in specs]  # held until the job ends
    log = ""
    try:
        if any(c is None for c in claims):
            action, code = "busy", 0  # another sweep runs it: skipped here
        else:
            action, code, log = _execute(job, threads, log_dir, in_process, live)
    finally:
        for c in claims:
            if c is not None:
                c.release()
    seconds = 0.0 if action in ("busy", "skipped") else time.perf_counter() - t0
    return [RunResult(s.name, s.run_dir, action, code, seconds, log) for s in specs]


def _execute(job: Job, threads: int, log_dir: str | None, in_process: bool,
             live: set[subprocess.Popen[bytes]] | None = None) -> tuple[str, int, str]:
    """(action, exit code, log) of a claimed job."""
    states = [RunFolder(s.run_dir).state() for s in runs_of(job)]
    if all(st == "finished" for st in states):
        return "skipped", 0, ""
    try:
        action, argv = job_command(job, states)
    except CliError as err:  # a stacked set's folders disagree
        print(f"error: {err}", flush=True)
        return "started", 2, ""
    module = runs_of(job)[0].module
    if in_process:
        return action, _run_in_process(module, argv, threads), ""
    cmd = [sys.executable, "-m", module, *argv]
    code, log = call(cmd, threads, log_dir and str(Path(log_dir) / f"{job.name}.log"), live)
    return action, code, log


def call(cmd: list[str], threads: int, log: str | None = None,
         live: set[subprocess.Popen[bytes]] | None = None) -> tuple[int, str]:
    """Run ``cmd`` in the repository root with ``threads`` torch threads, its output appended
    to ``log`` (after the command line; None: this process's output), the process in ``live``
    while it runs; (exit code, log)."""
    env = dict(os.environ)
    for var in ("TORCH_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)  # train_online reads TORCH_NUM_THREADS
    env.setdefault("TQDM_MININTERVAL", "30")  # keep logs short: one bar line per 30 s
    env[LAUNCHER_PID] = str(os.getpid())  # the run stops when this process ends (StopRequest)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    live = set() if live is None else live
    if log is not None:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") if log is not None else contextlib.nullcontext() as fh:
        if fh is not None:
            fh.write(f"$ {' '.join(cmd)}\n")
            fh.flush()
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=fh, stderr=fh)
        live.add(proc)
        try:
            return proc.wait(), log or ""
        finally:
            live.discard(proc)


def _run_in_process(module: str, argv: list[str], threads: int) -> int:
    """Call ``module.main(argv)`` here with ``threads`` torch threads; its exit code."""
    import torch

    os.environ["TORCH_NUM_THREADS"] = str(max(1, threads))  # what train_online reads
    torch.set_num_threads(max(1, threads))
    main = importlib.import_module(module).main
    try:
        return int(main(argv) or 0)
    except SystemExit as exc:  # parse errors and CliError wrappers
        return exc.code if isinstance(exc.code, int) else 1
    except CliError as exc:
        print(f"{module}: error: {exc}", file=sys.stderr)
        return 2


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Torch threads for each of ``workers`` concurrent runs: cores // workers, at least 1."""
    cores = cores or usable_cores()
    return max(1, cores // max(1, workers))


Progress = Callable[[RunResult, int, int], None]


def print_progress(result: RunResult, done: int, total: int) -> None:
    """Default progress line: ``[3/9] resumed track-C_seed-42: ok (312 s)``."""
    status = {"skipped": "already finished",
              "busy": "running in another process, not started here"}.get(result.action)
    status = status or ("ok" if result.ok else f"FAILED (exit {result.returncode})")
    where = f", log {result.log}" if result.log and not result.ok else ""
    print(f"[{done}/{total}] {result.action} {result.name}: {status} ({result.seconds:.0f} s)"
          f"{where}", flush=True)


def _gather(jobs: Sequence[Job], finished: Iterable[list[RunResult]],
            progress: Progress | None) -> list[RunResult]:
    """The results of ``jobs``, each job's as it finishes (``finished``) passed run by run to
    ``progress``; a result per run, in the jobs' order."""
    results: dict[str, RunResult] = {}
    total = sum(len(runs_of(j)) for j in jobs)
    for batch in finished:
        for res in batch:
            results[res.name] = res
            if progress is not None:
                progress(res, len(results), total)
    return [results[s.name] for j in jobs for s in runs_of(j)]


class LocalBackend:
    """A pool of ``workers`` concurrent runs on this machine, each a subprocess (default) or,
    with ``in_process``, a call in a fresh worker process; a thread per slot waits on it."""

    def __init__(self, workers: int | None = None, threads: int | None = None,
                 in_process: bool = False) -> None:
        self.workers = max(1, workers or usable_cores())
        self.threads = threads or threads_per_worker(self.workers)
        self.in_process = in_process
        self.live: set[subprocess.Popen[bytes]] = set()  # the subprocesses running now
        self.stopping = False

    def stop(self) -> None:
        """Start no more jobs and ask the running ones to stop (SIGTERM: each checkpoints)."""
        self.stopping = True
        for proc in list(self.live):
            proc.terminate()

    def describe(self) -> str:
        """One line for the user."""
        mode = "in-process" if self.in_process else "subprocess"
        return f"local: {self.workers} worker(s) x {self.threads} torch thread(s), {mode}"

    def run(self, jobs: Sequence[Job], log_dir: str | None = None,
            progress: Progress | None = print_progress) -> list[RunResult]:
        """Run every job (finished ones are skipped); a result per run, in the jobs' order."""
        if self.in_process:
            fn: Callable[[Job], list[RunResult]] = self._in_worker_process
        else:
            def fn(job: Job) -> list[RunResult]:
                if self.stopping:  # stopped before this job's turn: not started
                    return [RunResult(s.name, s.run_dir, "not started", 0, 0.0) for s in runs_of(job)]
                return execute(job, self.threads, log_dir, live=self.live)

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            futures = [pool.submit(fn, j) for j in jobs]
            return _gather(jobs, (f.result() for f in as_completed(futures)), progress)

    def _in_worker_process(self, job: Job) -> list[RunResult]:
        """One job in a fresh spawned process (a clean torch/thread state per job)."""
        with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
            return ex.submit(execute, job, self.threads, None, True).result()


class RayBackend:
    """The same ``execute`` as Ray tasks, one per job, each reserving ``threads`` CPUs:
    ``address=None`` starts a local Ray instance (``num_cpus`` cores, no dashboard), ``"auto"``
    or ``"ray://host:10001"`` joins a cluster (docs/reproduce.md, "Ray backend")."""

    def __init__(self, address: str | None = None, threads: int = 1, num_cpus: int | None = None,
                 working_dir: str | None = None) -> None:
        try:
            import ray
        except ImportError as exc:  # the optional extra is missing
            raise CliError('the ray backend needs Ray: pip install -e ".[ray]"') from exc
        self.ray = ray
        self.address = address
        self.threads = max(1, threads)
        self.num_cpus = num_cpus
        self.working_dir = working_dir
        self._owns = False

    def describe(self) -> str:
        """One line for the user."""
        where = self.address or "a local Ray instance"
        return f"ray: {where}, {self.threads} CPU(s) and torch thread(s) per run"

    def _init(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        kwargs: dict = {"include_dashboard": False, "log_to_driver": False}
        if self.working_dir:
            kwargs["runtime_env"] = {"working_dir": self.working_dir}
        try:
            if self.address:
                ray.init(address=self.address, **kwargs)
            else:
                ray.init(num_cpus=self.num_cpus or usable_cores(), **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise CliError(f"cannot start or reach Ray at {self.address or 'local'}: {exc}") from None
        self._owns = True

    def shutdown(self) -> None:
        """Stop Ray if this backend started it."""
        if self._owns and self.ray.is_initialized():
            self.ray.shutdown()
        self._owns = False

    def run(self, jobs: Sequence[Job], log_dir: str | None = None,
            progress: Progress | None = print_progress) -> list[RunResult]:
        """Submit every job as a task; collect them as they finish; a result per run, in the
        jobs' order."""
        ray = self.ray
        self._init()
        task = ray.remote(num_cpus=self.threads, max_retries=0)(execute)
        pending = [task.remote(j, self.threads, log_dir) for j in jobs]

        def finished() -> Iterator[list[RunResult]]:
            while pending:
                (ref,), pending[:] = ray.wait(pending, num_returns=1)
                yield ray.get(ref)

        try:
            return _gather(jobs, finished(), progress)
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref)  # SIGINT to the task: train_online stops with a checkpoint
            raise
