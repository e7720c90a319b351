"""The bounds trained beside the chosen track or after it, jobs of the launcher
(runners.online.beside)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from runners.cli import CliError
from runners.online import beside, job
from runners.online.command import build_config
from runners.online.rundir import RunFolder, StopRequest
from tests.runners.cli_helpers import ROOT, TINY_WORLDS, cli

TINY = [a for a in TINY_WORLDS if a != "--no-bounds"]


def _arrays(group: zarr.Group, prefix: str = "") -> dict[str, np.ndarray]:
    out = {}
    for key, member in group.members():
        if isinstance(member, zarr.Group):
            out.update(_arrays(member, f"{prefix}{key}/"))
        else:
            out[prefix + key] = member[...]
    return out


def test_bounds_beside_write_what_bounds_after_it_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--workers 3 (the floor and the ceiling each in a process beside the chosen track) and
    --workers 1 (one after another, after it): the same metrics, evaluations and reports, bit
    for bit. After it, the bounds' summaries come first, then the main run's, once, with its
    bounds: a main folder with a summary.json is finished (``RunFolder.is_finished``)."""
    written: list[tuple[str, bool]] = []
    real = job.write_summary

    def spy(root: Path, s: dict) -> None:
        written.append((Path(root).name, "bounds" in s))
        real(root, s)

    monkeypatch.setattr(job, "write_summary", spy)
    cfg = build_config([*TINY, "--steps", "40", "--out", str(tmp_path), "--name", "w1",
                        "--workers", "1"])  # fmt: skip
    folder = RunFolder(tmp_path / "w1")
    folder.make()
    with folder:
        assert job.train(cfg, folder, StopRequest(), resume=False) == 0
    assert "train beside this run" not in capsys.readouterr().out
    assert written == [("w1", True)]  # the bounds' own are written by their processes, before
    main = folder.root / "summary.json"
    assert all((folder.root / sub / "summary.json").stat().st_mtime_ns <= main.stat().st_mtime_ns
               for sub in ("floor", "ceiling"))  # fmt: skip
    assert folder.is_finished()
    res = cli("train_online", *TINY, "--steps", "40", "--out", str(tmp_path), "--name", "w3",
              "--workers", "3")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "train beside this run, each in a process of its own" in res.stdout
    one, three = tmp_path / "w1", tmp_path / "w3"
    for sub in ("floor", "ceiling"):
        a = _arrays(zarr.open_group(str(one / sub / "run.zarr"), mode="r"))
        b = _arrays(zarr.open_group(str(three / sub / "run.zarr"), mode="r"))
        assert a.keys() == b.keys() and "metrics/loss/total" in a
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        s1, s3 = (json.loads((r / sub / "summary.json").read_text()) for r in (one, three))
        assert s1["held_out"] == s3["held_out"] and s1["adaptation_curve"] == s3["adaptation_curve"]
        for root in (one, three):  # its output, beside its folder
            assert f"run folder {root / sub} " in (root / f"{sub}.log").read_text()
    b1, b3 = (json.loads((r / "summary.json").read_text())["bounds"] for r in (one, three))
    assert b1["memories"] == b3["memories"] and b1["floor"]["d"] == b3["floor"]["d"]


def test_a_stop_reaches_the_bound_processes_and_resume_finishes_all(tmp_path: Path) -> None:
    cfg = build_config([*TINY, "--steps", "30", "--workers", "3"])
    folder = RunFolder(tmp_path / "run")
    folder.make()
    folder.pause.write_text("")  # every process reads the main folder's PAUSE file
    with folder:
        assert job.train(cfg, folder, StopRequest(), resume=False) == 0
    assert not folder.is_finished()
    assert beside.pending(folder) == ["floor", "ceiling"]
    folder.pause.unlink()
    with folder:
        assert job.train(cfg, folder, StopRequest(), resume=True) == 0
    assert folder.is_finished() and beside.pending(folder) == []
    s = folder.read_summary()
    assert s is not None and s["bounds"]["floor"]["run"] == str(folder.root / "floor")


def test_bounds_stop_when_their_starter_is_killed(tmp_path: Path) -> None:
    """A killed main process leaves no bound training on: each stops, checkpointed."""
    env = {**os.environ, "TORCH_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "runners.train_online", *TINY, "--steps", "100000", "--no-switch",
         "--out", str(tmp_path), "--name", "run", "--workers", "3"],
        cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    root, deadline = tmp_path / "run", time.monotonic() + 120
    while not all(RunFolder(root / sub).latest.exists() for sub in ("floor", "ceiling")):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    stopped = "stopped by the end of the process that started it"
    while any(stopped not in (root / f"{s}.log").read_text() for s in ("floor", "ceiling")):
        assert time.monotonic() < deadline + 120
        time.sleep(0.2)
    time.sleep(1)  # the last lines written, the process exits
    for sub in ("floor", "ceiling"):
        assert RunFolder(root / sub).state() == "interrupted"


def test_a_failed_bound_process_is_one_clear_error(tmp_path: Path) -> None:
    cfg = build_config([*TINY, "--steps", "20", "--workers", "2"])
    folder = RunFolder(tmp_path / "run")
    folder.make()
    floor = RunFolder(folder.root / "floor")
    floor.make()
    floor.latest.write_bytes(b"not a checkpoint")  # an interrupted floor that cannot resume
    with folder, pytest.raises(CliError, match=r"the floor run failed \(exit 2\)"
                                               r": .*error: .*\(see .*run/floor.log\)"):
        job.train(cfg, folder, StopRequest(), resume=False)


def test_workers_default_to_all_three_where_two_cores_are(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = build_config(["--preset", "tiny"])
    monkeypatch.setattr(beside, "usable_cores", lambda: 2)
    assert beside.workers_for(cfg) == 3
    monkeypatch.setattr(beside, "usable_cores", lambda: 1)
    assert beside.workers_for(cfg) == 1
    assert beside.workers_for(build_config(["--preset", "tiny", "--workers", "2"])) == 2
    with pytest.raises(CliError, match="workers must be >= 0"):
        build_config(["--preset", "tiny", "--workers", "-1"])
