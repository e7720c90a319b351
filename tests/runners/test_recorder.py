"""The zarr recorder: blocks, plain-zarr readability, truncation for an exact resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from runners.online.recorder import Recorder, RecorderError


def fill(rec: Recorder, start: int, n: int) -> None:
    steps = np.arange(start, start + n)
    rec.append_metrics(steps, {"loss/total": steps * 0.5, "memory/boundary": steps % 2})


def test_blocks_are_one_row_per_step_and_plain_zarr_reads_them(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    fill(rec, 0, 10)
    fill(rec, 10, 5)
    root = zarr.open_group(str(tmp_path / "run.zarr"), mode="r")
    np.testing.assert_array_equal(root["metrics/step"][:], np.arange(15))
    np.testing.assert_allclose(root["metrics/loss/total"][:], np.arange(15) * 0.5)
    with pytest.raises(RecorderError, match="expected step 15"):
        fill(rec, 20, 3)  # a gap is refused


def test_late_metric_starts_with_nan(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    fill(rec, 0, 4)
    rec.append_metrics(np.arange(4, 6), {"loss/total": np.ones(2), "new/x": np.ones(2)})
    m = rec.read_metrics()
    assert np.isnan(m["new/x"][:4]).all() and (m["new/x"][4:] == 1).all()
    assert np.isnan(m["memory/boundary"][4:]).all()


def test_truncate_keeps_what_a_checkpoint_saw(tmp_path: Path) -> None:
    rec = Recorder(tmp_path)
    fill(rec, 0, 30)
    for s in (10, 20, 30):
        rec.append_eval(s, [0, 50], [1.0, 0.9], [[1, 1, 1], [0.9, 0.9, 0.9]], 0.5,
                        [0.5, 0.5, 0.5], 0.3, 0, [5, 10, 20])
    for s in (0, 10, 20):
        rec.append_frames(s, np.zeros((4, 1, 64, 64), np.uint8), np.zeros((4, 2, 2)),
                          np.zeros((4, 2, 2)), 0.0)
    # A write interrupted between columns: one metric is longer than the step column.
    rec.metrics["loss/total"].append(np.ones(3, np.float32))
    rec.truncate(20)
    again = Recorder(tmp_path, create=False)
    m = again.read_metrics()
    assert again.n_steps == 20 and all(len(v) == 20 for v in m.values())
    assert zarr.open_group(str(tmp_path / "run.zarr"))["metrics/loss/total"].shape == (20,)
    np.testing.assert_array_equal(again.read_eval()["step"], [10, 20])
    assert again.n_frames == 2
    fill(again, 20, 5)  # continues without a gap
    np.testing.assert_array_equal(again.read_metrics()["step"], np.arange(25))
    with pytest.raises(RecorderError):
        again.truncate(100)
