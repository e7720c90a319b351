"""A move of the predicted maps read from e_agg: what a world's gravity does to a digit.

On a spatial latent (``encoder="map"``) with the convolutional predictor, a world's gravity adds
to every digit's motion a displacement that is the same everywhere in the frame and grows with
the horizon (about g h^2 / 2 px away from the walls). ``Translation`` gives the modulation that
form directly: each horizon's predicted map is moved by a displacement (dx, dy), in cells, that is
linear in e_agg (no bias: e_agg = 0 leaves the prediction as it is, to float rounding), by
bilinear resampling with the border cells repeated. It acts beside the track's modulator (B-E),
on its output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Translation(nn.Module):
    """pred (B, K, latent) or (B, latent) of K maps of ``channels`` x side x side, e_agg (B,
    exp_dim) -> the maps moved by ``displacement(e_agg)``, the same shape."""

    def __init__(self, exp_dim: int, heads: int, side: int) -> None:
        super().__init__()
        self.heads, self.side = heads, side
        self.proj = nn.Linear(exp_dim, 2 * heads, bias=False)
        nn.init.zeros_(self.proj.weight)  # starts as the identity: the track's modulation alone

    def displacement(self, e_agg: torch.Tensor) -> torch.Tensor:
        """(B, exp_dim) -> (B, K, 2): each horizon's move (right, down) in cells."""
        return self.proj(e_agg).view(-1, self.heads, 2)

    def forward(self, pred: torch.Tensor, e_agg: torch.Tensor) -> torch.Tensor:
        b, s = pred.shape[0], self.side
        maps = pred.reshape(b * self.heads, -1, s, s)
        d = self.displacement(e_agg.float()).reshape(-1, 2).to(maps.dtype)
        # grid_sample reads the map at grid positions in [-1, 1] (a cell is 2 / s wide): content
        # moved by +d cells is the map read at -d.
        eye = torch.eye(2, dtype=maps.dtype, device=maps.device).expand(len(d), 2, 2)
        theta = torch.cat([eye, (-2.0 / s * d).unsqueeze(-1)], -1)  # (B K, 2, 3)
        grid = F.affine_grid(theta, list(maps.shape), align_corners=False)
        moved = F.grid_sample(maps, grid, mode="bilinear", padding_mode="border",
                              align_corners=False)
        return moved.reshape(pred.shape)
