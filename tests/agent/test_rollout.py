"""The rolling predictor (``predictor="rollout"``): one transition, applied step by step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent import AgentConfig, DatasetSource, Learner
from agent.adaptation import WorldSet, world_curves
from agent.memory.view import MemoryView
from agent.networks import Predictor
from agent.step import base_error, modulated_prediction


def rollout_cfg(track: str, **kw: object) -> AgentConfig:
    return AgentConfig.from_preset(
        "tiny", track=track, predictor="rollout", context_frames=2, horizons=(1, 3, 4),
        push_pair="input", **kw,
    )  # fmt: skip


def test_config() -> None:
    cfg = rollout_cfg("C")
    assert cfg.rollout and cfg.out_heads == 1
    assert cfg.replace(per_horizon=True).out_heads == 1  # moot: a rollout is per horizon
    assert AgentConfig(per_horizon=True, horizons=(1, 2)).out_heads == 2
    assert not AgentConfig().rollout  # the paper's direct predictor
    with pytest.raises(ValueError, match="predictor: expected one of direct, rollout"):
        AgentConfig(predictor="recurrent")


def test_the_rollouts_transition_is_no_change_at_zero() -> None:
    """With fc2 = 0 the rollout's transition (a residual predictor) is norm(z_last): "no change"
    of the newest latent."""
    pred = Predictor(8, 16, context=2, residual=True)
    torch.nn.init.zeros_(pred.fc2.weight)
    torch.nn.init.zeros_(pred.fc2.bias)
    z = torch.randn(5, 16)
    torch.testing.assert_close(pred(z), torch.nn.functional.layer_norm(z[:, 8:], (8,), eps=1e-5))
    cfg = AgentConfig.from_preset("tiny", predictor="rollout", per_horizon=True, context_frames=2)
    assert cfg.out_heads == 1 and Predictor.from_config(cfg).residual
    assert not Predictor.from_config(AgentConfig()).residual
    with pytest.raises(ValueError, match="one head"):
        Predictor(8, 16, heads=3, residual=True)


@pytest.mark.parametrize("track", ["A", "B", "C", "D", "E"])
def test_rollout_equals_the_stepwise_transition(track: str) -> None:
    """pred at horizon h = the transition applied h times, each output the newest context
    latent, the memory's e_agg modulating every step."""
    cfg = rollout_cfg(track)
    learner = Learner(cfg)
    nets, spec = learner.nets, learner.spec
    torch.manual_seed(1)
    z = torch.randn(6, 2, cfg.latent_dim)
    memory = MemoryView(torch.randn(7, 2, cfg.latent_dim), torch.ones(7, dtype=torch.bool))
    with torch.no_grad():
        mod, agg = modulated_prediction(nets, z, memory, spec)
        e_agg = agg.e_agg if agg is not None else torch.zeros(6, cfg.exp_dim)
        ctx, steps = z, []
        for _ in range(4):
            nxt = nets.modulator(nets.predictor, ctx.flatten(1), e_agg).pred
            steps.append(nxt)
            ctx = torch.stack([ctx[:, 1], nxt], 1)
    assert mod.pred.shape == (6, 3, cfg.latent_dim)
    for j, h in enumerate(cfg.horizons):
        assert torch.equal(mod.pred[:, j], steps[h - 1])
    if track in ("C", "D", "E"):  # e_agg moves every step: the rollout differs from the base's
        assert not torch.equal(mod.pred, _base(nets, z, spec))


def _base(nets, z, spec):  # type: ignore[no-untyped-def]
    """The unmodulated rollout, stepwise."""
    ctx, out = z, []
    for t in range(1, spec.horizons[-1] + 1):
        nxt = nets.predictor(ctx.flatten(1))
        if t in spec.horizons:
            out.append(nxt)
        ctx = torch.stack([ctx[:, 1], nxt], 1)
    return torch.stack(out, 1)


def test_surprisal_is_the_base_rollouts_error() -> None:
    cfg = rollout_cfg("C")
    learner = Learner(cfg)
    torch.manual_seed(2)
    z, targets = torch.randn(4, 2, cfg.latent_dim), torch.randn(4, 3, cfg.latent_dim)
    memory = MemoryView(torch.randn(3, 2, cfg.latent_dim), torch.ones(3, dtype=torch.bool))
    with torch.no_grad():
        mod, _ = modulated_prediction(learner.nets, z, memory, learner.spec)
        err = base_error(learner.nets, z, mod, targets, learner.spec)
        want = (targets - _base(learner.nets, z, learner.spec)).norm(dim=-1).mean(1)
    torch.testing.assert_close(err, want)


@pytest.mark.parametrize("track", ["A", "C"])
def test_a_short_run_learns_and_evaluates(track: str) -> None:
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(16, 12, 1, 64, 64), dtype=np.uint8)
    cfg = rollout_cfg(track, memory_scope="group", group_size=1, memory_read="all",
                      memory_write="every")  # fmt: skip
    learner, source = Learner(cfg.replace(total_steps=8)), DatasetSource(frames, cfg, seed=0)
    before = [p.detach().clone() for p in learner.nets.predictor.parameters()]
    losses = [float(learner.update(source.next()).loss_total) for _ in range(4)]
    assert np.isfinite(losses).all()
    after = list(learner.nets.predictor.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
    world = WorldSet("w", "train", np.zeros(4, np.float32), frames[:, :10])
    (curve,) = world_curves(learner, [world], ns=(0, 2), memories=("own",))
    assert np.isfinite(curve.d).all() and len(curve.d_per_h[0]) == 3
