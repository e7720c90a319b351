"""The reservoir: the stream's windows on a settled latent, for the predictor's passes
(settle, then fit: ``cfg.settle``, docs/agent.md "Settle, then fit").

Each step the stream's valid windows enter as latents (the C context latents, the E latents of
the window's memory entry, the K targets) with their world's physics, world key and episode
key; the reservoir keeps a uniform sample of every window since the settle (reservoir sampling).
A minibatch (``draw``) mixes ``groups`` worlds, each drawn as a random window's, ``per_group``
windows of each, reading one memory of ``capacity`` entries of its world's windows (``peer``:
without its own episode's, as the group memory's peer read; ``vary``: k of them, k uniform over
0..available, as ``cfg.vary_memory``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from agent.memory.read import MemoryView


class Draw(NamedTuple):
    """One minibatch of the reservoir."""

    ctx: torch.Tensor  # (B, C, D) context latents (or (B, D) when C = 1)
    target: torch.Tensor  # (B, K, D) EMA-target latents at the horizons
    physics: torch.Tensor  # (B, P) the windows' worlds (the oracle's input)
    memory: MemoryView  # pairs (G, cap, E, D), mask (B, cap), group (B,)


class Reservoir:
    """A uniform sample of up to ``size`` windows (latents, physics, world and episode keys),
    on ``device``; its draws from its own generator (seeded ``seed``), so a resumed run draws
    what the uninterrupted one would."""

    def __init__(
        self, size: int, context: int, entry: int, horizons: int, latent_dim: int,
        physics_dim: int, device: torch.device | str = "cpu", seed: int = 0,
    ) -> None:  # fmt: skip
        self.size = int(size)
        self.context = int(context)
        self.device = torch.device(device)
        d, dev = latent_dim, self.device
        self.ctx = torch.zeros(self.size, context, d, device=dev)
        self.entry = torch.zeros(self.size, entry, d, device=dev)
        self.target = torch.zeros(self.size, horizons, d, device=dev)
        self.physics = torch.zeros(self.size, physics_dim, device=dev)
        self.world = torch.full((self.size,), -1, dtype=torch.long, device=dev)
        self.episode = torch.full((self.size,), -1, dtype=torch.long, device=dev)
        self.seen = 0  # windows offered since the settle
        self.gen = torch.Generator(dev)
        self.gen.manual_seed(int(seed))
        self._index: tuple[torch.Tensor, torch.Tensor] | None = None  # (order, sorted worlds)

    @property
    def filled(self) -> int:
        """Slots holding a window."""
        return min(self.seen, self.size)

    def add(
        self, ctx: torch.Tensor, entry: torch.Tensor, target: torch.Tensor,
        physics: torch.Tensor | None, world: torch.Tensor, episode: torch.Tensor,
        valid: torch.Tensor,
    ) -> None:  # fmt: skip
        """Offer a step's windows (B, ...); the valid ones enter (algorithm R: while there is
        room, the next slots; then the n-th window a uniform slot of n, kept where < size)."""
        keep = torch.nonzero(valid).squeeze(1)
        n = int(keep.numel())
        if n == 0:
            return
        number = torch.arange(self.seen, self.seen + n, device=self.device)  # 0-based
        draw = (torch.rand(n, generator=self.gen, device=self.device) * (number + 1)).long()
        slot = torch.where(number < self.size, number, draw)
        take = slot < self.size
        slot, keep = slot[take], keep[take]
        ctx = ctx.unsqueeze(1) if ctx.dim() == 2 else ctx
        for name, new in zip(_SLOTS, (ctx, entry, target, physics, world, episode), strict=True):
            if new is not None:  # the slots' dtype: float32 latents and physics, int64 keys
                slots = getattr(self, name)
                slots[slot] = new[keep].to(slots.dtype)
        self.seen += n
        self._index = None

    def _world_index(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The filled slots ordered by world (order, their worlds), kept until the next add."""
        if self._index is None:
            worlds = self.world[: self.filled]
            order = torch.argsort(worlds, stable=True)
            self._index = (order, worlds[order].contiguous())
        return self._index

    def _within(self, start: torch.Tensor, count: torch.Tensor, n: int) -> torch.Tensor:
        """n uniform slots within each world's run of the order (start, count (G,)): (G, n)."""
        order, _ = self._world_index()
        u = torch.rand(start.shape[0], n, generator=self.gen, device=self.device)
        pos = start.unsqueeze(1) + (u * count.unsqueeze(1)).long().clamp(max=count.unsqueeze(1) - 1)
        return order[pos]

    def draw(self, groups: int, per_group: int, capacity: int, peer: bool, vary: bool) -> Draw:
        """A minibatch of ``groups`` x ``per_group`` windows with their worlds' memories."""
        if self.filled == 0:
            raise RuntimeError("the reservoir is empty: nothing to fit on")
        order, worlds = self._world_index()
        anchor = torch.randint(0, self.filled, (groups,), generator=self.gen, device=self.device)
        w = self.world[anchor]
        start = torch.searchsorted(worlds, w)
        count = torch.searchsorted(worlds, w, right=True) - start
        rows = self._within(start, count, per_group).flatten()  # (B,)
        slots = self._within(start, count, capacity)  # (G, cap)
        group = torch.arange(groups, device=self.device).repeat_interleave(per_group)  # (B,)
        mask = torch.ones(rows.shape[0], capacity, dtype=torch.bool, device=self.device)
        if peer:
            mask = self.episode[slots][group] != self.episode[rows].unsqueeze(1)
        if vary:
            avail = mask.sum(1)
            u = torch.rand(rows.shape[0], generator=self.gen, device=self.device)
            k = (u * (avail + 1).float()).long().clamp(max=avail)
            mask = mask & (torch.cumsum(mask.long(), 1) <= k.unsqueeze(1))
        ctx = self.ctx[rows]
        memory = MemoryView(self.entry[slots], mask, group)
        return Draw(ctx if self.context > 1 else ctx[:, 0], self.target[rows], self.physics[rows], memory)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The filled slots, the count seen and the generator (a resume draws on as if never
        stopped)."""
        n = self.filled
        return {"seen": self.seen, "gen": self.gen.get_state(),
                **{k: getattr(self, k)[:n].clone() for k in _SLOTS}}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen = int(state["seen"])
        self.gen.set_state(state["gen"].cpu())
        n = self.filled
        for k in _SLOTS:
            getattr(self, k)[:n] = state[k].to(self.device)
        self._index = None


_SLOTS = ("ctx", "entry", "target", "physics", "world", "episode")
