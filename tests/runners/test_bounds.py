"""The floor and the ceiling beside the chosen track (runners.online.bounds)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from agent.checkpoint import learner_from_checkpoint as checkpoint_learner
from runners.online import beside, bounds
from runners.online.command import build_config
from runners.online.config import resolve
from runners.online.rundir import RunFolder, StopRequest
from tests.runners.cli_helpers import TINY_WORLDS, cli

TINY = [a for a in TINY_WORLDS if a != "--no-bounds"]


def test_the_bounds_are_the_same_run_without_memory_and_with_the_true_physics() -> None:
    cfg = build_config(["--preset", "tiny", "--track", "B", "--steps", "60"])
    floor, ceiling = bounds.bound_config(cfg, "floor"), bounds.bound_config(cfg, "ceiling")
    assert (floor.agent.track, floor.agent.oracle) == ("A", False)
    assert (ceiling.agent.track, ceiling.agent.oracle) == ("B", True)
    assert not floor.bounds and not ceiling.bounds and bounds.wanted(cfg)
    for other in (floor, ceiling):  # the same stream: seed, worlds, schedule
        assert other.agent.seed == cfg.agent.seed and other.protocol == cfg.protocol
        assert other.schedule == cfg.schedule
        assert other.agent.replace(track="B", oracle=False) == cfg.agent
    a = build_config(["--preset", "tiny", "--track", "A"])
    assert bounds.bound_config(a, "ceiling").agent.track == "C"
    assert not bounds.wanted(build_config(["--preset", "tiny", "--no-bounds"]))
    assert not bounds.wanted(build_config(["--preset", "tiny", "--protocol", "paper"]))
    assert not bounds.wanted(build_config(["--preset", "tiny", "--oracle"]))


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
    text = "\n".join(bounds.bounds_text(b))
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
    text = "\n".join(bounds.bounds_text(bounds.bounds_report(main, floor, ceiling, n=50)))
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


def test_the_default_run_trains_floor_and_ceiling_and_tells_the_story(tmp_path: Path) -> None:
    res = cli("train_online", *TINY, "--steps", "60", "--out", str(tmp_path), "--name", "run")
    assert res.returncode == 0, res.stderr
    run = tmp_path / "run"
    s = json.loads((run / "summary.json").read_text())
    for name, track, oracle in (("floor", "A", False), ("ceiling", "C", True)):
        sub = RunFolder(run / name)
        assert sub.is_finished()
        agent = json.loads(sub.config.read_text())["agent"]
        assert (agent["track"], agent["oracle"]) == (track, oracle)
        assert s["bounds"][name]["run"] == str(sub.root)
    story = bounds.story(s["bounds"])
    assert story in res.stdout  # the first line of the table printed at the end
    assert res.stdout.index(story) < res.stdout.index("end of base training")
    assert res.stdout.count("end of base training") == 1  # the bounds print no tables
    assert (run / "figures" / "bounds.png").stat().st_size > 10_000
    probe = s["held_out"]["gravity_probe"]  # the chosen track reads memory: its gravity probe
    assert probe["peers"] == 1 and probe["worlds"] == 8
    for feature in ("e_agg", "entries"):  # e_agg, and the same entries summarised by hand
        assert set(probe[feature]) == {"train", "interp", "extrap", "held_out"}
        assert probe[feature]["interp"]["chance"] == 1 / 8
        assert 0.0 <= probe[feature]["extrap"]["direction_deg"] <= 180.0
    assert "entries: the same entries summarised by hand" in res.stdout
    assert re.search(r"\n  e_agg    interp +\d+\.\d deg", res.stdout)  # its aligned lines
    floor = json.loads((run / "floor" / "summary.json").read_text())
    assert floor["held_out"]["gravity_probe"] is None  # track A has no memory to probe
    md = (run / "summary.md").read_text()
    assert bounds.story(s["bounds"]) in md
    pp = s["held_out"]["perfect_physics"]  # every worlds run measures perfect physics
    assert set(pp["families"]) == {"interp", "extrap", "pooled"}
    assert all(len(d) == len(pp["horizons"]) + 1 for d in pp["families"]["pooled"].values())
    # The floor's perfect physics is that of its final learner on the run's held-out worlds:
    # recomputed here, world-blind physics scores what the run wrote, and the world's exact
    # physics (the true future, re-rendered) D = 0 to the encoder's rounding; pooled is the
    # families' mean.
    fp = floor["held_out"]["perfect_physics"]
    again = _perfect_physics(run / "floor", ("exact", "blind"))
    assert again["input_frame"] == fp["input_frame"]
    fams = fp["families"]
    for fam in ("interp", "extrap"):
        blind = fams[fam]["blind"]
        assert blind == pytest.approx(again["families"][fam]["blind"], rel=1e-6)
        assert again["families"][fam]["exact"] == pytest.approx([0.0] * len(blind), abs=1e-4)
        assert min(blind) > 1e-2  # world-blind physics is not the world's
    for branch, d in fams["pooled"].items():
        pairs = zip(fams["interp"][branch], fams["extrap"][branch], strict=True)
        assert d == pytest.approx([(a + b) / 2 for a, b in pairs], rel=1e-12), branch
    assert "perfect physics, blind" in res.stdout and "world-blind (no gravity)" in res.stdout
    assert "Perfect physics in this latent" in md


def test_bounds_are_jobs_of_the_main_runs_config_with_their_options(tmp_path: Path) -> None:
    """A bound's job (``train_online --config <main>/config.json`` and its options) is
    ``bound_config`` of the main run, whatever its track, preset or learner options."""
    for extra in ([], ["--track", "A"], ["--track", "B", "--preset", "paper", "--lr", "0.01"]):
        cfg = build_config([*TINY, "--steps", "40", *extra])
        folder = RunFolder(tmp_path / "main")
        folder.root.mkdir(exist_ok=True)
        cfg.save(folder.config)
        for name in bounds.BOUNDS:
            spec = beside.bound_spec(folder, cfg, name)
            assert spec.run_dir == str(folder.root / name) and spec.name == name
            made = build_config([*spec.args, "--out", str(folder.root), "--name", name])
            want = resolve(bounds.bound_config(cfg, name))
            assert dataclasses.replace(made, output=want.output) == want


def test_bounds_stopped_before_they_start_train_later_and_are_read_when_finished(
    tmp_path: Path,
) -> None:
    res = cli("train_online", *TINY, "--no-bounds", "--steps", "40", "--out", str(tmp_path),
              "--name", "run")  # fmt: skip
    assert res.returncode == 0, res.stderr
    folder = RunFolder(tmp_path / "run")
    cfg = build_config([*TINY, "--steps", "40"])
    stop = StopRequest()
    stop.request("test")
    assert beside.Bounds(cfg, folder, 1, 1).join(stop) is None  # nothing started
    assert not (folder.root / "floor").exists() and not (folder.root / "ceiling").exists()
    found = beside.Bounds(cfg, folder, 1, 1).join(StopRequest())
    assert found is not None and set(found) == {"floor", "ceiling"}
    assert found["floor"]["steps_done"] == 40 and found["ceiling"]["steps_done"] == 40
    again = beside.Bounds(cfg, folder, 3, 1)
    assert again.names == [] and not again.beside  # finished ones are read, not rerun
    assert again.join(StopRequest()) == found


SETTLED = [*TINY, "--settle", "0.5", "--fit-batch", "8", "--fit-worlds", "2"]


def test_a_settled_run_fits_its_floor_and_ceiling_as_heads_on_its_latent(tmp_path: Path) -> None:
    """A run that settles fits the floor and the ceiling as heads in its own process
    (``agent.heads``): no bound runs, the bounds from its heads' held-out reports, and the
    chosen track bit for bit as the run without them (--no-bounds)."""
    res = cli("train_online", *SETTLED, "--steps", "60", "--out", str(tmp_path), "--name", "run")
    assert res.returncode == 0, res.stderr
    alone = cli("train_online", *SETTLED, "--no-bounds", "--steps", "60", "--out", str(tmp_path),
                "--name", "alone")  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    run = tmp_path / "run"
    assert not (run / "floor").exists() and not (run / "ceiling").exists()
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["agent"]["heads"] == ["A", "oracle"]
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
    assert bounds.story(b) in res.stdout
    assert (run / "figures" / "bounds.png").stat().st_size > 10_000
    # the heads' decoded predictions, by the run's one decoder, drawn beside the track's
    px = b["pixels"]["rows"]
    assert {"floor (track A)", "ceiling (oracle)", "peer memory"} <= set(px)
    from runners.online.strips import run_strips, split_strips

    found = split_strips(run_strips(RunFolder(run)))
    assert set(found) == {"main", "floor", "ceiling"} and "interp/own" in found["floor"]
    # the floor head's D^n is the learner's head A scored again from the checkpoint
    from agent.evaluation import family_means, world_curves

    learner = checkpoint_learner(run / "checkpoints" / "latest.pt")
    sets = resolve(build_config(["--config", str(run / "config.json")])).protocol.evaluator(
        resolve(build_config(["--config", str(run / "config.json")]))).sets
    again = family_means(world_curves(learner.heads["A"], sets.held_out, tuple(s["held_out"]["ns"]),
                                      ("own",)))  # fmt: skip
    assert again["interp"]["own"] == pytest.approx(heads["A"]["families"]["interp"]["own"], rel=1e-6)
