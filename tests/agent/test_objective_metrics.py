"""Objective (the listing, masked) and the D metric's exact values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from agent.objective import (
    Objective,
    StepMetrics,
    columns,
    compute_loss,
    normalised_error,
    pred_loss,
    reg_loss,
    spread,
)


def listing_loss(pred: torch.Tensor, targets: list[torch.Tensor], gamma: float, lam: float):
    lp = sum(F.mse_loss(pred, t.detach()) for t in targets) / len(targets)
    lr = torch.clamp(gamma - pred.std(dim=0), min=0.0).mean()
    return lp + lam * lr, lp, lr


def test_loss_matches_listing_and_masking_drops_samples() -> None:
    torch.manual_seed(0)
    pred, tg = torch.randn(9, 6), torch.randn(9, 3, 6)
    ref = listing_loss(pred, list(tg.unbind(1)), 0.75, 0.05)
    for got in (
        compute_loss(pred, tg, 0.75, 0.05),
        compute_loss(pred, tg, 0.75, 0.05, torch.ones(9)),
    ):
        for a, b in zip(got, ref, strict=True):
            torch.testing.assert_close(a, b)
    keep = torch.tensor([1, 0, 1, 1, 0, 1, 1, 1, 0], dtype=torch.bool)
    masked = compute_loss(pred, tg, 0.75, 0.05, keep.float())
    sub = listing_loss(pred[keep], list(tg[keep].unbind(1)), 0.75, 0.05)
    for a, b in zip(masked, sub, strict=True):
        torch.testing.assert_close(a, b)


def test_the_hinge_on_the_latents_ignores_the_predictions_spread() -> None:
    """regularise="latents": the variance hinge on the encoder's latents,
    every context frame a row, invalid samples dropped; the prediction loss unchanged."""
    torch.manual_seed(1)
    pred, targets = torch.zeros(6, 4), torch.randn(6, 2, 4)
    z = torch.randn(6, 3, 4)
    w = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    paper = compute_loss(pred, targets, 0.75, 0.1, w)
    assert paper.reg.item() == pytest.approx(0.75)  # constant predictions: the whole hinge
    on_z = compute_loss(pred, targets, 0.75, 0.1, w, z)
    rows = z[:4].reshape(-1, 4)
    assert on_z.pred.item() == paper.pred.item()
    assert on_z.reg.item() == pytest.approx(reg_loss(rows, 0.75).item())
    assert on_z.total.item() == pytest.approx(on_z.pred.item() + 0.1 * on_z.reg.item(), rel=1e-6)


def test_the_relative_error_weighs_each_horizon_by_its_no_change_distance() -> None:
    """pred_error="relative": each horizon's MSE over its batch's mean ||zbar_k - z_t||^2, the
    weights normalised to mean 1; the paper's MSE where every horizon's distance is the same;
    invalid samples count in neither; the Objective reads z_t as the newest context latent."""
    z = torch.zeros(4, 3)
    targets = torch.zeros(4, 2, 3)
    targets[:, 0, 0], targets[:, 1, 0] = 1.0, 2.0  # no-change distance^2: 1 and 4
    pred = torch.zeros(4, 2, 3)
    pred[:, 0, 0] = 1.0 + 0.5  # horizon 1: squared error 0.25 per sample
    pred[:, 1, 0] = 2.0 + 0.5  # horizon 2: the same absolute error
    mse = pred_loss(pred, targets)
    assert mse.item() == pytest.approx(0.25 / 3)
    # scales 1/1 and 1/4, normalised to mean 1: 1.6 and 0.4
    rel = pred_loss(pred, targets, current=z)
    assert rel.item() == pytest.approx((1.6 * 0.25 / 3 + 0.4 * 0.25 / 3) / 2)
    pred[:, 1, 0] = 2.0 + 1.0  # twice the absolute error at twice the distance: D equal
    rel = pred_loss(pred, targets, current=z)
    assert rel.item() == pytest.approx((1.6 * 0.25 + 0.4 * 1.0) / 3 / 2)
    same = torch.randn(4, 2, 3)
    same[:, 1] = -same[:, 0]  # equal no-change distances at both horizons
    p2 = torch.randn(4, 2, 3)
    torch.testing.assert_close(pred_loss(p2, same, current=z), pred_loss(p2, same))
    w = torch.tensor([1.0, 1.0, 0.0, 0.0])
    t2 = targets.clone()
    t2[2:] = 100.0  # invalid samples: their distances and errors are not read
    torch.testing.assert_close(pred_loss(pred, t2, w, current=z), pred_loss(pred[:2], targets[:2],
                                                                          current=z[:2]))
    ctx = torch.stack([torch.full((4, 3), 9.0), z], 1)  # (B, C=2, D): z_t the newest
    got = Objective(relative=True)(pred, targets, torch.ones(4), ctx)
    assert got.pred.item() == pytest.approx(rel.item())


def test_d_is_exactly_one_for_no_change_and_zero_for_perfect() -> None:
    torch.manual_seed(0)
    z, tg = torch.randn(10, 8), torch.randn(10, 3, 8)
    d, per_h, excluded = normalised_error(z.clone(), z, tg)
    assert d.item() == 1.0 and per_h.tolist() == [1.0, 1.0, 1.0] and excluded.item() == 0
    perfect = tg[:, 1].clone()
    tg_same = perfect.unsqueeze(1).expand(10, 3, 8)
    d, _, _ = normalised_error(perfect, z, tg_same)
    assert d.item() == 0.0


def test_excluded_denominators_are_counted_not_averaged() -> None:
    torch.manual_seed(0)
    z, tg = torch.randn(6, 4), torch.randn(6, 3, 4)
    tg[0, 0] = z[0] + 1e-5  # ||target - z|| < 1e-3: excluded
    tg[3, 2] = z[3]
    pred = torch.randn(6, 4)
    d, per_h, excluded = normalised_error(pred, z, tg)
    assert excluded.item() == 2
    ratio = (tg - pred[:, None]).norm(dim=-1) / (tg - z[:, None]).norm(dim=-1)
    torch.testing.assert_close(per_h[0].float(), ratio[1:, 0].mean())
    torch.testing.assert_close(per_h[2].float(), ratio[[0, 1, 2, 4, 5], 2].mean())
    valid = torch.tensor([False, True, True, True, True, True])
    assert normalised_error(pred, z, tg, valid=valid)[2].item() == 1  # invalid sample ignored


def test_sigma_embed_and_stack() -> None:
    x = torch.randn(50, 4, dtype=torch.float64)
    got = spread(x)
    torch.testing.assert_close(got, x.std(0).mean())
    recs = [
        StepMetrics(*[torch.tensor(float(i + j)) for j in range(len(StepMetrics.NAMES))])
        for i in range(3)
    ]
    out = columns(recs)
    assert set(out) == set(StepMetrics.NAMES)
    np.testing.assert_array_equal(out["loss/total"], [0.0, 1.0, 2.0])
    assert recs[0].as_dict()["stream/norm_error"].item() == 13.0
    stacked = StepMetrics(*(torch.stack(list(c)) for c in zip(*recs, strict=True)))  # (3,) each
    for s, rec in enumerate(recs):  # each seed's column as its own 0-dim metrics
        got = stacked.seed(s)
        assert all(g.dim() == 0 and torch.equal(g, r) for g, r in zip(got, rec, strict=True))
