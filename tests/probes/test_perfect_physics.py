"""Perfect physics in a learner's latent (probes.perfect_physics): the env's simulator branched
from each test sequence's exact state at the input frame, rendered, encoded, scored by D."""

from __future__ import annotations

import numpy as np
import pytest

import env
from agent import AgentConfig, Learner
from agent.evaluation import input_index, sequence_length
from probes.perfect_physics import (
    WORLD_BLIND,
    as_seen,
    branch_physics,
    perfect_physics,
    scenes_at,
)
from runners.online.world_sets import world_set

N_MAX = 3


@pytest.fixture(scope="module")
def learner() -> Learner:
    cfg = AgentConfig.of_size("tiny", track="A", context_frames=2, horizons=(1, 2, 4),
                                  per_horizon=True)  # fmt: skip
    return Learner(cfg)


def worlds_of(cfg: AgentConfig, physics: list[env.PhysicsParams], family: str = "interp"):
    length = sequence_length(cfg, N_MAX)
    return [world_set(f"{family}-{k}", p, 6, length, [7, k], family)
            for k, p in enumerate(physics)]  # fmt: skip


GRAVITY = [env.PhysicsParams(0.3, 45.0), env.PhysicsParams(0.4, 225.0)]


def test_the_worlds_own_physics_scores_zero(learner: Learner) -> None:
    """Branched under its own physics the simulator renders the true future: D = 0."""
    worlds = worlds_of(learner.cfg, GRAVITY)
    out = perfect_physics(learner, worlds, N_MAX, ("exact",))
    assert out["input_frame"] == input_index(learner.cfg, N_MAX)
    assert out["horizons"] == [1, 2, 4]
    assert out["families"]["interp"]["exact"] == pytest.approx([0.0] * 4, abs=1e-6)


def test_world_blind_physics_misses_gravity_and_only_gravity(learner: Learner) -> None:
    """Above 0 at every horizon where the world has gravity; 0 where it has none (the
    world-blind physics is then the world's own)."""
    heavy = perfect_physics(learner, worlds_of(learner.cfg, GRAVITY), N_MAX)["families"]
    assert all(d > 0.01 for d in heavy["interp"]["blind"])
    assert all(d > 0.01 for d in heavy["interp"]["other"])
    assert heavy["pooled"] == heavy["interp"]  # one family: the pool is that family
    none = worlds_of(learner.cfg, [env.PhysicsParams(), env.PhysicsParams()], "flat")
    assert perfect_physics(learner, none, N_MAX)["families"]["flat"]["blind"] == pytest.approx(
        [0.0] * 4, abs=1e-6)


def test_perfect_physics_is_deterministic_and_leaves_the_worlds_alone(learner: Learner) -> None:
    worlds = worlds_of(learner.cfg, GRAVITY)
    before = [w.scenes.get_state() for w in worlds]
    first = perfect_physics(learner, worlds, N_MAX)
    assert perfect_physics(learner, worlds_of(learner.cfg, GRAVITY), N_MAX) == first
    for w, state in zip(worlds, before, strict=True):  # the branch point is a copy
        assert np.array_equal(w.scenes.positions, state["positions"])
        assert np.array_equal(w.scenes.velocities, state["velocities"])


def test_the_branches_physics() -> None:
    """world-blind: no gravity; other: the next world of the same family, cyclically; none
    for a family of one world; told: the world's own."""
    cfg = AgentConfig.of_size("tiny", track="A")
    a, b = worlds_of(cfg, GRAVITY)
    (c,) = worlds_of(cfg, [env.PhysicsParams(0.7, 90.0)], "extrap")
    worlds = [a, c, b]
    assert branch_physics("exact", a, worlds) == GRAVITY[0]
    assert branch_physics("told", a, worlds) == GRAVITY[0]  # the world's own, from the frames
    assert branch_physics("blind", a, worlds) == WORLD_BLIND == env.PhysicsParams()
    assert branch_physics("other", a, worlds) == GRAVITY[1]
    assert branch_physics("other", b, worlds) == GRAVITY[0]
    assert branch_physics("other", c, worlds) is None
    with pytest.raises(ValueError, match="unknown branch"):
        branch_physics("nope", a, worlds)


def test_scenes_that_do_not_reproduce_the_frames_are_refused() -> None:
    cfg = AgentConfig.of_size("tiny", track="A")
    (w,) = worlds_of(cfg, GRAVITY[:1])
    i = input_index(cfg, N_MAX)
    assert np.array_equal(scenes_at(w, i).render(), w.frames[:, i])
    w.frames = w.frames.copy()
    w.frames[0, i] ^= 1
    with pytest.raises(ValueError, match="do not reproduce its frame"):
        scenes_at(w, i)
    w.scenes = None
    with pytest.raises(ValueError, match="no simulator state"):
        scenes_at(w, i)


def test_the_seen_state_renders_the_frame_and_moves_as_the_frames_show(learner: Learner) -> None:
    """``as_seen``: whole-pixel positions that render frame i exactly, and the velocity of the
    rendered positions of frames i - 1 and i; in a world without gravity whose state is whole
    pixels (speeds rounded), the seen branch is the blind one."""
    (world,) = worlds_of(learner.cfg, GRAVITY[:1])
    i = input_index(learner.cfg, N_MAX)
    now, before = scenes_at(world, i), scenes_at(world, i - 1)
    seen = as_seen(now, before)
    assert np.array_equal(seen.render(), now.render())
    assert np.array_equal(seen.positions, np.rint(seen.positions))
    moved = seen.copy()
    moved.positions[:] = before.positions
    np.testing.assert_array_equal(seen.velocities, seen.positions - np.rint(moved.positions).clip(
        0, seen.limit))
    out = perfect_physics(learner, worlds_of(learner.cfg, GRAVITY), N_MAX)["families"]["interp"]
    assert all(d > 0.01 for d in out["seen"])  # whole pixels and no gravity: not the future


def test_told_is_the_worlds_own_physics_from_what_two_frames_show(learner: Learner) -> None:
    """``told`` starts where ``seen`` does and rolls the world's own physics: in worlds without
    gravity the two are the same branch; with gravity they part."""
    none = worlds_of(learner.cfg, [env.PhysicsParams(), env.PhysicsParams()], "flat")
    flat = perfect_physics(learner, none, N_MAX, ("seen", "told"))["families"]["flat"]
    assert flat["told"] == flat["seen"]
    heavy = perfect_physics(learner, worlds_of(learner.cfg, GRAVITY), N_MAX,
                            ("seen", "told"))["families"]["interp"]
    assert heavy["told"] != heavy["seen"] and all(d > 0.01 for d in heavy["told"])


def test_the_hedged_branches_differ_by_the_world_alone(learner: Learner) -> None:
    """``seen_mean`` and ``told_mean`` mean the latents of draws of the sub-pixel state two
    frames leave open, the same draws for both: where every world of the training family rolls
    as the world's own (no gravity), they are one branch; under gravity they part, the draws
    move the state off ``told``'s, and a second call draws the same. ``seen_mean`` needs the
    training family and is left out without one."""
    none = worlds_of(learner.cfg, [env.PhysicsParams(), env.PhysicsParams()], "flat")
    still = env.WorldFamily("still", (0.0, 0.0), ((0.0, 360.0),))
    flat = perfect_physics(learner, none, N_MAX, ("seen_mean", "told_mean"), still,
                           samples=3)["families"]["flat"]
    assert flat["seen_mean"] == flat["told_mean"]
    heavy = env.WorldFamily("heavy", (0.6, 0.8), ((0.0, 360.0),))
    worlds = worlds_of(learner.cfg, GRAVITY)
    first = perfect_physics(learner, worlds, N_MAX, ("told", "seen_mean", "told_mean"), heavy,
                            samples=3)["families"]["interp"]
    assert first["seen_mean"] != first["told_mean"] and first["told_mean"] != first["told"]
    assert perfect_physics(learner, worlds, N_MAX, ("told", "seen_mean", "told_mean"), heavy,
                           samples=3)["families"]["interp"] == first
    assert "seen_mean" not in perfect_physics(learner, worlds, N_MAX)["families"]["interp"]
