"""Memory subsystem: detector warmup and spikes, FIFO buffer, encoder, masked aggregation."""

from __future__ import annotations

import math

import torch

from agent.memory import AttentionAggregator, BoundaryDetector, ExperienceBuffer, ExperienceEncoder


def listing_detector(values: list[float], kappa: float, warmup: int = 10) -> list[bool]:
    """The paper's BoundaryDetector listing, verbatim logic with Python floats."""
    mu, var, steps, out = 0.0, 1.0, 0, []
    for s in values:
        old = mu
        mu = 0.99 * mu + 0.01 * s
        var = 0.99 * var + 0.01 * (s - old) ** 2
        steps += 1
        out.append(False if steps < warmup else s > mu + kappa * math.sqrt(max(var, 1e-8)))
    return out


def test_detector_warmup_spike_and_listing_agreement() -> None:
    det = BoundaryDetector(kappa=1.5, momentum=0.99, warmup=10)
    values = [5.0] * 9 + [1.0] * 300 + [50.0] + [1.0] * 5
    fired = [bool(det.update(torch.tensor(v))) for v in values]
    assert not any(fired[:9])  # the huge early values never fire during warmup
    assert fired[309]  # the spike after warmup fires
    assert fired == listing_detector(values, 1.5)
    assert isinstance(det.update(torch.tensor(1.0)), torch.Tensor)  # a device tensor, no .item()


def test_detector_inactive_steps_change_nothing() -> None:
    det = BoundaryDetector(kappa=1.0, warmup=0)
    before = det.state_dict()
    assert not det.update(torch.tensor(100.0), torch.tensor(False))
    assert all(torch.equal(before[k], v) for k, v in det.state_dict().items())


def test_buffer_fifo_evicts_the_oldest_and_respects_write() -> None:
    buf = ExperienceBuffer(capacity=3, latent_dim=2)
    for i in range(3):
        buf.push(torch.full((2, 2), float(i)), shifted=i % 2, step=i)
    buf.push(torch.full((2, 2), 99.0), shifted=1, step=9, write=torch.tensor(False))
    assert int(buf.size) == 3 and buf.ordered()[2].tolist() == [0, 1, 2]
    buf.push(torch.full((2, 2), 3.0), shifted=1, step=3, write=torch.tensor(True))
    pairs, world, steps = buf.ordered()
    assert steps.tolist() == [1, 2, 3]  # entry 0 evicted
    assert pairs[:, 0, 0].tolist() == [1.0, 2.0, 3.0] and world.tolist() == [1, 0, 1]
    assert abs(float(buf.shift_share()) - 2 / 3) < 1e-6
    copy = buf.clone()
    copy.push(torch.zeros(2, 2), 0, 4)
    assert buf.ordered()[2].tolist() == [1, 2, 3]  # the clone is independent


def test_aggregator_empty_is_zero_and_masks_empty_slots() -> None:
    torch.manual_seed(0)
    agg = AttentionAggregator(8, 6)
    z, e = torch.randn(4, 8), torch.randn(5, 6)
    out = agg(z, e, torch.zeros(5, dtype=torch.bool))
    assert torch.equal(out.e_agg, torch.zeros(4, 6))
    mask = torch.tensor([True, True, False, False, False])
    out = agg(z, e, mask)
    assert torch.equal(out.attn[:, 2:], torch.zeros(4, 3))
    torch.testing.assert_close(out.attn.sum(1), torch.ones(4))
    # Garbage in empty slots does not matter.
    e2 = e.clone()
    e2[2:] = 1e3
    assert torch.equal(agg(z, e2, mask).e_agg, out.e_agg)


def test_experience_encoder_shapes_and_order() -> None:
    torch.manual_seed(0)
    enc = ExperienceEncoder(latent_dim=8, dim=8, layers=2, heads=2, ff_dim=16)
    pairs = torch.randn(5, 2, 8)
    e = enc(pairs)
    assert e.shape == (5, 8)
    assert not torch.allclose(e, enc(pairs.flip(1)))  # (a, b) is not (b, a)
    torch.testing.assert_close(enc(pairs[:2]), e[:2])  # entries are encoded independently
