"""The run's one writer: a zarr v3 store ``run.zarr`` in the run folder.

Layout (readable with plain zarr: ``zarr.open_group("runs/x/run.zarr")["metrics/loss/total"][:]``)::

    metrics/step                 int64 (S,)   row i is step i: one row per learner update
    metrics/<namespace>/<name>   float32 (S,) e.g. metrics/loss/pred, metrics/memory/surprisal
    eval/step                    int64 (E,)   learner steps done when the evaluation ran
    eval/ns                      attribute: the memory sizes n of the d_shift columns
    eval/d_shift                 float32 (E, len(ns))          D_shift^n, mean over horizons
    eval/d_shift_per_h           float32 (E, len(ns), K)       per horizon
    eval/d_base, sigma_embed, sigma_z, sigma_target, excluded (E,); eval/d_base_per_h (E, K)
    frames/step                  int64 (F,)   steps whose newest frame batch was kept
    frames/frames                uint8 (F, B, 1, 64, 64); frames/positions, velocities
                                 float32 (F, B, n_digits, 2); frames/gravity float32 (F, B)

Metrics arrive in blocks (``append_metrics``): one zarr append per block, never per step.
``truncate(step)`` cuts every group back to a checkpoint's step so a resumed run has neither a gap
nor a duplicate step, even after a SIGKILL in the middle of an append.

A damaged store is an error naming the damaged file (``DamagedStoreError``, one line on the
command line), never a silently wrong number: metadata (``zarr.json``) that does not parse, an
array the layout needs that is gone, a column shorter than its group's ``step`` column, a chunk
file that is missing (zarr would read its fill value, e.g. D_shift = 0) or does not decode, a step
column out of order. A write that fails (a full or read-only disk) raises ``OSError`` naming the
store; zarr writes each file atomically, so what was written before stays readable.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import zarr
from zarr.core.sync import sync

from runners.cli import CliError, writing
from runners.online.rundir import RunFolder

METRIC_CHUNK = 8192


class RecorderError(Exception):
    """The store is missing or inconsistent."""


class DamagedStoreError(RecorderError, CliError):
    """``run.zarr`` or a file in it is damaged; the message names the file (one line, exit 2)."""


#: Arrays whose chunk may be absent without damage: zarr does not write a chunk equal to the fill
#: value (NaN for metrics; eval/excluded is often all 0, frames/gravity is 0 in the base world).
_MAY_BE_FILL = ("eval/excluded", "frames/gravity")
#: The arrays a group must hold once its step column exists.
_REQUIRED = {
    "eval": ("step", "d_shift", "d_shift_per_h", "d_base", "d_base_per_h", "sigma_embed", "excluded"),
    "frames": ("step", "frames", "gravity"),
}

#: The spreads an evaluation records (docs/definitions.md#sigma_embed).
_SIGMAS = ("sigma_embed", "sigma_z", "sigma_target")
#: The evaluation's columns in the order they are appended: (name, dtype, a row's dimensions
#: beside the evaluations': ``n`` the memory sizes, ``k`` the horizons).
_EVAL_COLUMNS = (("d_shift", "float32", "n"), ("d_shift_per_h", "float32", "nk"),
                 ("d_base", "float32", ""), ("d_base_per_h", "float32", "k"),
                 *((name, "float32", "") for name in _SIGMAS), ("excluded", "int64", ""),
                 ("step", "int64", ""))

_F = TypeVar("_F", bound=Callable[..., Any])


def _writes(method: _F) -> _F:
    """A failed write (a full disk: an OSError without a file name) names the store."""

    @functools.wraps(method)
    def wrapper(self: Recorder, *args: Any, **kwargs: Any) -> Any:
        with writing(self.path):
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _bad_metadata(store: Path) -> Path | None:
    """The first ``zarr.json`` of ``store`` that is not zarr v3 group or array metadata."""
    files = [store / "zarr.json", *sorted(p for p in store.rglob("zarr.json") if p.parent != store)]
    for f in files:
        try:
            meta = json.loads(f.read_text())
        except (OSError, ValueError):
            return f
        if not (isinstance(meta, dict) and meta.get("zarr_format") == 3
                and meta.get("node_type") in ("group", "array")):
            return f
    return None


def _damaged(store: Path, err: BaseException, where: Path | None = None) -> DamagedStoreError:
    where = where or _bad_metadata(store) or store
    return DamagedStoreError(f"{where}: damaged run store ({type(err).__name__}: {err})")


async def _append_all(columns: list[tuple[Any, np.ndarray]]) -> None:
    """Append each (zarr array, values) pair, all at once; the first error is raised."""
    await asyncio.gather(*(arr.async_array.append(v) for arr, v in columns))


class Recorder:
    """Appends metrics, evaluations and frames of one run to ``<run_dir>/run.zarr``."""

    def __init__(self, run_dir: str | Path | RunFolder, *, create: bool = True,
                 read_only: bool = False) -> None:
        folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder(run_dir)
        self.path = folder.store
        if (read_only or not create) and not self.path.exists():
            raise RecorderError(f"{self.path} does not exist")
        mode = "r" if read_only else ("a" if create else "r+")
        try:
            self._open(mode, read_only)
        except (RecorderError, OSError):
            raise
        except Exception as err:  # zarr's own errors do not say which file is bad
            raise _damaged(self.path, err) from None

    @_writes
    def _open(self, mode: str, read_only: bool) -> None:
        # Open metric arrays by name: opening one reads its metadata (~1.5 ms), once per array
        # and not at every block. Cleared wherever arrays are resized other than by append.
        self._handles: dict[str, Any] = {}
        self.root = zarr.open_group(str(self.path), mode=mode)
        if read_only:
            if "metrics" not in self.root or "eval" not in self.root:
                raise DamagedStoreError(f"{self.path}: not a run's store, no metrics/eval groups "
                                        "(damaged run store)")
            self.metrics = self.root["metrics"]  # type: ignore[assignment]
            self.eval = self.root["eval"]  # type: ignore[assignment]
        else:
            self.metrics = self.root.require_group("metrics")
            self.eval = self.root.require_group("eval")
        frames: Any = self.root["frames"] if "frames" in self.root else None
        self._frames: zarr.Group | None = frames
        if not read_only and "step" not in self.metrics:
            self.metrics.create_array("step", shape=(0,), chunks=(METRIC_CHUNK,), dtype="int64")
            self.metrics.attrs["names"] = []
        self.check()

    # -- integrity ---------------------------------------------------------------------------
    def check(self) -> None:
        """Every array the layout needs exists and opens (``DamagedStoreError`` naming it)."""
        if "step" not in self.metrics:
            raise DamagedStoreError(f"{self.path / 'metrics/step/zarr.json'}: missing (damaged run store)")
        for k in ["step", *self.metric_names]:
            self._array(self.metrics, "metrics", k)
        for name, group in (("eval", self.eval), ("frames", self._frames)):
            if group is None or not ("ns" in group.attrs or any(True for _ in group.array_keys())):
                continue  # nothing recorded yet
            for k in _REQUIRED[name]:
                self._array(group, name, k)

    def _array(self, group: zarr.Group, name: str, key: str) -> Any:
        where = self.path / name / key
        try:
            arr = group[key]
        except KeyError:
            raise DamagedStoreError(f"{where / 'zarr.json'}: missing (damaged run store)") from None
        except Exception as err:
            raise _damaged(self.path, err, _bad_metadata(where) or where) from None
        if not isinstance(arr, zarr.Array):
            raise DamagedStoreError(f"{where}: not an array (damaged run store)")
        return arr

    def _read(self, group: zarr.Group, name: str, key: str, rows: int) -> np.ndarray:
        """Rows ``[0, rows)`` of ``<name>/<key>``: every chunk they need must be on disk and
        decode, and the array must be that long; ``DamagedStoreError`` naming the file if not."""
        arr = self._array(group, name, key)
        where = self.path / name / key
        if int(arr.shape[0]) < rows:
            raise DamagedStoreError(
                f"{where}: {int(arr.shape[0])} rows, but {name}/step has {rows} (damaged run store)"
            )
        fill = arr.metadata.fill_value
        may_be_fill = (
            f"{name}/{key}" in _MAY_BE_FILL
            or (isinstance(fill, float | np.floating) and math.isnan(fill))
            or (key == "step" and rows == 1 and name != "eval")  # a chunk holding just step 0
        )
        if rows and not may_be_fill:
            first = range(math.ceil(rows / arr.chunks[0]))
            rest = [range(math.ceil(s / c)) for s, c in zip(arr.shape[1:], arr.chunks[1:], strict=True)]
            for coords in itertools.product(first, *rest):
                chunk = where / arr.metadata.encode_chunk_key(coords)
                if not chunk.is_file():
                    raise DamagedStoreError(f"{chunk}: chunk file missing (damaged run store)")
        try:
            return np.asarray(arr[:rows])
        except Exception as err:
            bad = where
            step = arr.chunks[0]
            for i in range(math.ceil(rows / step)):  # which chunk (one per row block here)
                try:
                    arr[i * step : (i + 1) * step]
                except Exception:
                    bad = where / arr.metadata.encode_chunk_key((i,) + (0,) * (arr.ndim - 1))
                    break
            raise DamagedStoreError(f"{bad}: damaged chunk file, cannot be decoded "
                                    f"({type(err).__name__}: {err})") from None

    def _check_steps(self, name: str, steps: np.ndarray, consecutive: bool) -> None:
        ok = (np.array_equal(steps, np.arange(len(steps))) if consecutive
              else bool(np.all(np.diff(steps) > 0) and (len(steps) == 0 or steps[0] >= 0)))
        if not ok:
            what = "0, 1, 2, ..." if consecutive else "increasing"
            raise DamagedStoreError(f"{self.path / name / 'step'}: not {what} (damaged run store)")

    # -- metrics -----------------------------------------------------------------------------
    @property
    def metric_names(self) -> list[str]:
        return list(self.metrics.attrs.get("names", []))

    @property
    def n_steps(self) -> int:
        """Rows of metrics written (= the next step to record)."""
        return int(self._metric("step").shape[0])

    def _metric(self, key: str) -> Any:
        """The open metric array ``key`` (kept open: appends go through the same handle)."""
        arr = self._handles.get(key)
        if arr is None:
            arr = self._handles[key] = self.metrics[key]
        return arr

    @_writes
    def append_metrics(self, steps: np.ndarray, values: Mapping[str, np.ndarray]) -> None:
        """Append one block: ``steps`` (n,) int and one (n,) array per metric name."""
        steps = np.asarray(steps, dtype=np.int64)
        n = steps.shape[0]
        if n == 0:
            return
        expected = self.n_steps
        if steps[0] != expected or np.any(np.diff(steps) != 1):
            raise RecorderError(
                f"metrics must be appended step by step: expected step {expected}, got "
                f"{int(steps[0])}..{int(steps[-1])}"
            )
        names = self.metric_names
        new = [k for k in values if k not in names]
        for k in new:  # a metric that appears late (or a new name): NaN for earlier steps
            self.metrics.create_array(k, shape=(expected,), chunks=(METRIC_CHUNK,),
                                      dtype="float32", fill_value=np.nan)
        if new:
            names = names + new
            self.metrics.attrs["names"] = names
        columns = []
        for k in names:
            v = values.get(k)
            v = np.full(n, np.nan, np.float32) if v is None else np.asarray(v, np.float32)
            if v.shape != (n,):
                raise RecorderError(f"metric {k!r} has shape {v.shape}, expected ({n},)")
            columns.append((self._metric(k), v))
        # The metric columns are appended concurrently (zarr's own event loop: one round of
        # file writes instead of one per column, about half the time); the step column is
        # written after all of them: it is what says a row is complete.
        sync(_append_all(columns))
        self._metric("step").append(steps)

    def read_metrics(self) -> dict[str, np.ndarray]:
        """All metrics as numpy arrays, ``step`` included, cut to complete rows."""
        n = self.n_steps
        out = {"step": self._read(self.metrics, "metrics", "step", n)}
        self._check_steps("metrics", out["step"], consecutive=True)
        for k in self.metric_names:
            out[k] = self._read(self.metrics, "metrics", k, n)
        return out

    # -- evaluations -------------------------------------------------------------------------
    @_writes
    def append_eval(self, step: int, ns: Sequence[int], d_shift: Sequence[float],
                    d_shift_per_h: Sequence[Sequence[float]], d_base: float,
                    d_base_per_h: Sequence[float], sigma_embed: float, excluded: int,
                    horizons: Sequence[int], *, sigma_z: float, sigma_target: float) -> None:
        """One row per evaluation; ``d_shift[i]`` is D_shift^{ns[i]}; ``sigma_z`` and
        ``sigma_target`` the spread of the input frames' online and EMA target latents."""
        ns = [int(n) for n in ns]
        dims = {"n": len(ns), "k": len(horizons)}
        values = {"d_shift": d_shift, "d_shift_per_h": d_shift_per_h, "d_base": d_base,
                  "d_base_per_h": d_base_per_h, "sigma_embed": sigma_embed, "sigma_z": sigma_z,
                  "sigma_target": sigma_target, "excluded": excluded, "step": step}
        if "step" not in self.eval:
            self.eval.attrs["ns"] = ns
            self.eval.attrs["horizons"] = [int(h) for h in horizons]
            for name, dtype, row in _EVAL_COLUMNS:
                shape = tuple(dims[d] for d in row)
                self.eval.create_array(name, shape=(0, *shape), chunks=(256, *shape), dtype=dtype)
        elif list(self.eval.attrs["ns"]) != ns:
            raise RecorderError(f"evaluation memory sizes changed: {self.eval.attrs['ns']} -> {ns}")
        rows = self.n_evals
        for name in _SIGMAS[1:]:  # a run recorded before the latents' spreads: NaN until now
            if name not in self.eval:
                self.eval.create_array(name, shape=(rows,), chunks=(256,), dtype="float32",
                                       fill_value=np.nan)  # fmt: skip
        for name, dtype, row in _EVAL_COLUMNS:  # the step column last: it completes the row
            arr: Any = self.eval[name]
            arr.resize((rows,) + arr.shape[1:])  # cut a row an interrupted append left
            arr.append(np.asarray([values[name]], dtype).reshape(1, *(dims[d] for d in row)))

    @property
    def n_evals(self) -> int:
        return int(self.eval["step"].shape[0]) if "step" in self.eval else 0

    def read_eval(self) -> dict[str, np.ndarray]:
        """Evaluation rows; ``ns`` and ``horizons`` as arrays too. Empty dict before the first."""
        n = self.n_evals
        if n == 0:
            return {}
        out = {k: self._read(self.eval, "eval", k, n) for k in self.eval.array_keys()}
        self._check_steps("eval", out["step"], consecutive=False)
        out["ns"] = np.asarray(self.eval.attrs["ns"])
        out["horizons"] = np.asarray(self.eval.attrs["horizons"])
        return out

    # -- frames ------------------------------------------------------------------------------
    @_writes
    def append_frames(self, step: int, frames: np.ndarray, positions: np.ndarray | None = None,
                      velocities: np.ndarray | None = None,
                      gravity: np.ndarray | None = None) -> None:
        """Keep one frame batch ``(B, 1, 64, 64)`` uint8 and its ground truth."""
        frames = np.asarray(frames, np.uint8)
        b = frames.shape[0]
        if self._frames is None:
            g = self.root.require_group("frames")
            g.create_array("frames", shape=(0, *frames.shape), chunks=(1, *frames.shape), dtype="uint8")
            if positions is not None:
                p = np.shape(positions)
                for name in ("positions", "velocities"):
                    g.create_array(name, shape=(0, *p), chunks=(64, *p), dtype="float32")
            g.create_array("gravity", shape=(0, b), chunks=(1024, b), dtype="float32")
            g.create_array("step", shape=(0,), chunks=(1024,), dtype="int64")
            self._frames = g
        g = self._frames
        rows = int(g["step"].shape[0])
        truth = {"positions": positions, "velocities": velocities}
        columns: dict[str, Any] = {
            "frames": frames,
            **{k: np.full(g[k].shape[1:], np.nan) if v is None else v  # type: ignore[union-attr]
               for k, v in truth.items() if k in g},
            "gravity": np.full(b, np.nan) if gravity is None else np.broadcast_to(
                np.asarray(gravity, np.float32), (b,)),
        }
        for name, value in columns.items():
            arr: Any = g[name]
            arr.resize((rows,) + arr.shape[1:])
            arr.append(np.asarray(value, arr.dtype)[None])
        g["step"].append(np.asarray([step], np.int64))  # type: ignore[union-attr]

    @property
    def n_frames(self) -> int:
        return int(self._frames["step"].shape[0]) if self._frames is not None else 0

    # -- resume ------------------------------------------------------------------------------
    @_writes
    def truncate(self, step: int) -> None:
        """Keep exactly what a checkpoint at ``step`` (steps done) has seen.

        Metrics keep rows 0..step-1; evaluations with ``eval/step <= step``; frames of steps
        ``< step``. Arrays longer than their group's ``step`` column (a write interrupted between
        columns) are cut too. A store with fewer metric rows than ``step`` cannot be resumed
        without a gap and raises ``RecorderError``.
        """
        self._handles.clear()  # arrays are resized below
        n = self.n_steps
        if n < step:
            raise RecorderError(
                f"{self.path} holds metrics for {n} steps but the checkpoint is at step {step}"
            )
        self._check_steps("metrics", self._read(self.metrics, "metrics", "step", step), True)
        for k in ["step", *self.metric_names]:
            arr = self.metrics[k]
            arr.resize((min(int(arr.shape[0]), step),))  # type: ignore[union-attr]
            if int(arr.shape[0]) < step:  # a column that lost rows: pad with NaN (never seen)
                arr.append(np.full(step - int(arr.shape[0]), np.nan, np.float32))  # type: ignore[union-attr]
        self._truncate_group(self.eval, lambda s: s <= step)
        if self._frames is not None:
            self._truncate_group(self._frames, lambda s: s < step)
        self._handles.clear()

    @staticmethod
    def _truncate_group(group: zarr.Group, keep) -> None:  # type: ignore[no-untyped-def]
        if "step" not in group:
            return
        s = np.asarray(group["step"][:])  # type: ignore[index]
        # Rows are in step order, so the kept rows are a prefix; it ends at the first row out of
        # order too (a row whose chunk a killed append never wrote reads as step 0).
        ok = np.asarray(keep(s), bool)
        ok[1:] &= np.diff(s) > 0
        rows = len(s) if ok.all() else int(np.argmin(ok))
        for k in group.array_keys():
            arr = group[k]
            arr.resize((min(rows, int(arr.shape[0])),) + arr.shape[1:])  # type: ignore[union-attr]
