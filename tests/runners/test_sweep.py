"""The study ``sweep`` (``python -m runners.study sweep``): grid expansion, run states, skip and
resume, aggregation on both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from cli_helpers import assert_one_line_error, main_error

from runners import study
from runners.cli import CliError
from runners.online.rundir import RunFolder
from runners.studies import backends, grid, launch, runs

REPO = Path(__file__).resolve().parents[2]
PROG = "python -m runners.study sweep"


def sweep(argv: list[str]) -> int:
    """``python -m runners.study sweep ARGV`` in this process."""
    return study.main(["sweep", *argv])

# Small evaluation sets keep each tiny run to a few seconds (most of it is imports and figures).
FAST_EVAL = ["--protocol", "paper", "--set", "eval_shift_train=32", "--set", "eval_shift_test=16", "--set", "eval_base_test=16", "--final-ns", "0", "50"]
TINY = ["--preset", "tiny", "--steps", "20", "--no-switch", "--eval-every", "10",
        "--checkpoint-every", "10", "--device", "cpu", *FAST_EVAL]


# -- grid expansion --------------------------------------------------------------------------
def test_grid_is_the_cartesian_product_in_order_with_stable_names():
    g = grid.parse_grid(["track=A,B,C", "seed=42,43,44", "lambda_reg=0.05,0.1"])
    points = grid.expand(g)
    assert len(points) == 3 * 3 * 2
    assert points[0].params == {"track": "A", "seed": "42", "lambda_reg": "0.05"}
    assert points[1].params == {"track": "A", "seed": "42", "lambda_reg": "0.1"}
    assert points[-1].params == {"track": "C", "seed": "44", "lambda_reg": "0.1"}
    names = [p.name for p in points]
    assert len(set(names)) == len(names)
    assert names[0] == "track-A_seed-42_lambda_reg-0.05"
    # The name depends on the point only: expanding again gives the same folders.
    assert names == [p.name for p in grid.expand(g)]
    assert points[0].train_args() == ["--track", "A", "--seed", "42", "--lambda-reg", "0.05"]
    assert grid.expand({}, prefix="x_")[0].name == "x_default"


def test_grid_names_are_filesystem_safe():
    p = grid.expand({"eval_ns": ["0 10 50"], "lr": ["1e-3"]})[0]
    assert p.name == "eval_ns-0-10-50_lr-1e-3"
    assert "/" not in grid.expand({"data": ["a/b.zarr"]})[0].name


EXPECTED = "expected FIELD=V1,V2,... (e.g. seed=42,43)"


@pytest.mark.parametrize(
    ("specs", "message"),
    [(["track"], f"bad --grid item 'track': {EXPECTED}"),
     (["track="], "bad --grid item 'track=': empty value"),
     (["track=A,,B"], "bad --grid item 'track=A,,B': empty value"),
     (["1x=3"], f"bad --grid item '1x=3': {EXPECTED}"),
     (["seed=1", "seed=2"], "--grid field 'seed' given twice"),
     (["seed=1,1"], "--grid field 'seed' repeats a value: 1,1")],
)
def test_bad_grid_items_are_one_line_errors(tmp_path, specs, message):
    """parse_grid's CliError is exactly one line; the sweep command given the same --grid
    prints just that line and exits 2, before any folder exists."""
    with pytest.raises(CliError) as err:
        grid.parse_grid(specs)
    assert str(err.value) == message
    out = tmp_path / "sweep"
    for extra in ([], ["--dry-run"]):
        res = main_error(sweep, ["--grid", *specs, "--out", str(out), *extra], PROG)
        assert assert_one_line_error(res, module="study sweep") == f"{PROG}: error: {message}"
        assert not out.exists()


def test_sweep_refuses_unknown_fields_and_reserved_options(capsys):
    with pytest.raises(CliError, match="unknown --grid field"):
        sweep(["--grid", "no_such_field=1", "--dry-run"])
    with pytest.raises(CliError, match="set by the study"):
        sweep(["--grid", "seed=1", "--name", "x", "--dry-run"])
    with pytest.raises(CliError, match="unknown option"):
        sweep(["--grid", "seed=1", "--no-such-option", "--dry-run"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--grid", "track=Q"], r"run track-Q: --track: expected one of .*got 'Q'"),
        (["--grid", "lr=1e-3,x"], r"run lr-x: --lr expects FLOAT: .*'x'"),
        (["--grid", "seed=1", "kappa=-1"], r"run seed-1_kappa--1: kappa: must be > 0 \(got -1.0\)"),
        (["--grid", "seed=1", "--steps", "10", "--switch", "20:0.5"], "outside the run"),
        (["--grid", "seed=1", "--switch", "5:friction=3"], r"friction must be in \[0, 1\)"),
        (["--grid", "seed=1,2", "--eval-ns", "a"], "--eval-ns"),
    ],
)
def test_bad_sweep_grids_never_start(tmp_path, argv, message):
    """Every point's typed config is built and resolved before anything starts: one line, no
    folder (not even with --dry-run)."""
    out = tmp_path / "sweep"
    for extra in ([], ["--dry-run"]):
        with pytest.raises(CliError, match=message) as err:
            sweep([*argv, "--out", str(out), *extra])
        assert "\n" not in str(err.value)
        assert not out.exists()


def test_bad_sweep_grid_cli_exits_2_with_one_line_and_no_folder(tmp_path):
    out = tmp_path / "sweep"
    res = subprocess.run(
        [sys.executable, "-m", "runners.study", "sweep", "--grid", "track=Q", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 2, res
    assert res.stderr.strip().splitlines() == [
        "python -m runners.study sweep: error: run track-Q: --track: expected one of "
        "'A', 'B', 'C', 'D', 'E', got 'Q'"]
    assert not out.exists() and not list(tmp_path.iterdir())


def test_the_paper_study_checks_its_runs_before_writing_anything(tmp_path):
    out = tmp_path / "repro"
    with pytest.raises(CliError, match="kappa: must be > 0"):
        study.main(["paper", "--out", str(out), "--preset", "tiny", "--steps", "20",
                    "--kappa", "-1"])
    with pytest.raises(CliError, match="--lambda-reg expects FLOAT"):
        study.main(["paper", "--out", str(out), "--preset", "tiny", "--lambda-reg", "x"])
    with pytest.raises(CliError, match=f"--data {tmp_path / 'no.zarr'} does not exist"):
        study.main(["paper", "--out", str(out), "--data", str(tmp_path / "no.zarr")])
    assert not out.exists()


def test_dry_run_lists_points_and_their_arguments(tmp_path, capsys):
    assert sweep(["--grid", "track=A,C", "seed=1", "--out", str(tmp_path), "--dry-run",
                  *TINY]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert out[0].startswith("new") and "track-A_seed-1:" in out[0]
    assert "--track A --seed 1 --no-bounds --preset tiny --steps 20" in out[0]
    assert f"--out {tmp_path.resolve()} --name track-A_seed-1" in out[0]


# -- run states ------------------------------------------------------------------------------
def _fake_run(root: Path, *, summary: dict | None, checkpoint: bool) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text("{}")
    if checkpoint:
        (root / "checkpoints").mkdir()
        (root / "checkpoints" / "latest.pt").write_bytes(b"x")
    if summary is not None:
        (root / "summary.json").write_text(json.dumps(summary))
    return root


def test_run_states(tmp_path):
    assert RunFolder(tmp_path / "nothing").state() == "new"
    done = _fake_run(tmp_path / "done", summary={"steps": 20, "steps_done": 20, "stopped": None},
                     checkpoint=True)
    assert RunFolder(done).state() == "finished"
    paused = _fake_run(tmp_path / "paused",
                       summary={"steps": 20, "steps_done": 7, "stopped": "PAUSE file"},
                       checkpoint=True)
    assert RunFolder(paused).state() == "interrupted"
    killed = _fake_run(tmp_path / "killed", summary=None, checkpoint=True)
    assert RunFolder(killed).state() == "interrupted"
    (killed / "summary.json").write_text("{broken")
    assert RunFolder(killed).state() == "interrupted"
    stale = _fake_run(tmp_path / "stale", summary=None, checkpoint=False)
    assert RunFolder(stale).state() == "stale"
    spec = backends.RunSpec("killed", str(killed), ("--track", "A"))
    assert backends.command_for(spec, "interrupted") == ["--resume", str(killed)]
    assert backends.command_for(spec, "new")[-4:] == ["--out", str(tmp_path), "--name", "killed"]


def test_finished_runs_are_skipped_without_starting_anything(tmp_path):
    done = _fake_run(tmp_path / "done", summary={"steps": 5, "steps_done": 5}, checkpoint=True)
    # A module that does not exist: starting it would fail, so "skipped" proves nothing ran.
    spec = backends.RunSpec("done", str(done), (), module="no_such_module_xyz")
    res = backends.LocalBackend(workers=1).run([spec], progress=None)
    assert [(r.action, r.returncode, r.ok) for r in res] == [("skipped", 0, True)]


def test_threads_per_worker():
    assert backends.threads_per_worker(2, cores=8) == 4
    assert backends.threads_per_worker(16, cores=8) == 1
    assert backends.LocalBackend(workers=2, threads=3).threads == 3


# -- real tiny runs --------------------------------------------------------------------------
def _metrics_steps(run_dir: str | Path) -> np.ndarray:
    return zarr.open_group(str(Path(run_dir) / "run.zarr"), mode="r")["metrics/step"][:]


def test_local_sweep_runs_skips_finished_runs_and_aggregates(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["--grid", "track=A,C", "seed=1", "--out", str(out), "--workers", "2", *TINY]
    assert sweep(argv) == 0
    for name in ("track-A_seed-1", "track-C_seed-1"):
        run = out / name
        assert RunFolder(run).is_finished()
        assert json.loads((run / "config.json").read_text())["schedule"]["steps"] == 20
        assert (_metrics_steps(run) == np.arange(20)).all()
        assert (out / "logs" / f"{name}.log").stat().st_size > 0
    first = capsys.readouterr().out
    assert first.count("started") == 2 and "| A |" in first and "| C |" in first
    table = (out / "sweep.md").read_text()
    assert "| A | 1 (1) |" in table and "| C | 1 (1) |" in table
    payload = json.loads((out / "sweep.json").read_text())
    assert {r["track"] for r in payload["runs"]} == {"A", "C"}
    assert all(np.isfinite(r["peak"]) for r in payload["runs"])
    # The same command again: nothing runs, the same table comes back.
    stamp = (out / "track-A_seed-1" / "summary.json").stat().st_mtime_ns
    assert sweep(argv) == 0
    again = capsys.readouterr().out
    assert again.count("already finished") == 2 and "started" not in again
    assert (out / "track-A_seed-1" / "summary.json").stat().st_mtime_ns == stamp
    assert (out / "sweep.md").read_text() == table


def _start_and_pause(spec: backends.RunSpec) -> None:
    """Start ``spec`` and drop a PAUSE file in its folder as soon as it exists: the run stops
    cleanly at its next step with a checkpoint and an incomplete summary."""
    cmd = [sys.executable, "-m", "runners.train_online", *backends.command_for(spec, "new")]
    env = dict(os.environ, TORCH_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    run_dir = Path(spec.run_dir)
    deadline = time.monotonic() + 60
    while not run_dir.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    (run_dir / "PAUSE").touch()
    assert proc.wait(timeout=120) == 75  # stopped by its PAUSE file, not finished


def test_interrupted_run_is_resumed_without_gap(tmp_path):
    out = tmp_path / "sweep"
    args = ["--preset", "tiny", "--steps", "60", "--no-switch", "--eval-every", "20",
            "--checkpoint-every", "20", "--device", "cpu", *FAST_EVAL]
    (paused,) = launch.make_specs(grid.expand({"track": ["C"], "seed": ["3"]}), out, args)
    _start_and_pause(paused)
    summary = RunFolder(paused.run_dir).read_summary()
    assert summary is not None and summary["stopped"] and summary["steps_done"] < 60
    assert RunFolder(paused.run_dir).state() == "interrupted"

    (res,) = backends.LocalBackend(workers=1, threads=1).run(
        [paused], log_dir=str(out / "logs"), progress=None)
    assert res.action == "resumed" and res.ok
    assert Path(res.log).read_text().startswith(f"$ {sys.executable} -m runners.train_online "
                                                f"--resume {paused.run_dir}\n")
    assert RunFolder(paused.run_dir).is_finished()
    assert (_metrics_steps(paused.run_dir) == np.arange(60)).all()  # no gap, no duplicate
    rec = runs.load_run(paused.run_dir)
    assert rec is not None and rec.final_step == 60 and rec.has_evals


def test_stale_folder_is_moved_aside_never_deleted(tmp_path):
    stale = tmp_path / "track-C_seed-4"
    stale.mkdir()
    (stale / "notes.txt").write_text("keep me")
    (tmp_path / "track-C_seed-4.stale-1").mkdir()  # an earlier one: the next free k is used
    spec = backends.RunSpec(stale.name, str(stale), (), module="no_such_module_xyz")
    (res,) = backends.LocalBackend(workers=1).run([spec], log_dir=str(tmp_path / "logs"),
                                                  progress=None)
    assert res.action == "started" and res.returncode != 0 and not res.ok
    assert (tmp_path / "track-C_seed-4.stale-2" / "notes.txt").read_text() == "keep me"
    assert "No module named no_such_module_xyz" in Path(res.log).read_text()


@pytest.mark.ray
def test_ray_backend_runs_the_same_runs_and_aggregates(tmp_path):
    ray = pytest.importorskip("ray")
    out = tmp_path / "sweep"
    points = grid.expand({"track": ["A", "C"], "seed": ["5"]})
    specs = launch.make_specs(points, out, TINY)
    backend = backends.RayBackend(threads=1, num_cpus=2)
    try:
        results = backend.run(specs, log_dir=str(out / "logs"), progress=None)
        assert [r.action for r in results] == ["started", "started"]
        assert all(r.ok for r in results)
        # Finished runs are skipped by the Ray tasks too.
        again = backend.run(specs, progress=None)
        assert [r.action for r in again] == ["skipped", "skipped"]
    finally:
        backend.shutdown()
    assert not ray.is_initialized()
    recs = [runs.load_run(s.run_dir, p.params) for p, s in zip(points, specs, strict=True)]
    rows = runs.group_table(recs, ["track"])
    assert [(r["track"], r["runs"], r["finished"]) for r in rows] == [("A", 1, 1), ("C", 1, 1)]
    assert all(np.isfinite(r["peak"].mean) for r in rows)


def test_a_stacked_sweep_trains_each_points_seeds_as_one(tmp_path, capsys):
    """``--stack``: the points equal but for their seed are one stacked run (folders
    <name without the seed>-s<seed>); the table aggregates them as any sweep's."""
    worlds = ["--protocol", "worlds", "--preset", "tiny", "--steps", "20", "--eval-every", "10",
              "--checkpoint-every", "10", "--device", "cpu", "--precision", "fp32", "--set", "eval_shift_test=8", "--eval-world-seqs", "4", "--eval-worlds", "2", "--base-world-seqs", "4", "--base-worlds", "2", "--episode-steps", "21", "40", "--final-ns", "0", "5"]  # fmt: skip
    assert sweep(["--grid", "track=A,C", "seed=1,2", "--out", str(tmp_path), "--stack",
                  *worlds]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "2 stacked set(s) of 4 run(s)" in out
    names = sorted(p.name for p in tmp_path.iterdir() if p.is_dir() and p.name != "logs")
    assert names == ["track-A-s1", "track-A-s2", "track-C-s1", "track-C-s2"]
    assert all(RunFolder(tmp_path / n).is_finished() for n in names)
    table = json.loads((tmp_path / "sweep.json").read_text())
    assert len(table["runs"]) == 4 and len(table["groups"]) == 2
    with pytest.raises(CliError, match="add seed=... to --grid"):
        sweep(["--grid", "track=A,C", "--out", str(tmp_path / "x"), "--stack", *worlds])
    # --workers 2: the two sets at once, each a job of the backend: the same runs, bit for bit
    two = tmp_path / "two"
    assert sweep(["--grid", "track=A,C", "seed=1,2", "--out", str(two), "--stack",
                  "--workers", "2", *worlds]) == 0  # fmt: skip
    assert "2 stacked set(s) of 4 run(s): 0 finished, 0 to resume, 4 to start; local: 2 worker(s)" \
        in capsys.readouterr().out
    for name in names:
        a = zarr.open_group(str(tmp_path / name / "run.zarr"), mode="r")["metrics"]
        b = zarr.open_group(str(two / name / "run.zarr"), mode="r")["metrics"]
        for key in ("loss/total", "memory/surprisal"):
            np.testing.assert_array_equal(a[key][...], b[key][...], err_msg=f"{name} {key}")
    assert sorted(p.name for p in (two / "logs").iterdir()) == ["track-A.log", "track-C.log"]
