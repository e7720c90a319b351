"""The bound runs trained beside the chosen track, each in a process of its own:
``BoundProcesses``.

A run of the worlds protocol trains three learners on the same stream: the chosen track, the
floor and the ceiling (``runners.online.bounds``). Each is a complete run of its own (its
folder, loop, checkpoints and summary), so none needs to wait for another: with ``workers`` W
> 1 (``--workers``), the chosen track trains in this process while the unfinished bounds train
in up to W - 1 spawned processes (two bounds in one process: one after the other), each with
the torch threads of this one. What each writes is what it writes trained one after another:
bit for bit on a CPU (``tests/runners/test_beside.py``).

A bound process writes its output to ``floor.log`` or ``ceiling.log`` in the main run folder,
and reports through its run folder (a finished run's ``summary.json``) and its exit status. A
stop reaches all of them: Ctrl-C the whole process group, the main folder's PAUSE file each of
them reads, a SIGTERM to this process is passed on, and a bound process whose starter ended
(killed, say) stops too; each stops with a checkpoint, and ``--resume`` on the main folder
continues every one.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runners.cli import CliError, usable_cores
from runners.online import bounds
from runners.online.config import RunConfig
from runners.online.parts import resolve_device, set_threads
from runners.online.rundir import RunFolder, StopRequest

#: Trains one bound: (the run's config, its folder, the bound's name, the stop request) -> the
#: bound's summary, or None when a stop cut it short.
TrainOne = Callable[[RunConfig, RunFolder, str, StopRequest], "dict[str, Any] | None"]

#: A bound process's exit status when a stop request ended it (with a checkpoint).
STOPPED = 3
#: A bound process's exit status for a clear error (its message is the log's last line).
FAILED = 2


def log_path(folder: RunFolder, name: str) -> Path:
    """Bound ``name``'s output, beside its run folder in the main one (``floor.log``): a bound
    folder without a checkpoint is removed when it starts again, so its log stays outside it."""
    return folder.root / f"{bounds.folder_of(name)[0]}.log"


def workers_for(cfg: RunConfig) -> int:
    """How many runs train at once: ``cfg.workers``, or for 0 all three where this process may
    use two cores or more, else one."""
    if cfg.workers:
        return cfg.workers
    return 1 + len(bounds.BOUNDS) if usable_cores() >= 2 else 1


def pending(folder: RunFolder) -> list[str]:
    """The bounds of the run in ``folder`` that have not finished, in training order."""
    return [name for name, sub, _ in bounds.BOUNDS
            if not RunFolder(folder.root / sub).is_finished()]  # fmt: skip


def _train_in_process(
    cfg: RunConfig, root: str, names: Sequence[str], train_one: TrainOne
) -> None:
    """A bound process: train the bounds ``names`` of ``cfg`` in the run folder ``root`` with
    ``train_one``, one after the other, each with its output in its log (``log_path``); exits 0
    when all finished, ``STOPPED`` at a stop request, ``FAILED`` (the message last in the log)
    at an error."""
    folder = RunFolder(root)
    set_threads(resolve_device(cfg.device))
    with StopRequest(folder.pause) as stop:
        _stop_with_parent(stop)
        for name in names:
            with open(log_path(folder, name), "a", buffering=1) as log, \
                    contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):  # fmt: skip
                try:
                    summary = train_one(cfg, folder, name, stop)
                except CliError as err:
                    print(f"error: {err}")
                    sys.exit(FAILED)
                except Exception:  # a fault: its traceback in the log, for the report
                    traceback.print_exc()
                    sys.exit(1)
            if summary is None:
                sys.exit(STOPPED)


def _stop_with_parent(stop: StopRequest) -> None:
    """Request a stop of this bound process when the process that started it ends (killed,
    say): it then checkpoints and exits instead of training on alone."""
    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        mp.connection.wait([parent.sentinel])
        stop.request("the end of the main run's process")

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


class BoundProcesses:
    """The unfinished bounds of the run ``cfg`` in ``folder``, training in up to ``workers - 1``
    spawned processes from construction, each bound by ``train_one`` (``job.train_bound``, a
    module-level function: the processes import it by name); ``join`` waits for them and
    returns their summaries."""

    def __init__(self, cfg: RunConfig, folder: RunFolder, workers: int, train_one: TrainOne
                 ) -> None:  # fmt: skip
        self.folder = folder
        self.stopping = False
        names = pending(folder)
        n = max(1, min(workers - 1, len(names)))
        groups = [names[i::n] for i in range(n) if names[i::n]]
        ctx = mp.get_context("spawn")  # a fresh interpreter: CUDA and torch threads start clean
        self.procs = [
            (group, ctx.Process(target=_train_in_process, name=f"bounds-{'-'.join(group)}",
                                args=(cfg, str(folder.root), group, train_one)))
            for group in groups
        ]  # fmt: skip
        for _, proc in self.procs:
            proc.start()

    def describe(self) -> str:
        """One line for the user: which bounds train where, and where their output goes."""
        parts = [", then ".join(f"the {name}" for name in group) for group, _ in self.procs]
        where = ("each in a process of its own" if all(len(g) == 1 for g, _ in self.procs)
                 else "in one process" if len(self.procs) == 1
                 else f"in {len(self.procs)} processes")  # fmt: skip
        logs = ", ".join(str(log_path(self.folder, name)) for g, _ in self.procs for name in g)
        return f"{' and '.join(parts)} train beside this run, {where} (output: {logs})"

    def stop(self) -> None:
        """Ask every live bound process to stop (SIGTERM: each checkpoints and exits)."""
        self.stopping = True
        for _, proc in self.procs:
            if proc.is_alive():
                proc.terminate()

    def join(self, stop: StopRequest) -> dict[str, dict[str, Any]] | None:
        """Wait for every bound process (passing a stop request of this process on to them);
        the bounds' summaries by name, or None when a stop cut one short. ``CliError`` when one
        failed, naming its log."""
        passed_on = False
        while any(proc.is_alive() for _, proc in self.procs):
            for _, proc in self.procs:
                proc.join(0.2)
            if stop.requested and not passed_on:
                self.stop()
                passed_on = True
        for group, proc in self.procs:
            # Asked to stop, a process may end before it could checkpoint (a signal while it
            # started): nothing of it is lost, --resume starts it again.
            stopped = self.stopping or stop.requested
            if proc.exitcode not in (0, STOPPED) and (proc.exitcode == FAILED or not stopped):
                raise CliError(f"the {' or the '.join(group)} run failed (exit {proc.exitcode}): "
                               f"{_last_line(self.folder, group)}")  # fmt: skip
        found = {}
        for name, sub, _ in bounds.BOUNDS:
            bound = RunFolder(self.folder.root / sub)
            if not bound.is_finished():
                return None
            found[name] = bound.read_summary()
        return found

    def __enter__(self) -> BoundProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving early (an error in this process): stop the bound processes and wait."""
        self.stop()
        for _, proc in self.procs:
            proc.join()


def _last_line(folder: RunFolder, group: Sequence[str]) -> str:
    """The last line of the newest log of ``group`` (the error a bound process printed)."""
    for name in reversed(group):
        path = log_path(folder, name)
        if path.exists():
            lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
            if lines:
                return f"{lines[-1].strip()} (see {path})"
    return "no output"
