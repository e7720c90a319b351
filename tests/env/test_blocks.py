"""env.blocks: S blocks of one vector env, each driven by its own WorldSchedule, give each
schedule's lone run bit for bit (frames, infos, state)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import env
from env.blocks import SharedWorlds

S, B, G = 3, 8, 4
SEEDS = (5, 9, 13)


def schedule(vec, seed: int) -> env.WorldSchedule:
    return env.WorldSchedule(vec, "train", episode_steps=(6, 12), seed=seed, group_size=G,
                             residency=(1, 3))  # fmt: skip


def host(x):
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else x


def same_step(a, b, what: str) -> None:
    for x, y in zip(a[:-1], b[:-1], strict=True):  # obs (, rewards, terminated, truncated)
        assert np.array_equal(host(x), host(y)), what
    for key in ("world_id", "positions", "velocities", "physics"):
        if key in b[-1]:
            assert np.array_equal(host(a[-1][key]), host(b[-1][key])), f"{what}: {key}"


@pytest.mark.parametrize("device", [None, "cpu"], ids=["numpy", "tensors"])
def test_each_block_is_its_lone_env_bit_for_bit(device) -> None:
    """Three blocks, each under its own schedule, against three lone envs: resets, world
    draws and residencies, a hold, a set_physics and a release mid-way, 80 steps."""
    shared = SharedWorlds(env.MovingMNISTVectorEnv(S * B, max_episode_steps=None, device=device), S)
    blocks = [schedule(b, s) for b, s in zip(shared.blocks, SEEDS, strict=True)]
    lones = [schedule(env.MovingMNISTVectorEnv(B, max_episode_steps=None, device=device), s)
             for s in SEEDS]  # fmt: skip
    for k in range(S):
        same_step(blocks[k].reset(seed=SEEDS[k]), lones[k].reset(seed=SEEDS[k]), f"reset {k}")
    held = env.PhysicsParams(gravity=0.3, gravity_direction=45.0)
    for t in range(80):
        if t == 20:
            for sch in (blocks[1], lones[1]):
                sch.hold(held, np.repeat([True, False], G))
        if t == 30:
            for sch in (blocks[2], lones[2]):
                sch.set_physics(np.repeat([False, True], G), friction=0.1, restitution=0.8)
        if t == 50:
            for sch in (blocks[1], lones[1]):
                sch.release()
        for k in range(S):
            same_step(blocks[k].step(), lones[k].step(), f"step {t}, block {k}")


def test_a_block_state_is_a_lone_env_state() -> None:
    """A block's state continues in a lone env exactly, and a lone env's state in a block."""
    shared = SharedWorlds(env.MovingMNISTVectorEnv(S * B, max_episode_steps=None), S)
    blocks = [schedule(b, s) for b, s in zip(shared.blocks, SEEDS, strict=True)]
    for k in range(S):
        blocks[k].reset(seed=SEEDS[k])
    for _ in range(15):
        for sch in blocks:
            sch.step()
    lone = schedule(env.MovingMNISTVectorEnv(B, max_episode_steps=None), 0)
    lone.set_state(blocks[1].get_state())
    snapshot = lone.get_state()
    for t in range(25):
        ours = [sch.step() for sch in blocks]
        same_step(ours[1], lone.step(), f"step {t}")
    blocks[0].set_state(snapshot)  # the lone env's state, 25 steps back, into block 0
    again = schedule(env.MovingMNISTVectorEnv(B, max_episode_steps=None), 0)
    again.set_state(snapshot)
    for t in range(10):
        ours = [sch.step() for sch in blocks]
        same_step(ours[0], again.step(), f"step {t} after set_state")


def test_blocks_refuse_what_breaks_the_rounds() -> None:
    with pytest.raises(ValueError, match="positive divisor"):
        SharedWorlds(env.MovingMNISTVectorEnv(10, max_episode_steps=None), 3)
    shared = SharedWorlds(env.MovingMNISTVectorEnv(S * B, max_episode_steps=None), S)
    for k, blk in enumerate(shared.blocks):
        blk.reset(seed=k)
    shared.blocks[0].step()
    shared.blocks[0].step()  # a second round: blocks 1 and 2 are behind now
    with pytest.raises(RuntimeError, match="rounds behind"):
        shared.blocks[1].step()
