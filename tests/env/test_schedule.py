"""WorldSchedule: one drawn world per episode, random lengths, hold/release, exact resume."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from gymnasium.error import ResetNeeded

import env
from env import MovingMNISTVectorEnv, PhysicsParams, WorldSchedule, family, physics_features

N = 4
STEPS = (3, 6)


def _schedule(seed: int | None = None) -> WorldSchedule:
    return WorldSchedule(MovingMNISTVectorEnv(N, max_episode_steps=None), "train", STEPS, seed)


def _run(s: WorldSchedule, steps: int) -> list[tuple]:
    return [s.step(None) for _ in range(steps)]


def _assert_same_steps(a: list[tuple], b: list[tuple]) -> None:
    for ra, rb in zip(a, b, strict=True):
        for k in range(4):
            np.testing.assert_array_equal(ra[k], rb[k])
        assert ra[4].keys() == rb[4].keys()
        for key in ra[4]:
            np.testing.assert_array_equal(ra[4][key], rb[4][key])


def _episodes(s: WorldSchedule, steps: int) -> list[list[dict]]:
    """Reset ``s`` (seed 0), step it; per sub-env the complete episodes, each a list of frames
    (``world_id``, ``physics`` row, ``world`` (the env's physics then), ``limit``, ``elapsed``)
    from the reset frame to the truncation."""
    _, infos = s.reset(seed=0)
    current: list[list[dict]] = [[] for _ in range(N)]
    done: list[list[list[dict]]] = [[] for _ in range(N)]

    def record(infos: dict, truncs: np.ndarray) -> None:
        for i in range(N):
            current[i].append(
                {
                    "world_id": int(infos["world_id"][i]),
                    "physics": infos["physics"][i].copy(),
                    "world": None if truncs[i] else s.physics(i),  # redrawn after truncation
                    "limit": None if truncs[i] else int(s.episode_limits[i]),
                    "elapsed": int(s.elapsed_steps[i]),
                }
            )
            if truncs[i]:
                done[i].append(current[i])
                current[i] = []

    record(infos, np.zeros(N, bool))
    for _ in range(steps):
        *_, truncs, infos = s.step(None)
        record(infos, truncs)
    return done


def test_every_episode_runs_in_one_drawn_world_for_its_drawn_length():
    s = _schedule()
    episodes = _episodes(s, 120)
    fam = family("train")
    ids, lengths = [], []
    for per_env in episodes:
        assert len(per_env) >= 120 // (STEPS[1] + 1)
        worlds = []
        for ep in per_env:
            first = ep[0]
            assert first["elapsed"] == 0  # starts at a reset frame
            world, limit = first["world"], first["limit"]
            assert fam.contains(world)
            assert STEPS[0] <= limit <= STEPS[1]
            assert len(ep) == limit + 1  # limit steps after the reset frame, then truncated
            assert [f["elapsed"] for f in ep] == list(range(limit + 1))
            for frame in ep:
                assert frame["world_id"] == first["world_id"]
                np.testing.assert_array_equal(frame["physics"], physics_features(world))
            worlds.append(world)
            ids.append(first["world_id"])
            lengths.append(limit)
        assert all(a != b for a, b in zip(worlds, worlds[1:], strict=False))
    assert len(set(ids)) == len(ids)  # a new id for every episode of every sub-env
    assert set(lengths) == set(range(STEPS[0], STEPS[1] + 1))


def test_reset_seed_determinism():
    a, b = _schedule(seed=1), _schedule(seed=2)
    ra, rb = a.reset(seed=3), b.reset(seed=3)
    np.testing.assert_array_equal(ra[0], rb[0])
    for key in ("physics", "world_id", "positions"):
        np.testing.assert_array_equal(ra[1][key], rb[1][key])
    limits = a.episode_limits
    np.testing.assert_array_equal(limits, b.episode_limits)
    _assert_same_steps(_run(a, 40), _run(b, 40))
    _, infos = _schedule().reset(seed=4)
    assert not np.array_equal(infos["physics"], ra[1]["physics"])
    # a constructor seed draws the same worlds and lengths as reset(seed=...)
    c = _schedule(seed=3)
    _, infos = c.reset()
    np.testing.assert_array_equal(infos["physics"], ra[1]["physics"])
    np.testing.assert_array_equal(c.episode_limits, limits)
    # the schedule does not draw from the sub-envs' generators: the frames of a bare env
    bare = MovingMNISTVectorEnv(N, max_episode_steps=None)
    np.testing.assert_array_equal(bare.reset(seed=3)[0], ra[0])


def test_exact_resume_from_a_state():
    s = _schedule(seed=0)
    s.reset(seed=5)
    _run(s, 3)
    s.hold(PhysicsParams(gravity=0.7, gravity_direction=100.0), mask=np.array([0, 1, 0, 0], bool))
    for _ in range(10):  # stop right after a truncation: a drawn world and a reset are pending
        if s.step(None)[3][[0, 2, 3]].any():
            break
    else:
        pytest.fail("no episode ended")
    state = pickle.loads(pickle.dumps(s.get_state()))  # as in a checkpoint
    ref = _run(s, 40)
    other = WorldSchedule(MovingMNISTVectorEnv(N, max_episode_steps=None), "train", STEPS, 99)
    other.reset(seed=123)
    _run(other, 2)
    other.set_state(state)
    np.testing.assert_array_equal(other.held, [False, True, False, False])
    _assert_same_steps(ref, _run(other, 40))
    np.testing.assert_array_equal(other.world_ids, s.world_ids)


def test_hold_switches_mid_episode_and_stays_across_episodes():
    s = _schedule()
    s.reset(seed=1)
    _run(s, 1)  # every sub-env at step 1 of an episode of >= 3 steps: none ends next step
    world = family("extrap").sample(np.random.default_rng(0), 1)[0]
    mask = np.array([True, True, False, False])
    ids_before = s.world_ids
    physics_before = [s.physics(i) for i in range(N)]
    ref = MovingMNISTVectorEnv(N, max_episode_steps=None)
    ref.set_state(s.env.get_state())
    s.hold(world, mask=mask)
    ref.set_physics(mask=mask, **world.as_dict())
    obs, _, _, truncs, infos = s.step(None)
    robs, *_, rinfos = ref.step(None)
    np.testing.assert_array_equal(obs, robs)  # the held sub-envs moved in `world` this step
    np.testing.assert_array_equal(infos["velocities"], rinfos["velocities"])
    np.testing.assert_array_equal(s.elapsed_steps, [2] * N)  # the same episodes go on
    assert not truncs.any()
    held_id = infos["world_id"][0]
    assert held_id > ids_before.max()
    np.testing.assert_array_equal(infos["world_id"], [held_id, held_id, *ids_before[2:]])
    np.testing.assert_array_equal(infos["physics"][:2], [physics_features(world)] * 2)
    for i in (2, 3):
        np.testing.assert_array_equal(infos["physics"][i], physics_features(physics_before[i]))
    np.testing.assert_array_equal(s.held, mask)
    held_ends = 0
    for _ in range(40):
        *_, truncs, infos = s.step(None)
        held_ends += int(truncs[:2].sum())
        np.testing.assert_array_equal(infos["physics"][:2], [physics_features(world)] * 2)
        np.testing.assert_array_equal(infos["world_id"][:2], [held_id] * 2)
        limits = s.episode_limits
        assert ((limits >= STEPS[0]) & (limits <= STEPS[1])).all()
        assert (s.elapsed_steps[~truncs] < limits[~truncs]).all()  # (truncs: the next limit)
    assert held_ends >= 2 * 40 // (STEPS[1] + 1)
    assert (infos["world_id"][2:] > held_id).all()  # the others kept drawing
    assert all(family("train").contains(s.physics(i)) for i in (2, 3))


def test_release_resumes_drawing_at_the_next_episode_end():
    s = _schedule()
    s.reset(seed=2)
    world = PhysicsParams(gravity=0.7)
    s.hold(world)
    _run(s, 1)
    held_id = s.world_ids[0]
    np.testing.assert_array_equal(s.world_ids, [held_id] * N)
    s.release(mask=np.array([True, False, False, False]))
    np.testing.assert_array_equal(s.held, [False, True, True, True])
    for _ in range(STEPS[1]):  # sub-env 0 finishes its episode in the held world
        *_, truncs, infos = s.step(None)
        np.testing.assert_array_equal(infos["physics"], [physics_features(world)] * N)
        np.testing.assert_array_equal(infos["world_id"], [held_id] * N)
        if truncs[0]:
            break
    else:
        pytest.fail("sub-env 0 did not end its episode")
    *_, infos = s.step(None)  # its reset frame: a fresh world of the family
    assert s.elapsed_steps[0] == 0
    assert family("train").contains(s.physics(0))
    assert infos["world_id"][0] > held_id
    np.testing.assert_array_equal(infos["physics"][0], physics_features(s.physics(0)))
    np.testing.assert_array_equal(infos["physics"][1:], [physics_features(world)] * 3)
    np.testing.assert_array_equal(infos["world_id"][1:], [held_id] * 3)
    s.release()
    assert not s.held.any()
    _run(s, 2 * (STEPS[1] + 1))
    assert (s.world_ids > held_id).all()
    assert all(family("train").contains(s.physics(i)) for i in range(N))


def test_endless_hold_ends_the_current_episode_only_and_release_draws_a_length():
    s, ref = _schedule(seed=3), _schedule(seed=3)
    s.reset(seed=3)
    ref.reset(seed=3)
    world = PhysicsParams(gravity=0.3, gravity_direction=45.0)
    mask = np.array([True, True, False, False])
    s.hold(world, mask=mask, endless=True)
    ref.hold(world, mask=mask)
    ends, ref_ends = np.zeros(N, np.int64), np.zeros(N, np.int64)
    for _ in range(6 * (STEPS[1] + 1)):
        ends += s.step(None)[3]
        ref_ends += ref.step(None)[3]
    # Each held sub-env ended the episode it was in, then never again (held without
    # ``endless``, it goes on ending episodes); the others kept drawing worlds.
    np.testing.assert_array_equal(ends[:2], [1, 1])
    assert (ref_ends[:2] >= 5).all() and (ends[2:] >= 5).all()
    assert all(family("train").contains(s.physics(i)) for i in (2, 3))
    np.testing.assert_array_equal(s.episode_limits[:2], [env.NO_EPISODE_LIMIT] * 2)
    assert s.elapsed_steps[0] > STEPS[1]
    state = pickle.loads(pickle.dumps(s.get_state()))
    np.testing.assert_array_equal(state["endless"], mask)
    other = _schedule(seed=9)
    other.reset(seed=9)
    other.set_state(state)
    _assert_same_steps(_run(s, 5), _run(other, 5))
    s.release(mask=np.array([True, False, False, False]))
    elapsed = s.elapsed_steps[0]
    assert elapsed < s.episode_limits[0] <= elapsed + STEPS[1]
    assert s.episode_limits[1] == env.NO_EPISODE_LIMIT
    for _ in range(STEPS[1]):
        if s.step(None)[3][0]:
            break
    else:
        pytest.fail("the released sub-env did not end its episode")


def test_reset_mask_is_respected():
    s = _schedule()
    s.reset(seed=0)
    _run(s, 2)
    ids, limits, elapsed = s.world_ids, s.episode_limits, s.elapsed_steps
    physics = [s.physics(i) for i in range(N)]
    _, infos = s.reset(options={"reset_mask": np.array([False, True, False, False])})
    np.testing.assert_array_equal(s.elapsed_steps, [elapsed[0], 0, elapsed[2], elapsed[3]])
    assert infos["world_id"][1] > ids.max() and infos["_world_id"].all()
    np.testing.assert_array_equal(infos["world_id"][[0, 2, 3]], ids[[0, 2, 3]])
    assert [s.physics(i) == physics[i] for i in range(N)] == [True, False, True, True]
    assert family("train").contains(s.physics(1))
    np.testing.assert_array_equal(s.episode_limits[[0, 2, 3]], limits[[0, 2, 3]])
    assert STEPS[0] <= s.episode_limits[1] <= STEPS[1]
    # a held sub-env keeps its world through a reset; the others get fresh ones
    world = PhysicsParams(gravity=0.75, gravity_direction=0.0)
    s.hold(world, mask=np.array([True, False, False, False]))
    held_id = s.world_ids[0]
    _, infos = s.reset(options={"reset_mask": np.array([True, True, False, False])})
    assert s.physics(0) == world and infos["world_id"][0] == held_id
    assert infos["world_id"][1] > held_id and family("train").contains(s.physics(1))


def test_passes_through_the_vector_env_api():
    v = MovingMNISTVectorEnv(N, max_episode_steps=None)
    s = WorldSchedule(v, family("interp"), STEPS, seed=0)
    assert s.unwrapped is v and s.env is v and env.WorldSchedule is WorldSchedule
    assert s.num_envs == N and s.action_space == v.action_space
    assert s.observation_space == v.observation_space
    assert s.metadata["autoreset_mode"] == v.metadata["autoreset_mode"]
    obs, infos = s.reset(seed=0)
    assert obs.shape == (N, 1, 64, 64)
    assert all(family("interp").contains(s.physics(i)) for i in range(N))
    ids = s.world_ids
    s.set_gravity(0.25, mask=np.array([True, False, False, False]))
    assert s.physics(0).gravity == 0.25
    assert s.world_ids[0] > ids.max()  # a changed world is a new world
    np.testing.assert_array_equal(s.world_ids[1:], ids[1:])
    s.set_physics(friction=0.1)
    assert len(set(s.world_ids.tolist())) == N and s.world_ids.min() > ids.max()
    obs, rewards, terms, truncs, infos = s.step(s.action_space.sample())
    np.testing.assert_array_equal(infos["physics"][:, 3], [0.1] * N)
    np.testing.assert_array_equal(infos["world_id"], s.world_ids)
    assert "env" in s.get_state() and s.get_state()["env"]["num_envs"] == N


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.reset(options={"gravity": 0.5}), "options.*gravity"),
        (lambda s: s.reset(options={"reset_mask": np.ones(2, bool)}), "mask"),
        (lambda s: s.reset(seed=-1), "seed.*-1"),
        (lambda s: s.reset(seed=[1, 2]), "seed"),
        (lambda s: s.reset(seed=[1, 2, -3, 4]), "seed"),
        (lambda s: s.reset(seed=1.5), "seed"),
        (lambda s: s.reset(seed=True), "seed"),
        (lambda s: s.hold(0.5), "world"),
        (lambda s: s.hold(PhysicsParams(), mask=np.ones(3, bool)), "mask"),
        (lambda s: s.release(mask=[0, 1, 0, 1]), "mask"),
        (lambda s: s.set_physics(friction=1.0), "friction"),
        (lambda s: s.set_gravity(float("nan")), "gravity"),
        (lambda s: s.set_state({**s.get_state(), "family": "interp"}), "family"),
        (lambda s: s.set_state({**s.get_state(), "episode_steps": (3, 7)}), "episode_steps"),
    ],
)
def test_bad_inputs_change_nothing(call, match):
    s = _schedule(seed=0)
    s.reset(seed=0)
    _run(s, 2)
    before = s.get_state()
    with pytest.raises(ValueError, match=match):
        call(s)
    after = s.get_state()
    assert after["rng"] == before["rng"] and after["next_world_id"] == before["next_world_id"]
    for key in ("world_ids", "held"):
        np.testing.assert_array_equal(after[key], before[key])
    for key in ("elapsed", "limits"):
        np.testing.assert_array_equal(after["env"][key], before["env"][key])
    for name, arr in before["env"]["scenes"]["physics"].items():
        np.testing.assert_array_equal(after["env"]["scenes"]["physics"][name], arr)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"env": object()}, "env must be a MovingMNISTVectorEnv"),
        ({"family": "moon"}, "unknown world family 'moon'"),
        ({"family": 3}, "family"),
        ({"episode_steps": (0, 3)}, "episode_steps"),
        ({"episode_steps": (5, 3)}, "episode_steps"),
        ({"episode_steps": (3.0, 4)}, "episode_steps"),
        ({"episode_steps": (True, 4)}, "episode_steps"),
        ({"episode_steps": 3}, "episode_steps"),
        ({"episode_steps": (1, 2, 3)}, "episode_steps"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    args = {"env": MovingMNISTVectorEnv(2), "family": "train", "episode_steps": STEPS, "seed": 0}
    with pytest.raises(ValueError, match=match):
        WorldSchedule(**{**args, **kwargs})


def test_step_before_reset():
    with pytest.raises(ResetNeeded):
        _schedule().step(None)
