"""OracleContext: the true physics of a sample's world in place of e_agg (the ceiling).

The oracle pathway is what any memory could at most tell the predictor: the world's parameters
themselves. A small MLP maps them to the modulators' context width, so every track (B-E) reads
them through its own modulation exactly as it would read e_agg.
"""

from __future__ import annotations

import torch
from torch import nn

from agent.config import PHYSICS_DIM, AgentConfig


class OracleContext(nn.Module):
    """physics (B, PHYSICS_DIM) -> e (B, exp_dim): Linear, GELU, Linear."""

    def __init__(self, dim: int, physics_dim: int = PHYSICS_DIM) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(physics_dim, dim), nn.GELU(), nn.Linear(dim, dim))

    @classmethod
    def from_config(cls, cfg: AgentConfig) -> OracleContext:
        return cls(cfg.exp_dim)

    def forward(self, physics: torch.Tensor) -> torch.Tensor:
        return self.net(physics)
