"""Learner.update: gradient flow, masking, surprisal, freeze controls, bf16, all tracks."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from fp32 import assert_reordered

from agent import AgentConfig, DatasetSource, Learner, StepMetrics, columns
from agent.objective import reg_loss
from agent.sources import Batch
from agent.step import context_latents


def fill_buffer(learner: Learner, n: int = 5) -> None:
    g = torch.Generator().manual_seed(1)
    for i in range(n):
        learner.buffer.push(torch.randn(2, learner.cfg.latent_dim, generator=g), i % 2, i)


@pytest.mark.parametrize("track", list("ABCDE"))
def test_update_runs_and_returns_device_tensors(track: str, frames: np.ndarray) -> None:
    cfg = AgentConfig.of_size("tiny", track=track)
    learner, src = Learner(cfg), DatasetSource(frames, cfg, seed=0)
    recs = [learner.update(src.next()) for _ in range(4)]
    assert learner.step == 4
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in recs[-1])
    out = columns(recs)
    assert np.isfinite(out["loss/total"]).all() and (out["stream/valid_frac"] == 1).all()
    assert math.isnan(out["mod/delta_abs"][0]) == (track in "AB")
    assert math.isnan(out["memory/attn_entropy"][0]) == (track == "A")


def test_gradients_reach_every_trainable_part_and_not_the_target(frames: np.ndarray) -> None:
    cfg = AgentConfig.of_size("tiny", track="C")
    learner = Learner(cfg)
    fill_buffer(learner)  # non-empty memory: e_agg != 0, so the generators get gradients
    learner.update(DatasetSource(frames, cfg, seed=0).next())
    nets = learner.nets
    parts = {
        "encoder": nets.encoder,
        "predictor": nets.predictor,
        "experience": nets.experience,
        "aggregator": nets.aggregator,
    }
    for name, module in parts.items():
        for pname, p in module.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, f"{name}.{pname}"
    mod = nets.modulator
    for p in (mod.u1, mod.v1, mod.u2, mod.v2, mod.delta1_gen.weight, mod.delta2_gen.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0
    assert all(p.grad is None and not p.requires_grad for p in nets.target.parameters())


def test_the_hinge_on_the_latents_is_the_one_a_step_reports(frames: np.ndarray) -> None:
    """regularise="latents": the step's loss/reg is the hinge on the online latents of the
    context frames of the batch it trained on (before the update), not on its predictions."""
    cfg = AgentConfig.of_size("tiny", track="A", regularise="latents")
    learner, batch = Learner(cfg), DatasetSource(frames, cfg, seed=0).next()
    with torch.no_grad():
        z = context_latents(learner.nets, batch.frames, learner.spec)
    expected = reg_loss(z.reshape(-1, cfg.latent_dim), cfg.gamma).item()
    rec = learner.update(batch)
    assert rec.loss_reg.item() == pytest.approx(expected, rel=1e-5)
    assert math.isfinite(rec.loss_total.item()) and rec.loss_total.item() > rec.loss_pred.item()


def test_the_relative_error_is_the_one_a_step_reports(frames: np.ndarray) -> None:
    """pred_error="relative": the step's loss/pred is its objective's relative error (the
    same weights and batch under "mse" report another number)."""
    cfg = AgentConfig.of_size("tiny", track="A", pred_error="relative")
    assert Learner(cfg).spec.objective.relative
    got = [Learner(c).update(DatasetSource(frames, c, seed=0).next()).loss_pred.item()
           for c in (cfg, replace(cfg, pred_error="mse"))]
    assert all(math.isfinite(x) for x in got) and got[0] != pytest.approx(got[1])


def test_track_a_dummy_projection_is_frozen(frames: np.ndarray) -> None:
    cfg = AgentConfig.of_size("tiny", track="A")
    learner = Learner(cfg)
    before = learner.nets.modulator.proj_B.weight.clone()
    src = DatasetSource(frames, cfg, seed=0)
    for _ in range(3):
        learner.update(src.next())
    assert torch.equal(before, learner.nets.modulator.proj_B.weight)
    assert learner.nets.experience is None


def test_invalid_samples_are_masked_everywhere(frames: np.ndarray) -> None:
    """A batch with invalid samples gives the same step as the batch of its valid samples."""
    cfg = AgentConfig.of_size("tiny", track="C", batch_size=8, detector_warmup=0)
    batch = DatasetSource(frames, cfg, seed=0).next()
    valid = torch.tensor([True, False, True, True, False, True, True, True])
    noisy = batch.frames.clone()
    noisy[~valid] = 255 - noisy[~valid]  # garbage in the invalid streams
    a, b = Learner(cfg), Learner(cfg.replace(batch_size=6))
    fill_buffer(a)
    fill_buffer(b)
    ma = a.update(Batch(noisy, valid, torch.zeros(8, dtype=torch.long)))
    mb = b.update(
        Batch(
            batch.frames[valid], torch.ones(6, dtype=torch.bool), torch.zeros(6, dtype=torch.long)
        )
    )
    assert ma.valid_frac.item() == 0.75
    # Equal in exact arithmetic; sums over 8 vs 6 samples may be blocked (rounded) differently.
    # The longest: the first convolution's weight gradient, over B * 32 * 32 positions. Gradients,
    # not the weights after AdamW, whose first step is lr * g / |g|: a gradient that is zero in
    # exact arithmetic (an attention key's bias) moves by lr whatever its rounding noise.
    longest = 8 * 32 * 32
    for name, x, y in zip(StepMetrics.NAMES, ma, mb, strict=True):
        if name != "stream/valid_frac":
            assert_reordered(x, y, longest, name)
    for (name, p), q in zip(a.nets.named_parameters(), b.nets.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert_reordered(p.grad, q.grad, longest, name)
    assert_reordered(a.buffer.pairs, b.buffer.pairs, longest, "memory")
    # No valid sample: nothing fires, nothing is pushed, the detector stays put.
    det = a.detector.state_dict()
    m = a.update(Batch(noisy, torch.zeros(8, dtype=torch.bool), torch.zeros(8, dtype=torch.long)))
    assert m.boundary.item() == 0 and m.valid_frac.item() == 0
    assert torch.equal(det["mu"], a.detector.mu)


def test_surprisal_uses_the_base_predictor(frames: np.ndarray) -> None:
    """s_t = batch mean of mean_k ||zbar_k - P_base(z)||, with the weights of the step's forward
    (before the optimizer moves them), not the modulated prediction."""
    cfg = AgentConfig.of_size("tiny", track="C")
    learner = Learner(cfg)
    fill_buffer(learner)
    src = DatasetSource(frames, cfg, seed=0)
    learner.update(src.next())
    batch = src.next()
    with torch.no_grad():
        x = learner.encoder_input(batch.frames)
        z = learner.nets.encoder(x[:, 0])
        tg = learner.nets.target(x[:, 1:4].flatten(0, 1)).view(cfg.batch_size, 3, -1)
        s = (tg - learner.nets.predictor(z)[:, None]).norm(dim=-1).mean()
        pred = learner.predict(z, learner.buffer)[0].pred
        s_mod = (tg - pred[:, None]).norm(dim=-1).mean()
    m = learner.update(batch)
    torch.testing.assert_close(m.surprisal, s)
    assert not torch.allclose(m.surprisal, s_mod)


def test_boundary_pushes_the_batch_mean_newest_pair(frames: np.ndarray) -> None:
    cfg = AgentConfig.of_size("tiny", track="B", detector_warmup=0, kappa=1e-6)
    learner = Learner(cfg)
    learner.freeze_weights()
    learner.detector.var.zero_()  # any surprisal above mu fires
    batch = DatasetSource(frames, cfg, seed=0).next()
    batch.shifted[:] = 1
    m = learner.update(batch)
    assert m.boundary.item() == 1 and m.buffer_size.item() == 1 and m.shift_share.item() == 1
    with torch.no_grad():
        x = learner.encoder_input(batch.frames)  # frames 19 (index K+1) and 20 (index K)
        ref = torch.stack(
            [learner.nets.encoder(x[:, 4]).mean(0), learner.nets.encoder(x[:, 3]).mean(0)]
        )
    pairs, world, steps = learner.buffer.ordered()
    torch.testing.assert_close(pairs[0], ref)
    assert world.tolist() == [1] and steps.tolist() == [0]


def test_freeze_controls(frames: np.ndarray) -> None:
    cfg = AgentConfig.of_size(
        "tiny", track="C", detector_warmup=0, kappa=1e-6, freeze_buffer_at=2, freeze_ema_at=1
    )
    learner = Learner(cfg)
    src = DatasetSource(frames, cfg, seed=0)
    learner.update(src.next())
    target = [p.clone() for p in learner.nets.target.parameters()]
    for _ in range(3):
        learner.detector.var.zero_()
        learner.update(src.next())
    assert all(
        torch.equal(a, b) for a, b in zip(target, learner.nets.target.parameters(), strict=True)
    )
    assert learner.buffer.ordered()[2].max().item() <= 1  # no writes from step 2 on
    # Memory mode: weights fixed, detector and buffer live.
    learner = Learner(cfg.replace(freeze_buffer_at=None, freeze_ema_at=None))
    learner.freeze_weights()
    weights = [p.clone() for p in learner.nets.parameters()]
    for _ in range(3):
        learner.detector.var.zero_()
        m = learner.update(src.next())
    assert all(torch.equal(a, b) for a, b in zip(weights, learner.nets.parameters(), strict=True))
    assert m.buffer_size.item() == 3 and learner.detector.count.item() == 3
    learner.unfreeze_weights()
    learner.update(src.next())
    assert not all(
        torch.equal(a, b) for a, b in zip(weights, learner.nets.parameters(), strict=True)
    )


@pytest.mark.bf16
def test_bf16_runs_and_stays_close(frames: np.ndarray) -> None:
    cfg = AgentConfig.of_size("tiny", track="C")
    src = DatasetSource(frames, cfg, seed=0)
    batch = src.next()
    m32 = Learner(cfg).update(batch)
    m16 = Learner(cfg.replace(precision="bf16")).update(batch)
    assert all(p.dtype == torch.float32 for p in Learner(cfg).nets.parameters())
    torch.testing.assert_close(m16.loss_total, m32.loss_total, rtol=0.05, atol=0.01)


def test_one_valid_or_identical_samples_give_finite_gradients(frames: np.ndarray) -> None:
    cfg = AgentConfig.of_size("tiny", track="C")
    learner = Learner(cfg)
    batch = DatasetSource(frames, cfg, seed=0).next()
    one = torch.zeros(cfg.batch_size, dtype=torch.bool)
    one[2] = True
    learner.update(Batch(batch.frames, one, batch.shifted))
    same = batch.frames[:1].expand_as(batch.frames).clone()  # zero variance across the batch
    m = learner.update(Batch(same, torch.ones_like(one), batch.shifted))
    assert math.isfinite(m.loss_total.item())
    assert all(torch.isfinite(p).all() for p in learner.nets.parameters())


def test_input_scale_is_applied_everywhere(frames: np.ndarray) -> None:
    cfg = AgentConfig.of_size("tiny", track="A")
    raw, unit = Learner(cfg), Learner(cfg.replace(input_scale=1 / 255))
    x = torch.from_numpy(frames[:4, 0])  # (4, 1, 64, 64) uint8
    assert torch.equal(raw.encode(x), raw.nets.encoder(x.float()))
    torch.testing.assert_close(unit.encode(x), unit.nets.encoder(x.float() / 255))
    assert torch.equal(raw.encode(x, target=True), raw.encode(x))  # EMA copy at step 0
