"""Where the runs of a sweep execute: a local pool of worker processes, or Ray tasks.

Both backends run the same function, ``execute(spec)``, which starts one run as a subprocess
``python -m runners.train_online ...`` (or, with ``in_process=True``, calls its ``main`` in the
worker process) and returns a ``RunResult``. Before starting, ``execute`` looks at the run folder:

- ``finished`` (``summary.json`` present and complete): skipped, nothing is started;
- ``interrupted`` (``checkpoints/latest.pt`` present, no complete summary): ``--resume RUN_DIR``;
- ``stale`` (the folder exists but holds no checkpoint: the run died before its first one):
  moved aside to ``<name>.stale-<k>`` (never deleted) and started afresh;
- ``new``: started with the point's arguments.

``execute`` first claims the point (``RunFolder.claim``: an OS lock beside the run folder, held
while the run executes): a point another sweep is running right now is reported ``busy`` and
not started, so two sweeps on one output folder never run the same point twice.

So rerunning the same sweep command after a crash, a Ctrl-C or a lost Ray node finishes exactly
the missing runs. Each worker gets ``cores // workers`` torch threads (``TORCH_NUM_THREADS`` (read by
``train_online``), ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` for a subprocess, ``torch.set_num_threads`` in process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path

from runners.cli import CliError, usable_cores
from runners.online.rundir import RunFolder

TRAIN_MODULE = "runners.train_online"
#: The repository root (the folder holding ``runners/``): subprocesses run there.
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: its folder and the ``train_online`` arguments that create it.

    ``args`` never include ``--out``/``--name``/``--resume``: ``execute`` adds them.
    """

    name: str
    run_dir: str
    args: tuple[str, ...]
    module: str = TRAIN_MODULE


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
    command: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the run is finished now (skipped because done, or exited 0 and complete)."""
        return self.returncode == 0 and is_finished(self.run_dir)


def is_finished(run_dir: str | Path) -> bool:
    """The run's ``summary.json`` says it ran all its steps (``RunFolder.is_finished``)."""
    return RunFolder(run_dir).is_finished()


def run_state(run_dir: str | Path) -> str:
    """``finished``, ``interrupted``, ``stale`` or ``new`` (module docstring)."""
    return RunFolder(run_dir).state()


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


def execute(
    spec: RunSpec,
    threads: int = 1,
    log_dir: str | None = None,
    in_process: bool = False,
) -> RunResult:
    """Bring one run to completion: skip, resume or start it (module docstring).

    The subprocess's output goes to ``log_dir/<name>.log`` (appended, so a resumed run keeps
    its history) or, without ``log_dir``, to this process's output.
    """
    t0 = time.perf_counter()
    folder = RunFolder(spec.run_dir)
    Path(spec.run_dir).parent.mkdir(parents=True, exist_ok=True)
    claim = folder.claim()  # held until this run ends: another sweep skips the point
    if claim is None:
        return RunResult(spec.name, spec.run_dir, "busy", 0, 0.0)
    try:
        return _execute(spec, folder, threads, log_dir, in_process, t0)
    finally:
        claim.release()


def _execute(
    spec: RunSpec, folder: RunFolder, threads: int, log_dir: str | None, in_process: bool,
    t0: float,
) -> RunResult:
    state = folder.state()
    if state == "finished":
        return RunResult(spec.name, spec.run_dir, "skipped", 0, 0.0)
    if state == "stale":
        move_aside(Path(spec.run_dir))
        state = "new"
    action = "resumed" if state == "interrupted" else "started"
    argv = command_for(spec, state)
    log = ""
    if in_process:
        code = _run_in_process(spec.module, argv, threads)
        cmd = [spec.module, *argv]
    else:
        cmd = [sys.executable, "-m", spec.module, *argv]
        code, log = call(cmd, threads, log_dir and str(Path(log_dir) / f"{spec.name}.log"))
    return RunResult(spec.name, spec.run_dir, action, code, time.perf_counter() - t0, log, cmd)


def call(cmd: list[str], threads: int, log: str | None = None) -> tuple[int, str]:
    """Run ``cmd`` in the repository root with ``threads`` torch threads, its output appended
    to ``log`` (after the command line; None: this process's output); (exit code, log)."""
    env = dict(os.environ)
    for var in ("TORCH_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)  # train_online reads TORCH_NUM_THREADS
    env.setdefault("TQDM_MININTERVAL", "30")  # keep logs short: one bar line per 30 s
    path = str(REPO_ROOT)
    env["PYTHONPATH"] = path + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if log is None:
        return subprocess.call(cmd, cwd=REPO_ROOT, env=env), ""
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        return subprocess.call(cmd, cwd=REPO_ROOT, env=env, stdout=fh, stderr=fh), log


def _run_in_process(module: str, argv: list[str], threads: int) -> int:
    """Call ``module.main(argv)`` here with ``threads`` torch threads; its exit code."""
    import importlib

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


def default_workers() -> int:
    """As many workers as this process may use cores."""
    return usable_cores()


def threads_per_worker(workers: int, cores: int | None = None) -> int:
    """Torch threads for each of ``workers`` concurrent runs: cores // workers, at least 1."""
    cores = cores or default_workers()
    return max(1, cores // max(1, workers))


Progress = Callable[[RunResult, int, int], None]


def print_progress(result: RunResult, done: int, total: int) -> None:
    """Default progress line: ``[3/9] resumed track-C_seed-42: ok (312 s)``."""
    status = "ok" if result.ok else f"FAILED (exit {result.returncode})"
    if result.action == "skipped":
        status = "already finished"
    elif result.action == "busy":
        status = "running in another process, not started here"
    where = f", log {result.log}" if result.log and not result.ok else ""
    print(
        f"[{done}/{total}] {result.action} {result.name}: {status} ({result.seconds:.0f} s){where}",
        flush=True,
    )


class LocalBackend:
    """A pool of ``workers`` concurrent runs on this machine.

    Each run is a subprocess (default) or, with ``in_process``, a call in a fresh worker
    process; a thread per slot waits on it. Ctrl-C reaches the subprocesses too (same process
    group): each stops cleanly with a checkpoint, and rerunning the sweep resumes them.
    """

    def __init__(
        self,
        workers: int | None = None,
        threads: int | None = None,
        in_process: bool = False,
    ) -> None:
        self.workers = max(1, workers or default_workers())
        self.threads = threads or threads_per_worker(self.workers)
        self.in_process = in_process

    def describe(self) -> str:
        """One line for the user."""
        mode = "in-process" if self.in_process else "subprocess"
        return f"local: {self.workers} worker(s) x {self.threads} torch thread(s), {mode}"

    def run(
        self,
        specs: Sequence[RunSpec],
        log_dir: str | None = None,
        progress: Progress | None = print_progress,
    ) -> list[RunResult]:
        """Run every spec (finished ones are skipped); results in the order of ``specs``."""
        results: dict[str, RunResult] = {}
        if self.in_process:
            fn: Callable[[RunSpec], RunResult] = self._in_worker_process
        else:
            def fn(s: RunSpec) -> RunResult:
                return execute(s, self.threads, log_dir)

        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            pending: set[Future[RunResult]] = {pool.submit(fn, s) for s in specs}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    res = fut.result()
                    results[res.name] = res
                    if progress is not None:
                        progress(res, len(results), len(specs))
        return [results[s.name] for s in specs]

    def _in_worker_process(self, spec: RunSpec) -> RunResult:
        """One run in a fresh spawned process (a clean torch/thread state per run)."""
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
            return ex.submit(execute, spec, self.threads, None, True).result()


class RayBackend:
    """The same ``execute`` as Ray tasks, one per run, each reserving ``threads`` CPUs.

    ``address=None`` starts a local Ray instance (``num_cpus`` cores, no dashboard); ``"auto"``
    or ``"ray://host:10001"`` joins a cluster. The run folders are written by the workers, so on
    a multi-node cluster ``--out`` must be on a filesystem every node sees (NFS, a mounted
    bucket), and the workers need this repository (installed, or shipped with
    ``working_dir``, see docs/reproduce.md).
    """

    def __init__(
        self,
        address: str | None = None,
        threads: int = 1,
        num_cpus: int | None = None,
        working_dir: str | None = None,
    ) -> None:
        try:
            import ray
        except ImportError as exc:  # the optional extra is missing
            raise CliError(
                'the ray backend needs Ray: pip install -e ".[ray]"'
            ) from exc
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
        runtime_env = {"working_dir": self.working_dir} if self.working_dir else None
        kwargs: dict = {"include_dashboard": False, "log_to_driver": False}
        if runtime_env:
            kwargs["runtime_env"] = runtime_env
        try:
            if self.address:
                ray.init(address=self.address, **kwargs)
            else:
                ray.init(num_cpus=self.num_cpus or default_workers(), **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise CliError(f"cannot start or reach Ray at {self.address or 'local'}: {exc}") from None
        self._owns = True

    def shutdown(self) -> None:
        """Stop Ray if this backend started it."""
        if self._owns and self.ray.is_initialized():
            self.ray.shutdown()
        self._owns = False

    def run(
        self,
        specs: Sequence[RunSpec],
        log_dir: str | None = None,
        progress: Progress | None = print_progress,
    ) -> list[RunResult]:
        """Submit every spec as a task; collect them as they finish; results in spec order."""
        ray = self.ray
        self._init()
        task = ray.remote(num_cpus=self.threads, max_retries=0)(_ray_execute)
        refs = {task.remote(asdict(s), self.threads, log_dir): s.name for s in specs}
        results: dict[str, RunResult] = {}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    res = RunResult(**ray.get(ref))
                    results[res.name] = res
                    if progress is not None:
                        progress(res, len(results), len(specs))
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref)  # SIGINT to the task: train_online stops with a checkpoint
            raise
        return [results[s.name] for s in specs]


def _ray_execute(spec: dict, threads: int, log_dir: str | None) -> dict:
    """Ray task body: ``execute`` on plain dicts (no pickled classes cross the wire)."""
    res = execute(RunSpec(**{**spec, "args": tuple(spec["args"])}), threads, log_dir)
    return asdict(res)
