"""The worlds-protocol study: its numbers from known curves, and the command end to end on tiny
runs (report, resume by skipping finished runs, bad input)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import TINY_WORLDS, assert_one_line_error, cli

from runners.cli import CliError
from runners.studies import stats
from runners.studies import worlds as ws

NS = (0, 1, 5, 10, 25, 50)


def _run(arm: str, seed: str, own: list[float], wrong: list[float] | None = None) -> ws.WorldsRun:
    """A run whose interp and extrap curves are both ``own`` (and ``wrong``, ``same`` = own)."""
    mems = {"own": np.asarray(own)}
    if wrong is not None:
        mems |= {"wrong": np.asarray(wrong), "same": np.asarray(own)}
    curves = {f: dict(mems) for f in (*ws.FAMILIES, ws.POOLED)}
    return ws.WorldsRun(arm=arm, seed=seed, ns=NS, curves=curves)


def test_analyse_computes_gain_share_gap_and_delta_from_seed_means() -> None:
    flat = [0.8] * 6
    runs = [
        _run("A", "1", flat), _run("A", "2", [0.6] * 6),           # D_A = 0.7
        _run(ws.ORACLE, "1", [0.5] * 6), _run(ws.ORACLE, "2", [0.3] * 6),  # D_oracle = 0.4
        _run("B", "1", [0.7] * 6, [0.7] * 6), _run("B", "2", [0.7] * 6, [0.7] * 6),
        _run("C", "1", [0.7, 0.7, 0.6, 0.6, 0.5, 0.5], [0.6] * 6),
        _run("C", "2", [0.7, 0.7, 0.6, 0.6, 0.5, 0.5], [0.6] * 6),
    ]
    res = ws.analyse(runs)
    m = res["metrics"]["pooled"]
    assert m["d_A"] == pytest.approx(0.7) and m["d_oracle"] == pytest.approx(0.4)
    assert m["oracle_gain"] == pytest.approx(0.3 / 0.7)
    c = m["tracks"]["C"]
    assert c["memory_drop"] == pytest.approx(0.2 / 0.7)
    assert c["oracle_share"] == pytest.approx(0.2 / 0.3)
    assert c["wrong_gap"] == pytest.approx(0.1 / 0.5) and c["same_gap"] == pytest.approx(0.0)
    assert m["delta"] == pytest.approx(0.2 / 0.7) and m["outcome"] == "A"
    assert res["best_memory_track"] == "C"
    assert all(t["met"] for t in res["targets"].values())
    std = res["arms"]["A"]["families"]["interp"]["own"]["std"]
    assert std == pytest.approx([float(np.std([0.8, 0.6], ddof=1))] * 6)


def test_peer_memory_against_floor_and_ceiling_per_seed() -> None:
    def run(arm: str, seed: str, own: float, peer: float, wrong: float, r2: float | None) -> ws.WorldsRun:
        mems = {"own": np.full(6, own), "same": np.full(6, peer), "wrong": np.full(6, wrong)}
        curves = {f: dict(mems) for f in (*ws.FAMILIES, ws.POOLED)}
        def probe(r2: float) -> dict:  # direction cosine and strength R^2 both r2
            row = {"direction_deg": 10.0, "direction_cos": r2, "strength_r2": r2, "identified": 1.0}
            return {f: dict(row) for f in ("interp", "extrap", "held_out")}
        gravity = None if r2 is None else {"e_agg": probe(r2), "entries": probe(0.7)}
        return ws.WorldsRun(arm=arm, seed=seed, ns=NS, curves=curves, gravity=gravity)

    runs = [
        run("A", "1", 1.0, 1.0, 1.0, None), run("A", "2", 0.9, 0.9, 0.9, None),
        run(ws.ORACLE, "1", 0.8, 0.8, 0.8, None), run(ws.ORACLE, "2", 0.8, 0.8, 0.8, None),
        run("B", "1", 0.85, 0.95, 0.97, 0.5), run("B", "2", 0.85, 0.88, 0.87, 0.5),
        run("C", "1", 0.85, 0.88, 0.90, 0.9), run("C", "2", 0.80, 0.84, 0.86, 0.85),
    ]
    peer = ws.analyse(runs)["peer"]
    assert peer["best"] == "C"
    c = peer["families"]["pooled"]["tracks"]["C"]
    assert c["per_seed"]["1"]["share"] == pytest.approx(0.12 / 0.2)
    assert c["per_seed"]["2"]["share"] == pytest.approx(0.06 / 0.1)
    assert c["mean"]["share"] == pytest.approx((0.95 - 0.86) / (0.95 - 0.8))
    assert c["per_seed"]["1"]["wrong_gap"] == pytest.approx(0.02 / 0.88)
    assert c["mean"]["entries_strength_r2"] == pytest.approx(0.7)  # the entries', beside e_agg's
    assert c["mean"]["gravity_direction_cos"] == pytest.approx(0.875)  # held_out: the pooled row
    assert peer["families"]["pooled"]["delta"] == pytest.approx((0.915 - 0.86) / 0.915)
    assert peer["targets"] == {"below_floor": True, "half_the_gap": True, "wrong_worse": True,
                               "gravity": True}
    runs[-1] = run("C", "2", 0.80, 0.84, 0.83, 0.5)  # one seed: wrong world better, probe weak
    t = ws.analyse(runs)["peer"]["targets"]
    assert t["wrong_worse"] is False and t["gravity"] is False and t["below_floor"] is True
    text = "\n".join(ws.report_lines(ws.analyse(runs)))
    assert "## The group-memory targets" in text and "| gravity probe, e_agg | gravity probe, entries |" in text


def test_a_negligible_oracle_gain_leaves_the_share_out_and_targets_unmet() -> None:
    runs = [_run("A", "1", [0.7] * 6), _run(ws.ORACLE, "1", [0.699] * 6),
            _run("C", "1", [0.7] * 5 + [0.69], [0.68] * 6)]
    res = ws.analyse(runs)
    c = res["metrics"]["pooled"]["tracks"]["C"]
    assert math.isnan(c["oracle_share"]) and c["wrong_gap"] < 0
    assert not any(t["met"] for t in res["targets"].values())
    assert math.isnan(res["metrics"]["pooled"]["delta"]) and res["metrics"]["pooled"]["outcome"] == "?"


def test_load_refuses_a_paper_protocol_summary(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"protocol": "paper"}))
    with pytest.raises(CliError, match="not a worlds-protocol run"):
        ws.load_worlds_run(tmp_path, "A", "1")
    assert ws.load_worlds_run(tmp_path / "nothing", "A", "1") is None


def test_study_runs_every_arm_writes_the_report_and_skips_finished_runs(tmp_path: Path) -> None:
    out = tmp_path / "study"
    args = ["--tracks", "A", "B", "C", "--seeds", "3", "--preset", "tiny", "--steps", "30",
            "--out", str(out), "--workers", "2", "--threads", "1", *TINY_WORLDS[2:]]
    res = cli("study", "worlds", *args)
    assert res.returncode == 0, res.stderr
    assert "4 run(s): 0 finished" in res.stdout
    runs = out / "runs" / "tiny-30"
    names = sorted(p.name for p in runs.iterdir() if p.is_dir())
    assert names == ["track-A_seed-3", "track-B_seed-3", "track-C_seed-3",
                     "track-C_seed-3_oracle-true"]
    cfg = json.loads((runs / "track-C_seed-3_oracle-true" / "config.json").read_text())
    assert cfg["protocol"]["kind"] == "worlds" and cfg["agent"]["oracle"] is True
    report = json.loads((out / "report.json").read_text())
    assert report["missing"] == []

    def own50(name: str, fam: str) -> float:
        held = json.loads((runs / name / "summary.json").read_text())["held_out"]
        return held["families"][fam]["own"][held["ns"].index(50)]

    m = report["metrics"]
    for fam in ("interp", "extrap"):
        assert m[fam]["d_A"] == pytest.approx(own50("track-A_seed-3", fam), abs=1e-12)
        d_b, d_c = own50("track-B_seed-3", fam), own50("track-C_seed-3", fam)
        assert m[fam]["delta"] == pytest.approx(stats.delta(d_b, d_c), abs=1e-12)
        assert m[fam]["outcome"] == stats.outcome(m[fam]["delta"])
    assert m["pooled"]["d_oracle"] == pytest.approx(
        np.mean([own50("track-C_seed-3_oracle-true", f) for f in ("interp", "extrap")]), abs=1e-12)
    md = (out / "report.md").read_text()
    assert "Pre-registered test on held-out worlds" in md and "oracle gain" in md
    held_a = json.loads((runs / "track-A_seed-3" / "summary.json").read_text())["held_out"]
    blind = held_a["perfect_physics"]["families"]["pooled"]["blind"][:-1]
    assert report["arms"]["A"]["blind_per_horizon"] == pytest.approx(blind, abs=1e-12)
    d_a = report["arms"]["A"]["d50_per_horizon"]
    (row,) = [line for line in md.splitlines() if line.startswith("| track A")
              and line.count("x |") == len(blind)]  # the arm's D^50 over perfect physics
    assert row.endswith(" | ".join(f"{d / b:.2f}x" for d, b in zip(d_a, blind, strict=True)) + " |")
    assert (out / "figures" / "held_out_curves.png").read_bytes()[:4] == b"\x89PNG"
    again = cli("study", "worlds", *args)
    assert again.returncode == 0, again.stderr
    assert "4 run(s): 4 finished" in again.stdout
    assert json.loads((out / "report.json").read_text())["metrics"] == report["metrics"]
    rebuilt = cli("study", "worlds", *args, "--report-only")
    assert rebuilt.returncode == 0, rebuilt.stderr
    meta = json.loads((out / "report.json").read_text())["meta"]
    assert len(meta["commands"]) == 2 and meta["commands"][1].endswith("--report-only")


def test_where_runs_settle_each_seed_is_one_run_whose_heads_are_the_arms(tmp_path: Path) -> None:
    """A settled run: the arms are heads on its one latent (``agent.heads``), the floor its own
    predictor (every memory track a head from the same start), every arm read from the one
    summary."""
    out = tmp_path / "study"
    args = ["--tracks", "A", "B", "C", "--seeds", "3", "--preset", "tiny", "--steps", "30",
            "--out", str(out), "--settle", "0.5", "--set", "fit_batch=8", "--set", "fit_worlds=2",
            *TINY_WORLDS[2:]]  # fmt: skip
    res = cli("study", "worlds", *args)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 run(s): 0 finished" in res.stdout
    runs = out / "runs" / "tiny-30"
    (name,) = [p.name for p in runs.iterdir() if p.is_dir()]
    assert name == "track-A_heads-B-C-oracle_seed-3"
    summary = json.loads((runs / name / "summary.json").read_text())
    assert summary["head"] == "A" and list(summary["held_out"]["heads"]) == ["B", "C", "oracle"]
    held = summary["held_out"]

    def own50(arm: str, fam: str) -> float:
        rep = held if arm == "A" else held["heads"][arm]
        return rep["families"][fam]["own"][held["ns"].index(50)]

    report = json.loads((out / "report.json").read_text())
    assert report["missing"] == [] and set(report["arms"]) == {"A", "B", "C", "oracle"}
    m = report["metrics"]
    for fam in ("interp", "extrap"):
        assert m[fam]["d_A"] == pytest.approx(own50("A", fam), abs=1e-12)
        assert m[fam]["d_oracle"] == pytest.approx(own50("oracle", fam), abs=1e-12)
        assert m[fam]["delta"] == pytest.approx(stats.delta(own50("B", fam), own50("C", fam)),
                                                abs=1e-12)  # fmt: skip
    assert report["arms"]["B"]["blind_per_horizon"] == report["arms"]["C"]["blind_per_horizon"]

    def peer50(arm: str) -> float:  # pooled: the families' mean
        rep = held if arm == "A" else held["heads"][arm]
        return float(np.mean([rep["families"][f]["same"][held["ns"].index(50)] for f in ("interp", "extrap")]))

    primary = report["question"]["primary"]  # the paper's question, paired within the seed
    assert primary["per_seed"] == {"3": pytest.approx(stats.delta(peer50("B"), peer50("C")), abs=1e-12)}
    assert "## The paper's question" in (out / "report.md").read_text()
    assert (out / "figures" / "delta_per_seed.png").exists()
    with pytest.raises(CliError, match="has no track D"):
        ws.load_worlds_run(runs / name, "D", "3")


@pytest.mark.parametrize("extra, message", [
    (["--protocol", "paper"], "--protocol is set by the study; use its own options"),
    (["--track", "B"], "--track is set by the study; use --tracks"),
    (["--oracle"], "--oracle is set by the study; use --oracle-track"),
    (["--steps", "0"], "--steps must be at least 1"),
    (["--tracks", "A", "B", "--trainer", "C"], "--trainer C is not one of --tracks (A B)"),
    (["--trainer", "B"], "--trainer B cannot carry the oracle on track C's pathway: use --trainer A or C"),
    (["--episode-steps", "5", "10"],
     "run track-A_seed-42: episode_steps must be LOW HIGH with 21 <= LOW <= HIGH, got 5 10"),
])
def test_bad_study_options_fail_in_one_line_before_anything_runs(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    """Exit status 2 and exactly the one line ``<prog>: error: MESSAGE`` on stderr."""
    res = cli("study", "worlds", "--preset", "tiny", "--out", str(tmp_path / "s"), *extra)
    line = assert_one_line_error(res, module="study worlds")
    assert line == f"python -m runners.study worlds: error: {message}"
    assert not (tmp_path / "s").exists()


def test_a_stacked_study_trains_each_arms_seeds_as_one_and_skips_them_after(tmp_path: Path) -> None:
    """``--stack``: each arm's two seeds as one stacked run, a job of the backend (folders
    <arm>-s<seed>, a stack.json in each), the report over all; a rerun skips every set."""
    out = tmp_path / "study"
    args = ["--tracks", "A", "C", "--oracle-track", "none", "--seeds", "3", "4", "--preset",
            "tiny", "--steps", "30", "--out", str(out), "--stack", "--precision", "fp32",
            *TINY_WORLDS[2:]]  # fmt: skip
    res = cli("study", "worlds", *args)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 stacked set(s) of 4 run(s)" in res.stdout
    runs = out / "runs" / "tiny-30"
    names = sorted(p.name for p in runs.iterdir() if p.is_dir())
    assert names == ["track-A-s3", "track-A-s4", "track-C-s3", "track-C-s4"]
    for name in names:
        cfg = json.loads((runs / name / "config.json").read_text())
        assert cfg["agent"]["seed"] == int(name[-1]) and cfg["agent"]["stream_cache"] is False
        assert json.loads((runs / name / "stack.json").read_text())["runs"][0].endswith("-s3")
    report = json.loads((out / "report.json").read_text())
    assert report["missing"] == []
    again = cli("study", "worlds", *args)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("started") == 0 and "report:" in again.stdout
    assert "4 finished, 0 to resume, 0 to start" in again.stdout
