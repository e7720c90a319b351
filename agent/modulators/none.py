"""Track A (V-JEPA): no modulation; carries a frozen dummy proj_B for parameter parity with B."""

from __future__ import annotations

import torch
from torch import nn

from agent.modulators.base import Modulated, Modulator
from agent.networks import AnyPredictor


class NoModulator(Modulator):
    """Prediction = predictor(z). ``proj_B`` (exp_dim -> hidden) exists, frozen, never used."""

    uses_memory = False

    def __init__(self, exp_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.proj_B = nn.Linear(exp_dim, hidden_dim)
        self.proj_B.requires_grad_(False)

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        """z (B, latent), e_agg ignored -> pred (B, latent)."""
        return Modulated(predictor(z), None)
