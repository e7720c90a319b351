"""Track B (EI-JEPA): residual injection of proj_B(e_agg) into the predictor's hidden state."""

from __future__ import annotations

import torch
from torch import nn

from agent.modulators.base import Modulated, Modulator
from agent.networks import AnyPredictor


class ResidualModulator(Modulator):
    """h1 = GELU(W1 z + b1) + proj_B(e_agg); pred = norm(W2 h1 + b2) (Section 3, Track B)."""

    def __init__(self, exp_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.proj_B = nn.Linear(exp_dim, hidden_dim)

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        """z (B, latent), e_agg (B, exp_dim) -> pred (B, latent)."""
        return Modulated(predictor.readout(predictor.hidden(z) + self.proj_B(e_agg)), None)
