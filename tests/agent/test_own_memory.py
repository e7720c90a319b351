"""A group memory of group size 1 reading all its entries: each stream its own memory (what the
per-stream memory was); varied memory sizes; the oracle pathway."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent import AgentConfig, Learner
from agent.memory import BoundaryDetector, ExperienceBuffer
from agent.memory.read import MemoryView
from agent.sources import Batch
from agent.step import modulated_prediction


def own(track: str = "C", **kw) -> AgentConfig:
    """Each of 4 streams its own memory: group memory, groups of one, every entry read."""
    base = {"push_pair": "input", "memory_scope": "group", "group_size": 1, "memory_read": "all",
            "batch_size": 4}  # fmt: skip
    return AgentConfig.of_size("tiny", track=track, **{**base, **kw})


def batch_of(cfg: AgentConfig, value: torch.Tensor, key=None, physics=None) -> Batch:
    """Frames whose pixel [0, 0, 2] is ``value[b]`` for stream b (random texture elsewhere);
    ``key`` (B,) the id of each stream's world (default: all in world 0)."""
    b, f = cfg.batch_size, len(cfg.frame_offsets)
    g = torch.Generator().manual_seed(int(value.sum()))
    frames = torch.randint(0, 256, (b, f, 1, 64, 64), dtype=torch.uint8, generator=g)
    frames[:, :, 0, 0, 2] = value.view(b, 1).to(torch.uint8)
    key = torch.zeros(b, dtype=torch.long) if key is None else key
    return Batch(frames, torch.ones(b, dtype=torch.bool), torch.zeros(b, dtype=torch.long),
                 physics, world_key=key)  # fmt: skip


def test_one_detector_per_memory_equals_separate_detectors() -> None:
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
    shared = ExperienceBuffer(4, 1)
    for step in range(3):
        shared.push(torch.full((2, 1), float(step)), 0, step)
    view = MemoryView.visible(shared, torch.tensor([0.0, 0.5, 0.99]))
    assert view.mask.sum(1).tolist() == [0, 2, 3]  # floor(u * (size + 1))
    assert sorted(shared.pairs[view.mask[1], 0, 0].tolist()) == [1.0, 2.0]  # the newest two


def test_a_streams_prediction_never_reads_another_streams_entries() -> None:
    cfg = own()
    learner = Learner(cfg)
    g = torch.Generator().manual_seed(0)
    streams = torch.arange(cfg.batch_size)
    for step in range(5):
        pairs = torch.randn(cfg.batch_size, 2, cfg.latent_dim, generator=g)
        learner.buffer.push(pairs, streams, streams, torch.zeros_like(streams), step,
                            torch.ones(cfg.batch_size, dtype=torch.bool))  # fmt: skip
    z = torch.randn(cfg.batch_size, cfg.latent_dim, generator=g)
    before = learner.predict(z, learner.buffer)[0].pred
    learner.buffer.pairs[1] += 10.0  # stream 1's memory changes
    after = learner.predict(z, learner.buffer)[0].pred
    same = [b for b in range(cfg.batch_size) if b != 1]
    assert torch.equal(before[same], after[same])
    assert not torch.allclose(before[1], after[1])


def test_each_stream_pushes_its_own_pairs_and_a_new_world_empties_its_memory(
    pixel_encoder,
) -> None:
    cfg = own(kappa=1e-6, detector_warmup=0)
    learner = Learner(cfg)
    learner.nets.encoder = pixel_encoder(cfg.latent_dim, pixel=2)  # the stream's id
    learner.freeze_weights()
    ids = torch.arange(1, cfg.batch_size + 1)
    for _ in range(6):
        learner.update(batch_of(cfg, ids))
    buf = learner.buffer
    assert (buf.size > 0).all()
    for b in range(cfg.batch_size):
        assert (buf.pairs[b][buf.mask()[b]] == float(ids[b])).all()  # only its own latents
    size = buf.size.clone()
    learner.update(batch_of(cfg, ids, key=torch.tensor([0, 1, 0, 0])))  # stream 1: a new world
    assert buf.size[1] == 1  # emptied, then this step's own entry
    assert buf.size[0] == min(size[0] + 1, cfg.buffer_capacity)


def test_vary_memory_training_is_deterministic_and_resumes_exactly() -> None:
    cfg = own(vary_memory=True, kappa=0.5, detector_warmup=0)
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


def test_the_oracle_reads_physics_instead_of_memory() -> None:
    cfg = own(oracle=True)
    learner = Learner(cfg)
    assert learner.nets.oracle is not None and learner.nets.aggregator is None
    z = torch.randn(cfg.batch_size, cfg.latent_dim)
    p1 = torch.tensor([[0.0, 0.3, 1.0, 0.0]]).expand(cfg.batch_size, -1)
    p2 = torch.tensor([[0.3, 0.0, 1.0, 0.0]]).expand(cfg.batch_size, -1)
    out1 = learner.predict(z, learner.buffer, p1)[0].pred
    out2 = learner.predict(z, learner.buffer, p2)[0].pred
    assert not torch.allclose(out1, out2)
    streams = torch.arange(cfg.batch_size)
    learner.buffer.push(torch.randn(cfg.batch_size, 2, cfg.latent_dim), streams, streams,
                        torch.zeros_like(streams), 0, torch.ones(cfg.batch_size, dtype=torch.bool))
    again = learner.predict(z, learner.buffer, p1)
    assert torch.equal(again[0].pred, out1)  # memory is not read
    view = MemoryView.of(ExperienceBuffer(4, cfg.latent_dim))
    with pytest.raises(ValueError, match="no physics"):
        modulated_prediction(learner.nets, z, view, learner.spec, None)
    m = learner.update(batch_of(cfg, torch.arange(cfg.batch_size), physics=p1))
    assert torch.isfinite(m.loss_total)


def test_options_validate_and_round_trip() -> None:
    with pytest.raises(ValueError, match="oracle"):
        AgentConfig.of_size("tiny", track="A", oracle=True)
    with pytest.raises(ValueError, match="memory_scope"):
        AgentConfig.of_size("tiny", memory_scope="group")  # the paper's newest pair
    for gone in ("per_stream", "everywhere"):
        with pytest.raises(ValueError, match="memory_scope: expected one of global, group"):
            AgentConfig.of_size("tiny", memory_scope=gone, push_pair="input")
    with pytest.raises(ValueError, match="vary_memory"):
        AgentConfig.of_size("tiny", vary_memory=1)
    cfg = own(vary_memory=True, oracle=True, context_frames=2, per_horizon=True)
    assert AgentConfig.from_dict(cfg.to_dict()) == cfg


def test_the_oracles_width_is_envs_physics_features() -> None:
    import env
    from agent.config import PHYSICS_DIM

    assert PHYSICS_DIM == len(env.PHYSICS_FEATURES)
    world = env.PhysicsParams(0.3, 90.0, 0.9, 0.01)
    assert env.physics_features(world).shape == (PHYSICS_DIM,)
