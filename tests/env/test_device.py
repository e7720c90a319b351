"""The world on a torch device (``env.device``): on the CPU the same frames as the numpy world
bit for bit and the same state exactly, through every physics, redraw and schedule event, and a
step that reads nothing back from the device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import env
from env.device import DeviceScenes


def every_physics(n: int, rng: np.random.Generator) -> list[env.PhysicsParams]:
    """Worlds of every kind: gravity along an axis (exact unit vectors) and at any angle, none,
    lossy walls and friction; a quarter of each."""
    out = []
    for i in range(n):
        kind = i % 4
        out.append(env.PhysicsParams(
            gravity=0.0 if kind == 0 else float(rng.uniform(0.05, 2.5)),
            gravity_direction=float(rng.choice([0.0, 90.0, 180.0, 270.0]) if kind == 1
                                    else rng.uniform(0, 360)),
            restitution=1.0 if kind < 2 else float(rng.uniform(0.3, 1.0)),
            friction=0.0 if kind < 3 else float(rng.uniform(0.0, 0.2)),
        ))  # fmt: skip
    return out


@pytest.mark.parametrize("n_digits", [1, 2, 3])
def test_the_device_world_is_the_numpy_world_bit_for_bit(digits: env.Digits, n_digits: int) -> None:
    n = 24
    rng = np.random.default_rng(n_digits)
    host = env.SceneBatch(n, digits, n_digits=n_digits, speed_range=(1.0, 45.0))  # fast: clip
    host.reset_scenes(np.arange(n), [np.random.default_rng(i) for i in range(n)])
    host.physics.assign(np.arange(n), every_physics(n, rng))
    dev = DeviceScenes(host, "cpu")
    twin = host.copy()  # advanced by numpy alone; host is redrawn in step with the device
    bounced = 0
    for t in range(400):
        before = twin.velocities.copy()
        twin.step()
        dev.step()
        bounced += int((np.sign(before) != np.sign(twin.velocities)).sum())
        if t % 29 == 7:  # redraw some scenes mid-run (an episode reset) and change some worlds
            idx = rng.choice(n, 5, replace=False)
            twin.reset_scenes(idx, [np.random.default_rng(10_000 + 5 * t + k) for k in range(5)])
            host.reset_scenes(idx, [np.random.default_rng(10_000 + 5 * t + k) for k in range(5)])
            worlds = every_physics(5, rng)
            twin.physics.assign(idx, worlds)
            host.physics.assign(idx, worlds)
            dev.load(idx)
            dev.load_physics()
        frames = dev.render()
        assert frames.dtype == torch.uint8 and frames.shape == (n, 1, 64, 64)
        np.testing.assert_array_equal(frames.numpy(), twin.render(), err_msg=f"frame {t}")
        np.testing.assert_array_equal(dev.positions.numpy(), twin.positions, err_msg=f"{t}")
        np.testing.assert_array_equal(dev.velocities.numpy(), twin.velocities, err_msg=f"{t}")
    assert bounced > 100  # the walls were hit, lossy ones included
    dev.save()  # the host's state is the device's
    np.testing.assert_array_equal(host.positions, twin.positions)
    np.testing.assert_array_equal(host.velocities, twin.velocities)


def test_render_into_a_buffer_and_bad_buffers(digits: env.Digits) -> None:
    host = env.SceneBatch(3, digits)
    host.reset_scenes(np.arange(3), [np.random.default_rng(i) for i in range(3)])
    dev = DeviceScenes(host, "cpu")
    out = torch.full((3, 1, 64, 64), 7, dtype=torch.uint8)
    assert dev.render(out) is out
    np.testing.assert_array_equal(out.numpy(), host.render())
    with pytest.raises(ValueError, match="uint8 with shape"):
        dev.render(torch.zeros((3, 64, 64), dtype=torch.uint8))


def schedule(device: str | None) -> env.WorldSchedule:
    vec = env.MovingMNISTVectorEnv(16, max_episode_steps=None, device=device)
    return env.WorldSchedule(vec, "train", episode_steps=(5, 30), seed=3, group_size=4,
                             residency=(1, 3))  # fmt: skip


def test_a_vector_env_on_the_device_gives_the_numpy_envs_frames_and_state() -> None:
    numpy_env, device_env = schedule(None), schedule("cpu")
    assert numpy_env.device is None and device_env.device == torch.device("cpu")
    oa, _ = numpy_env.reset(seed=1)
    ob, _ = device_env.reset(seed=1)
    np.testing.assert_array_equal(ob.numpy(), oa)
    saved = None
    for t in range(300):
        for e in (numpy_env, device_env):
            if t == 100:
                e.hold(env.PhysicsParams(0.7, 45.0, 0.8, 0.05), endless=True)
            if t == 170:
                e.set_physics(mask=np.repeat([True, False, False, True], 4), friction=0.1)
            if t == 200:
                e.release()
        if t == 150:
            saved = device_env.get_state()
            np.testing.assert_equal(saved, numpy_env.get_state())  # every array, exactly
        oa, _, _, ta, ia = numpy_env.step()
        ob, _, _, tb, ib = device_env.step()
        np.testing.assert_array_equal(ob.numpy(), oa, err_msg=f"step {t}")
        np.testing.assert_array_equal(tb, ta)
        np.testing.assert_array_equal(ib["positions"].numpy(), ia["positions"])
        np.testing.assert_array_equal(ib["velocities"].numpy(), ia["velocities"])
        np.testing.assert_array_equal(ib["world_id"], ia["world_id"])
        np.testing.assert_array_equal(ib["physics"], ia["physics"])
    # a fresh device env restored from the state at step 150 continues as the numpy env did
    resumed, again = schedule("cpu"), schedule(None)
    resumed.reset(seed=9)
    resumed.set_state(saved)
    again.reset(seed=9)
    again.set_state(saved)
    for t in range(150, 300):
        for e in (resumed, again):
            if t == 170:
                e.set_physics(mask=np.repeat([True, False, False, True], 4), friction=0.1)
            if t == 200:
                e.release()
        ob = resumed.step()[0]
        np.testing.assert_array_equal(ob.numpy(), again.step()[0], err_msg=f"resumed {t}")


def test_a_device_env_step_reads_nothing_on_the_host(no_host_reads) -> None:
    """No .item()/bool()/tolist()/numpy() of a tensor in a step, its episode redraws and world
    draws included (on a GPU each would wait for the device)."""
    e = schedule("cpu")
    e.reset(seed=0)
    worlds = set()
    with no_host_reads("step()"):
        for _ in range(80):  # episodes of 5-30 steps: many redraws and new worlds
            worlds.update(e.step()[-1]["world_id"])
    assert len(worlds) > 8


@pytest.mark.gpu
def test_on_a_gpu_the_world_is_the_numpy_world_bit_for_bit(digits: env.Digits) -> None:
    n = 32
    rng = np.random.default_rng(5)
    host = env.SceneBatch(n, digits, speed_range=(1.0, 45.0))
    host.reset_scenes(np.arange(n), [np.random.default_rng(i) for i in range(n)])
    host.physics.assign(np.arange(n), every_physics(n, rng))
    dev = DeviceScenes(host, "cuda")
    twin = host.copy()
    for t in range(300):
        twin.step()
        dev.step()
        np.testing.assert_array_equal(dev.render().cpu().numpy(), twin.render(), err_msg=f"{t}")
    np.testing.assert_array_equal(dev.positions.cpu().numpy(), twin.positions)
    np.testing.assert_array_equal(dev.velocities.cpu().numpy(), twin.velocities)


@pytest.mark.gpu
def test_on_a_gpu_a_stream_step_never_waits_for_the_device() -> None:
    """torch's sync debug mode raises at any synchronising call in the env's steps and the
    windows the source cuts from them (episode redraws and new worlds included)."""
    from agent import AgentConfig, StreamSource

    cfg = AgentConfig.of_size("tiny", push_pair="input", batch_size=8, context_frames=2,
                                  horizons=(2, 4), per_horizon=True)  # fmt: skip
    vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None, device="cuda")
    sched = env.WorldSchedule(vec, "train", episode_steps=(6, 12), seed=0, group_size=4)
    source = StreamSource(sched, cfg, device="cuda", seed=0)
    source.next()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(40):
            batch = source.next()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert batch.frames.is_cuda and batch.valid.is_cuda
