"""Track E: a hypernetwork generating full-rank deltas for the predictor's first layer."""

from __future__ import annotations

import torch
from torch import nn

from agent.modulators.base import Modulated, Modulator
from agent.networks import AnyPredictor


class HyperModulator(Modulator):
    """DeltaW1 = sum_j c_j H_j, c = Linear(e_agg) (no bias, size m = hyper_dim).

    Each H_j (hidden, latent) is a full-rank learned basis matrix (N(0, 0.02)), so the
    generated delta is full rank (unlike LoRA's rank r), in an m-dimensional family.
    Applied per sample without materialising (B, hidden, latent):
    DeltaW1_b z_b = (c_b (x) z_b) @ H.view(m * latent, hidden). e_agg = 0 gives c = 0 and the
    base predictor exactly.
    """

    def __init__(self, in_dim: int, hidden_dim: int, exp_dim: int, hyper_dim: int) -> None:
        super().__init__()
        self.code = nn.Linear(exp_dim, hyper_dim, bias=False)
        self.bases = nn.Parameter(torch.empty(hyper_dim * in_dim, hidden_dim))
        nn.init.normal_(self.bases, std=0.02)

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        """z (B, in), e_agg (B, exp_dim) -> pred (``Predictor.readout``), scales (B, m)."""
        c = self.code(e_agg)  # (B, m)
        h1 = predictor.act(predictor.fc1(z) + predictor.mixed(z, c, self.bases))
        return Modulated(predictor.readout(h1), c)
