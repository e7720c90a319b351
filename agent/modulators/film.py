"""Track D: FiLM conditioning of the predictor's hidden layer (paper: future work)."""

from __future__ import annotations

import torch
from torch import nn

from agent.modulators.base import Modulated, Modulator
from agent.networks import AnyPredictor


class FiLMModulator(Modulator):
    """h1 = GELU(W1 z + b1) * (1 + g) + b, (g, b) = Linear(e_agg) with no bias (per channel of
    a convolutional predictor's hidden map).

    With ``shift_heads`` = K > 0 (a convolutional predictor's K horizons, ``cfg.film_shift``)
    each horizon's predicted map is also moved by a displacement d_k (x, y in cells) =
    Linear(e_agg), bias-free and zero at initialisation, before the LayerNorm.

    Bias-free, so e_agg = 0 gives g = b = d = 0 and the base predictor (exactly; with the
    shift to the rounding of resampling a map in place).
    """

    def __init__(self, exp_dim: int, hidden_dim: int, shift_heads: int = 0) -> None:
        super().__init__()
        self.film = nn.Linear(exp_dim, 2 * hidden_dim, bias=False)
        self.shift = None
        if shift_heads:
            self.shift = nn.Linear(exp_dim, 2 * shift_heads, bias=False)
            nn.init.zeros_(self.shift.weight)

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        """z (B, latent), e_agg (B, exp_dim) -> pred (B, latent), scales (B, 2 hidden)."""
        gb = self.film(e_agg)  # (B, 2 hidden)
        g, b = gb.chunk(2, dim=-1)
        h1 = predictor.hidden(z) * (1.0 + predictor.per_sample(g)) + predictor.per_sample(b)
        if self.shift is None:
            return Modulated(predictor.readout(h1, z), gb)
        y = predictor.fc2(predictor.body(h1))  # (B, K * channels, side, side)
        moved = predictor.translate(y, self.shift(e_agg).unflatten(-1, (-1, 2)))
        return Modulated(predictor.finish(moved, z), gb)
