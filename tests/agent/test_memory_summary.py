"""``cfg.memory_summary``: e_agg also gets a learned map of the entries' own statistics
(``agent.memory.summary``) beside the attention's pooling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import env
from agent import AgentConfig, Learner, StreamSource
from agent.memory import AttentionAggregator
from agent.metrics import stack
from agent.speed import Speed


def cfg_of(**kw) -> AgentConfig:
    base = {"push_pair": "input", "memory_scope": "world", "batch_size": 6, "group_size": 3,
            "memory_write": "every", "buffer_capacity": 8, "context_frames": 2,
            "horizons": (2, 4), "per_horizon": True, "input_scale": 1 / 255,
            "entry_frames": 3, "total_steps": 40, "memory_summary": True}  # fmt: skip
    return AgentConfig.from_preset("tiny", track="C", **{**base, **kw})


def test_the_summary_reads_the_entries_and_keeps_an_empty_memory_silent() -> None:
    cfg = cfg_of()
    agg = AttentionAggregator.from_config(cfg)
    assert agg.w_s is not None and agg.w_s.in_features == 3 * cfg.latent_dim
    assert AttentionAggregator.from_config(cfg.replace(memory_summary=False)).w_s is None
    g = torch.Generator().manual_seed(0)
    w, cap, b = 2, 5, 6
    entries = torch.randn(w, cap, 3, cfg.latent_dim, generator=g)
    codes = torch.randn(w, cap, cfg.exp_dim, generator=g)
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    z = torch.randn(b, cfg.latent_dim, generator=g)
    empty = agg(z, codes, torch.zeros(b, cap, dtype=torch.bool), group, entries)
    assert (empty.e_agg == 0).all()  # no entry: e_agg = 0, the base predictor
    mask = torch.rand(b, cap, generator=g) > 0.3
    grouped = agg(z, codes, mask, group, entries)
    per_sample = agg(z, codes[group], mask, None, entries[group])  # one memory per sample
    torch.testing.assert_close(grouped.e_agg, per_sample.e_agg)
    without = AttentionAggregator(cfg.latent_dim, cfg.exp_dim)
    without.load_state_dict({k: v for k, v in agg.state_dict().items() if k != "w_s.weight"})
    plain = without(z, codes, mask, group)
    assert not torch.allclose(plain.e_agg, grouped.e_agg)  # the summary adds to e_agg ...
    torch.testing.assert_close(plain.attn, grouped.attn)  # ... not to where it attends
    grouped.e_agg.sum().backward()
    assert agg.w_s.weight.grad is not None and agg.w_s.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="needs the memory's entries"):
        agg(z, codes, mask, group)


def test_a_learner_with_the_summary_trains_deterministically() -> None:
    cfg = cfg_of(vary_memory=True)
    vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None)
    sched = env.WorldSchedule(vec, "train", episode_steps=(8, 12), seed=0,
                              group_size=cfg.group_size, residency=(2, 3))  # fmt: skip
    source = StreamSource(sched, cfg, seed=0)
    batches = [source.next() for _ in range(20)]
    runs = []
    for _ in range(2):
        learner = Learner(cfg, speed=Speed())
        start = learner.nets.aggregator.w_s.weight.detach().clone()
        runs.append(stack([learner.update(b) for b in batches]))
        assert not torch.equal(start, learner.nets.aggregator.w_s.weight)  # it learns
    for key in runs[0]:
        np.testing.assert_array_equal(runs[0][key], runs[1][key], err_msg=key)
