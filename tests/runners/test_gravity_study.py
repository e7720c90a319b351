"""The gravity study: its runs' options from the scale, its numbers from the runs' summaries, and
the command end to end on tiny runs (report, figure, resume by skipping, bad input)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_helpers import TINY_WORLDS, assert_one_line_error, cli

from runners.online.config import Worlds
from runners.studies import gravity as gs


def test_a_scale_multiplies_every_familys_range_and_the_switch() -> None:
    base = Worlds()
    fams = gs.families(2.5)
    assert fams["train"] == pytest.approx(tuple(2.5 * g for g in base.train_gravity))
    assert fams["interp"] == pytest.approx(tuple(2.5 * g for g in base.interp_gravity))
    assert fams["extrap"] == pytest.approx(tuple(2.5 * g for g in base.extrap_gravity))
    assert gs.families(1.0) == {"train": base.train_gravity, "interp": base.interp_gravity,
                                "extrap": base.extrap_gravity}
    args = gs.scale_args(2.0, 4500)
    assert args[args.index("--extrap-gravity") + 1:][:2] == ["1.2", "1.6"]
    assert args[args.index("--switch") + 1] == "3000:gravity=1.5,direction=90"


def _summary(floor: float, oracle: float, same: float, wrong: float, blind: float) -> dict:
    def d(x: float) -> dict:
        return {"d": {"interp": x, "extrap": x, "pooled": x}}
    return {"bounds": {"floor": d(floor), "ceiling": d(oracle),
                       "memories": {"same": d(same), "wrong": d(wrong), "own": d(same)},
                       "perfect_physics": {"d": {"blind": {"pooled": blind},
                                                 "seen": {"pooled": 0.5}, "told": {"pooled": 0.4},
                                                 "seen_mean": {"pooled": 0.5},
                                                 "told_mean": {"pooled": 0.3}}}},
            "held_out": {"gravity_probe": {"e_agg": {"held_out": {
                "direction_deg": 30.0, "strength_r2": 0.5, "identified": 0.75}}}}}


def test_report_numbers_are_seed_means_of_the_runs_summaries(tmp_path: Path) -> None:
    runs = []
    for seed, (floor, oracle) in enumerate([(0.8, 0.6), (0.6, 0.6)]):
        run_dir = tmp_path / f"s{seed}"
        run_dir.mkdir()
        (run_dir / "summary.json").write_text(json.dumps(_summary(floor, oracle, 0.7, 0.75, 0.3)))
        runs.append(gs.load_gravity_run(run_dir, 2.0, str(seed)))
    assert gs.load_gravity_run(tmp_path / "none", 2.0, "0") is None
    (tmp_path / "nobounds").mkdir()
    (tmp_path / "nobounds" / "summary.json").write_text(json.dumps({"held_out": {}}))
    assert gs.load_gravity_run(tmp_path / "nobounds", 2.0, "0") is None
    res = gs.analyse([r for r in runs if r is not None])
    row = res["2"]
    assert row["floor"]["mean"] == pytest.approx(0.7) and row["floor"]["n"] == 2
    assert row["margin"]["mean"] == pytest.approx(0.25 / 2)  # (0.2 / 0.8 + 0 / 0.6) / 2
    assert row["margin"]["seeds"] == {"0": pytest.approx(0.25), "1": pytest.approx(0.0)}
    assert row["blind"]["std"] == 0.0 and row["probe_strength"]["mean"] == pytest.approx(0.5)
    assert row["probe_direction"]["mean"] == 30.0 and row["probe_identified"]["mean"] == 0.75
    text = "\n".join(gs.table_lines(res, {"2": gs.families(2.0)}))
    assert row["worth"]["mean"] == pytest.approx(0.2)  # (0.5 - 0.4) / 0.5
    assert row["worth_mean"]["mean"] == pytest.approx(0.4)  # hedged: (0.5 - 0.3) / 0.5
    assert ("| 2 | 0.2-1 / 0.3-0.9 / 1.2-1.6 | 0.300 +- 0.000 | 0.500 +- 0.000 | 0.400 +- 0.000 | "
            "20.0% +- 0.0% | 0.500 +- 0.000 | 0.300 +- 0.000 | 40.0% +- 0.0% | 0.700 +- 0.141 |"
            ) in text
    assert "12.5% +- 17.7%" in text and text.endswith("| 2 |")


def test_study_runs_every_scale_writes_the_report_and_skips_finished_runs(tmp_path: Path) -> None:
    out = tmp_path / "study"
    args = ["--scales", "1", "2", "--seeds", "3", "--preset", "tiny", "--steps", "30",
            "--out", str(out), "--workers", "2", "--threads", "1",
            *[a for a in TINY_WORLDS[2:] if a != "--no-bounds"],
            "--settle", "0.5", "--fit-batch", "8", "--fit-worlds", "2"]  # bounds: heads
    res = cli("study", "gravity", *args)
    assert res.returncode == 0, res.stderr
    assert "2 run(s): 0 finished" in res.stdout
    runs = out / "runs" / "tiny-30"
    cfg = json.loads((runs / "gravity-2_seed-3" / "config.json").read_text())
    assert cfg["protocol"]["interp_gravity"] == [0.3, 0.9] and cfg["bounds"] is True
    assert cfg["schedule"]["switches"][0]["physics"]["gravity"] == pytest.approx(1.5)
    report = json.loads((out / "report.json").read_text())
    assert report["missing"] == [] and list(report["scales"]) == ["1", "2"]
    bounds = json.loads((runs / "gravity-1_seed-3" / "summary.json").read_text())["bounds"]
    row = report["scales"]["1"]
    assert row["floor"]["mean"] == pytest.approx(bounds["floor"]["d"]["pooled"], abs=1e-12)
    assert row["oracle"]["mean"] == pytest.approx(bounds["ceiling"]["d"]["pooled"], abs=1e-12)
    assert math.isfinite(row["blind"]["mean"]) and row["blind"]["mean"] > 0
    assert math.isfinite(row["told"]["mean"]) and math.isfinite(row["seen"]["mean"])
    assert row["worth_mean"]["mean"] == pytest.approx(
        1 - bounds["perfect_physics"]["d"]["told_mean"]["pooled"]
        / bounds["perfect_physics"]["d"]["seen_mean"]["pooled"], abs=1e-12)
    assert (out / "figures" / "dose_response.png").read_bytes()[:4] == b"\x89PNG"
    assert "| 2 | 0.2-1 / 0.3-0.9 / 1.2-1.6 |" in (out / "report.md").read_text()
    again = cli("study", "gravity", *args)
    assert again.returncode == 0, again.stderr
    assert "2 run(s): 2 finished" in again.stdout
    assert json.loads((out / "report.json").read_text())["scales"] == report["scales"]


@pytest.mark.parametrize("extra, message", [
    (["--interp-gravity", "0.1", "0.2"],
     "--interp-gravity is set by the study; use its own options"),
    (["--no-bounds"], "--no-bounds is set by the study; use its own options"),
    (["--seed=1"], "--seed is set by the study; use --seeds"),
    (["--scales", "0"], "--scales must be positive numbers"),
    (["--steps", "2"], "--steps must be at least 3 (the switch is at 2/3)"),
])
def test_bad_study_options_fail_in_one_line_before_anything_runs(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    """Exit status 2 and exactly the one line ``<prog>: error: MESSAGE`` on stderr."""
    res = cli("study", "gravity", "--preset", "tiny", "--out", str(tmp_path / "s"), *extra)
    line = assert_one_line_error(res, module="study gravity")
    assert line == f"python -m runners.study gravity: error: {message}"
    assert not (tmp_path / "s").exists()
