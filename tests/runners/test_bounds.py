"""The floor and the ceiling beside the chosen track (runners.online.bounds)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from agent.checkpoint import learner_from_checkpoint as checkpoint_learner
from runners.online import bounds
from runners.online.command import build_config
from runners.online.config import resolve
from runners.online.rundir import RunFolder
from runners.style import tables_text
from tests.runners.cli_helpers import TINY_WORLDS, cli

TINY = [a for a in TINY_WORLDS if a != "--no-bounds"]


def test_a_settled_worlds_run_fits_its_bounds_as_heads() -> None:
    """--bounds (the default) adds the floor (A) and the ceiling (oracle) to the heads of a
    worlds run that settles, never the run's own; nothing without a settle, --no-bounds, or
    under the paper protocol."""
    def heads(*argv: str) -> tuple[str, ...]:
        return resolve(build_config(["--preset", "tiny", *argv])).agent.heads

    assert heads("--settle", "0.5") == ("A", "oracle")
    assert heads("--settle", "0.5", "--track", "A") == ("oracle",)
    assert heads("--settle", "0.5", "--oracle") == ("A",)
    assert heads("--settle", "0.5", "--heads", "B", "E") == ("A", "oracle", "B", "E")
    assert heads("--settle", "0.5", "--heads", "oracle", "B") == ("A", "oracle", "B")
    assert heads("--settle", "0.5", "--no-bounds") == ()
    assert heads() == () and heads("--protocol", "paper") == ()
    oracle = resolve(build_config(["--preset", "tiny", "--settle", "0.5", "--track", "B"]))
    assert oracle.agent.heads == ("A", "oracle")  # B's oracle: tracks.ceiling_track
    from agent.heads import head_config

    assert (head_config(oracle.agent, "oracle").track, head_config(oracle.agent, "oracle").oracle) == ("B", True)


def test_share_of_the_gap() -> None:
    assert bounds.share(1.0, 0.95, 0.9) == pytest.approx(0.5)
    assert bounds.share(1.0, 1.05, 0.9) == pytest.approx(-0.5)
    assert bounds.share(1.0, 0.8, 0.9) == pytest.approx(2.0)
    assert bounds.share(0.9, 0.8, 1.0) is None  # the ceiling above the floor: no gap


def _held(d: dict[str, dict[str, list[float]]], per_h: dict[str, list[float]]) -> dict:
    worlds = [{"world": f"{fam}-0", "family": fam, "memory": mem,
               "d_per_h": [per_h[fam]] * len(ds)}
              for fam, mems in d.items() for mem, ds in mems.items()]  # fmt: skip
    return {"ns": [0, 50], "horizons": [2, 8], "memories": list(next(iter(d.values()))),
            "families": d, "worlds": worlds}


def test_the_report_places_every_memory_between_floor_and_ceiling() -> None:
    main = {"track": "C", "held_out": _held(
        {"interp": {"own": [1.0, 0.9], "same": [1.0, 0.95], "wrong": [1.0, 1.02]},
         "extrap": {"own": [1.2, 1.0], "same": [1.2, 1.1], "wrong": [1.2, 1.25]}},
        {"interp": [0.9, 1.0], "extrap": [1.0, 1.2]})}  # fmt: skip
    floor = {"run_dir": "f", "held_out": _held(
        {"interp": {"own": [1.0, 1.0]}, "extrap": {"own": [1.2, 1.2]}},
        {"interp": [1.0, 1.0], "extrap": [1.2, 1.2]})}  # fmt: skip
    ceiling = {"run_dir": "c", "held_out": _held(
        {"interp": {"own": [0.9, 0.9]}, "extrap": {"own": [1.0, 1.0]}},
        {"interp": [0.8, 0.8], "extrap": [1.0, 1.0]})}  # fmt: skip
    b = bounds.bounds_report(main, floor, ceiling, n=50)
    assert b["headline"] == "same"
    peer = b["memories"]["same"]
    assert peer["share"]["interp"] == pytest.approx(0.5)
    assert peer["share"]["extrap"] == pytest.approx(0.5)
    assert peer["d"]["pooled"] == pytest.approx(1.025)
    assert peer["share"]["pooled"] == pytest.approx((1.1 - 1.025) / (1.1 - 0.95))
    assert peer["share_per_h"]["interp"] == pytest.approx([0.5, 0.0])  # per horizon
    assert b["memories"]["wrong"]["share"]["interp"] == pytest.approx(-0.2)
    line = bounds.story(b)
    assert line.startswith("50 transitions from other sequences of each held-out world moved "
                           "track C from the floor (track A, D 1.100) to D 1.025: 50% of the way")
    assert "ceiling (the oracle, D 0.950)" in line
    assert line.endswith("Memory of another world: D 1.135, 73% of the oracle's margin above "
                         "peer memory: it carries the world")
    b["memories"]["wrong"]["d"]["pooled"] = 1.05  # 17% of the margin: below a quarter
    assert bounds.story(b).endswith("17% of the oracle's margin above peer memory: it does not "
                                    "carry the world")
    text = tables_text(bounds.tables(b))
    assert "peer memory" in text and "wrong-world memory" in text
    assert "share of the gap per horizon (peer memory, pooled): h=2 " in text
    assert b["perfect_physics"] is None and "perfect physics" not in text  # older reports


def test_perfect_physics_sits_beside_the_bounds() -> None:
    """The chosen track's perfect-physics D beside the bounds; track A's D per horizon over
    perfect world-blind physics in its own latent; the oracle's over the world's own physics as
    two frames show it, in its own latent."""
    def pp(blind_i: list[float], blind_e: list[float]) -> dict:
        fams = {"interp": {"blind": blind_i, "other": [0.6, 0.7, 0.65]},
                "extrap": {"blind": blind_e, "other": [0.8, 0.9, 0.85]}}
        fams["pooled"] = {k: list(np.mean([fams["interp"][k], fams["extrap"][k]], axis=0))
                          for k in ("blind", "other")}  # fmt: skip
        return {"horizons": [2, 8], "input_frame": 52, "families": fams}

    main = {"track": "C", "held_out": {**_held(
        {"interp": {"same": [1.0, 0.95]}, "extrap": {"same": [1.2, 1.1]}},
        {"interp": [0.9, 1.0], "extrap": [1.0, 1.2]}), "perfect_physics": pp([0.2, 0.4, 0.3],
                                                                             [0.4, 0.8, 0.6])}}
    floor = {"run_dir": "f", "held_out": {**_held(
        {"interp": {"own": [1.0, 1.0]}, "extrap": {"own": [1.2, 1.2]}},
        {"interp": [1.0, 1.0], "extrap": [1.2, 1.2]}), "perfect_physics": pp([0.25, 0.5, 0.375],
                                                                              [0.4, 0.6, 0.5])}}
    ceiling = {"run_dir": "c", "held_out": _held(
        {"interp": {"own": [0.9, 0.9]}, "extrap": {"own": [1.0, 1.0]}},
        {"interp": [0.8, 0.8], "extrap": [1.0, 1.0]})}  # fmt: skip
    assert "ceiling_ratio_told_per_h" not in bounds.bounds_report(
        main, floor, ceiling, n=50)["perfect_physics"]  # an oracle without perfect physics
    told = {"interp": {"told": [0.4, 0.5, 0.45]}, "extrap": {"told": [0.5, 0.8, 0.65]},
            "pooled": {"told": [0.45, 0.65, 0.55]}}
    ceiling["held_out"]["perfect_physics"] = {"horizons": [2, 8], "families": told}
    b = bounds.bounds_report(main, floor, ceiling, n=50)["perfect_physics"]
    assert b["ceiling_ratio_told_per_h"]["interp"] == pytest.approx([2.0, 1.6])
    assert b["ceiling_ratio_told_per_h"]["extrap"] == pytest.approx([2.0, 1.25])
    assert b["ceiling_ratio_told_per_h"]["pooled"] == pytest.approx([0.9 / 0.45, 0.9 / 0.65])
    assert b["d"]["blind"] == {"interp": 0.3, "extrap": 0.6, "pooled": pytest.approx(0.45)}
    assert b["d_per_h"]["other"]["extrap"] == [0.8, 0.9]
    assert b["floor_ratio_per_h"]["interp"] == pytest.approx([4.0, 2.0])
    assert b["floor_ratio_per_h"]["extrap"] == pytest.approx([3.0, 2.0])
    assert b["floor_ratio_per_h"]["pooled"] == pytest.approx([1.1 / 0.325, 1.1 / 0.55])
    text = tables_text(bounds.tables(bounds.bounds_report(main, floor, ceiling, n=50)))
    (row,) = [line.split() for line in text.splitlines() if "perfect physics, blind" in line]
    assert row[-3:] == ["0.300", "0.600", "0.450"]
    assert "track A / world-blind physics per horizon (pooled, each in its own latent): " \
        "h=2 3.4x, h=8 2.0x" in text
    assert "the oracle / the world's own physics as two frames show it: h=2 2.0x, h=8 1.4x" in text


def _perfect_physics(run: Path, branches: tuple[str, ...]) -> dict:
    """probes.perfect_physics of the run's final learner (its latest checkpoint) on the
    held-out worlds its config draws, at the held-out evaluation's input frame."""
    from probes.perfect_physics import perfect_physics
    from runners.online.command import config_from_dict

    cfg = config_from_dict(json.loads((run / "config.json").read_text()))
    learner = checkpoint_learner(run / "checkpoints" / "latest.pt")
    assert learner.step == cfg.schedule.steps
    sets = cfg.protocol.evaluator(cfg).sets
    return perfect_physics(learner, sets.held_out, max(cfg.schedule.final_ns), branches)


SETTLED = [*TINY, "--settle", "0.5", "--set", "fit_batch=8", "--set", "fit_worlds=2"]


def test_a_settled_run_fits_its_floor_and_ceiling_as_heads_and_tells_the_story(tmp_path: Path) -> None:
    """A run that settles fits the floor and the ceiling as heads in its own process
    (``agent.heads``): the bounds from its heads' held-out reports, with paired intervals, and
    the chosen track bit for bit as the run without them (--no-bounds)."""
    res = cli("train_online", *SETTLED, "--steps", "60", "--out", str(tmp_path), "--name", "run")
    assert res.returncode == 0, res.stderr
    alone = cli("train_online", *SETTLED, "--no-bounds", "--steps", "60", "--out", str(tmp_path),
                "--name", "alone")  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    run = tmp_path / "run"
    assert not (run / "floor").exists() and not (run / "ceiling").exists()
    assert json.loads((run / "config.json").read_text())["agent"]["heads"] == ["A", "oracle"]
    s = json.loads((run / "summary.json").read_text())
    lone = json.loads((tmp_path / "alone" / "summary.json").read_text())
    assert s["held_out"]["families"] == lone["held_out"]["families"]  # the heads changed nothing
    heads = s["held_out"]["heads"]
    assert set(heads) == {"A", "oracle"} and heads["oracle"]["oracle"]
    assert heads["A"]["memories"] == ["own"] == heads["oracle"]["memories"]
    b = s["bounds"]
    assert b["floor"]["d"]["pooled"] == pytest.approx(np.mean(
        [heads["A"]["families"][f]["own"][0] for f in ("interp", "extrap")]))  # fmt: skip
    assert b["floor"]["run"].endswith("(head A)") and b["ceiling"]["run"].endswith("(head oracle)")
    story = bounds.story(b)
    assert story in res.stdout  # the first line of the table printed at the end
    assert res.stdout.index(story) < res.stdout.index("end of base training")
    assert story in (run / "summary.md").read_text()
    assert "paired 95% intervals at n = 50" in res.stdout
    iv = s["held_out"]["intervals"]
    assert iv["heads"]["C"]["share"]["same"]["pooled"]["value"] == pytest.approx(
        b["memories"]["same"]["share"]["pooled"])  # the interval's point: the table's share
    assert (run / "figures" / "bounds.png").stat().st_size > 10_000
    # every head's stream error each step from the settle on (NaN before it), summarised
    from runners.online.recorder import Recorder

    m = Recorder(run, create=False).read_metrics()
    at = resolve(build_config(["--config", str(run / "config.json")])).agent.settle_at
    for head in ("A", "oracle"):
        e = m[f"heads/{head}/norm_error"]
        assert len(e) == 60 and np.isnan(e[:at]).all() and np.isfinite(e[at:]).any()
        assert s["stream_error"]["heads"][head]["since_switch"]
    assert re.search(r"every head on the same windows:\n.*\n  track C .*\n  track A \(the floor\)"
                     r" .*\n  oracle \(the ceiling\) ", res.stdout)
    probe = s["held_out"]["gravity_probe"]  # the chosen track reads memory: its gravity probe
    assert probe["peers"] == 1 and probe["worlds"] == 8
    assert set(probe["e_agg"]) == {"train", "interp", "extrap", "held_out"}
    assert re.search(r"\n  e_agg    interp +\d+\.\d deg", res.stdout)  # its aligned lines
    # the heads' decoded predictions, by the run's one decoder, drawn beside the track's
    px = b["pixels"]["rows"]
    assert {"floor (track A)", "ceiling (oracle)", "peer memory"} <= set(px)
    from runners.online.strips import run_strips, split_strips

    found = split_strips(run_strips(RunFolder(run)))
    assert set(found) == {"main", "floor", "ceiling"} and "interp/own" in found["floor"]
    # the floor head's D^n is the learner's head A scored again from the checkpoint, and the
    # run's perfect physics (the floor's: one latent) that of its final encoder
    from agent.evaluation import family_means, world_curves

    learner = checkpoint_learner(run / "checkpoints" / "latest.pt")
    cfg = resolve(build_config(["--config", str(run / "config.json")]))
    sets = cfg.protocol.evaluator(cfg).sets
    again = family_means(world_curves(learner.heads["A"], sets.held_out, tuple(s["held_out"]["ns"]),
                                      ("own",)))  # fmt: skip
    assert again["interp"]["own"] == pytest.approx(heads["A"]["families"]["interp"]["own"], rel=1e-6)
    fp = heads["A"]["perfect_physics"]
    assert fp == s["held_out"]["perfect_physics"]
    pp = _perfect_physics(run, ("exact", "blind"))
    for fam in ("interp", "extrap"):
        blind = fp["families"][fam]["blind"]
        assert blind == pytest.approx(pp["families"][fam]["blind"], rel=1e-6)
        assert pp["families"][fam]["exact"] == pytest.approx([0.0] * len(blind), abs=1e-4)
    assert "perfect physics, blind" in res.stdout and "Perfect physics in this latent" in (
        run / "summary.md").read_text()


def test_a_run_without_a_settle_says_it_has_no_bounds(tmp_path: Path) -> None:
    res = cli("train_online", *TINY, "--steps", "30", "--out", str(tmp_path), "--name", "run")
    assert res.returncode == 0, res.stderr
    assert "no floor or ceiling: they fit as heads on a settled latent (--settle)" in res.stdout
    assert "bounds" not in json.loads((tmp_path / "run" / "summary.json").read_text())
