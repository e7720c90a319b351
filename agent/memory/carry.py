"""Objectives that ask the memory's summary e_agg to carry the world (training worlds only).

Nothing in the JEPA loss asks a memory to hold what its world is: measured, a linear probe reads
a held-out world's gravity from e_agg at R^2 below 0. Two objectives, each switched on by its
weight (docs/agent.md, "A memory trained to carry the world"):

- **World identity** (``cfg.lambda_identity``, self-supervised: the groups are known, the physics
  is not read). Each world's memory is split into two disjoint halves, its even and its odd
  slots (entries of different streams, so of other digits and episodes); each sample reads each
  half, and the readouts of one world agree and differ from other worlds': a supervised
  contrastive loss (InfoNCE with the same world's samples as positives) over the batch, on the
  cosine of the two halves' readouts at temperature ``IDENTITY_TEMPERATURE``.
- **The world's physics** (``cfg.lambda_physics``, privileged): a small head regresses the
  world's physics features from e_agg; the loss is sum_d MSE_d / Var_d over the batch (so
  1 - R^2 summed over the features that vary), and it is only ever computed while the weights
  learn, in the training worlds.

Both read the memory with the query detached (the encoder is trained by the JEPA loss alone) and
only the samples that see at least one entry of each half (identity) or of the memory (physics).
Neither applies without a memory pathway (track A, the oracle).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from agent.memory.aggregator import AttentionAggregator
from agent.memory.view import MemoryView

#: The identity loss's softmax temperature on cosine similarities (SimCLR's and SupCon's range).
IDENTITY_TEMPERATURE = 0.1


class PhysicsHead(nn.Module):
    """e_agg (B, d) -> the world's physics features (B, P): Linear, GELU, Linear."""

    def __init__(self, dim: int, physics_dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, physics_dim))

    def forward(self, e_agg: torch.Tensor) -> torch.Tensor:
        return self.net(e_agg)


def physics_loss(
    head: PhysicsHead, e_agg: torch.Tensor, physics: torch.Tensor, keep: torch.Tensor
) -> torch.Tensor:
    """sum_d MSE_d / Var_d of the head's regression of ``physics`` (B, P) from ``e_agg`` over the
    samples ``keep`` (B,) bool; features that do not vary in the batch count 0."""
    w = keep.float()
    n = w.sum().clamp(min=1.0)
    target = physics.float()
    mean = (target * w[:, None]).sum(0) / n
    var = ((target - mean).pow(2) * w[:, None]).sum(0) / n
    mse = ((head(e_agg) - target).pow(2) * w[:, None]).sum(0) / n
    varies = var > 1e-8
    return torch.where(varies, mse / torch.where(varies, var, 1.0), 0.0).sum()


def identity_loss(
    aggregator: AttentionAggregator,
    query: torch.Tensor,
    codes: torch.Tensor,
    memory: MemoryView,
    keep: torch.Tensor,
) -> torch.Tensor:
    """The world-identity loss for the group memory ``memory`` (its e_i ``codes`` (W, cap, d)):
    each sample's readouts of its world's even and odd slots, a supervised contrastive loss with
    the samples of the same world as positives, both ways round; over the samples ``keep``."""
    assert memory.group is not None and memory.mask.dim() == 2
    even = torch.arange(memory.mask.shape[1], device=query.device) % 2 == 0
    halves = [memory.mask & even, memory.mask & ~even]
    keep = keep & halves[0].any(1) & halves[1].any(1)
    a, b = (
        F.normalize(aggregator(query, codes, m, memory.group).e_agg, dim=-1) for m in halves
    )
    same = memory.group.unsqueeze(1) == memory.group.unsqueeze(0)  # (B, B) positives
    pair = keep.unsqueeze(1) & keep.unsqueeze(0)
    loss = query.new_zeros(())
    for sim in (a @ b.T, b @ a.T):
        logits = (sim / IDENTITY_TEMPERATURE).masked_fill(~pair, -1e9)
        log_p = logits - torch.logsumexp(logits, dim=1, keepdim=True)
        pos = (same & pair).float()
        per = -(log_p * pos).sum(1) / pos.sum(1).clamp(min=1.0)
        has = keep & ((same & pair).sum(1) > 0)
        loss = loss + (per * has).sum() / has.sum().clamp(min=1) / 2
    return loss
