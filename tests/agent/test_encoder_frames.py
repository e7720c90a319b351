"""A latent of two frames (``encoder_frames`` 2): every encoder input is a frame and the one
before it, in training (both sources), in evaluation and in the probes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import zarr

import env
from agent import AgentConfig, DatasetSource, Learner, StreamSource
from agent.networks import Encoder
from agent.sources import frame_columns, read_frames, stack_frames
from probes.perfect_physics import rolled


def test_frame_columns_are_the_frame_then_those_before_it() -> None:
    np.testing.assert_array_equal(frame_columns([0, 1, 5], 2), [[0, 0], [1, 0], [5, 4]])
    np.testing.assert_array_equal(frame_columns([3, 7], 1), [[3], [7]])


def test_read_and_stack_agree_on_numpy_zarr_and_torch(tmp_path) -> None:
    x = np.random.default_rng(0).integers(0, 256, size=(5, 9, 1, 64, 64), dtype=np.uint8)
    z = zarr.open(str(tmp_path / "f.zarr"), mode="w", shape=x.shape, chunks=(2, 3, 1, 64, 64),
                  dtype=np.uint8)  # fmt: skip
    z[:] = x
    cols = frame_columns([0, 2, 8, 4], 2)
    want = np.stack([x[:, [0, 2, 8, 4], 0], x[:, [0, 1, 7, 3], 0]], 2)  # (5, 4, 2, 64, 64)
    np.testing.assert_array_equal(read_frames(x, slice(None), cols), want)
    np.testing.assert_array_equal(read_frames(z, slice(None), cols), want)
    rows = np.asarray([3, 1, 3])
    np.testing.assert_array_equal(read_frames(z, rows, cols), want[rows])
    stacked = stack_frames(x, 2)
    assert stacked.shape == (5, 9, 2, 64, 64)
    np.testing.assert_array_equal(stacked[:, [0, 2, 8, 4]], want)
    assert torch.equal(stack_frames(torch.from_numpy(x), 2), torch.from_numpy(stacked))
    assert stack_frames(x, 1) is x


def test_the_window_makes_room_for_the_frame_before() -> None:
    one = AgentConfig.of_size("tiny", push_pair="input", context_frames=2, horizons=(2, 4, 8))
    two = one.replace(encoder_frames=2)
    assert one.frame_offsets == (0, 1, 3, 5, 9) and one.window == 10
    assert two.frame_offsets == (1, 2, 4, 6, 10) and two.window == 11
    assert two.pair_offsets == (1, 2)
    with pytest.raises(ValueError, match="encoder_frames: must be 1 or 2"):
        one.replace(encoder_frames=3)


def test_the_encoder_reads_the_frames_as_channels() -> None:
    torch.manual_seed(0)
    enc = Encoder(16, (4, 8, 8, 8), frames=2)
    assert enc.conv[0].in_channels == 2
    x = torch.rand(3, 2, 64, 64) * 255
    with torch.no_grad():
        z = enc(x)
        assert z.shape == (3, 16)
        assert not torch.equal(z, enc(torch.stack([x[:, 0], x[:, 0]], 1)))  # the second counts


def test_stream_batches_carry_each_frames_predecessor(fake_env_cls, stream_tiny: AgentConfig) -> None:
    """With the fake env's (episode, t) pixels: in every valid window, each column's second
    channel is the same episode's frame one step earlier."""
    cfg = stream_tiny.replace(context_frames=2, encoder_frames=2)
    src = StreamSource(fake_env_cls([23, 30, 40, 200, 21, 25, 60, 100]), cfg)
    seen = 0
    for _ in range(80):
        b = src.next()
        assert b.frames.shape == (8, len(cfg.frame_offsets), 2, 64, 64)
        ep, t = b.frames[..., 0, 0].long(), b.frames[..., 0, 1].long()  # (B, F, 2)
        v = b.valid
        assert (ep[v, :, 1] == ep[v, :, 0]).all()
        assert (t[v, :, 1] == t[v, :, 0] - 1).all()
        assert (t[v, :, 0] - t[v, :1, 1] == torch.as_tensor(cfg.frame_offsets)).all()
        seen += int(v.sum())
    assert seen > 0


def test_a_dataset_source_and_a_device_ring_give_the_pairs() -> None:
    cfg = AgentConfig.of_size("tiny", push_pair="input", batch_size=8, context_frames=2,
                              horizons=(2, 4), per_horizon=True, encoder_frames=2)  # fmt: skip
    x = np.random.default_rng(1).integers(0, 256, size=(6, 8, 1, 64, 64), dtype=np.uint8)
    b = DatasetSource(x, cfg, seed=0).next()
    idx = np.random.default_rng(0).integers(0, 6, 8)
    np.testing.assert_array_equal(b.frames.numpy(), read_frames(x, idx, frame_columns(cfg.frame_offsets, 2)))

    def source(device: str | None) -> StreamSource:
        vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None, device=device)
        return StreamSource(env.WorldSchedule(vec, "train", episode_steps=(6, 15), seed=2, group_size=4),
                            cfg, seed=2)  # fmt: skip

    host, dev = source(None), source("cpu")
    for _ in range(12):
        a, c = host.next(), dev.next()
        assert torch.equal(a.frames, c.frames) and torch.equal(a.valid, c.valid)


def test_a_learner_of_pairs_trains_and_rolled_branches_pair_up() -> None:
    """Three updates of a learner of pairs; a perfect-physics branch's frames (``rolled``) are
    the rollout's, each with the one before it."""
    cfg = AgentConfig.of_size("tiny", track="A", push_pair="input", batch_size=8, context_frames=2,
                              horizons=(2, 4), per_horizon=True, memory_scope="group",
                              group_size=4, encoder_frames=2)  # fmt: skip
    learner = Learner(cfg)
    vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None)
    src = StreamSource(env.WorldSchedule(vec, "train", episode_steps=(6, 15), seed=2, group_size=4), cfg, seed=2)
    losses = [float(learner.update(src.next()).loss_total) for _ in range(3)]
    assert all(np.isfinite(losses))
    scenes = env.initial_scenes(2, seed=[0], split="test", physics=env.PhysicsParams(gravity=0.3))
    a, b = scenes.copy(), scenes.copy()
    x = rolled(a, [1, 3], 2)  # (N, 2, 2, 64, 64): frames 1 and 3 on, each with the one before
    now, later = b.render(), b.rollout([1, 2, 3])
    np.testing.assert_array_equal(x[:, 0, 0], later[:, 0, 0])
    np.testing.assert_array_equal(x[:, 0, 1], now[:, 0])
    np.testing.assert_array_equal(x[:, 1, 0], later[:, 2, 0])
    np.testing.assert_array_equal(x[:, 1, 1], later[:, 1, 0])
