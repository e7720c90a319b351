"""The memories: pre-allocated FIFOs of detached latent entries, written without a host sync.

The paper's memory (``ExperienceBuffer``): every stream's batch-mean pair goes to one FIFO.
What the memories and the detector share: their state as the device tensors named in ``_STATE``
(``TensorState``), and the two FIFOs' reads of their ring (``Fifo``).

``GroupBuffer``: one FIFO of transitions per world, written by the streams that live in it. The
paper keeps one buffer that every stream writes into, in a world all streams share. Under the
worlds protocol the streams live in many worlds at once, in groups of S that share a world for
several episodes (``env.WorldSchedule(group_size=S)``): streams ``g*S .. g*S+S-1`` form group
``g``. ``memory_scope="group"`` gives each group one FIFO, written by its streams (each writing
stream its own pair, tagged with its episode), emptied when the group's world changes, and read
by every sample of the group: by default without the entries of the sample's own episode (a
*peer read*, ``memory_read="peer"``), so what the memory can tell a sample is what other
sequences of its world did, not its own history. A step's writes are scattered through an index
tensor (non-writing streams into one spare slot), so nothing waits for the decision.
"""

from __future__ import annotations

import copy

import torch


class TensorState:
    """State dicts of the device tensors named in ``_STATE`` (copies); loading one checks the
    first tensor's shape (a ValueError ``_WHAT {shape} != {expected}``)."""

    _STATE: tuple[str, ...] = ()
    _WHAT = ""
    device: torch.device

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {n: getattr(self, n).clone() for n in self._STATE}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        have, want = tuple(state[self._STATE[0]].shape), tuple(getattr(self, self._STATE[0]).shape)
        if have != want:
            raise ValueError(f"{self._WHAT} {have} != {want}")
        for name in self._STATE:
            setattr(self, name, state[name].to(self.device).clone())


class Fifo(TensorState):
    """A ring of ``capacity`` entries (E = ``frames`` latents of ``latent_dim`` each, 2 a pair)
    on ``device``: ``ptr`` the next slot written (the oldest once full), ``size`` the filled
    ones, ``shifted`` each entry's shift tag; one ring, or one per group ((W,) ptr and size)."""

    ptr: torch.Tensor
    size: torch.Tensor
    shifted: torch.Tensor

    def __init__(
        self, capacity: int, latent_dim: int, device: torch.device | str = "cpu", frames: int = 2
    ) -> None:
        self.capacity = int(capacity)
        self.latent_dim = int(latent_dim)
        self.frames = int(frames)  # E latents an entry holds (2: a transition pair)
        self.device = torch.device(device)
        self.clear()

    def clear(self) -> None:
        raise NotImplementedError

    def mask(self) -> torch.Tensor:
        """([W,] cap) bool, True for filled slots."""
        return torch.arange(self.capacity, device=self.device) < self.size.unsqueeze(-1)

    def age(self) -> torch.Tensor:
        """([W,] cap) int64: 0 for the newest entry (of a world), 1 the one before, ...; >= size
        for empty slots."""
        slots = torch.arange(self.capacity, device=self.device)
        return (self.ptr.unsqueeze(-1) - 1 - slots) % self.capacity

    def shift_share(self, seeds: int = 1) -> torch.Tensor:
        """(seeds,) float: each seed's share of filled entries tagged shifted (0 when empty; a
        stack's rings seed-major)."""
        n = (self.shifted.eq(1) & self.mask()).view(seeds, -1).sum(1)
        return n.float() / self.size.view(seeds, -1).sum(1).clamp(min=1).float()


class ExperienceBuffer(Fifo):
    """Capacity-bounded FIFO of (z_prev, z_new) latent pairs with a shift tag and a step:
    ``pairs`` (cap, E, D) float32, ``shifted`` (cap,) int64 (1: written under switched physics),
    ``steps`` (cap,) int64, ``ptr`` and ``size`` 0-dim int64, all pre-allocated on the device.

    ``push(pair, shifted, step, write)`` takes the write decision as a 0-dim bool tensor: the
    slot is always rewritten (with its own old content when ``write`` is False) and the pointer
    advances by ``write``, so a step never asks the device whether a boundary fired.
    """

    _STATE = ("pairs", "shifted", "steps", "ptr", "size")
    _WHAT = "buffer shape"

    def clear(self) -> None:
        """Empty the buffer (zeros everywhere)."""
        d, cap = self.device, self.capacity
        self.pairs = torch.zeros(cap, self.frames, self.latent_dim, device=d)
        self.shifted = torch.zeros(cap, dtype=torch.long, device=d)
        self.steps = torch.full((cap,), -1, dtype=torch.long, device=d)
        self.ptr = torch.zeros((), dtype=torch.long, device=d)
        self.size = torch.zeros((), dtype=torch.long, device=d)

    @torch.no_grad()
    def push(
        self, pair: torch.Tensor, shifted: torch.Tensor | int, step: torch.Tensor | int,
        write: torch.Tensor | bool = True,
    ) -> None:  # fmt: skip
        """Append one pair if ``write`` (else a no-op, still without a host sync).

        pair: (E, D) (z_prev, z_new), stored detached as float32. shifted, step: ints or 0-dim
        tensors. write: 0-dim bool tensor or bool.
        """
        write = self._scalar(write, torch.bool)
        shifted = self._scalar(shifted, torch.long)
        step = self._scalar(step, torch.long)
        slot = self.ptr.view(1)  # (1,) index tensor, stays on the device
        new_pair = torch.where(write, pair.detach().to(self.pairs.dtype), self.pairs[slot][0])
        self.pairs.index_copy_(0, slot, new_pair.unsqueeze(0))
        self.shifted.index_copy_(0, slot, torch.where(write, shifted, self.shifted[slot][0]).view(1))
        self.steps.index_copy_(0, slot, torch.where(write, step, self.steps[slot][0]).view(1))
        inc = write.long()
        self.ptr.copy_((self.ptr + inc) % self.capacity)  # in place: a captured step's state
        self.size.copy_(torch.clamp(self.size + inc, max=self.capacity))

    def _scalar(self, value: torch.Tensor | int | bool, dtype: torch.dtype) -> torch.Tensor:
        """0-dim tensor on the device. A Python number is filled in place (``torch.full``), not
        copied from the host: a host-to-device copy of pageable memory would synchronise."""
        if isinstance(value, torch.Tensor):
            return value.to(device=self.device, dtype=dtype)
        return torch.full((), value, dtype=dtype, device=self.device)

    def ordered(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Filled entries oldest first: pairs (n, E, D), shifted (n,), steps (n,). Host sync."""
        n = int(self.size)
        start = int(self.ptr) if n == self.capacity else 0
        idx = (torch.arange(n, device=self.device) + start) % self.capacity
        return self.pairs[idx], self.shifted[idx], self.steps[idx]

    def clone(self) -> ExperienceBuffer:
        """An independent copy (evaluation pushes to a copy, never to the training buffer)."""
        other = copy.copy(self)
        for name in self._STATE:
            setattr(other, name, getattr(self, name).clone())
        return other


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
