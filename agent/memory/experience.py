"""ExperienceEncoder: each buffered (z_prev, z_new) pair -> e_i, by a small transformer.

The e_i do not depend on the sample, so the whole buffer is encoded once per step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from agent.config import AgentConfig


class Block(nn.Module):
    """Post-norm transformer encoder layer (Vaswani; torch's TransformerEncoderLayer default
    layout: ReLU feed-forward, no dropout), written out so train and eval run the same code."""

    def __init__(self, dim: int, heads: int, ff_dim: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.ff1 = nn.Linear(dim, ff_dim)
        self.ff2 = nn.Linear(ff_dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        # Stacked under vmap (agent.seeds): the attention written out (softmax(q k^T / sqrt(d))
        # v, equal to rounding), as the fused kernel has no vmap rule on a CPU.
        self.batched = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, T, d) -> (N, T, d)."""
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.batched:
            a = torch.softmax(q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5), -1) @ v
        else:
            a = F.scaled_dot_product_attention(q, k, v)  # (N, heads, T, d/heads)
        x = self.norm1(x + self.out(a.transpose(1, 2).reshape(n, t, d)))
        return self.norm2(x + self.ff2(F.relu(self.ff1(x))))


class ExperienceEncoder(nn.Module):
    """Entries (M, E, latent) -> e (M, exp_dim): input projection (identity when the widths
    match), a learned E-position embedding, ``layers`` transformer blocks, mean over the E tokens
    (E = ``frames``: 2, a transition pair, in the paper).

    The position embedding is our call: without it the mean-pooled transformer is symmetric in
    its two tokens, so a transition (a, b) and its reverse (b, a) would encode the same.
    """

    def __init__(
        self, latent_dim: int, dim: int, layers: int, heads: int, ff_dim: int, frames: int = 2
    ) -> None:
        super().__init__()
        self.inp = nn.Identity() if latent_dim == dim else nn.Linear(latent_dim, dim)
        self.pos = nn.Parameter(torch.zeros(frames, dim))
        nn.init.normal_(self.pos, std=0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, ff_dim) for _ in range(layers))

    @classmethod
    def from_config(cls, cfg: AgentConfig) -> ExperienceEncoder:
        return cls(cfg.latent_dim, cfg.exp_dim, cfg.exp_layers, cfg.exp_heads, cfg.exp_ff_dim,
                   cfg.entry_frames)

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        """(M, E, latent) -> (M, exp_dim)."""
        x = self.inp(pairs) + self.pos
        for block in self.blocks:
            x = block(x)
        return x.mean(dim=1)
