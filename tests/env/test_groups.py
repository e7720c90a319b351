"""WorldSchedule groups: S streams share a world for a residency of R episodes."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from env import MovingMNISTVectorEnv, PhysicsParams, WorldSchedule, family, physics_features

N, S = 6, 3
STEPS = (3, 6)
RESIDENCY = (2, 4)


def _grouped(seed: int | None = 0, n: int = N, s: int = S) -> WorldSchedule:
    return WorldSchedule(
        MovingMNISTVectorEnv(n, max_episode_steps=None), "train", STEPS, seed,
        group_size=s, residency=RESIDENCY,
    )  # fmt: skip


def _trace(sched: WorldSchedule, steps: int) -> list[dict]:
    _, infos = sched.reset(seed=0)
    rows = [{"trunc": np.zeros(sched.num_envs, bool), **infos}]
    for _ in range(steps):
        *_, truncs, infos = sched.step(None)
        rows.append({"trunc": truncs, **infos})
    return rows


def test_a_group_shares_its_world_and_episode_ends_for_a_residency_of_episodes():
    sched = _grouped()
    rows = _trace(sched, 400)
    np.testing.assert_array_equal(rows[0]["group"], [0, 0, 0, 1, 1, 1])
    fam = family("train")
    residencies = []
    for g in range(N // S):
        cols = slice(g * S, (g + 1) * S)
        episodes_in_world, world, digits_differ = 0, None, 0
        for r in rows:
            ids = r["world_id"][cols]
            assert (ids == ids[0]).all()  # one world per group at every frame
            assert (r["physics"][cols] == r["physics"][cols][0]).all()
            trunc = r["trunc"][cols]
            assert trunc.all() or not trunc.any()  # the group's episodes end together
            digits_differ += len({tuple(d) for d in r["digit_ids"][cols]}) > 1
            if world is not None and ids[0] != world:
                residencies.append(episodes_in_world)
                episodes_in_world = 0
            world = ids[0]
            episodes_in_world += int(trunc[0])
        assert digits_differ > 0.9 * len(rows)  # the streams' episodes are their own
    assert set(residencies) == set(range(RESIDENCY[0], RESIDENCY[1] + 1))
    for i in range(N):
        assert fam.contains(sched.physics(i))


def test_world_changes_only_where_an_episode_ended():
    rows = _trace(_grouped(seed=1), 300)
    for prev, r in zip(rows, rows[1:], strict=False):
        changed = r["world_id"] != prev["world_id"]
        np.testing.assert_array_equal(changed & ~prev["trunc"], np.zeros(N, bool))


def test_exact_resume_mid_residency():
    sched = _grouped(seed=2)
    sched.reset(seed=2)
    for _ in range(17):
        sched.step(None)
    state = pickle.loads(pickle.dumps(sched.get_state()))
    ref = [sched.step(None) for _ in range(60)]
    other = _grouped(seed=5)
    other.reset(seed=7)
    other.set_state(state)
    for a, b in zip(ref, [other.step(None) for _ in range(60)], strict=True):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[3], b[3])
        for key in ("world_id", "physics", "group"):
            np.testing.assert_array_equal(a[4][key], b[4][key])


def test_hold_and_release_whole_groups():
    sched = _grouped(seed=3)
    sched.reset(seed=3)
    world = PhysicsParams(gravity=0.7, gravity_direction=45.0)
    sched.hold(world, mask=np.array([False] * S + [True] * S))
    for _ in range(40):
        *_, infos = sched.step(None)
        np.testing.assert_array_equal(infos["physics"][S:], [physics_features(world)] * S)
    sched.release()
    for _ in range(2 * (STEPS[1] + 1)):
        *_, infos = sched.step(None)
    assert all(family("train").contains(sched.physics(i)) for i in range(N))
    sched.set_physics(mask=np.array([True] * S + [False] * S), friction=0.1)
    ids = sched.world_ids
    assert (ids[:S] == ids[0]).all() and ids[0] != ids[S]


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.hold(PhysicsParams(), mask=np.array([True, False, False, False, False, False])),
        lambda s: s.release(mask=np.array([True, True, False, False, False, False])),
        lambda s: s.set_physics(mask=np.array([False, True, True, True, False, False]), gravity=0.1),
        lambda s: s.reset(options={"reset_mask": np.array([True] + [False] * 5)}),
    ],
)
def test_masks_must_select_whole_groups(call):
    sched = _grouped()
    sched.reset(seed=0)
    before = sched.get_state()
    with pytest.raises(ValueError, match="whole groups of 3"):
        call(sched)
    after = sched.get_state()
    np.testing.assert_array_equal(after["world_ids"], before["world_ids"])
    np.testing.assert_array_equal(after["held"], before["held"])
    assert after["rng"] == before["rng"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"group_size": 4}, "group_size must be a positive divisor of num_envs=6"),
        ({"group_size": 0}, "group_size"),
        ({"group_size": True}, "group_size"),
        ({"residency": (0, 2)}, "residency must be integers"),
        ({"residency": (3, 2)}, "residency"),
        ({"residency": 2}, "residency must be a pair"),
    ],
)
def test_bad_group_arguments(kwargs, match):
    args = {"env": MovingMNISTVectorEnv(N), "family": "train", "episode_steps": STEPS}
    with pytest.raises(ValueError, match=match):
        WorldSchedule(**{**args, **kwargs})


def test_a_state_of_another_layout_is_refused():
    sched = _grouped()
    sched.reset(seed=0)
    state = sched.get_state()
    other = _grouped(s=2)
    with pytest.raises(ValueError, match="group_size 3"):
        other.set_state(state)
