"""The run folder: the one module that knows its file names, who holds it, and clean stops.

A run folder ``<out>/<name>/`` holds::

    config.json            the resolved RunConfig (``--resume`` reads it back)
    run.zarr/              metrics per step, evaluations, frames (``runners.online.recorder``)
    checkpoints/latest.pt  the newest checkpoint (atomic); ``best.pt`` the lowest D_shift^n
    checkpoints/<name>.eval.json   an adaptation curve of that checkpoint (``evaluate``)
    figures/*.png          ``runners.online.plots``
    summary.json, summary.md   written at the end (and when stopped early, with ``stopped``)
    events.out.tfevents.*  TensorBoard's events (``runners.online.events``; ``*.ending``: the end)
    PAUSE                  create it to stop the run between two steps
    .lock                  held (an OS lock) by the one process that writes the folder

A new run never reuses an existing folder. Every other module (loop, recorder, summary, plots,
evaluate, visualize, the sweep backends and the report) asks ``RunFolder`` for paths.

``RunFolder.hold()`` takes the folder's lock (``filelock``: ``flock`` on POSIX), released on any
exit, SIGKILL included, because the OS closes the descriptor; a second process gets ``CliError``
naming the folder and writes nothing. A sweep claims a point before starting its run with
``RunFolder.claim()`` (a lock file beside the folder), so two sweeps on one output folder never
run the same point twice.

``StopRequest`` turns Ctrl-C, SIGTERM and a ``PAUSE`` file into a flag the loop checks once per
step, so the run stops between two steps with everything flushed. A second Ctrl-C while stopping
raises ``KeyboardInterrupt`` (the checkpoint of the last save is still intact).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

from filelock import FileLock, Timeout

from runners.cli import CliError


class RunFolder:
    """The files of one run folder (paths only; nothing is created until asked)."""

    CONFIG = "config.json"
    LOCK = ".lock"

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.config = self.root / self.CONFIG
        self.store = self.root / "run.zarr"
        self.checkpoints = self.root / "checkpoints"
        self.latest = self.checkpoint("latest")
        self.best = self.checkpoint("best")
        self.figures = self.root / "figures"
        self.summary_json = self.root / "summary.json"
        self.summary_md = self.root / "summary.md"
        self.pause = self.root / "PAUSE"
        self._lock: FileLock | None = None

    def __repr__(self) -> str:
        return f"RunFolder({str(self.root)!r})"

    # -- names -------------------------------------------------------------------------------
    def checkpoint(self, which: str) -> Path:
        """``checkpoints/<which>.pt`` (``latest`` or ``best``)."""
        return self.checkpoints / f"{which}.pt"

    @staticmethod
    def curve_path(checkpoint: Path) -> Path:
        """Where an adaptation curve of ``checkpoint`` is written: ``<name>.eval.json`` beside it."""
        return checkpoint.with_suffix(".eval.json")

    @staticmethod
    def strips_path(checkpoint: Path) -> Path:
        """Where the decoded strips of ``checkpoint``'s held-out report are written:
        ``<name>.strips.npz`` beside it (``runners.online.pixels``)."""
        return checkpoint.with_suffix(".strips.npz")

    @property
    def claim_path(self) -> Path:
        """The sweep's claim on this run: ``<out>/.<name>.claim`` beside the folder."""
        return self.root.parent / f".{self.root.name}.claim"

    def make(self) -> None:
        """Create the subfolders (``CliError`` if the location is not writable)."""
        try:
            self.checkpoints.mkdir(parents=True, exist_ok=True)
            self.figures.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CliError(f"cannot write the run folder {self.root}: {err.strerror or err}") from None

    # -- what is there ---------------------------------------------------------------------------
    def is_run(self) -> bool:
        return self.config.is_file()

    def read_json(self, path: Path) -> dict[str, Any] | None:
        """A JSON object file of this folder, or None when missing or unreadable."""
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def read_config(self) -> dict[str, Any]:
        """``config.json`` as a dict (``CliError`` naming the file when it is missing or bad)."""
        try:
            data = json.loads(self.config.read_text())
        except OSError:
            raise CliError(f"{self.root} is not a run folder: {self.CONFIG} is missing") from None
        except ValueError as err:
            raise CliError(f"{self.config} is not valid JSON: {err}") from None
        if not isinstance(data, dict):
            raise CliError(f"{self.config}: expected a JSON object")
        return data

    def read_summary(self) -> dict[str, Any] | None:
        return self.read_json(self.summary_json)

    def is_finished(self) -> bool:
        """``summary.json`` parses and is not a stopped run's (``stopped`` unset, all steps done)."""
        s = self.read_summary()
        if s is None or s.get("stopped"):
            return False
        done, total = s.get("steps_done"), s.get("steps")
        return done is not None and total is not None and int(done) >= int(total)

    def state(self) -> str:
        """``new`` (no folder), ``finished``, ``interrupted`` (a checkpoint, not finished) or
        ``stale`` (a folder without a checkpoint: the run died before its first one)."""
        if not self.root.exists():
            return "new"
        if self.is_finished():
            return "finished"
        if self.latest.is_file():
            return "interrupted"
        return "stale"

    # -- one writer ----------------------------------------------------------------------------
    def hold(self) -> RunFolder:
        """Take the folder's lock for this process (``CliError`` if another process holds it)."""
        if self._lock is None:
            self._lock = _try_lock(self.root / self.LOCK, f"run folder {self.root}")
        return self

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> RunFolder:
        return self.hold()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def claim(self) -> FileLock | None:
        """A sweep's claim on this run (held lock), or None when another sweep holds it."""
        try:
            return _try_lock(self.claim_path, str(self.root))
        except CliError:
            return None


def _try_lock(path: Path, what: str) -> FileLock:
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise CliError(f"{what} is in use by another process (its lock {path.name} is held)") from None
    except OSError as err:
        raise CliError(f"cannot lock {what}: {err.strerror or err}") from None
    return lock


def default_name(track: str, seed: int) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{track}-s{seed}"


def new_folder(out: str | Path, name: str | None, default: str, what: str = "run folder") -> Path:
    """Create a fresh folder ``out/name`` (``name`` None: ``default``, else ``default-1``, ... the
    first that is free) and return it; an existing folder is never reused (``CliError``). A run
    folder's, and a live view's session folder (``runners.visualize``)."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CliError(f"cannot create --out {out}: {err.strerror or err}") from None
    names = [name] if name is not None else [default, *(f"{default}-{i}" for i in range(1, 1000))]
    for candidate in names:
        root = out / candidate
        try:
            root.mkdir()
            return root
        except FileExistsError:
            if name is None:
                continue
            raise CliError(f"{what} {root} already exists: continue it with --resume {root}, "
                           f"or choose another --name") from None
        except OSError as err:
            where = f"{what} {root}" if name is not None else f"a {what} under {out}"
            raise CliError(f"cannot create {where}: {err.strerror or err}") from None
    raise CliError(f"cannot find a free {what} name under {out}")  # pragma: no cover


def new_run_folder(out: str | Path, name: str | None, track: str, seed: int) -> RunFolder:
    """Create and hold a fresh run folder; an existing one is never reused (``CliError``)."""
    folder = RunFolder(new_folder(out, name, default_name(track, seed))).hold()
    folder.make()
    return folder


def existing_run_folder(path: str | Path, option: str = "--resume") -> RunFolder:
    """A run folder to continue, held by this process; ``CliError`` if it is not one, has no
    checkpoint yet, or another process holds it."""
    root = Path(path)
    if not root.is_dir():
        raise CliError(f"{option} {root}: no such run folder")
    folder = RunFolder(root)
    if not folder.is_run():
        raise CliError(f"{option} {root}: not a run folder (no {RunFolder.CONFIG})")
    folder.hold()
    if not folder.latest.exists():
        folder.release()
        raise CliError(f"{option} {root}: no checkpoint yet (checkpoints/latest.pt is missing); "
                       "the run stopped before its first checkpoint, start it again")
    folder.make()
    return folder


#: Set by the launcher (``runners.studies.backends``) for the runs it starts: its process id.
LAUNCHER_PID = "RUNNERS_LAUNCHER_PID"


#: The exit status of a run stopped by a PAUSE file or its launcher's end (EX_TEMPFAIL).
STOPPED_EXIT = 75


class StopRequest:
    """Ctrl-C, SIGTERM, a PAUSE file or, for a run the launcher started, the end of the
    launcher's process (killed, say: its runs then stop with a checkpoint rather than train on
    alone) -> ``requested`` is true; checked once per step."""

    def __init__(self, pause_file: Path | None = None) -> None:
        self.pause_file = pause_file
        self.reason: str | None = None
        self.signum: int | None = None
        self._old: dict[int, object] = {}
        launcher = os.environ.get(LAUNCHER_PID, "")
        self.launcher = int(launcher) if launcher.isdigit() else None

    def install(self) -> StopRequest:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: no signal handling, PAUSE still works
                pass
        return self

    def uninstall(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
        self._old.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.reason is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        self.reason = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """The exit status of a run this stopped, never 0 (a finished run's) so a script can
        tell: a signal's 128 + its number as a shell gives it (Ctrl-C 130, SIGTERM 143), else
        75 (EX_TEMPFAIL: a PAUSE file, the launcher's end); ``--resume`` continues it."""
        return 128 + self.signum if self.signum is not None else STOPPED_EXIT

    def request(self, reason: str) -> None:
        """Ask the loop to stop (the visualizer's Q key, tests)."""
        self.reason = reason

    @property
    def requested(self) -> bool:
        if self.reason is None and self.pause_file is not None and self.pause_file.exists():
            self.reason = f"{self.pause_file.name} file"
        if self.reason is None and self.launcher is not None and os.getppid() != self.launcher:
            self.reason = "the end of the process that started it"
        return self.reason is not None

    def __enter__(self) -> StopRequest:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()
