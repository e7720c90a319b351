"""The training objective (the paper's listing), with an optional per-sample validity mask.

With every sample valid these are the listing's ``pred_loss``, ``reg_loss``, ``compute_loss``
(up to float summation order); masked samples (stream windows spanning a reset) contribute
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from agent.metrics import per_horizon


class Loss(NamedTuple):
    total: torch.Tensor  # 0-dim: pred + lambda * reg
    pred: torch.Tensor  # 0-dim: mean over horizons of the MSE against the targets
    reg: torch.Tensor  # 0-dim: variance hinge, mean_d max(0, gamma - std_b)


def pred_loss(
    pred: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor | None = None,
    current: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean over horizons of the MSE between pred and the stop-gradient targets.

    pred (B, D) (the paper's one output for every horizon) or (B, K, D) (one per horizon);
    targets (B, K, D), detached here; weight (B,) 0/1 float or None (all valid). With the
    input frame's latent ``current`` (B, D), each horizon's MSE is divided by the batch's mean
    squared "no change" distance ||zbar_k - z_t||^2 at that horizon (detached; the weights
    normalised to mean 1 over the horizons), so that every horizon weighs as it does in D.
    """
    sq = (per_horizon(pred) - targets.detach()).pow(2)  # (B, K, D)
    b, k, d = sq.shape
    if current is None:
        if weight is None:
            return sq.mean()
        n = weight.sum().clamp(min=1.0)
        return (sq.sum(dim=(1, 2)) * weight).sum() / (n * k * d)
    w = sq.new_ones(b) if weight is None else weight
    n = w.sum().clamp(min=1.0)
    per_k = (sq.sum(2) * w.unsqueeze(1)).sum(0) / (n * d)  # (K,) each horizon's MSE
    with torch.no_grad():
        still = (targets - current.detach().float().unsqueeze(1)).pow(2).sum(2)  # (B, K)
        still = (still * w.unsqueeze(1)).sum(0) / n  # (K,)
        scale = 1.0 / still.clamp(min=1e-8)
        scale = scale / scale.mean()
    return (per_k * scale).mean()


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


def compute_loss(
    pred: torch.Tensor,
    targets: torch.Tensor,
    gamma: float,
    lambda_reg: float,
    weight: torch.Tensor | None = None,
    latents: torch.Tensor | None = None,
    current: torch.Tensor | None = None,
) -> Loss:
    """Loss(total, pred, reg) for pred (B, D) and targets (B, K, D). The variance hinge is on
    the predictions (the paper), or on the
    online encoder's ``latents`` (B, [C,] D) where given (each context frame a row). With the
    input latent ``current`` (B, D) the horizons' errors are relative (``pred_loss``)."""
    lp = pred_loss(pred, targets, weight, current)
    src, w = pred, weight
    if latents is not None:
        c = latents.shape[1] if latents.dim() == 3 else 1
        src = latents.float().reshape(-1, latents.shape[-1])
        w = None if weight is None else weight.repeat_interleave(c)
    lr = reg_loss(src, gamma, w)
    return Loss(lp + lambda_reg * lr, lp, lr)


@dataclass(frozen=True)
class Objective:
    """The step's loss settings (from ``AgentConfig``): the variance hinge's target std and
    weight, whether it holds the encoder's latents apart (``cfg.regularise``), and whether the horizons' errors are relative (``cfg.pred_error``)."""

    gamma: float = 0.75
    lambda_reg: float = 0.05
    on_latents: bool = False
    relative: bool = False

    def __call__(
        self, pred: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor, z: torch.Tensor
    ) -> Loss:
        """The loss of pred against targets for the online context latents z (B, [C,] D)."""
        current = z[:, -1] if z.dim() == 3 else z
        return compute_loss(pred, targets, self.gamma, self.lambda_reg, weight,
                            z if self.on_latents else None,
                            current if self.relative else None)
