"""EMA target encoder: a frozen copy of the online encoder, moved towards it after each step."""

from __future__ import annotations

import copy

import torch
from torch import nn


class EMATarget(nn.Module):
    """Holds ``target`` (deep copy of the online module, no gradients) and updates it.

    ``update(online, tau)``: target <- tau * target + (1 - tau) * online, as one fused
    ``torch._foreach_lerp_`` over all parameters (no per-parameter Python loop).
    """

    def __init__(self, online: nn.Module) -> None:
        super().__init__()
        self.target = copy.deepcopy(online)
        self.target.requires_grad_(False)
        self.target.eval()

    @torch.no_grad()
    def update(self, online: nn.Module, tau: float) -> None:
        """Move the target towards ``online`` with decay ``tau``."""
        tgt = list(self.target.parameters())
        src = [p.detach() for p in online.parameters()]
        torch._foreach_lerp_(tgt, src, 1.0 - tau)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Target encoding, no gradient: (N, ...) -> (N, latent)."""
        with torch.no_grad():
            return self.target(x)
