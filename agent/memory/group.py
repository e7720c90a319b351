"""GroupBuffer: one FIFO of transitions per world, written by the streams that live in it.

The paper keeps one buffer that every stream writes into, in a world all streams share. Under
the worlds protocol the streams live in many worlds at once, in groups of S that share a world
for several episodes (``env.WorldSchedule(group_size=S)``): streams ``g*S .. g*S+S-1`` form
group ``g``. ``memory_scope="group"`` gives each group one FIFO, written by its streams (each
writing stream its own pair, tagged with its episode), emptied when the group's world changes,
and read by every sample of the group: by default without the entries of the sample's own
episode (a *peer read*, ``memory_read="peer"``), so what the memory can tell a sample is what
other sequences of its world did, not its own history.

Writes keep the device busy and the host out: a step's writes are scattered through an index
tensor (non-writing streams into one spare slot), so nothing waits for the decision.
"""

from __future__ import annotations

import torch

from agent.memory.buffer import Fifo


class GroupBuffer(Fifo):
    """W FIFOs of ``capacity`` (z_prev, z_new) pairs, each entry with its writer's episode key,
    its shift tag (1: written under switched physics) and the step it was written.

    Tensors: ``pairs`` (W, cap, E, D) float32, ``episode`` (W, cap) int64 (-1 empty),
    ``shifted`` and ``steps`` (W, cap) int64, ``ptr`` and ``size`` (W,) int64 (``Fifo``), ``key``
    (W,) int64: the id of the world the entries were written in (-1 none yet). A push of S
    streams' pairs writes each group's writing streams in stream order into consecutive slots
    (capacity >= S).
    """

    _STATE = ("_pairs", "_episode", "_shifted", "_steps", "ptr", "size", "key")
    _WHAT = "group memory shape"

    def __init__(
        self, groups: int, capacity: int, latent_dim: int, device: torch.device | str = "cpu",
        frames: int = 2,
    ) -> None:  # fmt: skip
        self.groups = int(groups)
        super().__init__(capacity, latent_dim, device, frames)

    def clear(self, mask: torch.Tensor | None = None) -> None:
        """Empty every world's memory, or those where ``mask`` ((W,) bool, no host sync)."""
        if mask is not None:  # in place, as every per-step change (a captured step's state)
            self.ptr.masked_fill_(mask, 0)
            self.size.masked_fill_(mask, 0)
            return
        w, cap, d = self.groups, self.capacity, self.device
        # Flat storage with one spare row at the end (where non-writing streams scatter).
        self._pairs = torch.zeros(w * cap + 1, self.frames, self.latent_dim, device=d)
        self._episode = torch.full((w * cap + 1,), -1, dtype=torch.long, device=d)
        self._shifted = torch.zeros(w * cap + 1, dtype=torch.long, device=d)
        self._steps = torch.full((w * cap + 1,), -1, dtype=torch.long, device=d)
        self.ptr = torch.zeros(w, dtype=torch.long, device=d)
        self.size = torch.zeros(w, dtype=torch.long, device=d)
        self.key = torch.full((w,), -1, dtype=torch.long, device=d)

    # (W, cap, ...) views of the flat storage without its spare row (a later push changes them)
    pairs = property(lambda self: self._rows(self._pairs))
    episode = property(lambda self: self._rows(self._episode))
    shifted = property(lambda self: self._rows(self._shifted))
    steps = property(lambda self: self._rows(self._steps))

    def _rows(self, flat: torch.Tensor) -> torch.Tensor:
        return flat[:-1].view(self.groups, self.capacity, *flat.shape[1:])

    @torch.no_grad()
    def enter(self, group: torch.Tensor, key: torch.Tensor) -> None:
        """Empty the memories whose world changed: ``key`` (B,) the world id of each sample's
        stream (``Batch.world_key``), ``group`` (B,) its group. A group's streams share one id."""
        now = self.key.clone().scatter_(0, group, key)  # (W,) the id each group is in now
        self.clear(now != self.key)
        self.key.copy_(now)

    @torch.no_grad()
    def push(
        self, pairs: torch.Tensor, group: torch.Tensor, episode: torch.Tensor,
        shifted: torch.Tensor, step: int | torch.Tensor, write: torch.Tensor,
    ) -> None:  # fmt: skip
        """Append the entry (B, E, D) of every stream whose ``write`` (B,) bool is True to its
        group's FIFO (``group`` (B,)), tagged with ``episode`` and ``shifted`` (B,) and ``step``
        (an int, or a 0-dim tensor on the device)."""
        w, cap = self.groups, self.capacity
        write = write.to(self.device, torch.bool)
        per_group = torch.zeros(w, dtype=torch.long, device=self.device)
        per_group.index_add_(0, group, write.long())  # (W,) entries each group gets
        # A writing stream's rank among its group's writers (groups are any labelling).
        same = group.unsqueeze(0) == group.unsqueeze(1)  # (B, B)
        before = torch.ones_like(same).tril(-1)  # b' < b
        rank = (same & before & write.unsqueeze(0)).sum(1)  # (B,)
        slot = (self.ptr[group] + rank) % cap
        flat = torch.where(write, group * cap + slot, w * cap)  # non-writers: the spare row
        self._pairs[flat] = pairs.detach().to(self._pairs.dtype)
        self._episode[flat] = episode.to(torch.long)
        self._shifted[flat] = shifted.to(torch.long)
        if isinstance(step, torch.Tensor):
            self._steps[flat] = step
        else:  # a number as a kernel argument (``t[i] = n`` would copy it from the host)
            self._steps.index_fill_(0, flat, int(step))
        self.ptr.copy_((self.ptr + per_group) % cap)
        self.size.copy_(torch.clamp(self.size + per_group, max=cap))
