"""MovingMNIST-v0 as a single Gymnasium env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import env
from env import MovingMNISTEnv


def _episode(e: gym.Env, seed: int | None, steps: int) -> tuple[np.ndarray, list[dict]]:
    obs, info = e.reset(seed=seed)
    frames, infos = [obs], [info]
    for _ in range(steps):
        obs, reward, terminated, truncated, info = e.step(0)
        assert reward == 0.0 and terminated is False
        frames.append(obs)
        infos.append(info)
    return np.stack(frames), infos


@pytest.mark.filterwarnings("ignore:.*not having a spec")
def test_check_env_unwrapped():
    check_env(MovingMNISTEnv())
    made = gym.make("MovingMNIST-v0", render_mode="rgb_array", gravity=0.5)
    check_env(made.unwrapped, skip_render_check=False)  # with a spec: all render modes checked


def test_spaces_and_info(digits):
    e = MovingMNISTEnv(n_digits=3)
    assert e.observation_space == gym.spaces.Box(0, 255, (1, 64, 64), np.uint8)
    assert e.action_space == gym.spaces.Discrete(1)
    obs, info = e.reset(seed=3)
    assert obs.shape == (1, 64, 64) and obs.dtype == np.uint8
    assert set(info) == {"positions", "velocities", "gravity", "digit_ids"}
    assert info["positions"].shape == (3, 2) and info["velocities"].shape == (3, 2)
    assert info["digit_ids"].shape == (3,) and info["gravity"] == 0.0
    assert e.sprites.shape == (3, 28, 28) and e.sprites.dtype == np.uint8
    np.testing.assert_array_equal(e.sprites, digits.images[info["digit_ids"]])


def test_same_seed_same_episode():
    a, ia = _episode(MovingMNISTEnv(gravity=0.5), 7, 20)
    b, ib = _episode(MovingMNISTEnv(gravity=0.5), 7, 20)
    c, _ = _episode(MovingMNISTEnv(gravity=0.5), 8, 20)
    np.testing.assert_array_equal(a, b)
    for x, y in zip(ia, ib, strict=True):
        np.testing.assert_array_equal(x["positions"], y["positions"])
    assert not np.array_equal(a, c)


def test_frame_is_max_of_pasted_sprites(paste_reference):
    e = MovingMNISTEnv(n_digits=3, gravity=0.7, gravity_direction=30.0)
    frames, infos = _episode(e, 11, 60)
    sprites = e.sprites
    overlaps = 0
    for frame, info in zip(frames, infos, strict=True):
        np.testing.assert_array_equal(frame, paste_reference(sprites, info["positions"]))
        boxes = np.rint(info["positions"])
        d = np.abs(boxes[:, None] - boxes[None, :]).max(-1)
        overlaps += int((d[np.triu_indices(3, 1)] < 28).sum())
    assert overlaps > 0  # digits did overlap, so the max compositing was exercised


def test_truncates_after_max_episode_steps():
    e = MovingMNISTEnv(max_episode_steps=5)
    e.reset(seed=0)
    flags = [e.step(0)[3] for _ in range(7)]
    assert flags[:4] == [False] * 4 and flags[4] is True
    endless = MovingMNISTEnv(max_episode_steps=None)
    endless.reset(seed=0)
    assert not any(endless.step(0)[3] for _ in range(300))


def test_gym_make_episode_is_21_frames():
    e = gym.make("MovingMNIST-v0", gravity=0.5)
    e.reset(seed=0)
    truncated = [e.step(0)[3] for _ in range(20)]
    assert truncated == [False] * 19 + [True]
    longer = gym.make("MovingMNIST-v0", max_episode_steps=50)
    longer.reset(seed=0)
    assert [longer.step(0)[3] for _ in range(50)] == [False] * 49 + [True]
    endless = gym.make("MovingMNIST-v0", max_episode_steps=-1)
    endless.reset(seed=0)
    assert not any(endless.step(0)[3] for _ in range(100))


def test_gym_make_equals_class():
    made = gym.make("MovingMNIST-v0", gravity=0.5, n_digits=1)
    a, _ = _episode(made, 5, 20)
    b, _ = _episode(MovingMNISTEnv(gravity=0.5, n_digits=1), 5, 20)
    np.testing.assert_array_equal(a, b)
    assert isinstance(made.unwrapped, MovingMNISTEnv)


def test_mid_episode_switch_changes_dynamics_from_next_step():
    base = MovingMNISTEnv(max_episode_steps=None)
    switched = MovingMNISTEnv(max_episode_steps=None)
    fa, ia = _episode(base, 2, 10)
    fb, ib = _episode(switched, 2, 10)
    np.testing.assert_array_equal(fa, fb)
    switched.unwrapped.set_gravity(0.5)
    # the switch itself changes nothing already emitted; the next step feels gravity
    _, _, _, _, a = base.step(0)
    _, _, _, _, b = switched.step(0)
    assert b["gravity"] == 0.5 and a["gravity"] == 0.0
    vy_before = ib[-1]["velocities"][:, 1]
    free = (b["positions"][:, 1] > 0) & (b["positions"][:, 1] < 36)
    free &= np.abs(b["positions"][:, 1] - ib[-1]["positions"][:, 1] - b["velocities"][:, 1]) < 1e-9
    assert free.any()
    np.testing.assert_allclose(b["velocities"][free, 1] - vy_before[free], 0.5, atol=1e-12)
    np.testing.assert_array_equal(np.abs(a["velocities"]), np.abs(ia[-1]["velocities"]))
    switched.set_physics(gravity=0.0, friction=0.5)
    before = switched.step(0)[4]["velocities"]
    after = switched.step(0)[4]["velocities"]
    np.testing.assert_allclose(np.abs(after), np.abs(before) * 0.5, atol=1e-12)
    assert switched.physics == env.PhysicsParams(gravity=0.0, friction=0.5)


def test_reset_options_gravity_persists():
    e = MovingMNISTEnv()
    _, info = e.reset(seed=0, options={"gravity": 0.5})
    assert info["gravity"] == 0.5
    _, info = e.reset()
    assert info["gravity"] == 0.5
    with pytest.raises(ValueError, match="gravity.*nan"):
        e.reset(options={"gravity": float("nan")})
    with pytest.raises(ValueError, match="wind"):
        e.reset(options={"wind": 1.0})
    assert e.physics.gravity == 0.5


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"gravity": float("nan")}, "gravity.*nan"),
        ({"gravity": float("inf")}, "gravity.*inf"),
        ({"restitution": -1.0}, "restitution.*-1.0"),
        ({"friction": 1.0}, "friction.*1.0"),
        ({"friction": -0.5}, "friction.*-0.5"),
        ({"viscosity": 0.1}, "viscosity.*0.1"),
    ],
)
def test_bad_set_physics(params, match):
    e = MovingMNISTEnv()
    e.reset(seed=0)
    with pytest.raises(ValueError, match=match):
        e.set_physics(**params)
    assert e.physics == env.PhysicsParams()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gravity": float("nan")}, "gravity"),
        ({"restitution": -0.2}, "restitution"),
        ({"friction": 1.5}, "friction"),
        ({"n_digits": 0}, "n_digits"),
        ({"speed_range": (4.0, 2.0)}, "speed_range"),
        ({"split": "holdout"}, "split.*holdout"),
        ({"max_episode_steps": 0}, "max_episode_steps"),
        ({"render_mode": "ascii"}, "render_mode.*ascii"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MovingMNISTEnv(**kwargs)


def test_step_before_reset():
    with pytest.raises(gym.error.ResetNeeded):
        MovingMNISTEnv().step(0)


def test_render_modes(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    e = MovingMNISTEnv(render_mode="rgb_array")
    obs, _ = e.reset(seed=0)
    rgb = e.render()
    assert rgb.shape == (64, 64, 3) and rgb.dtype == np.uint8
    np.testing.assert_array_equal(rgb[..., 0], obs[0])
    human = MovingMNISTEnv(render_mode="human")
    human.metadata = {**human.metadata, "render_fps": 1000}
    human.reset(seed=0)
    for _ in range(3):
        human.step(0)
    assert human.render() is None
    human.close()


def _stream(e: MovingMNISTEnv, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """n steps of a stream that resets after every truncation: (frame, positions) pairs."""
    out = []
    truncated = False
    for _ in range(n):
        if truncated:
            obs, info = e.reset()
            truncated = False
        else:
            obs, _, _, truncated, info = e.step(0)
        out.append((obs, info["positions"]))
    return out


def test_get_set_state_continues_bit_exactly():
    e = MovingMNISTEnv(gravity=0.5, max_episode_steps=8)
    e.reset(seed=4)
    for _ in range(5):
        e.step(0)
    state = e.get_state()
    ref = _stream(e, 30)  # crosses several resets, so the RNG state matters
    other = MovingMNISTEnv(gravity=0.0, max_episode_steps=8)
    other.reset(seed=99)
    other.set_state(state)
    got = _stream(other, 30)
    for (fr, pr), (fg, pg) in zip(ref, got, strict=True):
        np.testing.assert_array_equal(fr, fg)
        np.testing.assert_array_equal(pr, pg)
