"""agent.seeds.SeedStack: S seeds' networks as one stacked set, each seed's forward, loss,
gradient and AdamW step the single network's (to rounding: the stacked kernels are batched
ones), and each seed's state dict back exactly."""

from __future__ import annotations

import pytest
import torch

from agent import AgentConfig
from agent.build import build_networks, build_optimizer
from agent.memory.read import MemoryView
from agent.seeds import SeedStack
from agent.step import StepSpec, context_latents, memory_codes, modulated_prediction, target_latents

SEEDS = (3, 11)
B, CAP = 6, 5


def config(track: str, seed: int, **kw) -> AgentConfig:
    return AgentConfig.of_size(
        "tiny", track=track, seed=seed, context_frames=2, horizons=(2, 4), per_horizon=True,
        input_scale=1 / 255, precision="fp32", **kw,
    )  # fmt: skip


def inputs(cfg: AgentConfig, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(100 + seed)
    frames = torch.randint(0, 256, (B, cfg.window, 1, 64, 64), generator=g, dtype=torch.uint8)
    pairs = torch.randn(B, CAP, cfg.entry_frames, cfg.latent_dim, generator=g)
    mask = torch.rand(B, CAP, generator=g) < 0.7
    return frames, pairs, mask


def loss_of(nets, frames, pairs, mask, spec: StepSpec) -> torch.Tensor:
    """One seed's forward to its loss: context latents, memory codes, the modulated prediction
    against the EMA targets (the step's pieces, as ``agent.step.jepa_step`` calls them)."""
    memory = MemoryView(pairs, mask)
    z = context_latents(nets, frames, spec)
    codes = memory_codes(nets, memory, spec)
    mod, _ = modulated_prediction(nets, z, memory, spec, None, codes)
    with torch.no_grad():
        targets = target_latents(nets, frames, spec).float()
    w = torch.ones(frames.shape[0])
    return spec.objective(mod.pred.float(), targets, w, z).total


@pytest.mark.parametrize("track", ["A", "B", "C", "D", "E"])
def test_each_seed_of_the_stack_is_its_single_network(track: str) -> None:
    cfgs = [config(track, s) for s in SEEDS]
    singles = [build_networks(c) for c in cfgs]
    stack = SeedStack([build_networks(c) for c in cfgs])
    spec = StepSpec.from_config(cfgs[0], "cpu")
    data = [inputs(c, s) for c, s in zip(cfgs, SEEDS, strict=True)]

    # Forward and loss: each seed's own.
    losses = [loss_of(n, *d, spec) for n, d in zip(singles, data, strict=True)]
    stacked = [torch.cat(parts) for parts in zip(*data, strict=True)]  # seed-major rows
    stacked_losses = stack.map(loss_of, *stacked, spec)
    assert stacked_losses.shape == (len(SEEDS),)
    torch.testing.assert_close(stacked_losses, torch.stack(losses).detach(), rtol=1e-5, atol=1e-6)

    # Gradient of the seeds' summed loss: each seed's own.
    for loss in losses:
        loss.backward()
    stacked_losses.sum().backward()
    for s, nets in enumerate(singles):
        for name, p in nets.named_parameters():
            if p.grad is not None:
                torch.testing.assert_close(stack.params[name].grad[s], p.grad, rtol=1e-4,
                                           atol=1e-6, msg=name)  # fmt: skip

    # One fused AdamW step over the stacked leaves, given the single gradients: each seed's
    # own optimizer's step, bit for bit (AdamW is elementwise; a gradient's rounding would
    # show as far more where Adam divides a near-zero gradient by its own size).
    for name, p in stack.params.items():
        grads = [dict(n.named_parameters())[name].grad for n in singles]
        p.grad = None if grads[0] is None else torch.stack(grads)
    for nets, cfg in zip(singles, cfgs, strict=True):
        build_optimizer(cfg, nets).step()
    trainable = [p for n, p in stack.params.items() if p.requires_grad and not n.startswith("target.")]
    torch.optim.AdamW(trainable, lr=cfgs[0].lr, weight_decay=cfgs[0].weight_decay, fused=True).step()
    for s, state in enumerate(stack.state_dicts()):
        for name, t in singles[s].state_dict().items():
            assert torch.equal(state[name], t), name


def test_state_dicts_round_trip_exactly() -> None:
    cfgs = [config("C", s) for s in SEEDS]
    singles = [build_networks(c) for c in cfgs]
    stack = SeedStack(singles)
    states = stack.state_dicts()
    for s, nets in enumerate(singles):
        assert states[s].keys() == nets.state_dict().keys()
        assert all(torch.equal(states[s][n], t) for n, t in nets.state_dict().items())
    other = SeedStack([build_networks(config("C", 99)) for _ in SEEDS])
    leaf = other.params["encoder.conv.0.weight"]
    other.load_state_dicts(states)
    assert other.params["encoder.conv.0.weight"] is leaf  # in place: an optimizer keeps it
    for s in range(len(SEEDS)):
        assert all(torch.equal(other.state_dicts()[s][n], t) for n, t in states[s].items())


def test_a_stack_refuses_rows_that_are_not_seed_major_and_mixed_shapes() -> None:
    stack = SeedStack([build_networks(config("A", s)) for s in SEEDS])
    with pytest.raises(ValueError, match="multiple of the 2 seeds"):
        stack.split(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="same parameters and shapes"):
        SeedStack([build_networks(config("A", 0)), build_networks(config("A", 0, latent_dim=64))])
