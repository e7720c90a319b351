"""The worlds protocol of train_online: its config, the scheduled stream world and its switch,
the evaluation worlds, and a command-line run whose summary holds the held-out curves."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_helpers import TINY_WORLDS, cli

import env
from agent import AgentConfig
from agent.checkpoint import learner_from_checkpoint as checkpoint_learner
from runners.cli import CliError
from runners.online.command import build_config, config_from_dict
from runners.online.config import Worlds
from runners.online.feeds import make_scheduled_feed
from runners.online.presets import PRESETS
from runners.online.summary import since_switch
from runners.online.world_sets import family_of, make_world_sets
from runners.style import DPI

WORLDS_FINAL_NS = (0, 1, 5, 10, 25, 50)
PAPER_FINAL_NS = (0, 10, 25, 50, 100, 256)


def test_worlds_is_the_default_and_paper_one_flag_away() -> None:
    w = build_config([])
    assert w.protocol.kind == "worlds" and w.schedule.final_ns == WORLDS_FINAL_NS
    assert w.schedule.best_min_sigma == 0.2  # the collapse guard of best.pt
    preset = PRESETS["cpu"].protocols["worlds"]  # the default preset's own, on top of the protocol's
    for k, v in {**Worlds.learner, **preset}.items():
        assert getattr(w.agent, k) == v, k
    assert w.agent.context_frames == 4 and w.agent.recon_weight == 3.0
    assert family_of(w.shift_physics) == "extrap"  # the default switch is held out
    p = build_config(["--protocol", "paper"])
    assert p.schedule.final_ns == PAPER_FINAL_NS and p.schedule.best_min_sigma == 0.0
    assert p.agent.memory_scope == "global" and p.agent.context_frames == 1
    assert p.agent.memory_write == "boundary" and p.agent.input_scale == 1.0
    assert p.agent.push_pair == "input"  # the stream source never leaks the future


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--source", "dataset", "--data", "x.zarr"], "--source belongs to --protocol paper"),
        (["--base-gravity", "0.2"], "--base-gravity belongs to --protocol paper"),
        (["--episode-steps", "10", "40"], "episode_steps"),
        (["--eval-world-seqs", "1"], "eval_world_seqs"),
        (["--base-world-seqs", "1"], "base_world_seqs"),
        (["--eval-worlds", "1"], r"eval_worlds must be at least 2 \(the wrong-world control"),
        (["--set", "best_min_sigma=-1"], "best_min_sigma must be >= 0"),
        (["--protocol", "other"], "protocol"),
        (["--train-gravity", "0.1", "0.7"], "families train and extrap overlap"),
        (["--set", "interp_arcs=[0, 50]"], "families train and interp overlap"),
        (["--train-gravity", "0.5", "0.1"], r"the train worlds \(train_\*\): .*empty"),
        (["--set", "extrap_arcs=[10]"], "extrap_arcs must be START END pairs"),
        (["--set", "interp_arcs=[50, 40]"], "arcs must be"),
        (["--set", "extrap_friction=[0.5, 1.5]"], "friction"),
        (["--residency", "0", "2"], "residency must be LOW HIGH"),
    ],
)
def test_worlds_bad_options(argv: list[str], message: str) -> None:
    with pytest.raises(CliError, match=message):
        build_config(argv)


def test_switch_starts_every_stream_anew_in_the_held_world_for_good() -> None:
    cfg = AgentConfig.of_size("tiny", track="C", **{**Worlds.learner, "push_pair": "input"})
    world = make_scheduled_feed(6, "train", (21, 40), cfg, "cpu", seed=3)
    for _ in range(5):
        world.next()
    before = world.episode_id.copy()
    held = env.PhysicsParams(gravity=0.3, gravity_direction=45.0)
    world.enter(held, 1)
    assert (world.shifted == 1).all()
    b1 = world.next()  # the last frame of the old episode (in the held physics already)
    b2 = world.next()  # every stream's first frame of a new episode
    assert b1.valid.any() and not b2.valid.any()  # windows spanning the start: memory emptied
    np.testing.assert_array_equal(world.episode_id, before + 1)
    assert world.schedule.held.all()
    assert all(p == held for p in world.stream_physics())
    np.testing.assert_allclose(b2.physics.numpy(), np.tile(env.physics_features(held), (6, 1)),
                               rtol=1e-6)  # fmt: skip
    for _ in range(45):  # longer than any drawn episode: the held episodes never end
        last = world.next()
        np.testing.assert_array_equal(world.episode_id, before + 1)
    assert last.valid.all()
    world.enter(held, 0)  # back to the schedule: each stream's episode ends within 40 steps
    assert not world.schedule.held.any()
    for _ in range(41):
        world.next()
    assert (world.episode_id == before + 2).all()


def test_world_sets_are_deterministic_and_held_out() -> None:
    cfg = AgentConfig.of_size("tiny", track="C", **{**Worlds.learner, "push_pair": "input"})
    shift = env.PhysicsParams(gravity=0.3, gravity_direction=45.0)

    def sets(seed: int):
        return make_world_sets(cfg, shift, train_family="train", n_max=5, shift_seqs=3,
                               world_seqs=2, worlds_per_family=2, seed=seed)  # fmt: skip

    a, b, c = sets(1), sets(1), sets(2)
    assert [w.family for w in a.base] == ["train"] * 2
    assert [w.family for w in a.held_out] == ["interp", "interp", "extrap", "extrap"]
    assert a.shift.family == "interp"
    length = max(5 + cfg.entry_frames - 1, cfg.context_frames - 1) + cfg.horizons[-1] + 1
    assert a.shift.frames.shape == (3, length, 1, 64, 64)
    for x, y in zip([a.shift, *a.base, *a.held_out], [b.shift, *b.base, *b.held_out], strict=True):
        np.testing.assert_array_equal(x.frames, y.frames)
        assert x.positions.shape == (*x.frames.shape[:2], 2, 2)  # the digits' positions, for probes
        np.testing.assert_array_equal(x.physics, y.physics)
    assert not np.array_equal(a.base[0].physics, c.base[0].physics)
    # the training family's own size (the periodic D_base, the probes' fit): 3 worlds of 4
    small = make_world_sets(cfg, shift, train_family="train", n_max=5, shift_seqs=3,
                            world_seqs=2, worlds_per_family=2, seed=1, base=(3, 4))  # fmt: skip
    assert [w.frames.shape[0] for w in small.base] == [4, 4, 4]
    assert [w.frames.shape[0] for w in small.held_out] == [2] * 4
    np.testing.assert_array_equal(small.base[0].frames[:2], a.base[0].frames)


def test_memory_write_every_pushes_each_valid_step() -> None:
    from agent import Learner
    from agent.sources import Batch

    cfg = AgentConfig.of_size(
        "tiny", track="C", push_pair="input", memory_scope="group", group_size=1,
        memory_read="all", memory_write="every", batch_size=3, buffer_capacity=4,
    )  # fmt: skip
    learner = Learner(cfg)
    f = len(cfg.frame_offsets)
    valid = torch.tensor([True, True, False])
    for step in range(6):
        g = torch.Generator().manual_seed(step)
        frames = torch.randint(0, 256, (3, f, 1, 64, 64), dtype=torch.uint8, generator=g)
        learner.update(Batch(frames, valid, torch.zeros(3, dtype=torch.long)))
        # streams 0 and 1 push every step (to the capacity); stream 2 is invalid: no entry
        assert learner.buffer.size.tolist() == [min(step + 1, 4), min(step + 1, 4), 0]


def _final_probes(run: Path) -> dict[str, dict[str, float]]:
    """probes.digits.probe_report of the run's latest checkpoint on the evaluation worlds its
    config draws: fit on the training-family worlds' sequences, scored on the held-out ones'."""
    from probes.digits import ProbeSet, probe_report
    cfg = config_from_dict(json.loads((run / "config.json").read_text()))
    sets = cfg.protocol.evaluator(cfg).sets
    learner = checkpoint_learner(run / "checkpoints" / "latest.pt")
    assert learner.step == cfg.schedule.steps

    def encode(frames: torch.Tensor, target: bool) -> torch.Tensor:
        with torch.no_grad():
            return learner.encode(frames, target=target)

    def probe_sets(worlds) -> list[ProbeSet]:
        return [ProbeSet(np.asarray(w.frames), np.asarray(w.positions)) for w in worlds]

    return probe_report(encode, probe_sets(sets.base), probe_sets(sets.held_out),
                        cfg.agent.context_frames)


def test_run_writes_held_out_curves(tmp_path: Path) -> None:
    res = cli("train_online", *TINY_WORLDS, "--set", "best_min_sigma=1e6", "--out", str(tmp_path), "--name",
              "w", "--steps", "40", "--switch", "30:gravity=0.6,direction=0")  # an extrap world
    assert res.returncode == 0, res.stderr
    assert "worlds protocol" in res.stdout and "held-out worlds at the end" in res.stdout
    s = json.loads((tmp_path / "w" / "summary.json").read_text())
    assert s["protocol"] == "worlds" and s["switch_world_family"] == "extrap"
    held = s["held_out"]
    assert held["ns"] == list(WORLDS_FINAL_NS) and held["memories"] == ["own", "same", "wrong"]
    assert set(held["families"]) == {"interp", "extrap"}
    for mems in held["families"].values():
        assert set(mems) == {"own", "same", "wrong"}
        # an empty memory is the same whatever its source would have been
        assert len({round(d[0], 9) for d in mems.values()}) == 1
    assert [r["n"] for r in s["adaptation_curve"]] == list(WORLDS_FINAL_NS)
    probes = held["probes"]  # R^2 of every latent and target (probes.digits)
    assert set(probes) == {"online", "target", "context", "context_mlp"}
    assert all(set(row) == {"position", "centroid", "velocity", "position_px", "velocity_px"}
               for row in probes.values())  # fmt: skip
    # They are the final learner's: its online and EMA-target encoders (frozen since the switch)
    # on the run's own evaluation worlds, probes fit on the training family's sequences and
    # scored on the held-out ones (probes.digits, its ridge and R^2 checked in closed form in
    # tests/probes/test_digit_probe.py).
    final = _final_probes(tmp_path / "w")
    assert probes.keys() == final.keys()
    for latent, row in final.items():
        assert probes[latent] == pytest.approx(row, rel=1e-6, abs=1e-9), latent
    assert "probes of the digits' state on held-out worlds" in res.stdout
    ref = held["reference"]  # agent.evaluation.reference_check, per family
    assert set(ref) == {"interp", "extrap"}
    k = len(held["horizons"]) + 1  # per horizon, then the mean
    assert all(set(r) == {"d", "d_target_ref", "d_future_online"} for r in ref.values())
    assert all(len(v) == k for r in ref.values() for v in r.values())
    assert "how much of D is predicted motion" in res.stdout
    # The collapse guard admitted no evaluation: no best.pt, and the summary says so.
    assert s["best"] == {"d_shift": None, "step": None, "min_sigma": 1e6}
    assert not (tmp_path / "w" / "checkpoints" / "best.pt").exists()
    since = s["stream_error"]["since_switch"]
    assert [(r["from"], r["to"]) for r in since] == [(0, 10)]
    figures = tmp_path / "w" / "figures"
    png = (figures / "overview.png").read_bytes()
    assert png[:4] == b"\x89PNG" and int.from_bytes(png[16:20], "big") == 18 * DPI  # 3 columns
    assert "stream error by steps since the switch (weights frozen)" in res.stdout
    ev = cli("evaluate", str(tmp_path / "w"), "--n", "0", "3")
    assert ev.returncode == 0, ev.stderr
    rep = json.loads((tmp_path / "w" / "checkpoints" / "latest.eval.json").read_text())
    assert [r["n"] for r in rep["curve"]] == [0, 3] and rep["held_out"]["ns"] == [0, 3]
    assert rep["held_out"]["probes"] == probes  # the same checkpoint, the same probes
    assert rep["held_out"]["reference"] == ref
    assert "held-out worlds at step" in ev.stdout and "probes of the digits' state" in ev.stdout
    assert "perfect physics in this latent" in ev.stdout  # probes.perfect_physics
    more = cli("evaluate", str(tmp_path / "w"), "--n", "0", "3", "--eval-worlds", "3",
               "--eval-world-seqs", "5", "--world-probe", "--probe-worlds", "2", "--probe-steps",
               "5", "--out", str(tmp_path / "more.json"))  # fmt: skip
    assert more.returncode == 0, more.stderr
    worlds = json.loads((tmp_path / "more.json").read_text())["held_out"]["worlds"]
    assert len({w["world"] for w in worlds}) == 2 * 3  # three worlds a held-out family
    wp = json.loads((tmp_path / "more.json").read_text())["world_probe"]
    assert wp["fit"]["worlds"] == 2 and wp["horizons"] == held["horizons"]
    assert set(wp["families"]) == {"interp", "extrap", "pooled"}
    assert all(set(r) == {"latent", "latent_world", "gain"} and len(r["gain"]) == k
               and np.isfinite(r["latent"]).all() for r in wp["families"].values())
    assert "the world probe" in more.stdout
    # What evaluate refuses of a worlds run: one line each (exit 2: tests/runners/test_cli.py).
    from runners import evaluate
    from runners.cli import CliError

    for argv, line in (
        (["--eval-worlds", "1"], "eval_worlds must be at least 2"),
        (["--target-reference"], "--target-reference: a paper-protocol run only"),
        (["--data", str(tmp_path / "some.zarr")], "--data: a paper-protocol run only"),
        (["--world-probe", "--probe-steps", "0"], "--probe-steps"),
    ):
        with pytest.raises(CliError, match=re.escape(line)):
            evaluate.main([str(tmp_path / "w"), *argv])
    at = cli("evaluate", str(tmp_path / "w"), "--n", "0", "3", "--world-probe", "--probe-worlds",
             "2", "--probe-steps", "5", "--probe-window", "input", "--out", str(tmp_path / "at.json"))
    assert at.returncode == 0, at.stderr
    cfg = json.loads((tmp_path / "w" / "config.json").read_text())["agent"]
    start = json.loads((tmp_path / "at.json").read_text())["world_probe"]["fit"]["start"]
    c = cfg["context_frames"]  # the held-out input frame (n = 3) ends the context
    assert start == max(3 + cfg["entry_frames"] - 1, c - 1) - c + 1 > 0
    assert f"windows from frame {start}" in at.stdout
    # A checkpoint on its own: its group memory says the worlds protocol.
    alone = cli("evaluate", str(tmp_path / "w" / "checkpoints" / "latest.pt"), "--n", "0", "3",
                "--out", str(tmp_path / "alone.json"))  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    assert "held-out worlds at step" in alone.stdout
    assert held["gravity_probe"]["peers"] == 1  # the tiny preset's worlds of 2 streams
    # A run of an earlier version is refused in one line naming its version, never a
    # traceback: its folder and its checkpoint on their own, and its --resume (config.json).
    old = tmp_path / "old"
    shutil.copytree(tmp_path / "w", old)
    saved = json.loads((old / "config.json").read_text())
    (old / "config.json").write_text(json.dumps({**saved, "version": 1}))
    ckpt = old / "checkpoints" / "latest.pt"
    payload = torch.load(ckpt, weights_only=False)
    torch.save({**payload, "format_version": 1}, ckpt)
    said = ("was written by version 1 of this project, this is version 2: use it with the code of "
            "its version")
    for args in ([str(old)], [str(ckpt)]):
        refused = cli("evaluate", *args, "--n", "0")
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].endswith(f"error: {ckpt}: the checkpoint {said}"), lines
    resumed = cli("train_online", "--resume", str(old))
    assert resumed.returncode == 2 and "Traceback" not in resumed.stderr, resumed.stderr
    lines = resumed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"error: config.json {said}"), lines


def test_stream_error_since_the_switch_is_binned_exactly() -> None:
    err = np.arange(300, dtype=np.float64)
    err[100:103] = np.nan  # the first steps after the switch: no valid window yet
    rows = since_switch(err, 100)
    assert [(r["from"], r["to"]) for r in rows] == [(0, 25), (25, 50), (50, 100), (100, 200)]
    assert rows[0]["mean"] == pytest.approx(np.mean(np.arange(103, 125)))
    assert rows[0]["valid_steps"] == pytest.approx(22 / 25, abs=1e-3)
    assert rows[3]["mean"] == pytest.approx(np.mean(np.arange(200, 300)))
    assert since_switch(err, None) == [] and since_switch(err, 300) == []


def test_families_from_the_command_line_reach_the_streams_and_the_evaluation() -> None:
    cfg = build_config([*TINY_WORLDS, "--set", "extrap_gravity=[0.85, 0.95]", "--train-arcs",
                        "80", "100", "--set", "interp_restitution=[0.8, 0.9]"])  # fmt: skip
    fams = cfg.protocol.families()
    assert fams["extrap"].gravity == (0.85, 0.95) and fams["train"].arcs == ((80.0, 100.0),)
    sets = cfg.protocol.evaluator(cfg).sets
    assert [w.family for w in sets.held_out] == ["interp"] * 2 + ["extrap"] * 2
    for w in sets.held_out[2:]:
        assert 0.85 <= float(np.hypot(*w.physics[:2])) <= 0.95
    for w in sets.held_out[:2]:
        assert 0.8 <= float(w.physics[2]) <= 0.9  # restitution
    world = cfg.protocol.feed(cfg, torch.device("cpu"))
    for p in world.stream_physics():  # the training worlds point within 10 degrees of down
        assert fams["train"].contains(p) and 80 <= p.gravity_direction <= 100
