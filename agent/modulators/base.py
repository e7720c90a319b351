"""The modulator interface: how a track routes e_agg into the predictor, and the per-sample
weight deltas tracks C and E act through."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from agent.networks import AnyPredictor


class Modulated(NamedTuple):
    pred: torch.Tensor  # (B, latent) the (modulated) prediction
    scales: torch.Tensor | None  # (B, n) the modulation scales (for mod/delta_abs), or None


class Modulator(nn.Module):
    """``forward(predictor, z, e_agg) -> Modulated``.

    ``uses_memory`` False means e_agg is ignored, so the learner skips the experience pathway.
    Every memory-using modulator here is the identity map of the base predictor at
    ``e_agg = 0`` except Track B (whose proj_B has a bias, as in the paper).
    """

    uses_memory: bool = True

    def forward(self, predictor: AnyPredictor, z: torch.Tensor, e_agg: torch.Tensor) -> Modulated:
        raise NotImplementedError


def low_rank(
    x: torch.Tensor, v: torch.Tensor, delta: torch.Tensor, u: torch.Tensor
) -> torch.Tensor:
    """x (B, n) through U diag(delta_b) V^T per sample: ((x V) * delta) U^T."""
    return (x @ v) * delta @ u.T


def mixed(x: torch.Tensor, c: torch.Tensor, bases: torch.Tensor) -> torch.Tensor:
    """x (B, n) through sum_j c_bj H_j per sample, bases (m * n, out) the H_j stacked:
    (c_b (x) x_b) @ bases (never materialising (B, out, n))."""
    return (c.unsqueeze(2) * x.unsqueeze(1)).flatten(1) @ bases
