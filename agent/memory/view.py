"""MemoryView: what a forward reads of a memory (nothing is written through it)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from agent.memory.buffer import ExperienceBuffer
from agent.memory.group import GroupBuffer


class MemoryView(NamedTuple):
    """What the forward reads of the experience buffer (nothing is written through it).

    One memory for every sample (the paper's global FIFO): pairs (cap, E, D) (E latents an
    entry, 2 in the paper); or one per sample (the adaptation curve's: sample b's own n
    entries): pairs (B, n, E, D); or one per group (``memory_scope="group"``): pairs (W, cap, E,
    D) and ``group`` (B,), sample b reading group ``group[b]``'s. ``mask`` is (cap,) or (B,
    cap): (B, cap) also where each sample sees a different part (``visible``, ``of_group``)."""

    pairs: torch.Tensor  # (cap, E, D), (B, n, E, D) or (W, cap, E, D) float32
    mask: torch.Tensor  # (cap,) or (B, cap) bool, True for the slots a sample attends to
    group: torch.Tensor | None = None  # (B,) int64: the group memory each sample reads

    @classmethod
    def of_group(
        cls,
        buffer: GroupBuffer,
        group: torch.Tensor,
        episode: torch.Tensor | None,
        u: torch.Tensor | None = None,
    ) -> MemoryView:
        """Sample b reads group ``group[b]``'s memory: its filled slots, without those its own
        episode wrote when ``episode`` (B,) is given (the peer read), and, with ``u`` (B,)
        uniform in [0, 1) (``cfg.vary_memory``, training), only the newest k of them,
        k = floor(u * (size + 1))."""
        mask = buffer.mask()[group]  # (B, cap)
        if episode is not None:
            mask = mask & (buffer.episode[group] != episode.unsqueeze(1))
        if u is not None:
            size = buffer.size[group]
            k = (u * (size + 1).float()).long().clamp(max=size)  # (B,)
            mask = mask & (buffer.age()[group] < k.unsqueeze(1))
        return cls(buffer.pairs, mask, group)

    @classmethod
    def of(cls, buffer: ExperienceBuffer) -> MemoryView:
        """The buffer's pairs and filled-slot mask."""
        return cls(buffer.pairs, buffer.mask())

    @classmethod
    def visible(cls, buffer: ExperienceBuffer, u: torch.Tensor) -> MemoryView:
        """Each sample sees only the newest k entries of its memory, k = floor(u * (size + 1))
        for u (B,) uniform in [0, 1): so k is uniform over 0..size, empty memory included
        (``cfg.vary_memory``, training only). mask (B, cap)."""
        k = (u * (buffer.size + 1).float()).long().clamp(max=buffer.size)  # (B,)
        return cls(buffer.pairs, buffer.age() < k.unsqueeze(-1))

