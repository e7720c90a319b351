"""ExperienceBuffer: pre-allocated FIFO of detached latent pairs, written without a host sync.

The paper's memory: every stream's batch-mean pair goes to one FIFO. (A memory per group of
streams that share a world is ``agent.memory.group.GroupBuffer``.) What the memories and the
detector share: their state as the device tensors named in ``_STATE`` (``TensorState``), and
the two FIFOs' reads of their ring (``Fifo``).
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

    def shift_share(self) -> torch.Tensor:
        """0-dim float: share of filled entries tagged shifted (0 when empty)."""
        n = (self.shifted.eq(1) & self.mask()).sum()
        return n.float() / self.size.sum().clamp(min=1).float()


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
