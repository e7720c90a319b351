"""A world model that uses what it is told: the predictor of residual blocks with the track's
modulation in every block (agent.networks)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from test_group_memory import grouped_source
from test_group_memory import world_cfg as group_cfg

from agent import AgentConfig, Learner
from agent.build import build_networks
from agent.networks import BlockPredictor
from agent.objective import columns


def world_cfg(track: str = "C", **kw) -> AgentConfig:
    """test_group_memory's learner, its memory varied in training as the worlds protocol's."""
    return group_cfg(track, **{"vary_memory": True, **kw})


# ---------------------------------------------------------------------------- the blocks
@pytest.mark.parametrize("track", ["B", "C", "D", "E"])
def test_every_blocks_modulation_is_the_base_predictor_at_e_agg_zero_and_not_elsewhere(
    track: str,
) -> None:
    cfg = world_cfg(track, predictor_blocks=3, hidden_dim=32)
    nets = build_networks(cfg)
    assert isinstance(nets.predictor, BlockPredictor) and len(nets.predictor.blocks) == 3
    z = torch.randn(5, cfg.context_frames * cfg.latent_dim)
    base = nets.predictor(z)
    assert base.shape == (5, cfg.n_horizons, cfg.latent_dim)
    zero = nets.modulator(nets.predictor, z, torch.zeros(5, cfg.exp_dim))
    assert torch.equal(zero.pred, base)
    for p in nets.modulator.parameters():  # D's adaLN-Zero starts at zero: move it off
        torch.nn.init.normal_(p, std=0.1)
    e = torch.randn(5, cfg.exp_dim)
    moved = nets.modulator(nets.predictor, z, e).pred
    assert (moved - base).abs().amax() > 1e-4
    # per sample: a sample's prediction depends on its own e_agg only
    e2 = e.clone()
    e2[0] = 0
    again = nets.modulator(nets.predictor, z, e2).pred
    assert torch.equal(again[0], base[0]) and torch.allclose(again[1:], moved[1:])


def test_every_block_gets_the_modulation() -> None:
    """Track C's LoRA delta of block i changes the prediction through block i (a delta on the
    last block alone moves it, as does one on the first)."""
    cfg = world_cfg("C", predictor_blocks=2, hidden_dim=16, lora_rank=2)
    nets = build_networks(cfg)
    z, e = torch.randn(4, cfg.context_frames * cfg.latent_dim), torch.randn(4, cfg.exp_dim)
    base = nets.predictor(z)
    mod = nets.modulator
    for i in range(2):
        with torch.no_grad():
            keep = mod.u.clone()
            mod.u.zero_()
            mod.u[i] = keep[i]
            assert (mod(nets.predictor, z, e).pred - base).abs().amax() > 1e-5
            mod.u.copy_(keep)


def test_block_predictor_predicts_a_change_of_the_newest_latent() -> None:
    """With its output layer at zero the prediction is norm(z_last) at every horizon."""
    cfg = world_cfg("A", predictor_blocks=2, hidden_dim=16)
    pred = BlockPredictor.from_config(cfg)
    with torch.no_grad():
        pred.out.weight.zero_()
        pred.out.bias.zero_()
    z = torch.randn(3, 2 * cfg.latent_dim)
    want = pred.norm(z[:, cfg.latent_dim :]).unsqueeze(1).expand(3, cfg.n_horizons, -1)
    assert torch.allclose(pred(z), want)


def test_blocks_are_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="predictor_blocks"):
        world_cfg(predictor_blocks=-1)


@pytest.mark.parametrize("track,oracle", [("A", False), ("C", False), ("D", True)])
def test_a_run_with_blocks_resumes_exactly(track: str, oracle: bool) -> None:
    """Cut after 4 steps, the learner's state loaded into a new one: the next 4 steps equal
    the uncut run's, bit for bit."""
    cfg = world_cfg(track, oracle=oracle, total_steps=50, predictor_blocks=2, hidden_dim=16)
    batches = [b for src in [grouped_source(cfg)] for b in (src.next() for _ in range(8))]
    whole = Learner(cfg)
    ms = [whole.update(b) for b in batches]
    first = Learner(cfg)
    for b in batches[:4]:
        first.update(b)
    resumed = Learner(cfg)
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))
    rest = [resumed.update(b) for b in batches[4:]]
    want, got = columns(ms[4:]), columns(rest)
    assert all(np.array_equal(want[k], got[k], equal_nan=True) for k in want)
    for (n, p), q in zip(whole.nets.named_parameters(), resumed.nets.parameters(), strict=True):
        assert torch.equal(p, q), n


