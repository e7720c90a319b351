"""A predictor batch larger than the encoder's (``encoder_batch``): every s-th stream's context
gives the encoder its gradient, the others are encoded without it; values and the predictor's
gradient unchanged."""

from __future__ import annotations

import pytest
import torch
from fp32 import assert_reordered

from agent import AgentConfig, Learner
from agent.build import build_networks
from agent.step import StepSpec, context_latents


def cfg_with(**kw) -> AgentConfig:
    return AgentConfig.of_size("tiny", push_pair="input", context_frames=2, batch_size=6,
                                   precision="fp32", **kw)  # fmt: skip


def grads(cfg: AgentConfig, frames: torch.Tensor, detach_rows: list[int] | None = None):
    nets = build_networks(cfg)
    spec = StepSpec.from_config(cfg, "cpu")
    z = context_latents(nets, frames, spec)
    if detach_rows:  # the reference: the same latents, those rows cut from the graph
        keep = torch.ones(z.shape[0], dtype=torch.bool)
        keep[detach_rows] = False
        z = torch.where(keep.view(-1, 1, 1), z, z.detach())
    pred = nets.predictor(z.flatten(1))
    (pred.pow(2).sum() + z.pow(3).sum()).backward()
    enc = [p.grad.clone() for p in nets.encoder.parameters()]
    head = [p.grad.clone() for p in nets.predictor.parameters()]
    return z.detach(), enc, head


def test_only_every_sth_stream_gives_the_encoder_its_gradient() -> None:
    frames = torch.randint(0, 256, (6, 5, 1, 64, 64), dtype=torch.uint8)
    torch.manual_seed(0)
    z_all, enc_all, head_all = grads(cfg_with(), frames)
    torch.manual_seed(0)
    z_split, enc_split, head_split = grads(cfg_with(encoder_batch=2), frames)  # rows 0 and 3
    torch.manual_seed(0)
    z_ref, enc_ref, head_ref = grads(cfg_with(), frames, detach_rows=[1, 2, 4, 5])
    # The same latents, in the batch's order: bit for bit but for the kernels' summation order,
    # which may differ with the batch size (oneDNN's on Intel CPUs); the longest sum is the
    # encoder's projection, 64 * 4 * 4 terms.
    assert_reordered(z_split, z_all, 64 * 16, "latents")
    # The predictor sees every stream: its gradient (a sum over the batch that cancels) carries
    # the latents' last-bit differences to a few 1e-6 (Intel's oneDNN; 0 where equal).
    for a, b in zip(head_split, head_all, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-5)
    # The encoder: rows 0 and 3 only (its gradients sum over the rows' 32 x 32 positions at most).
    for a, b in zip(enc_split, enc_ref, strict=True):
        assert_reordered(a, b, 2 * 32 * 32, "encoder gradient")
    assert any(not torch.allclose(a, b) for a, b in zip(enc_split, enc_all, strict=True))


def test_a_split_learner_trains_and_is_deterministic() -> None:
    from tests.agent.test_settle_fit import source, world_cfg

    def run() -> list[float]:
        cfg = world_cfg(settle=None, encoder_batch=2)
        learner, src = Learner(cfg), source(cfg)
        return [float(learner.update(src.next()).loss_total) for _ in range(4)]

    a = run()
    assert all(torch.isfinite(torch.tensor(a))) and a == run()


@pytest.mark.parametrize("bad", [4, 0, 7, 2.0])
def test_encoder_batch_must_divide_the_batch(bad) -> None:
    with pytest.raises(ValueError, match="encoder_batch"):
        cfg_with(encoder_batch=bad)
    assert cfg_with(encoder_batch=3).encoder_stride == 2 and cfg_with().encoder_stride == 1

