"""Damaged run files: one line naming the file and exit status 2, never a traceback or a number.

One small real run is made once; each test damages a copy of it (a truncated, random, empty or
other-track checkpoint; garbage ``zarr.json``; a deleted chunk; a garbage ``config.json``) and
runs one of the five readers on it: ``train_online --resume``, ``evaluate``, ``visualize --from``,
``visualize --resume`` (the run as a session's track) and the report (``study paper
--report-only``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import TINY, cli


@pytest.fixture(scope="module")
def made_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("made")
    res = cli("train_online", *TINY, "--out", str(out), "--name", "run", "--steps", "40",
              "--switch", "30:0.5")
    assert res.returncode == 0, res.stderr
    return out / "run"


@pytest.fixture
def run(made_run: Path, tmp_path: Path) -> Path:
    """A fresh copy of the made run (each test damages its own)."""
    return Path(shutil.copytree(made_run, tmp_path / "run"))


def other_track_checkpoint(path: Path) -> None:
    """A valid checkpoint, but of track A (the run is track C)."""
    from agent import AgentConfig, Learner, save_checkpoint

    save_checkpoint(path, Learner(AgentConfig.of_size("tiny", track="A")))


def damage(run: Path, kind: str) -> Path:
    """Damage one file of ``run``; returns the file a good message must name."""
    target, how = kind.split(":")
    path = {
        "latest": run / "checkpoints" / "latest.pt",
        "best": run / "checkpoints" / "best.pt",
        "eval_meta": run / "run.zarr" / "eval" / "d_shift" / "zarr.json",
        "root_meta": run / "run.zarr" / "zarr.json",
        "eval_chunk": run / "run.zarr" / "eval" / "d_shift" / "c" / "0" / "0",
        "step_chunk": run / "run.zarr" / "metrics" / "step" / "c" / "0",
        "config": run / "config.json",
    }[target]
    assert path.is_file(), path
    data = path.read_bytes()
    if how == "half":
        path.write_bytes(data[: len(data) // 2])
    elif how == "random":
        path.write_bytes(os.urandom(len(data)))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_text("garbage{")
    elif how == "deleted":
        path.unlink()
    elif how == "other_track":
        other_track_checkpoint(path)
    else:  # pragma: no cover
        raise ValueError(kind)
    return path


def assert_one_line(res: subprocess.CompletedProcess[str], names: Path) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert str(names) in lines[0], lines[0]


@pytest.mark.parametrize("kind", [
    "latest:half", "latest:random", "latest:empty", "latest:other_track",
    "eval_meta:garbage", "root_meta:garbage", "eval_chunk:deleted", "step_chunk:deleted",
])
def test_resume(run: Path, kind: str) -> None:
    bad = damage(run, kind)
    res = cli("train_online", "--resume", str(run), "--steps", "60")
    assert_one_line(res, bad)


@pytest.mark.parametrize("kind", ["latest:half", "latest:random", "latest:empty"])
def test_evaluate(run: Path, kind: str) -> None:
    bad = damage(run, kind)
    res = cli("evaluate", str(run), "--n", "0")
    assert_one_line(res, bad)


@pytest.mark.parametrize("kind", ["best:half", "best:random", "best:other_track"])
def test_visualize_from(run: Path, tmp_path: Path, kind: str) -> None:
    bad = damage(run, kind)
    res = cli("visualize", "--protocol", "paper", "--headless", "--from", str(run),
              "--steps", "3", "--out", str(tmp_path / "viz"))
    assert_one_line(res, bad)
    assert list((tmp_path / "viz").iterdir()) == []  # no half-made session folder left


@pytest.mark.parametrize("kind", [
    "latest:half", "latest:other_track", "step_chunk:deleted", "config:garbage", "latest:no_view",
])
def test_visualize_resume(run: Path, tmp_path: Path, kind: str) -> None:
    """A session (the run as its track C) with a damaged run folder, or whose checkpoints keep
    no view of it (a session of an earlier version, here a train_online run's): one line."""
    session = tmp_path / "session"
    session.mkdir()
    track = Path(shutil.move(run, session / "C"))
    latest = track / "checkpoints" / "latest.pt"
    bad = latest if kind == "latest:no_view" else damage(track, kind)
    res = cli("visualize", "--headless", "--resume", str(session), "--steps", "60")
    assert_one_line(res, bad)
    if kind == "latest:no_view":
        assert "keeps no view of a session" in res.stderr
        res = cli("visualize", "--headless", "--resume", str(track), "--steps", "60")
        assert_one_line(res, track)  # a run folder itself is no session
        assert "a run folder, not a session" in res.stderr


@pytest.mark.parametrize("kind", [
    "eval_meta:garbage", "root_meta:garbage", "eval_chunk:deleted", "config:garbage",
])
def test_report(made_run: Path, tmp_path: Path, kind: str) -> None:
    out = tmp_path / "repro"
    run = Path(shutil.copytree(made_run, out / "runs" / "tiny-40" / "track-C_seed-0"))
    (tmp_path / "data.zarr").mkdir()
    report_only = ["--report-only", "--data", str(tmp_path / "data.zarr"), "--out", str(out),
                   "--steps", "40", "--preset", "tiny", "--tracks", "C", "--seeds", "0",
                   "--no-analysis"]
    ok = cli("study", "paper", *report_only)
    assert ok.returncode == 0, ok.stderr
    bad = damage(run, kind)
    res = cli("study", "paper", *report_only)
    assert_one_line(res, bad)


def test_report_reads_a_missing_store_as_no_evaluations(made_run: Path, tmp_path: Path) -> None:
    """A run without run.zarr (it never recorded) has no evaluations: not an error."""
    from runners.studies import runs

    run = Path(shutil.copytree(made_run, tmp_path / "run"))
    assert runs.load_run(run).has_evals
    shutil.rmtree(run / "run.zarr")
    rec = runs.load_run(run)
    assert rec is not None and not rec.has_evals


# -- the recorder alone (in process, fast) ------------------------------------------------------
def small_store(root: Path) -> Path:
    """A run.zarr with what zarr legitimately leaves unwritten: all-zero eval/excluded and
    frames/gravity chunks, a late metric whose early rows are NaN."""
    import numpy as np

    from runners.online.recorder import Recorder

    rec = Recorder(root)
    rec.append_metrics(np.arange(10), {"loss/total": np.random.rand(10)})
    rec.append_metrics(np.arange(10, 20), {"loss/total": np.random.rand(10), "late": np.ones(10)})
    for step in (10, 20):
        rec.append_eval(step, [0, 50], [0.9, 0.8], [[0.9] * 3, [0.8] * 3], 0.7, [0.7] * 3, 0.5,
                        0, [5, 10, 20], sigma_z=0.6, sigma_target=0.6)
    rec.append_frames(0, np.ones((2, 1, 64, 64), np.uint8), gravity=np.zeros(2))
    return root / "run.zarr"


@pytest.mark.parametrize(("kind", "names"), [
    ("eval/d_shift/zarr.json:garbage", "eval/d_shift/zarr.json"),
    ("zarr.json:garbage", "run.zarr/zarr.json"),
    ("eval/sigma_embed/zarr.json:deleted", "eval/sigma_embed/zarr.json"),
    ("metrics/loss/total/zarr.json:deleted", "metrics/loss/total/zarr.json"),
    ("eval/d_base/c/0:deleted", "eval/d_base/c/0"),
    ("metrics/step/c/0:deleted", "metrics/step/c/0"),
    ("metrics/loss/total/c/0:random", "metrics/loss/total/c/0"),
    ("eval/d_shift_per_h/c/0/0/0:half", "eval/d_shift_per_h/c/0/0/0"),
])
def test_recorder_names_the_damaged_file(tmp_path: Path, kind: str, names: str) -> None:
    from runners.online.recorder import DamagedStoreError, Recorder

    store = small_store(tmp_path)
    rel, how = kind.split(":")
    path = store / rel
    data = path.read_bytes()
    if how == "garbage":
        path.write_text("garbage{")
    elif how == "deleted":
        path.unlink()
    elif how == "random":
        path.write_bytes(os.urandom(len(data)))
    else:
        path.write_bytes(data[: len(data) // 2])
    for read_only in (True, False):
        with pytest.raises(DamagedStoreError, match=names):
            rec = Recorder(tmp_path, read_only=read_only, create=False)
            rec.read_metrics()
            rec.read_eval()
            if not read_only:
                rec.truncate(20)


def test_recorder_reads_what_zarr_leaves_unwritten(tmp_path: Path) -> None:
    """Chunks equal to the fill value are never written: their absence is not damage."""
    import numpy as np

    from runners.online.recorder import Recorder

    store = small_store(tmp_path)
    assert not (store / "eval" / "excluded" / "c").exists()
    assert not (store / "frames" / "gravity" / "c").exists()
    rec = Recorder(tmp_path, read_only=True)
    m, ev = rec.read_metrics(), rec.read_eval()
    assert np.isnan(m["late"][:10]).all() and (m["late"][10:] == 1).all()
    assert list(ev["excluded"]) == [0, 0] and list(ev["step"]) == [10, 20]
    Recorder(tmp_path).truncate(15)
    assert list(Recorder(tmp_path, read_only=True).read_eval()["step"]) == [10]


def test_a_full_disk_names_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import numpy as np
    import zarr.storage._local as local

    from runners.online.recorder import Recorder

    rec = Recorder(tmp_path)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(local, "_put", full)
    with pytest.raises(OSError, match="No space left") as info:
        rec.append_metrics(np.arange(3), {"loss/total": np.ones(3)})
    assert info.value.filename == str(tmp_path / "run.zarr")
