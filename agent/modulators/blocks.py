"""Tracks B-E acting in every block i of a ``BlockPredictor`` (``cfg.predictor_blocks`` > 0;
docs/agent.md, "a predictor with room to use the world"), each its track's kind of modulation:
B adds P_i e_agg to the block's hidden state; C a per-sample LoRA delta to both its layers; D is
adaLN-Zero, (1 + g_i) fc_b(act(fc_a(ln(h) (1 + s_i) + t_i))); E a hypernetwork's full-rank delta
of its fc_a. Every code is a bias-free linear map of e_agg, so an empty memory (e_agg = 0) gives
the base predictor exactly (B too, unlike the listing's proj_B with its bias).
"""

from __future__ import annotations

import torch
from torch import nn

from agent.modulators.base import Modulated, Modulator
from agent.networks import Block, BlockPredictor, low_rank, mixed


class BlockResidual(Modulator):
    """Track B per block: P_i e_agg added to block i's hidden state."""

    def __init__(self, exp_dim: int, hidden_dim: int, blocks: int) -> None:
        super().__init__()
        self.proj = nn.Linear(exp_dim, blocks * hidden_dim, bias=False)
        self.blocks = blocks

    def forward(self, predictor: BlockPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        add = self.proj(e_agg).chunk(self.blocks, -1)

        def run(i: int, blk: Block, h: torch.Tensor) -> torch.Tensor:
            return blk.fc_b(blk.act(blk.fc_a(blk.ln(h))) + add[i])

        return Modulated(predictor(z, run), None)


class BlockLoRA(Modulator):
    """Track C per block: W^eff = W + U diag(delta) V^T on fc_a and fc_b of every block, delta
    (2 N r) = Linear(e_agg), U, V ~ N(0, 0.02) as the listing's."""

    def __init__(self, exp_dim: int, hidden_dim: int, blocks: int, rank: int) -> None:
        super().__init__()
        self.u = nn.Parameter(torch.empty(blocks, 2, hidden_dim, rank))  # [i, layer]
        self.v = nn.Parameter(torch.empty(blocks, 2, hidden_dim, rank))
        nn.init.normal_(self.u, std=0.02)
        nn.init.normal_(self.v, std=0.02)
        self.delta_gen = nn.Linear(exp_dim, blocks * 2 * rank, bias=False)
        self.blocks, self.rank = blocks, rank

    def forward(self, predictor: BlockPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        deltas = self.delta_gen(e_agg)  # (B, N * 2 * r)
        d = deltas.view(-1, self.blocks, 2, self.rank)

        def run(i: int, blk: Block, h: torch.Tensor) -> torch.Tensor:
            x = blk.ln(h)
            a = blk.fc_a(x) + low_rank(x, self.v[i, 0], d[:, i, 0], self.u[i, 0])
            g = blk.act(a)
            return blk.fc_b(g) + low_rank(g, self.v[i, 1], d[:, i, 1], self.u[i, 1])

        return Modulated(predictor(z, run), deltas)


class BlockFiLM(Modulator):
    """Track D per block, adaLN-Zero: (s, t, g) = Linear(e_agg) per block (zero-initialised,
    bias-free); the block's normed input x (1 + s) + t, its branch times (1 + g)."""

    def __init__(self, exp_dim: int, hidden_dim: int, blocks: int) -> None:
        super().__init__()
        self.film = nn.Linear(exp_dim, blocks * 3 * hidden_dim, bias=False)
        nn.init.zeros_(self.film.weight)
        self.blocks = blocks

    def forward(self, predictor: BlockPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        codes = self.film(e_agg)  # (B, N * 3 H)
        sst = codes.chunk(3 * self.blocks, -1)

        def run(i: int, blk: Block, h: torch.Tensor) -> torch.Tensor:
            s, t, g = sst[3 * i : 3 * i + 3]
            x = blk.ln(h) * (1.0 + s) + t
            return blk.fc_b(blk.act(blk.fc_a(x))) * (1.0 + g)

        return Modulated(predictor(z, run), codes)


class BlockHyper(Modulator):
    """Track E per block: Delta fc_a_i = sum_j c_ij H_ij, c = Linear(e_agg) (m a block), the
    bases full rank, N(0, 0.02); applied per sample as (c_b (x) x_b) @ H_i."""

    def __init__(self, exp_dim: int, hidden_dim: int, blocks: int, hyper_dim: int) -> None:
        super().__init__()
        self.code = nn.Linear(exp_dim, blocks * hyper_dim, bias=False)
        self.bases = nn.Parameter(torch.empty(blocks, hyper_dim * hidden_dim, hidden_dim))
        nn.init.normal_(self.bases, std=0.02)
        self.blocks, self.hyper_dim = blocks, hyper_dim

    def forward(self, predictor: BlockPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        codes = self.code(e_agg)  # (B, N * m)
        c = codes.view(-1, self.blocks, self.hyper_dim)

        def run(i: int, blk: Block, h: torch.Tensor) -> torch.Tensor:
            x = blk.ln(h)
            return blk.fc_b(blk.act(blk.fc_a(x) + mixed(x, c[:, i], self.bases[i])))

        return Modulated(predictor(z, run), codes)
