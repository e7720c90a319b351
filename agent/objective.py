"""The training objective (the paper's listing), with an optional per-sample validity mask.

With every sample valid these are the listing's ``pred_loss``, ``reg_loss``, ``compute_loss``
(up to float summation order); masked samples (stream windows spanning a reset) contribute
nothing.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from agent.metrics import per_horizon


class Loss(NamedTuple):
    total: torch.Tensor  # 0-dim: pred + lambda * reg
    pred: torch.Tensor  # 0-dim: mean over horizons of the MSE against the targets
    reg: torch.Tensor  # 0-dim: variance hinge, mean_d max(0, gamma - std_b)


def pred_loss(
    pred: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean over horizons of the MSE between pred and the stop-gradient targets.

    pred (B, D) (the paper's one output for every horizon) or (B, K, D) (one per horizon);
    targets (B, K, D), detached here; weight (B,) 0/1 float or None (all valid).
    """
    sq = (per_horizon(pred) - targets.detach()).pow(2)  # (B, K, D)
    if weight is None:
        return sq.mean()
    b, k, d = sq.shape
    n = weight.sum().clamp(min=1.0)
    return (sq.sum(dim=(1, 2)) * weight).sum() / (n * k * d)


def reg_loss(pred: torch.Tensor, gamma: float, weight: torch.Tensor | None = None) -> torch.Tensor:
    """VICReg variance term: mean_d max(0, gamma - std_b(pred[:, d])), std unbiased.

    pred (B, D), or (B, K, D) per horizon (each horizon's dimensions count apart); weight (B,)
    0/1 float or None.
    """
    pred = pred.flatten(1)
    if weight is None:
        std = pred.std(dim=0)
    else:
        n = weight.sum()
        w = weight.unsqueeze(1)  # (B, 1)
        mean = (pred * w).sum(0) / n.clamp(min=1.0)
        var = ((pred - mean).pow(2) * w).sum(0) / (n - 1.0).clamp(min=1.0)
        # sqrt'(0) is inf: with < 2 valid samples (or identical ones) the gradient would be NaN.
        pos = var > 0
        std = torch.where(pos, torch.where(pos, var, 1.0).sqrt(), 0.0)
    return torch.clamp(gamma - std, min=0.0).mean()


def cov_loss(x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """VICReg covariance term: the squared off-diagonal entries of the (unbiased) covariance of
    x (N, D) over its rows, summed and divided by D; weight (N,) 0/1 float or None."""
    w = torch.ones(x.shape[0], device=x.device) if weight is None else weight
    n = w.sum()
    xc = x - (x * w.unsqueeze(1)).sum(0) / n.clamp(min=1.0)
    cov = (xc * w.unsqueeze(1)).T @ xc / (n - 1.0).clamp(min=1.0)
    off = cov - torch.diag(torch.diagonal(cov))
    return off.pow(2).sum() / x.shape[1]


def compute_loss(
    pred: torch.Tensor,
    targets: torch.Tensor,
    gamma: float,
    lambda_reg: float,
    weight: torch.Tensor | None = None,
    latents: torch.Tensor | None = None,
    lambda_cov: float = 0.0,
) -> Loss:
    """Loss(total, pred, reg) for pred (B, D) and targets (B, K, D). The variance hinge (and,
    with ``lambda_cov``, the covariance term) is on the predictions (the paper), or on the
    online encoder's ``latents`` (B, [C,] D) where given (each context frame a row)."""
    lp = pred_loss(pred, targets, weight)
    src, w = pred, weight
    if latents is not None:
        c = latents.shape[1] if latents.dim() == 3 else 1
        src = latents.float().reshape(-1, latents.shape[-1])
        w = None if weight is None else weight.repeat_interleave(c)
    lr = reg_loss(src, gamma, w)
    total = lp + lambda_reg * lr
    if lambda_cov > 0:
        total = total + lambda_cov * cov_loss(src.flatten(1), w)
    return Loss(total, lp, lr)
