"""Per-stream memory, varied memory sizes and the oracle pathway (the protocol beyond the paper)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent import AgentConfig, Learner
from agent.memory import BoundaryDetector, ExperienceBuffer
from agent.sources import Batch
from agent.step import MemoryView, modulated_prediction


def per_stream(track: str = "C", **kw) -> AgentConfig:
    base = {"push_pair": "input", "memory_scope": "per_stream", "batch_size": 4}
    return AgentConfig.from_preset("tiny", track=track, **{**base, **kw})


def batch_of(cfg: AgentConfig, value: torch.Tensor, valid=None, physics=None) -> Batch:
    """Frames whose pixel [0, 0, 2] is ``value[b]`` for stream b (random texture elsewhere)."""
    b, f = cfg.batch_size, len(cfg.frame_offsets)
    g = torch.Generator().manual_seed(int(value.sum()))
    frames = torch.randint(0, 256, (b, f, 1, 64, 64), dtype=torch.uint8, generator=g)
    frames[:, :, 0, 0, 2] = value.view(b, 1).to(torch.uint8)
    valid = torch.ones(b, dtype=torch.bool) if valid is None else valid
    return Batch(frames, valid, torch.zeros(b, dtype=torch.long), physics)


# ---------------------------------------------------------------------------- buffer, detector
def test_per_stream_buffer_is_one_fifo_per_stream() -> None:
    buf = ExperienceBuffer(3, 2, streams=2)
    for step in range(5):  # stream 0 writes every step, stream 1 on even steps only
        pair = torch.full((2, 2, 2), float(step))
        buf.push(pair, torch.tensor([0, 1]), step, torch.tensor([True, step % 2 == 0]))
    assert buf.size.tolist() == [3, 3]
    assert buf.ptr.tolist() == [5 % 3, 3 % 3]
    assert sorted(buf.pairs[0, :, 0, 0].tolist()) == [2.0, 3.0, 4.0]
    assert sorted(buf.pairs[1, :, 0, 0].tolist()) == [0.0, 2.0, 4.0]
    assert buf.mask().shape == (2, 3)
    # age: 0 for the newest entry
    newest = buf.pairs[0, :, 0, 0][buf.age()[0] == 0]
    assert newest.tolist() == [4.0]
    buf.clear(torch.tensor([False, True]))
    assert buf.size.tolist() == [3, 0]
    assert buf.mask()[1].sum() == 0 and buf.mask()[0].all()
    other = ExperienceBuffer(3, 2, streams=2)
    other.load_state_dict(buf.state_dict())
    assert torch.equal(other.pairs, buf.pairs) and torch.equal(other.size, buf.size)
    with pytest.raises(ValueError, match="buffer shape"):
        ExperienceBuffer(3, 2, streams=3).load_state_dict(buf.state_dict())
    with pytest.raises(ValueError, match="per-stream"):
        ExperienceBuffer(3, 2).clear(torch.tensor([True]))


def test_per_stream_detector_equals_separate_detectors() -> None:
    rng = np.random.default_rng(0)
    s = torch.from_numpy(rng.random((40, 3)))
    active = torch.from_numpy(rng.random((40, 3)) > 0.2)
    batched = BoundaryDetector(1.0, 0.9, 3, streams=3)
    single = [BoundaryDetector(1.0, 0.9, 3) for _ in range(3)]
    for t in range(40):
        fired = batched.update(s[t], active[t])
        for i, det in enumerate(single):
            assert bool(det.update(s[t, i], active[t, i])) == bool(fired[i])
    assert torch.equal(batched.mu, torch.stack([d.mu for d in single]))
    with pytest.raises(ValueError, match="statistics of shape"):
        BoundaryDetector(1.0, streams=2).load_state_dict(batched.state_dict())


def test_visible_memory_is_the_newest_k_entries() -> None:
    buf = ExperienceBuffer(4, 1, streams=3)
    for step in range(6):
        buf.push(torch.full((3, 2, 1), float(step)), 0, step, torch.tensor([True, step < 2, False]))
    u = torch.tensor([0.0, 0.999, 0.999])
    view = MemoryView.visible(buf, u)
    assert view.mask.tolist()[0] == [False] * 4  # u = 0: empty memory
    assert int(view.mask[1].sum()) == 2  # stream 1 has 2 entries; u -> 1 sees all
    assert int(view.mask[2].sum()) == 0  # stream 2 has none
    half = MemoryView.visible(buf, torch.tensor([0.5, 0.0, 0.0]))  # floor(0.5 * 5) = 2
    assert sorted(buf.pairs[0, half.mask[0], 0, 0].tolist()) == [4.0, 5.0]
    shared = ExperienceBuffer(4, 1)
    for step in range(3):
        shared.push(torch.full((2, 1), float(step)), 0, step)
    view = MemoryView.visible(shared, torch.tensor([0.0, 0.5, 0.99]))
    assert view.mask.sum(1).tolist() == [0, 2, 3]


# ---------------------------------------------------------------------------- isolation
def test_a_streams_prediction_never_reads_another_streams_entries() -> None:
    cfg = per_stream()
    learner = Learner(cfg)
    g = torch.Generator().manual_seed(0)
    for step in range(5):
        pairs = torch.randn(cfg.batch_size, 2, cfg.latent_dim, generator=g)
        learner.buffer.push(pairs, 0, step)
    z = torch.randn(cfg.batch_size, cfg.latent_dim, generator=g)
    before = learner.predict(z, learner.buffer)[0].pred
    learner.buffer.pairs[1] += 10.0  # stream 1's memory changes
    after = learner.predict(z, learner.buffer)[0].pred
    same = [b for b in range(cfg.batch_size) if b != 1]
    assert torch.equal(before[same], after[same])
    assert not torch.allclose(before[1], after[1])


def test_each_stream_pushes_its_own_pairs_and_a_new_episode_empties_its_memory(
    pixel_encoder,
) -> None:
    cfg = per_stream(kappa=1e-6, detector_warmup=0)
    learner = Learner(cfg)
    learner.nets.encoder = pixel_encoder(cfg.latent_dim, pixel=2)  # the stream's id
    learner.freeze_weights()
    ids = torch.arange(1, cfg.batch_size + 1)
    for _ in range(6):
        learner.update(batch_of(cfg, ids))
    assert (learner.buffer.size > 0).all()
    for b in range(cfg.batch_size):
        held = learner.buffer.pairs[b][learner.buffer.mask()[b]]
        assert (held == float(ids[b])).all()  # only its own stream's latents
    valid = torch.tensor([True, False, True, True])
    size = learner.buffer.size.clone()
    learner.update(batch_of(cfg, ids, valid=valid))
    assert learner.buffer.size[1] == 0  # its window spans an episode start: a new world
    assert learner.buffer.size[0] >= size[0]


def test_vary_memory_training_is_deterministic_and_resumes_exactly() -> None:
    cfg = per_stream(vary_memory=True, kappa=0.5, detector_warmup=0)
    ids = torch.arange(1, cfg.batch_size + 1)
    a, b = Learner(cfg), Learner(cfg)
    losses_a = [float(a.update(batch_of(cfg, ids + t)).loss_total) for t in range(6)]
    for t in range(3):
        b.update(batch_of(cfg, ids + t))
    c = Learner(cfg)
    c.load_state_dict(b.state_dict())
    losses_c = [float(c.update(batch_of(cfg, ids + t)).loss_total) for t in range(3, 6)]
    assert losses_c == losses_a[3:]
    assert torch.equal(c.buffer.pairs, a.buffer.pairs)


# ---------------------------------------------------------------------------- the oracle
def test_the_oracle_reads_physics_instead_of_memory() -> None:
    cfg = per_stream(oracle=True)
    learner = Learner(cfg)
    assert learner.nets.oracle is not None and learner.nets.aggregator is None
    z = torch.randn(cfg.batch_size, cfg.latent_dim)
    p1 = torch.tensor([[0.0, 0.3, 1.0, 0.0]]).expand(cfg.batch_size, -1)
    p2 = torch.tensor([[0.3, 0.0, 1.0, 0.0]]).expand(cfg.batch_size, -1)
    view = MemoryView.of(learner.buffer)
    out1 = modulated_prediction(learner.nets, z, view, learner.spec, p1)[0].pred
    out2 = modulated_prediction(learner.nets, z, view, learner.spec, p2)[0].pred
    assert not torch.allclose(out1, out2)
    learner.buffer.push(torch.randn(cfg.batch_size, 2, cfg.latent_dim), 0, 0)
    again = modulated_prediction(learner.nets, z, MemoryView.of(learner.buffer), learner.spec, p1)
    assert torch.equal(again[0].pred, out1)  # memory is not read
    with pytest.raises(ValueError, match="no physics"):
        learner.update(batch_of(cfg, torch.arange(cfg.batch_size)))
    m = learner.update(batch_of(cfg, torch.arange(cfg.batch_size), physics=p1))
    assert torch.isfinite(m.loss_total)


def test_options_validate_and_round_trip() -> None:
    with pytest.raises(ValueError, match="oracle"):
        AgentConfig.from_preset("tiny", track="A", oracle=True)
    with pytest.raises(ValueError, match="memory_scope"):
        AgentConfig.from_preset("tiny", memory_scope="per_stream")  # the paper's newest pair
    with pytest.raises(ValueError, match="memory_scope"):
        AgentConfig.from_preset("tiny", memory_scope="everywhere")
    with pytest.raises(ValueError, match="vary_memory"):
        AgentConfig.from_preset("tiny", vary_memory=1)
    cfg = per_stream(vary_memory=True, oracle=True, context_frames=2, per_horizon=True)
    assert AgentConfig.from_dict(cfg.to_dict()) == cfg


def test_the_oracles_width_is_envs_physics_features() -> None:
    import env
    from agent.config import PHYSICS_DIM

    assert PHYSICS_DIM == len(env.PHYSICS_FEATURES)
    world = env.PhysicsParams(0.3, 90.0, 0.9, 0.01)
    assert env.physics_features(world).shape == (PHYSICS_DIM,)
