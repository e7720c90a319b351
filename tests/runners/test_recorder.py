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
                        [0.5, 0.5, 0.5], 0.3, 0, [5, 10, 20], sigma_z=0.6, sigma_target=0.7)
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


def test_the_spreads_round_trip_and_resume_in_step(tmp_path: Path) -> None:
    """sigma_embed, sigma_z and sigma_target: written per evaluation, read back by
    ``EvalRecord.rows``, cut with the rest on truncate, continued without gap or duplicate."""
    from runners.online.evaluation import EvalRecord

    def evaluation(rec: Recorder, step: int, i: int) -> None:
        rec.append_eval(step, [0, 50], [1.0, 0.9], [[1, 1, 1], [0.9, 0.9, 0.9]], 0.5,
                        [0.5, 0.5, 0.5], 0.1 + i, 0, [5, 10, 20], sigma_z=0.2 + i,
                        sigma_target=0.3 + i)  # fmt: skip

    rec = Recorder(tmp_path)
    fill(rec, 0, 30)
    for i, step in enumerate((10, 20, 30)):
        evaluation(rec, step, i)
    rec.truncate(20)  # a resume from step 20: the evaluation at 30 goes, and is done again
    again = Recorder(tmp_path, create=False)
    fill(again, 20, 10)
    for name in ("sigma_z", "sigma_target"):  # a write killed between columns: rows without a step
        again.eval[name].append(np.full(1, 9.0, np.float32))
    evaluation(again, 30, 5)
    ev = Recorder(tmp_path, read_only=True).read_eval()
    np.testing.assert_array_equal(ev["step"], [10, 20, 30])
    want = {"sigma_embed": [0.1, 1.1, 5.1], "sigma_z": [0.2, 1.2, 5.2],
            "sigma_target": [0.3, 1.3, 5.3]}  # fmt: skip
    for name, values in want.items():
        assert ev[name].dtype == np.float32 and ev[name].shape == (3,), name
        np.testing.assert_allclose(ev[name], values, rtol=1e-6, err_msg=name)
    rows = EvalRecord.rows(ev)
    for name, values in want.items():
        np.testing.assert_allclose([getattr(r, name) for r in rows], values, rtol=1e-6)


def test_the_latent_spreads_are_recorded_read_back_and_drawn(tmp_path: Path) -> None:
    """eval/sigma_z and eval/sigma_target round trip through run.zarr into the records, the
    summary's evaluation and the figure."""
    import matplotlib.pyplot as plt

    from runners.online.evaluation import EvalRecord
    from runners.online.plots import plot_sigma
    from runners.online.summary import _eval_at

    rec = Recorder(tmp_path)
    fill(rec, 0, 20)
    for step in (10, 20):
        rec.append_eval(step, [0, 50], [1.0, 0.9], [[1, 1, 1], [0.9, 0.9, 0.9]], 0.5,
                        [0.5, 0.5, 0.5], 0.4, 0, [5, 10, 20], sigma_z=0.6, sigma_target=0.7)
    ev = Recorder(tmp_path, read_only=True).read_eval()
    assert _eval_at(EvalRecord.rows(ev), 20, 50) == pytest.approx(
        {"step": 20, "d_base": 0.5, "d_shift_50": 0.9, "d_shift_0": 1.0, "sigma_embed": 0.4,
         "sigma_z": 0.6, "sigma_target": 0.7})  # fmt: skip
    fig, ax = plt.subplots()
    plot_sigma(ax, ev, {})
    assert [line.get_label().split(":")[0] for line in ax.get_lines()] == [
        "sigma_embed", "sigma_z", "sigma_target"]
    plt.close(fig)
