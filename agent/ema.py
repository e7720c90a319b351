"""EMA target encoder: a frozen copy of the online encoder, moved towards it after each step."""

from __future__ import annotations

import copy

import torch
from torch import nn


class EMATarget(nn.Module):
    """Holds ``target`` (deep copy of the online module, no gradients) and updates it
    (``update``: ``lerp_towards``)."""

    def __init__(self, online: nn.Module) -> None:
        super().__init__()
        self.target = copy.deepcopy(online)
        self.target.requires_grad_(False)
        self.target.eval()

    @torch.no_grad()
    def update(self, online: nn.Module, tau: float | torch.Tensor) -> None:
        """Move the target towards ``online`` with decay ``tau`` (``lerp_towards``)."""
        lerp_towards(list(self.target.parameters()), list(online.parameters()), tau)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Target encoding, no gradient: (N, ...) -> (N, latent)."""
        with torch.no_grad():
            return self.target(x)


@torch.no_grad()
def lerp_towards(
    targets: list[torch.Tensor], online: list[torch.Tensor], tau: float | torch.Tensor
) -> None:
    """targets <- tau * targets + (1 - tau) * online, one fused ``torch._foreach_lerp_``; tau a
    number or a 0-dim tensor on the device (a captured step's: no host read)."""
    src = [p.detach() for p in online]
    if isinstance(tau, torch.Tensor):
        weight = (1.0 - tau).to(targets[0].dtype)  # as a number is cast by the kernel
        torch._foreach_lerp_(targets, src, [weight] * len(targets))
    else:
        torch._foreach_lerp_(targets, src, 1.0 - tau)
