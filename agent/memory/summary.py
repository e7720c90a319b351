"""What a memory's entries say when summarised by hand: ``entry_statistics``.

Over a sample's entries (E latents each, the newest last): the mean newest latent, the mean
change (newest minus the one before) and, for entries of three frames or more, the median change
of velocity (the second difference). A median, because a bounce off a wall is a second
difference many times gravity's: the mean of a world's second differences is its walls', the
median its gravity (docs/results.md, "Is the world in the entries at all?").

Used by the gravity probe's reference (``agent.context_probe``) and, with
``cfg.memory_summary``, by the aggregator (``AttentionAggregator``: e_agg gets a learned linear
map of these statistics beside the attention's pooling).
"""

from __future__ import annotations

import torch


def statistics_dim(latent_dim: int, frames: int) -> int:
    """Width of ``entry_statistics`` for entries of ``frames`` latents of ``latent_dim``."""
    return latent_dim * (3 if frames >= 3 else 2)


def entry_statistics(pairs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, 3D) - (N, 2D) for pairs - each sample's entries (N, cap, E, D) where ``mask`` (N,
    cap) summarised: the mean newest latent, the mean change and, for E >= 3, the median change
    of velocity. Zeros where a sample has no entry. Differentiable (the median's gradient goes
    to the median entry)."""
    x = pairs.float()
    w = mask.float().unsqueeze(-1)
    count = w.sum(1).clamp(min=1.0)
    feats = [(x[:, :, -1] * w).sum(1) / count, ((x[:, :, -1] - x[:, :, -2]) * w).sum(1) / count]
    if x.shape[2] >= 3:
        d2 = x[:, :, -1] - 2 * x[:, :, -2] + x[:, :, -3]
        d2 = d2.masked_fill(~mask.unsqueeze(-1), float("nan"))
        feats.append(torch.nanmedian(d2, dim=1).values.nan_to_num(0.0))
    return torch.cat(feats, 1)
