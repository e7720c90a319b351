"""Sources: dataset offsets, stream windows that never mix episodes, the real env."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import zarr

from agent import AgentConfig, DatasetSource, Learner, StreamSource
from env import MovingMNISTVectorEnv


def test_dataset_source_frames_and_determinism(frames: np.ndarray, tiny: AgentConfig) -> None:
    src = DatasetSource(frames, tiny, seed=3, shifted=1)
    b = src.next()
    assert b.frames.shape == (tiny.batch_size, 5, 1, 64, 64) and b.frames.dtype == torch.uint8
    assert b.valid.all() and (b.shifted == 1).all()
    idx = np.random.default_rng(3).integers(0, len(frames), tiny.batch_size)
    np.testing.assert_array_equal(b.frames.numpy(), frames[idx][:, [0, 5, 10, 20, 19]])
    state = src.state_dict()
    nxt = src.next()
    src.load_state_dict(state)
    assert torch.equal(src.next().frames, nxt.frames)


@pytest.mark.parametrize("context", [1, 3])
def test_stream_window_never_mixes_two_episodes(
    fake_env_cls, stream_tiny: AgentConfig, context: int
) -> None:
    cfg = stream_tiny.replace(context_frames=context)
    lengths = [23, 30, 40, 200, 21, 25, 60, 100]
    env = fake_env_cls(lengths)
    src = StreamSource(env, cfg)
    p = cfg.past_frames  # (0, 1, 6, 11, 21) with C = 1; (0, 1, 2, 7, 12, 22) with C = 3
    n_valid = 0
    for _ in range(150):
        b = src.next()
        ep = b.frames[:, :, 0, 0, 0].numpy()  # (B, F) episode of each frame
        t = b.frames[:, :, 0, 0, 1].numpy().astype(int)  # step within the episode
        assert b.frames.shape[1] == p + 3
        for i in range(env.num_envs):
            same = (ep[i] == ep[i, 0]).all() and (t[i] - t[i, 0]).tolist() == list(
                cfg.frame_offsets
            )
            assert bool(b.valid[i]) == bool(same), (i, ep[i], t[i])
            if b.valid[i]:  # the past frames are consecutive; the targets at the horizons
                assert (t[i, p:] - t[i, p - 1]).tolist() == [5, 10, 20]
                assert (np.diff(t[i, :p]) == 1).all()
        n_valid += int(b.valid.sum())
    assert 0 < n_valid < 150 * env.num_envs
    # Stream 3 (length 200) is valid on every step of its first episode.
    assert b.valid[3]


def test_stream_state_round_trip_and_world_tag(fake_env_cls, stream_tiny: AgentConfig) -> None:
    env = fake_env_cls([25, 40])
    src = StreamSource(env, stream_tiny, base_gravity=0.0)
    for _ in range(10):
        src.next()
    state = src.state_dict()
    env.gravity[1] = 0.5
    ahead = [src.next() for _ in range(30)]
    assert ahead[0].shifted.tolist() == [0, 1]
    src.load_state_dict(state)
    again = [src.next() for _ in range(30)]
    for a, b in zip(ahead, again, strict=True):
        assert torch.equal(a.frames, b.frames) and torch.equal(a.valid, b.valid)


def test_stream_source_with_the_real_env(stream_tiny: AgentConfig) -> None:
    tiny = stream_tiny
    venv = MovingMNISTVectorEnv(tiny.batch_size, max_episode_steps=30)
    src = StreamSource(venv, tiny, seed=0, base_gravity=0.0)
    learner = Learner(tiny)
    fracs = []
    for _ in range(40):
        b = src.next()
        assert b.frames.shape == (tiny.batch_size, 5, 1, 64, 64)
        fracs.append(learner.update(b).valid_frac.item())
    assert min(fracs) < 1.0 < 2 * max(fracs)  # resets are masked, most windows are whole
    venv.set_gravity(0.5)
    assert (src.next().shifted == 1).all()
    state = src.state_dict()
    ahead = [src.next().frames for _ in range(5)]
    src.load_state_dict(state)
    assert all(torch.equal(a, src.next().frames) for a in ahead)


def test_dataset_source_and_evaluation_read_zarr_lazily(
    frames: np.ndarray, tiny: AgentConfig
) -> None:
    from agent import EvalData, evaluate

    z = zarr.create_array(store={}, shape=frames.shape, chunks=(4, 21, 1, 64, 64), dtype="uint8")
    z[:] = frames
    a, b = DatasetSource(z, tiny, seed=5).next(), DatasetSource(frames, tiny, seed=5).next()
    assert torch.equal(a.frames, b.frames)
    learner = Learner(tiny)
    res_z = evaluate(learner, EvalData(z, z, z), n=3)
    assert res_z == evaluate(learner, EvalData(frames, frames, frames), n=3)


def test_a_stream_across_scheduled_worlds_tags_each_valid_window_with_its_world() -> None:
    import env

    cfg = AgentConfig.of_size(
        "tiny", track="C", push_pair="input", context_frames=2, horizons=(1, 2), batch_size=3
    )
    vec = env.MovingMNISTVectorEnv(3, max_episode_steps=None)
    schedule = env.WorldSchedule(vec, "train", episode_steps=(4, 7), seed=0)
    source = StreamSource(schedule, cfg, seed=0)
    history = []  # Batch.physics of each step: a valid window's frames all share one world
    for _ in range(40):
        batch = source.next()
        assert batch.physics is not None and batch.physics.shape == (3, 4)
        history.append(batch.physics.clone())
        if len(history) >= cfg.window:
            oldest = history[-cfg.window]
            v = batch.valid
            assert torch.equal(oldest[v], batch.physics[v])
        g = torch.linalg.vector_norm(batch.physics[:, :2], dim=1)
        assert ((g >= 0.1 - 1e-6) & (g <= 0.5 + 1e-6)).all()  # the train family's gravity
    worlds = {tuple(p.tolist()) for h in history for p in h}
    assert len(worlds) >= 6  # several worlds per stream over 40 steps


def test_a_stream_over_worlds_on_a_device_gives_the_same_batches() -> None:
    """The windows kept and cut on the worlds' device (``env.device``) equal the host ring's,
    every tag included, and its state dict round-trips to the same continuation."""
    import env

    cfg = AgentConfig.of_size("tiny", push_pair="input", batch_size=8, context_frames=2,
                                  horizons=(2, 4), per_horizon=True)  # fmt: skip

    def source(device: str | None) -> StreamSource:
        vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None, device=device)
        sched = env.WorldSchedule(vec, "train", episode_steps=(6, 15), seed=2, group_size=4)
        return StreamSource(sched, cfg, seed=2)

    host, dev = source(None), source("cpu")
    assert dev.world_device == torch.device("cpu") and isinstance(dev.frames, torch.Tensor)

    def same(a, b) -> None:
        for field in ("frames", "valid", "shifted", "physics", "episode", "world_key"):
            assert torch.equal(getattr(a, field), getattr(b, field)), field
        assert a.clock == b.clock

    valid = 0
    for t in range(60):
        a, b = host.next(), dev.next()
        same(a, b)
        valid += int(a.valid.sum())
        if t == 30:
            state = dev.state_dict()
            np.testing.assert_equal(state, host.state_dict())
            then = state["frames"].copy()
    np.testing.assert_array_equal(state["frames"], then)  # a copy, not the live windows
    assert 0 < valid < 60 * cfg.batch_size  # windows across resets are masked
    resumed = source("cpu")
    resumed.load_state_dict(state)
    host.load_state_dict(state)
    for _ in range(10):
        same(resumed.next(), host.next())
