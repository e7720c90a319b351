"""Unwritable or full output locations: one line naming the place and exit status 2, never a
traceback; a disk that fills mid-run leaves the last good checkpoint intact and resumable."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from cli_helpers import TINY, cli

from runners.cli import CliError, ensure_output_dir, run_main

NOWHERE = "/proc/epm-jepa-test"  # not writable, even as root


def test_ensure_output_dir(tmp_path: Path) -> None:
    assert ensure_output_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert list((tmp_path / "a" / "b").iterdir()) == []  # the probe file is gone
    with pytest.raises(CliError, match=f"cannot write --out {NOWHERE}"):
        ensure_output_dir(NOWHERE, "--out")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CliError, match="cannot write"):
        ensure_output_dir(tmp_path / "file" / "sub")


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("make_dataset", ["--out", f"{NOWHERE}/d.zarr", "--base-sequences", "20",
                          "--shift-sequences", "10"]),
        ("make_dataset", ["--out", "/proc/d.zarr", "--base-sequences", "20",
                          "--shift-sequences", "10"]),
        ("train_online", [*TINY, "--steps", "5", "--out", NOWHERE]),
        ("evaluate", ["{checkpoint}", "--out", f"{NOWHERE}/curve.json"]),
        ("evaluate", ["{checkpoint}", "--out", "{tmp}/c.json", "--predictions", f"{NOWHERE}/p.png"]),
        ("study", ["sweep", "--grid", "seed=1", "--out", NOWHERE, "--preset", "tiny", "--steps", "5"]),
        ("study", ["paper", "--out", NOWHERE, "--preset", "tiny", "--steps", "5"]),
        # with datasets that exist (any path: unread), so what fails is the output folder
        ("study", ["paper", "--out", NOWHERE, "--report-only", "--data", "{checkpoint}"]),
        ("study", ["worlds", "--out", NOWHERE, "--preset", "tiny", "--steps", "5", "--seeds", "1"]),
        ("visualize", ["--headless", "--steps", "3", "--preset", "tiny", "--out", NOWHERE]),
        ("visualize", ["--headless", "--steps", "3", "--preset", "tiny", "--out", "{tmp}",
                       "--screenshot", f"{NOWHERE}/final.png"]),
        ("visualize", ["--headless", "--steps", "3", "--preset", "tiny", "--out", "{tmp}",
                       "--video", f"{NOWHERE}/frames"]),
    ],
)
def test_unwritable_output_is_one_line(tmp_path: Path, module: str, args: list[str]) -> None:
    checkpoint = tmp_path / "some.pt"  # evaluate checks its output before reading the file
    checkpoint.write_bytes(b"unread")
    args = [a.format(checkpoint=checkpoint, tmp=tmp_path / "out") for a in args]
    res = cli(module, *args)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "/proc" in lines[0] and "error" in lines[0], res.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# -- a disk that fills mid-run (in process: the failure is injected) ---------------------------
def train(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          *argv: str) -> tuple[int, str]:
    """``python -m runners.train_online ARGV`` in this process: (exit status, stderr)."""
    from runners import train_online

    monkeypatch.setattr(sys, "argv", ["train_online", *argv])
    with pytest.raises(SystemExit) as info:
        run_main(train_online.main, "train_online")
    return int(info.value.code or 0), capsys.readouterr().err


def full() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")  # as write() raises it: no file name


def latest_step(run: Path) -> int:
    from agent import load_checkpoint

    return int(load_checkpoint(run / "checkpoints" / "latest.pt")["run_step"])


def one_line(err: str, names: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert names in lines[0] and "No space left on device" in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def saves(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count torch.save calls (checkpoints); ``saves[0]`` is the count so far."""
    count = [0]
    real = torch.save

    def counting(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "save", counting)
    return count


def test_full_disk_at_a_checkpoint(tmp_path, monkeypatch, capsys, saves) -> None:
    real = torch.save  # the counting one

    def fills_after_two(*args, **kwargs):
        if saves[0] >= 2:  # best.pt and latest.pt at step 20 written, then the disk is full
            raise full()
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "save", fills_after_two)
    code, err = train(monkeypatch, capsys, *TINY, "--steps", "40", "--switch", "30:0.5",
                      "--out", str(tmp_path), "--name", "run")
    assert code == 2
    line = one_line(err, str(tmp_path / "run" / "checkpoints"))
    assert latest_step(tmp_path / "run") == 20  # the last good checkpoint, intact
    assert "latest.pt (step 20) is intact" in line and "--resume" in line, line
    assert not list((tmp_path / "run" / "checkpoints").glob("*.tmp"))


def test_full_disk_in_run_zarr_then_resume(tmp_path, monkeypatch, capsys, saves) -> None:
    import zarr.storage._local as local

    real_put = local._put

    def put(*args, **kwargs):
        if saves[0] >= 2:  # after the checkpoint at step 20
            raise full()
        return real_put(*args, **kwargs)

    monkeypatch.setattr(local, "_put", put)
    run = tmp_path / "run"
    code, err = train(monkeypatch, capsys, *TINY, "--steps", "40", "--switch", "30:0.5",
                      "--out", str(tmp_path), "--name", "run")
    assert code == 2
    one_line(err, str(run / "run.zarr"))
    assert latest_step(run) == 20
    # Space again: the run continues from its checkpoint, one metrics row per step, no gap.
    monkeypatch.setattr(local, "_put", real_put)
    code, err = train(monkeypatch, capsys, "--resume", str(run))
    assert code == 0, err
    steps = zarr.open_group(str(run / "run.zarr"), mode="r")["metrics/step"][:]
    np.testing.assert_array_equal(steps, np.arange(40))
    assert latest_step(run) == 40


def test_full_disk_at_the_figures(tmp_path, monkeypatch, capsys) -> None:
    from matplotlib.figure import Figure

    def savefig(self, *args, **kwargs):
        raise full()

    monkeypatch.setattr(Figure, "savefig", savefig)
    code, err = train(monkeypatch, capsys, *TINY, "--steps", "20", "--no-switch",
                      "--out", str(tmp_path), "--name", "run")
    assert code == 2
    assert ".png" in one_line(err, str(tmp_path / "run" / "figures"))
    assert latest_step(tmp_path / "run") == 20


def test_full_disk_at_the_summary(tmp_path, monkeypatch, capsys) -> None:
    write_text = Path.write_text

    def fails_for_summary(self, *args, **kwargs):
        if self.name == "summary.json":
            raise full()
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", fails_for_summary)
    code, err = train(monkeypatch, capsys, *TINY, "--steps", "20", "--no-switch",
                      "--out", str(tmp_path), "--name", "run")
    assert code == 2
    one_line(err, str(tmp_path / "run" / "summary.json"))
    assert latest_step(tmp_path / "run") == 20
