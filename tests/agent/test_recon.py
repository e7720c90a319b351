"""The pixel reconstruction beside the JEPA loss (``recon_weight``): off by default and then
absent; on, a decoder built after every other module (their init unchanged), trained with the
encoder, its loss the per-pixel cross-entropy against the context frames' ink."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from agent import Learner
from agent.build import build_networks
from agent.step import StepSpec, context_latents, recon_loss
from tests.agent.test_settle_fit import source, world_cfg


def test_off_by_default_and_absent() -> None:
    nets = build_networks(world_cfg())
    assert nets.recon is None
    assert not any(k.startswith("recon.") for k in nets.state_dict())


def test_the_other_modules_start_the_same() -> None:
    plain, with_recon = build_networks(world_cfg()), build_networks(world_cfg(recon_weight=1.0))
    a, b = plain.state_dict(), with_recon.state_dict()
    assert set(b) - set(a) == {k for k in b if k.startswith("recon.")} and set(a) <= set(b)
    for k, v in a.items():
        assert torch.equal(v, b[k]), k


def test_the_loss_is_the_cross_entropy_against_the_ink() -> None:
    cfg = world_cfg(recon_weight=1.0)
    nets, spec = build_networks(cfg), StepSpec.from_config(cfg, "cpu")
    frames = torch.randint(0, 256, (6, 7, 1, 64, 64), dtype=torch.uint8)
    with torch.no_grad():
        z = context_latents(nets, frames, spec)  # (6, 2, D): the frames before the targets
        got = recon_loss(nets, frames, z, spec)
        ctx = frames[:, spec.past - 2 : spec.past].flatten(0, 1).float() / 255.0
        ink = (ctx[..., 0::2, 0::2] + ctx[..., 1::2, 0::2] + ctx[..., 0::2, 1::2]
               + ctx[..., 1::2, 1::2]).flatten(1) / 4  # fmt: skip
        want = F.binary_cross_entropy_with_logits(nets.recon(z.flatten(0, 1)), ink)
    torch.testing.assert_close(got, want)


def test_it_trains_the_decoder_and_the_encoder_deterministically() -> None:
    def run(weight: float) -> tuple[list[float], Learner]:
        cfg = world_cfg(settle=None, recon_weight=weight)
        learner, src = Learner(cfg), source(cfg)
        return [float(learner.update(src.next()).loss_total) for _ in range(3)], learner

    (plain, p), (a, la), (b, _) = run(0.0), run(1.0), run(1.0)
    assert a == b  # deterministic
    assert all(x > y for x, y in zip(a, plain, strict=True))  # the total carries the cross-entropy
    fresh = build_networks(world_cfg(recon_weight=1.0))
    moved = [not torch.equal(x, y) for x, y in zip(la.nets.recon.parameters(), fresh.recon.parameters(), strict=True)]
    assert all(moved)
    enc_a, enc_p = la.nets.encoder.state_dict(), p.nets.encoder.state_dict()
    assert any(not torch.equal(enc_a[k], enc_p[k]) for k in enc_a)
