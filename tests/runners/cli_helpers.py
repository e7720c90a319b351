"""Running the commands as a user does, in a subprocess, and comparing what two runs left in
their folders, bit for bit (shared by the command-line tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import zarr

ROOT = Path(__file__).resolve().parents[2]
#: A tiny run of the paper protocol with evaluations and checkpoints every 20 steps on small
#: evaluation splits.
TINY = ["--protocol", "paper", "--preset", "tiny", "--eval-every", "20", "--checkpoint-every", "20",
        "--set", "eval_shift_train=32", "--set", "eval_shift_test=16", "--set", "eval_base_test=16"]
#: The same for the worlds protocol (the default): short episodes, few held-out worlds.
TINY_WORLDS = ["--preset", "tiny", "--eval-every", "20", "--checkpoint-every", "20", "--no-bounds",
               "--set", "eval_shift_test=8", "--eval-world-seqs", "4", "--eval-worlds", "2", "--base-world-seqs", "4", "--base-worlds", "2", "--episode-steps", "21", "40"]  # fmt: skip


def cli(
    module: str, *args: str, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m runners.<module> ARGS`` from the repository root: one torch thread, no display
    (``env``: more environment variables)."""
    env = {**os.environ, "MPLBACKEND": "Agg", "TORCH_NUM_THREADS": "1",
           "SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", f"runners.{module}", *args], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=timeout,
    )


def assert_one_line_error(
    res: subprocess.CompletedProcess[str], *names: str, module: str = "train_online"
) -> str:
    """``res`` refused its input as the commands document (``runners.cli.run_main``): exit
    status 2 and stderr exactly one line, ``python -m runners.<module>: error: ...``, naming
    each of ``names`` (no traceback, no warning). Returns the line."""
    assert res.returncode == 2, f"exit status {res.returncode}: {res.stderr}"
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and res.stderr == lines[0] + "\n", f"not one line: {res.stderr!r}"
    assert lines[0].startswith(f"python -m runners.{module}: error: "), lines[0]
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


# -- comparing two runs ------------------------------------------------------------------------

#: The summary's numbers that measure the machine, not the run: wall-clock seconds and the rate
#: derived from them differ between any two processes.
WALL_CLOCK = ("wall_time_s", "steps_per_s")


def store_arrays(run: Path, *groups: str) -> dict[str, np.ndarray]:
    """Every array of ``run``'s ``run.zarr`` (of the top-level ``groups`` when given), by path."""
    root = zarr.open_group(str(run / "run.zarr"), mode="r")
    out: dict[str, np.ndarray] = {}

    def walk(group: zarr.Group, prefix: str) -> None:
        for key, member in group.members():
            if isinstance(member, zarr.Group):
                walk(member, f"{prefix}{key}/")
            else:
                out[prefix + key] = member[...]

    for key, member in root.members():
        if not groups or key in groups:
            if isinstance(member, zarr.Group):
                walk(member, f"{key}/")
            else:
                out[key] = member[...]
    return out


def assert_same_store(one: Path, other: Path, *groups: str) -> dict[str, np.ndarray]:
    """The two runs' stores hold the same arrays (every metric column, every evaluation; of
    ``groups`` when given), exactly (NaN where NaN). Returns the first's."""
    a, b = store_arrays(one, *groups), store_arrays(other, *groups)
    assert sorted(a) == sorted(b)
    assert "metrics/step" in a and "metrics/loss/total" in a
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        np.testing.assert_array_equal(a[key], b[key], err_msg=key, strict=True)
    return a


def summary_numbers(run: Path) -> dict[str, Any]:
    """``run``'s summary.json with its folder's path written ``RUN`` and the wall-clock numbers
    (``WALL_CLOCK``, at any depth) left out: what two runs of one config must share exactly."""
    text = (run / "summary.json").read_text().replace(str(run), "RUN")

    def drop(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: drop(v) for k, v in x.items() if k not in WALL_CLOCK}
        if isinstance(x, list):
            return [drop(v) for v in x]
        return x

    return drop(json.loads(text))


def assert_same_summary(one: Path, other: Path) -> dict[str, Any]:
    """Every number of the two runs' summaries but the wall-clock ones, exactly (compared as
    JSON text: a NaN equals a NaN). Returns the first's."""
    a, b = summary_numbers(one), summary_numbers(other)
    flat_a, flat_b = _flat(a), _flat(b)
    differ = {k: (flat_a.get(k), flat_b.get(k)) for k in sorted(flat_a.keys() | flat_b.keys())
              if flat_a.get(k, "absent") != flat_b.get(k, "absent")}  # fmt: skip
    assert not differ, f"the summaries differ: {differ}"
    return a


def _flat(x: Any, at: str = "") -> dict[str, str]:
    """Every leaf of a JSON value by its path, as JSON text (a NaN equals a NaN)."""
    if isinstance(x, dict) and x:
        return {k: v for key, val in x.items() for k, v in _flat(val, f"{at}/{key}").items()}
    if isinstance(x, list) and x:
        return {k: v for i, val in enumerate(x) for k, v in _flat(val, f"{at}[{i}]").items()}
    return {at: json.dumps(x)}


def assert_same_state(a: Any, b: Any, where: str = "") -> None:
    """Two checkpoint payloads (nested dicts, lists, tensors, arrays, numbers) are equal bit for
    bit: a tensor's or an array's bytes, dtype and shape."""
    import torch

    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} vs {list(b)}"
        for k in a:
            assert_same_state(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        x, y = (t.detach().cpu().contiguous().reshape(-1).view(torch.uint8) for t in (a, b))
        assert torch.equal(x, y), f"{where}: tensors differ"
    elif isinstance(a, np.ndarray):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        if a.dtype == object:
            assert_same_state(a.tolist(), b.tolist(), where)
        else:
            assert a.tobytes() == b.tobytes(), f"{where}: arrays differ"
    elif isinstance(a, float) and a != a:
        assert b != b, where  # NaN
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def assert_same_checkpoint(one: Path, other: Path) -> None:
    """The two runs' ``checkpoints/latest.pt`` hold the same config, learner (weights,
    optimizer, EMA, memory, detector, its generators), world (the env's RNG included) and
    bookkeeping, bit for bit. Left out: the wall-clock seconds (``extra.elapsed``) and the
    process-global RNG states (``rng``: torch's, numpy's and Python's default generators, which
    each process seeds from the OS's entropy and nothing in a run draws from)."""
    import torch

    a, b = (torch.load(r / "checkpoints" / "latest.pt", weights_only=False) for r in (one, other))
    for p in (a, b):
        p["extra"].pop("elapsed")
        p.pop("rng")
    assert_same_state(a, b)


def assert_same_run(one: Path, other: Path) -> dict[str, np.ndarray]:
    """``other`` (say, stopped and resumed) recorded exactly what ``one`` (done in one go) did:
    run.zarr's metrics and evaluations, the summary's numbers and the final checkpoint."""
    a = assert_same_store(one, other, "metrics", "eval")
    assert_same_summary(one, other)
    assert_same_checkpoint(one, other)
    return a


def main_error(main, argv: list[str], prog: str) -> subprocess.CompletedProcess[str]:
    """``runners.cli.run_main(main, prog)`` in this process on the command line ``argv``, as
    ``python -m`` runs it: its exit status and what it wrote to stderr, as ``cli`` returns them
    (for ``assert_one_line_error``)."""
    import contextlib
    import io

    from runners.cli import run_main

    err, saved = io.StringIO(), sys.argv
    sys.argv = [prog, *argv]
    try:
        with contextlib.redirect_stderr(err):
            run_main(main, prog)
    except SystemExit as exit_:
        return subprocess.CompletedProcess([prog, *argv], exit_.code, "", err.getvalue())
    finally:
        sys.argv = saved
    raise AssertionError(f"{prog} {' '.join(argv)}: run_main returned without exiting")


# -- a run's TensorBoard events ----------------------------------------------------------------


def read_events(run: Path) -> Any:
    """``run``'s TensorBoard events as TensorBoard reads them (its ``EventAccumulator``, every
    event kept: no sampling), what an earlier session wrote after a resume's step purged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return acc


def event_scalars(acc: Any, tag: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps int64, values float32) of one scalar tag, in the order written."""
    events = acc.Scalars(tag)
    return (np.asarray([e.step for e in events], np.int64),
            np.asarray([e.value for e in events], np.float32))


def assert_events_are_the_store(run: Path) -> Any:
    """``run``'s events hold every metric of its run.zarr at step row + 1, each step once, and
    every evaluation's D_shift^n, D_base and spreads at its step, the same float32 numbers (a
    value that is not finite is not written). Returns the events."""
    acc, store = read_events(run), store_arrays(run, "metrics", "eval")
    rows = store["metrics/step"]
    assert np.array_equal(rows, np.arange(len(rows)))
    for key, values in store.items():
        if not key.startswith("metrics/") or key == "metrics/step":
            continue
        finite = np.isfinite(values)
        if not finite.any():  # (the floor head's modulation): no event at all
            assert key.removeprefix("metrics/") not in acc.Tags()["scalars"], key
            continue
        steps, got = event_scalars(acc, key.removeprefix("metrics/"))
        np.testing.assert_array_equal(steps, rows[finite] + 1, err_msg=key, strict=True)
        np.testing.assert_array_equal(got, values[finite], err_msg=key, strict=True)
    ns = zarr.open_group(str(run / "run.zarr"), mode="r")["eval"].attrs["ns"]
    columns = {f"D_shift^{n}": store["eval/d_shift"][:, j] for j, n in enumerate(ns)}
    columns |= {"D_base": store["eval/d_base"], "sigma_embed": store["eval/sigma_embed"]}
    for name, values in columns.items():
        steps, got = event_scalars(acc, f"eval/{name}")
        np.testing.assert_array_equal(steps, store["eval/step"], err_msg=name, strict=True)
        np.testing.assert_array_equal(got, values, err_msg=name, strict=True)
    return acc
