"""Run folders and clean stops.

A run folder ``<out>/<name>/`` holds ``config.json``, ``run.zarr``, ``checkpoints/``,
``figures/``, ``summary.json`` and ``summary.md``. A new run never reuses an existing folder.

``StopRequest`` turns Ctrl-C, SIGTERM and a ``PAUSE`` file in the run folder into a flag the loop
checks once per step, so the run stops between two steps with everything flushed. A second Ctrl-C
while stopping raises ``KeyboardInterrupt`` (the checkpoint of the last save is still intact).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import FrameType

from runners.cli import CliError

PAUSE_FILE = "PAUSE"


class RunPaths:
    """The files of one run folder."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.config = self.root / "config.json"
        self.checkpoints = self.root / "checkpoints"
        self.latest = self.checkpoints / "latest.pt"
        self.best = self.checkpoints / "best.pt"
        self.figures = self.root / "figures"
        self.summary_json = self.root / "summary.json"
        self.summary_md = self.root / "summary.md"
        self.pause = self.root / PAUSE_FILE

    def make(self) -> None:
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.figures.mkdir(parents=True, exist_ok=True)


def default_name(track: str, seed: int) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{track}-s{seed}"


def new_run_dir(out: str | Path, name: str | None, track: str, seed: int) -> RunPaths:
    """Create a fresh run folder; an existing one is never reused (``CliError``)."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CliError(f"cannot create --out {out}: {err.strerror or err}") from None
    if name is not None:
        root = out / name
        try:
            root.mkdir()
        except FileExistsError:
            raise CliError(
                f"run folder {root} already exists: continue it with --resume {root}, "
                f"or choose another --name"
            ) from None
        except OSError as err:
            raise CliError(f"cannot create run folder {root}: {err.strerror or err}") from None
    else:
        base = default_name(track, seed)
        for i in range(1000):
            root = out / (base if i == 0 else f"{base}-{i}")
            try:
                root.mkdir()
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover
            raise CliError(f"cannot find a free run folder name under {out}")
    paths = RunPaths(root)
    paths.make()
    return paths


def existing_run_dir(path: str | Path) -> RunPaths:
    """A run folder to resume (or the folder a checkpoint lies in); ``CliError`` if it is not."""
    root = Path(path)
    if not root.is_dir():
        raise CliError(f"--resume {root}: no such run folder")
    paths = RunPaths(root)
    if not paths.config.exists():
        raise CliError(f"--resume {root}: not a run folder (no config.json)")
    if not paths.latest.exists():
        raise CliError(
            f"--resume {root}: no checkpoint yet (checkpoints/latest.pt is missing); "
            f"the run stopped before its first checkpoint, start it again"
        )
    paths.make()
    return paths


class StopRequest:
    """Ctrl-C, SIGTERM or a PAUSE file -> ``requested`` is true; checked once per step."""

    def __init__(self, pause_file: Path | None = None) -> None:
        self.pause_file = pause_file
        self.reason: str | None = None
        self._old: dict[int, object] = {}

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

    def request(self, reason: str) -> None:
        """Ask the loop to stop (the visualizer's Q key, tests)."""
        self.reason = reason

    @property
    def requested(self) -> bool:
        if self.reason is None and self.pause_file is not None and self.pause_file.exists():
            self.reason = f"{self.pause_file.name} file"
        return self.reason is not None

    def __enter__(self) -> StopRequest:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()
