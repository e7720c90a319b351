"""The latent replay: the predictor and the memory pathway fed more windows than the encoder.

A training step's cost is the encoder (its forward and backward over the frames); the predictor
reads 16 numbers a frame. Measured offline on a run's frozen latents, the predictor is
sample-starved: fit on many more windows it takes several times more of the world
(docs/results.md). So with ``cfg.replay_updates`` = K each training step stores its windows as
the step saw them, and after its own update makes K more updates of the predictor, the
modulator and the memory pathway (experience encoder, aggregator, or the oracle's net; never the
encoder, whose latents are stored detached), each on ``replay_draw`` stored steps drawn
uniformly from the newest ``replay_span``:

- the context latents z (B, C, D) as the online encoder gave them (no gradient);
- the EMA-target latents at the horizons (B, K, D), the valid flags, the worlds' physics (read
  by the oracle only);
- the memory the step's samples read: its worlds' entries (W, cap, E, D) and each sample's mask
  (B, cap) (peer read and varied size as drawn then), so a replayed window reads the memory of
  its own world as it stood. The memory pathway encodes it anew, with today's weights.

A replayed window is at most ``replay_span`` steps old (the update-to-data ratio is K x
replay_draw + 1 windows a stream a step). The draws come from the replay's own generator (seeded
from ``cfg.seed``), and the store and the generator are in the learner's checkpoint, so a resumed
run draws what it would have drawn.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from agent.config import AgentConfig
from agent.memory.view import MemoryView


class Replayed(NamedTuple):
    """Windows of ``replay_draw`` stored steps, concatenated (N = draws x B)."""

    z: torch.Tensor  # (N, C, D) | (N, D) float32, the online context latents
    targets: torch.Tensor  # (N, K, D) float32
    w: torch.Tensor  # (N,) 0/1 float32
    physics: torch.Tensor | None  # (N, PHYSICS_DIM) | None
    memory: MemoryView | None  # group memory: pairs (draws x W, cap, E, D), group (N,)
    age: torch.Tensor  # (draws,) int64: steps since each draw was stored


class LatentReplay:
    """A ring of the newest ``cfg.replay_span`` steps' windows (allocated at the first ``add``)."""

    #: The stored fields, in the order of ``add``'s arguments.
    FIELDS = ("z", "targets", "w", "physics", "pairs", "mask", "step")

    def __init__(self, cfg: AgentConfig, device: torch.device | str) -> None:
        self.updates, self.span, self.draws = cfg.replay_updates, cfg.replay_span, cfg.replay_draw
        self.device = torch.device(device)
        self.store: dict[str, torch.Tensor] = {}
        self.group: torch.Tensor | None = None  # (B,) the group each stream reads (fixed)
        self.count = 0  # steps stored so far (the ring's next slot is count % span)
        self.gen = torch.Generator(self.device)
        self.gen.manual_seed(cfg.seed + 7919)  # apart from the learner's memory draws

    def add(
        self,
        z: torch.Tensor,
        targets: torch.Tensor,
        w: torch.Tensor,
        physics: torch.Tensor | None,
        memory: MemoryView | None,
        step: int | torch.Tensor,
    ) -> None:
        """Store one step's windows (the memory: a group memory's view, or None when the learner
        reads none)."""
        values: dict[str, torch.Tensor | None] = {
            "z": z.detach().float(),
            "targets": targets.detach().float(),
            "w": w.detach().float(),
            "physics": None if physics is None else physics.detach().float(),
            "pairs": None if memory is None else memory.pairs.detach(),
            "mask": None if memory is None else memory.mask,
            "step": torch.as_tensor(step, dtype=torch.int64, device=self.device),
        }
        if memory is not None:
            self.group = memory.group
        i = self.count % self.span
        for name, value in values.items():
            if value is None:
                continue
            if name not in self.store:
                self.store[name] = value.new_zeros((self.span, *value.shape))
            self.store[name][i].copy_(value)
        self.count += 1

    def draw(self, now: int | torch.Tensor) -> Replayed:
        """``replay_draw`` stored steps, uniformly with replacement, their windows concatenated;
        ``now`` the current step (for the draws' age)."""
        idx = torch.randint(
            min(self.count, self.span), (self.draws,), generator=self.gen, device=self.device
        )
        s = {name: t.index_select(0, idx) for name, t in self.store.items()}
        memory = None
        if "pairs" in s:
            assert self.group is not None
            worlds = s["pairs"].shape[1]
            offset = torch.arange(self.draws, device=self.device).unsqueeze(1) * worlds
            memory = MemoryView(
                s["pairs"].flatten(0, 1), s["mask"].flatten(0, 1), (self.group + offset).flatten()
            )
        return Replayed(
            s["z"].flatten(0, 1),
            s["targets"].flatten(0, 1),
            s["w"].flatten(0, 1),
            s["physics"].flatten(0, 1) if "physics" in s else None,
            memory,
            torch.as_tensor(now, device=self.device) - s["step"],
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "store": dict(self.store),
            "group": self.group,
            "count": self.count,
            "gen": self.gen.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """A replay's state; None (a checkpoint without one): empty."""
        if state is None:
            self.store, self.group, self.count = {}, None, 0
            return
        self.store = {k: v.to(self.device) for k, v in state["store"].items()}
        self.group = None if state["group"] is None else state["group"].to(self.device)
        self.count = int(state["count"])
        self.gen.set_state(state["gen"].cpu())
