"""The bounds trained beside the chosen track or after it, jobs of the launcher
(runners.online.beside)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runners.cli import CliError
from runners.online import beside, job
from runners.online.command import build_config
from runners.online.rundir import RunFolder, StopRequest
from tests.runners.cli_helpers import ROOT, TINY_WORLDS, assert_same_run, cli, store_arrays

TINY = [a for a in TINY_WORLDS if a != "--no-bounds"]
#: The runs of this module: the worlds protocol's tiny run with its floor and ceiling.
STEPS = ["--steps", "40"]
SUBS = ("", "floor", "ceiling")  # the main run's folder and its bounds'


@pytest.fixture(scope="module")
def beside_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's run done in one go by the command, its bounds beside it (--workers 3):
    what the run with its bounds after it, or stopped and resumed, must record."""
    out = tmp_path_factory.mktemp("beside")
    res = cli("train_online", *TINY, *STEPS, "--out", str(out), "--name", "w3", "--workers", "3")
    assert res.returncode == 0, res.stderr
    assert "train beside this run, each in a process of its own" in res.stdout
    return out / "w3"


def assert_same_runs(one: Path, other: Path) -> None:
    """The main run and each bound record the same metrics, evaluations, summary numbers and
    final checkpoint in ``one`` and ``other``, bit for bit."""
    for sub in SUBS:
        assert_same_run(one / sub, other / sub)


def test_bounds_beside_write_what_bounds_after_it_write(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    beside_run: Path,
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
    cfg = build_config([*TINY, *STEPS, "--out", str(tmp_path), "--name", "w1", "--workers", "1"])
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
    one, three = tmp_path / "w1", beside_run
    assert "metrics/loss/total" in store_arrays(one / "floor")
    assert_same_runs(one, three)  # the main summary's bounds (floor, memories, ceiling) too
    for root in (one, three):  # each bound's output, beside its folder
        for sub in ("floor", "ceiling"):
            assert f"run folder {root / sub} " in (root / f"{sub}.log").read_text()


def test_a_stop_reaches_the_bound_processes_and_resume_finishes_all(
    tmp_path: Path, beside_run: Path
) -> None:
    """Each bound stopped after its first checkpoint (step 20 of 40): the first to write it by
    a PAUSE file in its own folder, the other by one in the main folder, which the main process
    passes on (it stops the main run too, unless its head start has taken it to its end).
    ``--resume`` finishes them all, each recording exactly what the run done in one go
    records."""
    cfg = build_config([*TINY, *STEPS, "--workers", "3"])
    folder = RunFolder(tmp_path / "run")
    folder.make()
    deadline = time.monotonic() + 300
    bounds = {sub: RunFolder(folder.root / sub) for sub in SUBS[1:]}
    first: list[str] = []

    def stop_each_after_its_first_checkpoint() -> None:
        while time.monotonic() < deadline:
            ready = [sub for sub, bound in bounds.items() if bound.latest.exists()]
            if ready and not first:
                first.append(ready[0])
                bounds[ready[0]].pause.write_text("")  # the first there stops alone
            if len(ready) == len(bounds):
                folder.pause.write_text("")  # every process reads the main folder's PAUSE
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=stop_each_after_its_first_checkpoint, daemon=True)
    watcher.start()
    with folder:
        assert job.train(cfg, folder, StopRequest(), resume=False) == 0
    watcher.join()
    assert folder.pause.exists(), "the bounds did not both write a checkpoint"
    assert not folder.is_finished()
    assert beside.pending(folder) == ["floor", "ceiling"]
    done = {sub: len(store_arrays(folder.root / sub, "metrics")["metrics/step"]) for sub in SUBS}
    assert all(RunFolder(folder.root / sub).state() == "interrupted" for sub in SUBS)
    assert done[""] >= 20 and all(20 <= done[sub] < 40 for sub in bounds), done
    (other,) = set(bounds) - set(first)
    assert "stopped by SIGTERM" in (folder.root / f"{other}.log").read_text()  # passed on
    folder.pause.unlink()
    with folder:
        assert job.train(cfg, folder, StopRequest(), resume=True) == 0
    assert folder.is_finished() and beside.pending(folder) == []
    assert not any(bound.pause.exists() for bound in bounds.values())  # removed on resuming
    s = folder.read_summary()
    assert s is not None and s["bounds"]["floor"]["run"] == str(folder.root / "floor")
    assert_same_runs(beside_run, folder.root)


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
