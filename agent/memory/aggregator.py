"""AttentionAggregator: the current latent attends over the encoded buffer entries."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from agent.config import AgentConfig


class Aggregate(NamedTuple):
    e_agg: torch.Tensor  # (B, exp_dim), exactly 0 when the buffer is empty
    attn: torch.Tensor  # (B, cap) attention weights, 0 on empty slots


class AttentionAggregator(nn.Module):
    """Single-head attention: alpha = softmax(W_q(z) . W_k(e_i) / sqrt(d)) over filled slots,
    e_agg = W_e sum_i alpha_i e_i. No biases (the paper's formula), so an empty buffer gives
    e_agg = 0 exactly and the modulators reduce to the base predictor."""

    def __init__(self, latent_dim: int, dim: int) -> None:
        super().__init__()
        self.scale = 1.0 / math.sqrt(dim)
        self.w_q = nn.Linear(latent_dim, dim, bias=False)
        self.w_k = nn.Linear(dim, dim, bias=False)
        self.w_e = nn.Linear(dim, dim, bias=False)

    @classmethod
    def from_config(cls, cfg: AgentConfig) -> AttentionAggregator:
        return cls(cfg.latent_dim, cfg.exp_dim)

    def forward(
        self,
        z: torch.Tensor,
        e: torch.Tensor,
        mask: torch.Tensor,
        group: torch.Tensor | None = None,
    ) -> Aggregate:
        """z (B, latent), e (cap, d) shared by all samples or (B, cap, d) one memory per sample
        (the adaptation curve's), or (W, cap, d) one per world with ``group`` (B,) the world each
        sample reads; mask (cap,) or (B, cap) bool -> Aggregate(e_agg (B, d), attn (B, cap))."""
        q = self.w_q(z)  # (B, d)
        keys = self.w_k(e)  # each world's keys once
        if group is not None:
            return self._per_group(q, e, keys, mask, group)
        if e.dim() == 2:
            scores = q @ keys.T  # (B, cap)
        else:
            scores = torch.einsum("bd,bcd->bc", q, keys)
        scores = (scores * self.scale).masked_fill(~mask, torch.finfo(scores.dtype).min)
        # All slots empty: softmax is uniform over garbage; the mask product zeroes it.
        attn = torch.softmax(scores, dim=-1) * mask
        pooled = attn @ e if e.dim() == 2 else torch.einsum("bc,bcd->bd", attn, e)
        return Aggregate(self.w_e(pooled), attn)

    def _per_group(
        self,
        q: torch.Tensor,
        e: torch.Tensor,
        keys: torch.Tensor,
        mask: torch.Tensor,
        group: torch.Tensor,
    ) -> Aggregate:
        """One memory per world (e, keys (W, cap, d)): every sample's scores against every
        world's keys in one matmul, then the block of its own world; the pooling the same way
        back. The same sums as a copy of its world's entries per sample (B x cap x d), without
        the copy or the per-sample products."""
        w, cap, d = e.shape
        block = group.view(-1, 1, 1).expand(-1, 1, cap)  # (B, 1, cap): the sample's world
        every = (q @ keys.reshape(w * cap, d).T).view(-1, w, cap)  # (B, W, cap)
        scores = every.gather(1, block).squeeze(1)  # (B, cap)
        scores = (scores * self.scale).masked_fill(~mask, torch.finfo(scores.dtype).min)
        attn = torch.softmax(scores, dim=-1) * mask
        spread = attn.new_zeros(attn.shape[0], w, cap).scatter(1, block, attn.unsqueeze(1))
        pooled = spread.view(-1, w * cap) @ e.reshape(w * cap, d)  # (B, d)
        return Aggregate(self.w_e(pooled), attn)
