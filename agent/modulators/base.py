"""The modulator interface: how a track routes e_agg into the predictor (the per-sample weight
deltas tracks C and E act through: ``agent.networks.low_rank``, ``mixed``)."""

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
