"""Track C (EPM-JEPA): per-sample LoRA deltas on both predictor layers (the paper's listing)."""

from __future__ import annotations

import torch
from torch import nn

from agent.modulators.base import Modulated, Modulator
from agent.networks import AnyPredictor


class LoRAModulator(Modulator):
    """W_l^eff = W_l + U_l diag(delta_l) V_l^T, delta_l = Linear(e_agg) (no bias), rank r.

    u1 (hidden, r), v1 (in, r) for fc1; u2 (out, r), v2 (hidden, r) for fc2; all N(0, 0.02)
    (in = out = latent in the paper; the predictor's ``in_dim`` / ``out_dim`` beyond it). With e_agg = 0 the deltas are 0 and the output equals the base predictor's,
    bit for bit (x + 0 == x).
    """

    def __init__(
        self, in_dim: int, hidden_dim: int, exp_dim: int, rank: int, out_dim: int | None = None
    ) -> None:
        super().__init__()
        self.u1 = nn.Parameter(torch.empty(hidden_dim, rank))
        self.v1 = nn.Parameter(torch.empty(in_dim, rank))
        self.u2 = nn.Parameter(torch.empty(in_dim if out_dim is None else out_dim, rank))
        self.v2 = nn.Parameter(torch.empty(hidden_dim, rank))
        self.delta1_gen = nn.Linear(exp_dim, rank, bias=False)
        self.delta2_gen = nn.Linear(exp_dim, rank, bias=False)
        for param in (self.u1, self.v1, self.u2, self.v2):
            nn.init.normal_(param, std=0.02)

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        """z (B, in), e_agg (B, exp_dim) -> pred (``Predictor.finish``), scales (B, 2r)."""
        delta1 = self.delta1_gen(e_agg)  # (B, r)
        delta2 = self.delta2_gen(e_agg)  # (B, r)
        h1 = predictor.act(predictor.fc1(z) + predictor.low_rank(z, self.v1, delta1, self.u1))
        h2 = predictor.fc2(h1) + predictor.low_rank(h1, self.v2, delta2, self.u2)
        return Modulated(predictor.finish(h2), torch.cat([delta1, delta2], dim=-1))
