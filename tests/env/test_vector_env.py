"""The native vector env: NEXT_STEP autoreset, equality with single envs, switches, state."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import env
from env import NO_EPISODE_LIMIT, MovingMNISTEnv, MovingMNISTVectorEnv
from env.vector import INFO_KEYS


def _run_vector(v: MovingMNISTVectorEnv, steps: int) -> list[tuple]:
    actions = np.zeros(v.num_envs, dtype=np.int64)
    return [v.step(actions) for _ in range(steps)]


def test_make_vec_uses_native_env():
    v = gym.make_vec("MovingMNIST-v0", num_envs=4, gravity=0.5)
    assert isinstance(v.unwrapped, MovingMNISTVectorEnv)
    assert v.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert v.single_observation_space == gym.spaces.Box(0, 255, (1, 64, 64), np.uint8)
    assert v.observation_space.shape == (4, 1, 64, 64)
    obs, infos = v.reset(seed=0)
    assert obs.shape == (4, 1, 64, 64) and obs.dtype == np.uint8
    assert infos["positions"].shape == (4, 2, 2) and infos["velocities"].shape == (4, 2, 2)
    assert infos["digit_ids"].shape == (4, 2)
    np.testing.assert_array_equal(infos["gravity"], [0.5] * 4)
    assert infos["_positions"].all()
    obs, rewards, terminations, truncations, infos = v.step(np.zeros(4, dtype=np.int64))
    assert rewards.shape == (4,) and not rewards.any() and not terminations.any()
    # registered default: 20 steps per episode, like gym.make
    for _ in range(19):
        *_, truncations, _ = v.step(None)
    assert truncations.all()
    endless = gym.make_vec("MovingMNIST-v0", num_envs=2, max_episode_steps=None)
    endless.reset(seed=0)
    assert not any(endless.step(None)[3].any() for _ in range(50))


def test_same_seed_same_vector_stream():
    a = MovingMNISTVectorEnv(3, gravity=0.5, max_episode_steps=6)
    b = MovingMNISTVectorEnv(3, gravity=0.5, max_episode_steps=6)
    oa, _ = a.reset(seed=1)
    ob, _ = b.reset(seed=1)
    np.testing.assert_array_equal(oa, ob)
    for ra, rb in zip(_run_vector(a, 20), _run_vector(b, 20), strict=True):
        np.testing.assert_array_equal(ra[0], rb[0])
        np.testing.assert_array_equal(ra[4]["positions"], rb[4]["positions"])
    c = MovingMNISTVectorEnv(3, gravity=0.5, max_episode_steps=6)
    oc, _ = c.reset(seed=2)
    assert not np.array_equal(oa, oc)


def test_vector_equals_single_envs_including_autoreset():
    n, seed, horizon = 5, 10, 4
    kwargs = {"gravity": 0.5, "n_digits": 2, "max_episode_steps": horizon}
    v = MovingMNISTVectorEnv(n, **kwargs)
    singles = [MovingMNISTEnv(**kwargs) for _ in range(n)]
    obs, infos = v.reset(seed=seed)
    for i, e in enumerate(singles):
        o, info = e.reset(seed=seed + i)
        np.testing.assert_array_equal(obs[i], o)
        np.testing.assert_array_equal(infos["digit_ids"][i], info["digit_ids"])
    # Gymnasium NEXT_STEP: after a truncation the next step() is the reset
    pending = [False] * n
    saw_autoreset_step = 0
    for _ in range(3 * (horizon + 1) + 2):
        obs, rewards, terms, truncs, infos = v.step(np.zeros(n, dtype=np.int64))
        for i, e in enumerate(singles):
            if pending[i]:
                o, info = e.reset()
                r, term, trunc = 0.0, False, False
                saw_autoreset_step += 1
            else:
                o, r, term, trunc, info = e.step(0)
            pending[i] = term or trunc
            np.testing.assert_array_equal(obs[i], o)
            assert (rewards[i], terms[i], truncs[i]) == (r, term, trunc)
            np.testing.assert_array_equal(infos["positions"][i], info["positions"])
            np.testing.assert_array_equal(infos["velocities"][i], info["velocities"])
            np.testing.assert_array_equal(infos["digit_ids"][i], info["digit_ids"])
            assert infos["gravity"][i] == info["gravity"]
    assert saw_autoreset_step >= 2 * n


def test_vector_frames_are_max_of_pasted_sprites(paste_reference):
    v = MovingMNISTVectorEnv(8, n_digits=3, max_episode_steps=5)
    v.reset(seed=0)
    for _ in range(12):
        obs, *_, infos = v.step(None)
        sprites = v.sprites
        for i in range(8):
            np.testing.assert_array_equal(
                obs[i], paste_reference(sprites[i], infos["positions"][i])
            )


def test_set_gravity_with_mask_from_next_step():
    v = MovingMNISTVectorEnv(4, max_episode_steps=None)
    ref = MovingMNISTVectorEnv(4, max_episode_steps=None)
    v.reset(seed=3)
    ref.reset(seed=3)
    _run_vector(v, 3)
    _run_vector(ref, 3)
    mask = np.array([True, False, True, False])
    v.set_gravity(0.5, mask=mask)
    *_, infos = v.step(None)
    *_, rinfos = ref.step(None)
    np.testing.assert_array_equal(infos["gravity"], [0.5, 0.0, 0.5, 0.0])
    same = np.all(infos["positions"] == rinfos["positions"], axis=(1, 2))
    np.testing.assert_array_equal(same, ~mask)  # only the masked worlds changed course
    assert v.physics(0) == env.PhysicsParams(gravity=0.5)
    v.set_physics(friction=0.2)  # all sub-envs
    assert all(v.physics(i).friction == 0.2 for i in range(4))
    _, infos = v.reset(options={"gravity": 0.25})
    np.testing.assert_array_equal(infos["gravity"], [0.25] * 4)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda v: v.set_gravity(float("nan")), "gravity.*nan"),
        (lambda v: v.set_gravity(float("-inf"), mask=np.ones(3, bool)), "gravity.*inf"),
        (lambda v: v.set_physics(restitution=-0.5), "restitution.*-0.5"),
        (lambda v: v.set_physics(friction=1.0), "friction.*1.0"),
        (lambda v: v.set_physics(drag=0.1), "drag.*0.1"),
        (lambda v: v.set_gravity(0.5, mask=np.ones(4, bool)), "mask.*length 3.*\\(4,\\)"),
        (lambda v: v.set_gravity(0.5, mask=[0, 1, 2]), "mask.*boolean"),
        (lambda v: v.reset(options={"reset_mask": np.ones(2, bool)}), "mask"),
        (lambda v: v.reset(seed=[1, 2]), "seed"),
        (lambda v: v.reset(options={"gravity": float("nan")}), "gravity.*nan"),
    ],
)
def test_bad_vector_inputs(call, match):
    v = MovingMNISTVectorEnv(3)
    v.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        call(v)
    assert all(v.physics(i) == env.PhysicsParams() for i in range(3))


def test_bad_num_envs():
    with pytest.raises(ValueError, match="num_envs.*0"):
        MovingMNISTVectorEnv(0)


def test_partial_reset_mask():
    v = MovingMNISTVectorEnv(3, max_episode_steps=None)
    v.reset(seed=0)
    _run_vector(v, 4)
    before = v.elapsed_steps
    _, infos = v.reset(seed=[None, 7, None], options={"reset_mask": np.array([False, True, False])})
    np.testing.assert_array_equal(v.elapsed_steps, [before[0], 0, before[2]])
    single = MovingMNISTEnv()
    _, info = single.reset(seed=7)
    np.testing.assert_array_equal(infos["positions"][1], info["positions"])


def test_get_state_set_state_continuation():
    kwargs = {"gravity": 0.5, "max_episode_steps": 6}
    v = MovingMNISTVectorEnv(4, **kwargs)
    v.reset(seed=5)
    _run_vector(v, 6)  # the step that just ran truncated every env: an autoreset is pending
    v.set_gravity(0.1, mask=np.array([True, False, False, True]))
    state = v.get_state()
    assert state["autoreset"].all()
    ref = _run_vector(v, 15)
    other = MovingMNISTVectorEnv(4, max_episode_steps=6)
    other.reset(seed=123)
    _run_vector(other, 2)
    other.set_state(state)
    got = _run_vector(other, 15)
    for r, g in zip(ref, got, strict=True):
        for k in range(4):
            np.testing.assert_array_equal(r[k], g[k])
        for key in ("positions", "velocities", "gravity", "digit_ids"):
            np.testing.assert_array_equal(r[4][key], g[4][key])
    with pytest.raises(ValueError, match="4 envs"):
        MovingMNISTVectorEnv(2).set_state(state)


def test_render_rgb_and_human(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    v = MovingMNISTVectorEnv(3, render_mode="rgb_array")
    obs, _ = v.reset(seed=0)
    rgb = v.render()
    assert rgb.shape == (3, 64, 64, 3)
    np.testing.assert_array_equal(rgb[..., 1], obs[:, 0])
    h = MovingMNISTVectorEnv(3, render_mode="human")
    h.metadata = {**h.metadata, "render_fps": 1000}
    h.reset(seed=0)
    h.step(None)
    h.close()
    assert h.closed


def test_per_env_limits_truncate_and_autoreset_like_single_envs():
    limits = [2, 3, 5]
    v = MovingMNISTVectorEnv(3, gravity=0.5, max_episode_steps=None)
    np.testing.assert_array_equal(v.episode_limits, [NO_EPISODE_LIMIT] * 3)
    v.set_episode_limits(np.array(limits))
    singles = [MovingMNISTEnv(gravity=0.5, max_episode_steps=n) for n in limits]
    obs, _ = v.reset(seed=4)
    for i, e in enumerate(singles):
        np.testing.assert_array_equal(obs[i], e.reset(seed=4 + i)[0])
    pending = [False] * 3
    for t in range(1, 31):
        obs, _, _, truncs, infos = v.step(None)
        for i, e in enumerate(singles):
            if pending[i]:
                o, info = e.reset()
                trunc = False
            else:
                o, _, _, trunc, info = e.step(0)
            pending[i] = trunc
            np.testing.assert_array_equal(obs[i], o)
            np.testing.assert_array_equal(infos["positions"][i], info["positions"])
            assert truncs[i] == trunc
        # sub-env i truncates every limit + 1 steps (limit steps, then the reset step)
        np.testing.assert_array_equal(truncs, [t % (n + 1) == n for n in limits])
    np.testing.assert_array_equal(v.episode_limits, limits)


def test_set_episode_limits_mask_none_and_mid_episode():
    v = MovingMNISTVectorEnv(3, max_episode_steps=10)
    np.testing.assert_array_equal(v.episode_limits, [10, 10, 10])
    v.set_episode_limits(4, mask=np.array([True, False, True]))
    np.testing.assert_array_equal(v.episode_limits, [4, 10, 4])
    v.set_episode_limits(None, mask=np.array([False, False, True]))
    np.testing.assert_array_equal(v.episode_limits, [4, 10, NO_EPISODE_LIMIT])
    v.set_episode_limits(np.array([7, 8, 9]), mask=np.array([False, True, False]))
    np.testing.assert_array_equal(v.episode_limits, [4, 8, NO_EPISODE_LIMIT])
    v.reset(seed=0)
    truncs = [v.step(None)[3] for _ in range(6)]
    np.testing.assert_array_equal(truncs[3], [True, False, False])
    # lowering a limit below the steps taken truncates at the next step
    np.testing.assert_array_equal(v.elapsed_steps, [1, 6, 6])
    v.set_episode_limits(np.array([3, 3, 3]))
    np.testing.assert_array_equal(v.step(None)[3], [False, True, True])
    assert v.max_episode_steps == 10  # the constructor's default is untouched


@pytest.mark.parametrize(
    ("limits", "mask"),
    [
        (0, None),
        (-1, None),
        (2.5, None),
        (True, None),
        ("5", None),
        ([1, 2], None),
        (np.array([1, 0, 2]), None),
        (np.array([1.0, 2.0, 3.0]), None),
        ([1, None, 2], None),
        (4, np.ones(2, bool)),
        (4, [1, 0, 1]),
    ],
)
def test_bad_episode_limits_change_nothing(limits, mask):
    v = MovingMNISTVectorEnv(3, max_episode_steps=6)
    v.set_episode_limits(np.array([2, 3, 4]))
    with pytest.raises(ValueError, match="limits" if mask is None else "mask"):
        v.set_episode_limits(limits, mask=mask)
    np.testing.assert_array_equal(v.episode_limits, [2, 3, 4])


def test_state_round_trip_with_limits():
    v = MovingMNISTVectorEnv(4, max_episode_steps=6)
    v.reset(seed=2)
    v.set_episode_limits(np.array([2, 3, 5, 7]))
    _run_vector(v, 4)
    state = v.get_state()
    np.testing.assert_array_equal(state["limits"], [2, 3, 5, 7])
    ref = _run_vector(v, 20)
    other = MovingMNISTVectorEnv(4, max_episode_steps=6)
    other.set_state(state)
    np.testing.assert_array_equal(other.episode_limits, [2, 3, 5, 7])
    for r, g in zip(ref, _run_vector(other, 20), strict=True):
        np.testing.assert_array_equal(r[0], g[0])
        np.testing.assert_array_equal(r[3], g[3])
        np.testing.assert_array_equal(r[4]["physics"], g[4]["physics"])
    bad = {**state, "limits": np.array([2, 0, 5, 7])}
    before = other.get_state()
    with pytest.raises(ValueError, match="limits"):
        other.set_state(bad)
    positions = other.get_state()["scenes"]["positions"]
    np.testing.assert_array_equal(positions, before["scenes"]["positions"])
    np.testing.assert_array_equal(other.episode_limits, [2, 3, 5, 7])


def test_physics_infos_are_the_features_of_each_world():
    v = MovingMNISTVectorEnv(4, gravity=0.5, max_episode_steps=3)
    _, infos = v.reset(seed=0)
    assert set(k for k in infos if not k.startswith("_")) == set(INFO_KEYS)
    assert all(infos["_" + k].all() for k in INFO_KEYS)
    np.testing.assert_array_equal(infos["physics"], [[0.0, 0.5, 1.0, 0.0]] * 4)
    v.set_physics(mask=np.array([False, True, False, False]), gravity=0.3, gravity_direction=180.0)
    v.set_physics(mask=np.array([False, False, True, False]), gravity=0.2, gravity_direction=30.0)
    v.set_physics(mask=np.array([False, False, False, True]), restitution=0.7, friction=0.1)
    for _ in range(5):
        *_, infos = v.step(None)
        assert infos["physics"].shape == (4, 4) and infos["physics"].dtype == np.float64
        for i in range(4):
            np.testing.assert_array_equal(infos["physics"][i], env.physics_features(v.physics(i)))
    np.testing.assert_array_equal(infos["physics"][1], [-0.3, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(infos["physics"][3], [0.0, 0.5, 0.7, 0.1])


def test_set_worlds_per_sub_env():
    v = MovingMNISTVectorEnv(4, max_episode_steps=None)
    ref = MovingMNISTVectorEnv(4, max_episode_steps=None)
    v.reset(seed=1)
    ref.reset(seed=1)
    worlds = [env.PhysicsParams(0.2, 30.0), env.PhysicsParams(0.4, 200.0, 0.8, 0.1)]
    mask = np.array([False, True, False, True])
    v.set_worlds(worlds, mask=mask)
    ref.set_physics(mask=np.arange(4) == 1, **worlds[0].as_dict())
    ref.set_physics(mask=np.arange(4) == 3, **worlds[1].as_dict())
    assert [v.physics(i) for i in range(4)] == [
        env.PhysicsParams(),
        *worlds[:1],
        env.PhysicsParams(),
        worlds[1],
    ]
    for r, g in zip(_run_vector(ref, 10), _run_vector(v, 10), strict=True):
        np.testing.assert_array_equal(r[0], g[0])
        np.testing.assert_array_equal(r[4]["physics"], g[4]["physics"])
    for bad, m in [(worlds, None), (worlds[:1], mask), ([0.5, 0.5], mask), (worlds, mask[:3])]:
        with pytest.raises(ValueError, match="worlds|mask"):
            v.set_worlds(bad, mask=m)
    assert v.physics(0) == env.PhysicsParams() and v.physics(3) == worlds[1]
