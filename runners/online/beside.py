"""The floor and the ceiling of a worlds run, started through the launcher: ``Bounds``.

A run of the worlds protocol trains three learners on the same stream: the chosen track, the
floor and the ceiling (``runners.online.bounds``). Each bound is a complete run of its own in the
main folder (``floor/``, ``ceiling/``) and a job of the sweeps' local backend
(``runners.studies.backends``): ``python -m runners.train_online`` on the main run's
``config.json`` with the bound's track (``bound_spec``), started, resumed from its checkpoint or
read when finished, as a sweep's run is. With ``workers`` W > 1 (``--workers``) the bounds start
with the main run and train beside it, in up to W - 1 processes; with 1, after it, one after
the other. What each writes does not depend on it: bit for bit on a CPU
(``tests/runners/test_beside.py``).

A bound's output goes to ``floor.log`` or ``ceiling.log`` in the main folder. A stop reaches
them: Ctrl-C reaches the whole process group, and a SIGTERM or a PAUSE file of the main run is
passed on to them as a SIGTERM, and a main process killed outright (SIGKILL) stops them too
(``StopRequest``: the launcher's end); each stops with a checkpoint, and ``--resume`` on the
main folder continues every one.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from runners.cli import CliError, usable_cores
from runners.online import bounds
from runners.online.config import RunConfig
from runners.online.rundir import RunFolder, StopRequest
from runners.studies.backends import LocalBackend, RunResult, RunSpec

#: How often a stop of the main process is looked for while the bounds train (seconds).
WATCH_S = 0.2


def workers_for(cfg: RunConfig) -> int:
    """How many runs train at once: ``cfg.workers``, or for 0 all three where this process may
    use two cores or more, else one."""
    return cfg.workers or (1 + len(bounds.BOUNDS) if usable_cores() >= 2 else 1)


def pending(folder: RunFolder) -> list[str]:
    """The bounds of the run in ``folder`` that have not finished, in training order."""
    return [name for name in bounds.BOUNDS if not RunFolder(folder.root / name).is_finished()]


def bound_spec(folder: RunFolder, cfg: RunConfig, name: str) -> RunSpec:
    """Bound ``name`` of the run ``cfg`` in ``folder`` as a ``train_online`` job: its folder
    (``log_dir/<name>.log`` its log) and the main run's config with the bound's options."""
    return RunSpec(name, str(folder.root / name),
                   ("--config", str(folder.config), *bounds.bound_options(cfg, name)))


class Bounds:
    """The unfinished bounds of the run ``cfg`` in ``folder``: ``start`` them beside it (a
    thread of this process waits on them), ``join`` waits for them (starting them first when
    they train after it) and returns their summaries; leaving the ``with`` block early stops
    them and waits."""

    def __init__(self, cfg: RunConfig, folder: RunFolder, workers: int, threads: int,
                 stop: StopRequest | None = None) -> None:  # fmt: skip
        self.folder = folder
        self.stop = stop  # this process's: a stop of it is passed on (``_watch``)
        self.names = pending(folder)
        self.beside = workers > 1 and bool(self.names)
        self.backend = LocalBackend(max(1, min(workers - 1, len(self.names))), threads)
        self.jobs = [bound_spec(folder, cfg, name) for name in self.names]
        self.failed: RunResult | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the bounds' jobs (nothing to start: nothing happens), and the watch that passes
        a stop of this process on to them."""
        if self.thread is None and self.jobs:
            self.thread = threading.Thread(target=self._run, name="bounds", daemon=True)
            self.thread.start()
            threading.Thread(target=self._watch, name="bounds-stop", daemon=True).start()

    def _watch(self) -> None:
        """While the bounds run, a stop of this process (``self.stop``: Ctrl-C, SIGTERM, the
        main folder's PAUSE) reaches them within ``WATCH_S``, whatever this process's main
        thread is doing (training, or writing its own ending while the bounds still train)."""
        while self.running:
            if self.stop is not None and self.stop.requested and not self.backend.stopping:
                self.backend.stop()
            time.sleep(WATCH_S)

    @property
    def running(self) -> bool:
        """Whether the bounds' jobs are running now."""
        return self.thread is not None and self.thread.is_alive()

    def _run(self) -> None:
        self.backend.run(self.jobs, str(self.folder.root), progress=self._ended)

    def _ended(self, res: RunResult, done: int, total: int) -> None:
        """A bound's job ended: a failure (not a stop) stops the others."""
        if res.action == "busy":  # left training by a main process killed earlier
            print(f"{res.name}: it trains in another process; --resume when it ends")
        if res.returncode != 0 and not self.backend.stopping and self.failed is None:
            self.failed = res
            self.backend.stop()

    def describe(self) -> str:
        """One line for the user: which bounds train where, and where their output goes."""
        n = self.backend.workers
        parts = " and ".join(f"the {name}" for name in self.names)
        where = ("each in a process of its own" if n == len(self.names) else
                 "one after the other" if n == 1 else f"in {n} processes")  # fmt: skip
        logs = ", ".join(str(self.folder.root / f"{job.name}.log") for job in self.jobs)
        when = "beside this run" if self.beside else "after this run"
        return f"{parts} train {when}, {where} (output: {logs})"

    def join(self, stop: StopRequest) -> dict[str, dict[str, Any]] | None:
        """Wait for the bounds (passing a stop request of this process on to them); their
        summaries by name, or None when a stop cut one short. ``CliError`` when one failed,
        naming its log."""
        self.stop = stop
        if not stop.requested:
            self.start()
        while self.running:
            self.thread.join(0.2)
            if stop.requested and not self.backend.stopping:
                self.backend.stop()
        if self.failed is not None:
            res = self.failed
            raise CliError(f"the {res.name} run failed (exit {res.returncode}): "
                           f"{_last_line(res.log)}")  # fmt: skip
        runs = {name: RunFolder(self.folder.root / name) for name in bounds.BOUNDS}
        if not all(run.is_finished() for run in runs.values()):
            return None
        return {name: run.read_summary() for name, run in runs.items()}

    def __enter__(self) -> Bounds:
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving early (a stop, an error in this process): stop the bounds and wait."""
        if self.running:
            self.backend.stop()
            self.thread.join()


def _last_line(log: str) -> str:
    """The last line of a bound's log (the error it printed)."""
    try:
        lines = [x for x in open(log, errors="replace").read().splitlines() if x.strip()]
    except OSError:
        lines = []
    return f"{lines[-1].strip() if lines else 'no output'} (see {log})"
