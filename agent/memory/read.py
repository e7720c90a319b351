"""How a sample reads memory: what it sees (``MemoryView``), each entry encoded
(``ExperienceEncoder``: each buffered entry -> e_i, by a small transformer; the e_i do not depend
on the sample, so the whole buffer is encoded once per step), and the attention over them
(``AttentionAggregator``: the current latent attends over the encoded entries -> e_agg).
Nothing is written through any of them."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from agent.config import AgentConfig
from agent.memory.buffer import ExperienceBuffer, GroupBuffer


class MemoryView(NamedTuple):
    """What the forward reads of the experience buffer (nothing is written through it).

    One memory for every sample (the paper's global FIFO): pairs (cap, E, D) (E latents an
    entry, 2 in the paper); or one per sample (the adaptation curve's: sample b's own n
    entries): pairs (B, n, E, D); or one per group (``memory_scope="group"``): pairs (W, cap, E,
    D) and ``group`` (B,), sample b reading group ``group[b]``'s. ``mask`` is (cap,) or (B,
    cap): (B, cap) also where each sample sees a different part (``visible``, ``of_group``)."""

    pairs: torch.Tensor  # (cap, E, D), (B, n, E, D) or (W, cap, E, D) float32
    mask: torch.Tensor  # (cap,) or (B, cap) bool, True for the slots a sample attends to
    group: torch.Tensor | None = None  # (B,) int64: the group memory each sample reads

    @classmethod
    def of_group(
        cls, buffer: GroupBuffer, group: torch.Tensor, episode: torch.Tensor | None,
        u: torch.Tensor | None = None,
    ) -> MemoryView:  # fmt: skip
        """Sample b reads group ``group[b]``'s memory: its filled slots, without those its own
        episode wrote when ``episode`` (B,) is given (the peer read), and, with ``u`` (B,)
        uniform in [0, 1) (``cfg.vary_memory``, training), only the newest k of them,
        k = floor(u * (size + 1))."""
        mask = buffer.mask()[group]  # (B, cap)
        if episode is not None:
            mask = mask & (buffer.episode[group] != episode.unsqueeze(1))
        if u is not None:
            size = buffer.size[group]
            k = (u * (size + 1).float()).long().clamp(max=size)  # (B,)
            mask = mask & (buffer.age()[group] < k.unsqueeze(1))
        return cls(buffer.pairs, mask, group)

    @classmethod
    def of(cls, buffer: ExperienceBuffer) -> MemoryView:
        """The buffer's pairs and filled-slot mask."""
        return cls(buffer.pairs, buffer.mask())

    @classmethod
    def visible(cls, buffer: ExperienceBuffer, u: torch.Tensor) -> MemoryView:
        """Each sample sees only the newest k entries of its memory, k = floor(u * (size + 1))
        for u (B,) uniform in [0, 1): so k is uniform over 0..size, empty memory included
        (``cfg.vary_memory``, training only). mask (B, cap)."""
        k = (u * (buffer.size + 1).float()).long().clamp(max=buffer.size)  # (B,)
        return cls(buffer.pairs, buffer.age() < k.unsqueeze(-1))


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
        self, z: torch.Tensor, e: torch.Tensor, mask: torch.Tensor,
        group: torch.Tensor | None = None,
    ) -> Aggregate:  # fmt: skip
        """z (B, latent), e (cap, d) shared by all samples or (B, cap, d) one memory per sample
        (the adaptation curve's), or (W, cap, d) one per world with ``group`` (B,) the world each
        sample reads; mask (cap,) or (B, cap) bool -> Aggregate(e_agg (B, d), attn (B, cap))."""
        q = self.w_q(z)  # (B, d)
        keys = self.w_k(e)  # each world's keys once
        if group is not None:
            return self._per_group(q, e, keys, mask, group)
        scores = q @ keys.T if e.dim() == 2 else torch.einsum("bd,bcd->bc", q, keys)  # (B, cap)
        attn = self._attend(scores, mask)
        pooled = attn @ e if e.dim() == 2 else torch.einsum("bc,bcd->bd", attn, e)
        return Aggregate(self.w_e(pooled), attn)

    def _attend(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Scores (B, cap) -> attention over the slots of ``mask`` (all 0 when none is)."""
        scores = (scores * self.scale).masked_fill(~mask, torch.finfo(scores.dtype).min)
        return torch.softmax(scores, dim=-1) * mask

    def _per_group(
        self, q: torch.Tensor, e: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor,
        group: torch.Tensor,
    ) -> Aggregate:  # fmt: skip
        """One memory per world (e, keys (W, cap, d)): every sample's scores against every
        world's keys in one matmul, then the block of its own world; the pooling the same way
        back. The same sums as a copy of its world's entries per sample (B x cap x d), without
        the copy or the per-sample products."""
        w, cap, d = e.shape
        block = group.view(-1, 1, 1).expand(-1, 1, cap)  # (B, 1, cap): the sample's world
        every = (q @ keys.reshape(w * cap, d).T).view(-1, w, cap)  # (B, W, cap)
        attn = self._attend(every.gather(1, block).squeeze(1), mask)  # (B, cap)
        spread = attn.new_zeros(attn.shape[0], w, cap).scatter(1, block, attn.unsqueeze(1))
        pooled = spread.view(-1, w * cap) @ e.reshape(w * cap, d)  # (B, d)
        return Aggregate(self.w_e(pooled), attn)
