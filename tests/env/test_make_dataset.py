"""`python -m runners.make_dataset`: a tiny store end to end, and one clear line per bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import env
from runners import make_dataset
from runners.cli import run_main

REPO = Path(__file__).resolve().parents[2]


def _cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["make_dataset", *args])
    with pytest.raises(SystemExit) as info:
        run_main(make_dataset.main, make_dataset.PROG)
    return int(info.value.code), capsys.readouterr().err


def test_small_dataset_end_to_end(tmp_path, monkeypatch, capsys):
    out = tmp_path / "small.zarr"
    args = ["--out", str(out), "--base-sequences", "20", "--shift-sequences", "10", "--seed", "5"]
    code, err = _cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "wrote" in err and "30 sequences" in err
    ds = env.open_dataset(out)
    assert ds.sizes() == {
        "base": {"train": 16, "val": 2, "test": 2},
        "shift": {"train": 8, "val": 1, "test": 1},
    }
    assert ds.attrs["seed"] == 5 and ds.split("shift", "val").gravity == 0.5
    expected = env.generate_split("shift", "train", ds.config)
    np.testing.assert_array_equal(ds.split("shift", "train").load()["frames"], expected["frames"])
    # refuses to overwrite without --overwrite, one line, exit 2
    code, err = _cli(monkeypatch, capsys, *args)
    assert code == 2 and "already exists" in err and "--overwrite" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    code, err = _cli(monkeypatch, capsys, *args, "--overwrite", "--shift-gravity", "0.25")
    assert code == 0, err
    assert env.open_dataset(out).split("shift", "test").gravity == 0.25


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--base-sequences", "2"], "base_sequences must be an integer >= 3, got 2"),
        (["--shift-sequences", "0"], "shift_sequences must be an integer >= 3, got 0"),
        (["--shift-gravity", "nan"], "shift world: gravity must be finite, got nan"),
        (["--seed", "-3"], "seed must be a non-negative integer, got -3"),
        (["--n-digits", "0"], "n_digits must be a positive integer, got 0"),
        (["--digits", "/nonexistent/mnist"], "/nonexistent/mnist: not found"),
    ],
)
def test_bad_input_is_one_line(tmp_path, monkeypatch, capsys, extra, match):
    code, err = _cli(monkeypatch, capsys, "--out", str(tmp_path / "x.zarr"), *extra)
    assert code == 2
    assert match in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "x.zarr").exists()


def test_missing_parent_folder(tmp_path, monkeypatch, capsys):
    code, err = _cli(
        monkeypatch,
        capsys,
        "--out",
        str(tmp_path / "no" / "x.zarr"),
        "--base-sequences",
        "3",
        "--shift-sequences",
        "3",
    )
    assert code == 2 and "does not exist" in err


def test_module_runs_as_script(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "runners.make_dataset", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "--shift-gravity" in proc.stdout
