"""Objective (the listing, masked) and the D metric's exact values."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from agent.metrics import StepMetrics, normalised_error, sigma_embed, stack
from agent.objective import compute_loss


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
    got = sigma_embed(x.sum(0), x.pow(2).sum(0), 50)
    torch.testing.assert_close(got, x.std(0).mean())
    recs = [
        StepMetrics(*[torch.tensor(float(i + j)) for j in range(len(StepMetrics.NAMES))])
        for i in range(3)
    ]
    out = stack(recs)
    assert set(out) == set(StepMetrics.NAMES)
    np.testing.assert_array_equal(out["loss/total"], [0.0, 1.0, 2.0])
    assert recs[0].as_dict()["stream/norm_error"].item() == 13.0
