"""Track D: FiLM conditioning of the predictor's hidden layer (paper: future work)."""

from __future__ import annotations

import torch
from torch import nn

from agent.modulators.base import Modulated, Modulator
from agent.networks import AnyPredictor


class FiLMModulator(Modulator):
    """h1 = GELU(W1 z + b1) * (1 + g) + b, (g, b) = Linear(e_agg) with no bias.

    Bias-free, so e_agg = 0 gives g = b = 0 and the base predictor exactly.
    """

    def __init__(self, exp_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.film = nn.Linear(exp_dim, 2 * hidden_dim, bias=False)

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        """z (B, latent), e_agg (B, exp_dim) -> pred (B, latent), scales (B, 2 hidden)."""
        gb = self.film(e_agg)  # (B, 2 hidden)
        g, b = gb.chunk(2, dim=-1)
        h1 = predictor.hidden(z) * (1.0 + g) + b
        return Modulated(predictor.readout(h1), gb)
