"""Command-line smoke tests of train_online and evaluate (tiny preset, subprocesses)."""

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
import torch
import zarr
from cli_helpers import ROOT, TINY, assert_one_line_error, assert_same_run, cli

PNG = b"\x89PNG\r\n\x1a\n"


def train(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("train_online", *TINY, "--out", str(out), *args)


def metrics(run: Path) -> dict[str, np.ndarray]:
    g = zarr.open_group(str(run / "run.zarr"), mode="r")["metrics"]
    names = g.attrs["names"]
    return {"step": g["step"][:], **{k: g[k][:] for k in names}}


def test_bf16_on_a_cpu_without_it_exits_2_with_one_line(tmp_path: Path) -> None:
    """oneDNN limited to AVX2 (``ONEDNN_MAX_CPU_ISA``, as on an AVX2-only x86-64 CPU): bf16 is
    refused in one line, exit 2, and no run folder is made."""
    done = cli("train_online", "--preset", "tiny", "--steps", "20", "--precision", "bf16",
               "--no-bounds", "--device", "cpu", "--out", str(tmp_path),
               env={"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert assert_one_line_error(done) == (
        "python -m runners.train_online: error: --precision bf16: this CPU has no bf16 kernels "
        "(torch's oneDNN finds neither AVX-512 nor AMX); use --precision fp32"
    )
    assert list(tmp_path.iterdir()) == []


def test_switch_resume_evaluate(tmp_path: Path) -> None:
    """A run with a switch, continued with --resume, equals the same run done in one go."""
    whole = train(
        tmp_path, "--steps", "70", "--switch", "30:0.5", "--name", "whole", "--record-frames", "10"
    )
    assert whole.returncode == 0, whole.stderr
    frames = zarr.open_group(str(tmp_path / "whole" / "run.zarr"), mode="r")["frames"]
    assert list(frames["step"][:]) == [0, 10, 20, 30, 40, 50, 60]
    assert frames["frames"].shape == (7, 8, 1, 64, 64) and frames["frames"][:].max() > 0
    assert frames["positions"].shape == (7, 8, 2, 2)  # ground truth: 8 streams x 2 digits
    assert list(frames["gravity"][:, 0]) == [0, 0, 0, 0.5, 0.5, 0.5, 0.5]
    part = train(tmp_path, "--steps", "40", "--switch", "30:0.5", "--name", "part")
    assert part.returncode == 0, part.stderr
    more = cli("train_online", "--resume", str(tmp_path / "part"), "--steps", "70")
    assert more.returncode == 0, more.stderr
    assert "resuming at step 40" in more.stdout

    b = metrics(tmp_path / "part")
    np.testing.assert_array_equal(b["step"], np.arange(70))  # one row per step, no gap
    assert all(len(v) == 70 for v in b.values())
    # The resumed run continues the uninterrupted one bit for bit, in another process: every
    # metric column and evaluation of run.zarr, every number of the summary but the wall-clock
    # ones, and the final checkpoint (weights, optimizer, memory, the world, their generators).
    assert_same_run(tmp_path / "whole", tmp_path / "part")
    # memory mode: after the switch the weights are frozen, the losses stop changing the model
    assert (b["physics/gravity"][:30] == 0).all() and (b["physics/gravity"][30:] == 0.5).all()

    run = tmp_path / "part"
    ev = zarr.open_group(str(run / "run.zarr"), mode="r")["eval"]
    assert list(ev["step"][:]) == [20, 30, 40, 60, 70]
    assert ev["d_shift"].shape == (5, len(ev.attrs["ns"]))
    assert ev["d_shift_per_h"].shape[2] == 3
    # The spreads of the predictions and of the input latents (online, EMA target): one row per
    # evaluation, none doubled or lost by the resume, those of the run done in one go.
    ev_whole = zarr.open_group(str(tmp_path / "whole" / "run.zarr"), mode="r")["eval"]
    rows = [list(ev_whole["step"][:]).index(s) for s in ev["step"][:]]
    for name in ("sigma_embed", "sigma_z", "sigma_target"):
        assert ev[name].shape == (5,) and (ev[name][:] > 0).all(), name
        np.testing.assert_array_equal(ev[name][:], ev_whole[name][:][rows], err_msg=name)
    assert "sigma_z/target" in whole.stdout and "sigma_z/target" in more.stdout
    for name in ("latest.pt", "best.pt", "latest.eval.json"):
        assert (run / "checkpoints" / name).is_file()
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["schedule"]["steps"] == 70 and cfg["schedule"]["switches"] == [{"step": 30, "physics": {"gravity": 0.5}}]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps_done"] == 70 and summary["end_of_base"]["step"] == 30
    for when, row in (("end_of_base", 1), ("end", 4)):  # evaluations at steps 30 and 70
        for name in ("sigma_embed", "sigma_z", "sigma_target"):
            assert summary[when][name] == pytest.approx(float(ev[name][row]), rel=1e-6), name
    assert [r["n"] for r in summary["adaptation_curve"]] == [0, 10, 25, 50, 100, 256]
    assert "D_shift^50" in (run / "summary.md").read_text()
    assert "D_base" in more.stdout and str(run) in more.stdout  # the printed table
    figures = sorted(p.name for p in (run / "figures").glob("*.png"))
    assert figures == ["lora_delta.png", "losses.png", "overview.png", "sigma_embed.png"]
    for p in (run / "figures").glob("*.png"):
        data = p.read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, p

    ev_run = cli("evaluate", str(run), "--n", "0", "10")
    assert ev_run.returncode == 0, ev_run.stderr
    assert "D_shift" in ev_run.stdout and "sigma_embed" in ev_run.stdout
    rep = json.loads((run / "checkpoints" / "latest.eval.json").read_text())
    assert [r["n"] for r in rep["curve"]] == [0, 10] and rep["step"] == 70
    assert all(len(r["d_shift_per_h"]) == 3 for r in rep["curve"])
    ev_best = cli("evaluate", str(run / "checkpoints" / "best.pt"), "--n", "0", "--target-reference")
    assert ev_best.returncode == 0, ev_best.stderr
    ref = json.loads((run / "checkpoints" / "best.eval.json").read_text())["target_reference"]
    assert ref["n"] == 50 and ref["latent_gap"] > 0  # the EMA lags the online encoder
    assert "reference: its EMA target latent" in ev_best.stdout
    assert "held_out" not in ref and "held-out worlds" not in ev_best.stdout  # the worlds' report
    for option in ("--world-probe", "--eval-worlds 3", "--predictions p.png"):  # the worlds' own
        refused = cli("evaluate", str(run), *option.split())
        assert_one_line_error(refused, f"{option.split()[0]}: a worlds-protocol run only",
                              module="evaluate")  # fmt: skip


def _start(out: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "MPLBACKEND": "Agg", "TORCH_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "runners.train_online", *TINY, "--out", str(out), *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    t0 = time.time()
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() - t0 < timeout, f"{path} did not appear"
        time.sleep(0.05)


#: The stopped runs' schedule (memory mode: the learner's schedule ends at the switch, so it
#: does not depend on --steps) and the step their resume runs to.
STOP_RUN, STOP_END = ("--switch", "10:0.5"), 60


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stopped runs' config done in one go to ``STOP_END``: what each must record."""
    out = tmp_path_factory.mktemp("uninterrupted")
    done = train(out, "--steps", str(STOP_END), *STOP_RUN, "--name", "r")
    assert done.returncode == 0, done.stderr
    return out / "r"


@pytest.mark.parametrize("how", ["pause", "sigterm", "sigkill"])
def test_stop_and_resume_without_gap(tmp_path: Path, how: str, uninterrupted: Path) -> None:
    """A run stopped after its first checkpoint (PAUSE, SIGTERM: a clean stop; SIGKILL: the
    steps since the checkpoint lost) and resumed records exactly what the run done in one go
    records: no gap, no duplicate, every metric, evaluation and summary number the same."""
    run = tmp_path / "r"
    proc = _start(tmp_path, "--steps", "100000", *STOP_RUN, "--name", "r")
    _wait_for(run / "checkpoints" / "latest.pt", proc)
    if how == "pause":
        (run / "PAUSE").touch()
    elif how == "sigterm":
        proc.send_signal(signal.SIGTERM)
    else:
        proc.kill()
    out, err = proc.communicate(timeout=120)
    if how == "sigkill":
        assert proc.returncode == -signal.SIGKILL
    else:  # not 0, a finished run's: a script can tell (PAUSE file: 75; SIGTERM: 128 + 15)
        assert proc.returncode == (75 if how == "pause" else 143), err
        assert "stopped by" in out and f"--resume {run}" in out
        assert "Traceback" not in err
    ckpt = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
    stopped = int(ckpt["extra"]["run_step"])
    assert 20 <= stopped < STOP_END, "the run went on too long after its first checkpoint"
    res = cli("train_online", "--resume", str(run), "--steps", str(STOP_END))
    assert res.returncode == 0, res.stderr
    assert f"resuming at step {stopped} of {STOP_END}" in res.stdout
    assert not (run / "PAUSE").exists()
    m = metrics(run)
    np.testing.assert_array_equal(m["step"], np.arange(STOP_END))
    assert all(len(v) == STOP_END for v in m.values())
    assert_same_run(uninterrupted, run)
    assert_summary_counts_the_metrics(run, switch=10)
    if how == "pause":  # resuming the finished run says so, and adds no step
        again = cli("train_online", "--resume", str(run))
        assert again.returncode == 0, again.stderr
        assert f"the run had finished its {STOP_END} steps" in again.stdout
        assert "resuming at" not in again.stdout
        np.testing.assert_array_equal(metrics(run)["step"], np.arange(STOP_END))


def assert_summary_counts_the_metrics(run: Path, switch: int) -> None:
    """summary.json (built from the loop's records, which a resume reads back) holds what a
    recount of run.zarr's metrics gives."""
    s = json.loads((run / "summary.json").read_text())
    m = metrics(run)
    b = m["memory/boundary"] > 0.5
    err = m["stream/norm_error"].astype(np.float64)
    win = s["stream_error"]["window"]
    tail = err[max(0, len(err) - win) :]
    assert s["steps_done"] == len(m["step"])
    assert (s["boundary_events_before_switch"], s["boundary_events_after_switch"]) == (
        int(b[:switch].sum()), int(b[switch:].sum()))
    assert s["buffer"]["size"] == int(m["memory/buffer_size"][-1])
    assert s["stream_valid_frac"] == pytest.approx(float(np.nanmean(m["stream/valid_frac"])))
    assert s["stream_error"]["end"] == pytest.approx(float(tail[np.isfinite(tail)].mean()))
    assert s["stream_error"]["since_switch"][0]["from"] == 0


def _dataset(path: Path) -> Path:
    import env

    cfg = env.PaperDatasetConfig(base_sequences=40, shift_sequences=20)
    return env.write_dataset(path, cfg)


def test_dataset_source_and_bad_stores(tmp_path: Path) -> None:
    store = _dataset(tmp_path / "d.zarr")
    ok = train(tmp_path, "--source", "dataset", "--data", str(store), "--steps", "30",
               "--switch", "20:0.5", "--name", "ds")
    assert ok.returncode == 0, ok.stderr
    assert len(metrics(tmp_path / "ds")["step"]) == 30
    import shutil

    shutil.rmtree(store / "shift" / "test")
    bad = train(tmp_path, "--data", str(store), "--steps", "30", "--name", "x")
    assert_one_line_error(bad, "shift/test")
    assert not (tmp_path / "x").exists()  # a failed start leaves no run folder


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "/nonexistent/d.zarr"], "no such file"),
        (["--steps", "50", "--switch", "80:0.5"], "outside the run"),
        (["--switch", "3000-0.5"], "malformed --switch"),
        (["--nosuch", "3"], "unknown option"),
        (["--resume", "/nonexistent/run"], "no such run folder"),
        (["--config", "/nonexistent/c.json"], "cannot read --config"),
    ],
)
def test_bad_input_exits_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    res = train(tmp_path, *args)
    assert_one_line_error(res, message)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_gpu(tmp_path: Path) -> None:
    res = train(tmp_path, "--device", "cuda", "--steps", "30")
    assert_one_line_error(res, "no CUDA GPU")


def test_existing_run_folder_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    res = train(tmp_path, "--steps", "30", "--name", "taken")
    assert_one_line_error(res, "already exists", str(tmp_path / "taken"))
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"


def test_evaluate_bad_input(tmp_path: Path) -> None:
    res = cli("evaluate", str(tmp_path / "nothing"))
    assert_one_line_error(res, "no such run folder", module="evaluate")
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    res = cli("evaluate", str(tmp_path / "bad.pt"))
    assert_one_line_error(res, str(tmp_path / "bad.pt"), module="evaluate")
