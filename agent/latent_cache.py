"""LatentCache: each stream frame encoded once per encoder (``cfg.stream_cache``).

In stream mode consecutive batches share their frames: every stream advances one frame per step,
so the frame that is the newest target (horizon max(h)) at step t is a target again at its
shorter horizons, max(h) - h steps later, and the input frame of step t is the memory pair's
older frame at step t + 1. Recomputing those latents costs three EMA-encoder passes and one
online pass per sample per step where one EMA pass would do.

``LatentCache`` keeps, by stream time (``Batch.clock``, the source's frame counter):

- the EMA-target latent of each frame, computed when the frame arrives (as the newest target)
  and reused at its later horizons, so a target latent is at most max(h) - min(h) steps old
  (15 in the paper's (5, 10, 20), 6 in the worlds protocol's (2, 4, 8)): the EMA weights it
  was computed with have moved by at most 1 - tau^15 of the way (tau >= 0.996);
- the online latent of each input frame (the step's own, detached), which later steps' memory
  entries reuse as their older frames (one or more steps old).

A frame the cache does not hold (the first steps, after a gap in the clock) is encoded exactly.
Nothing here is read without a clock: the dataset source's i.i.d. batches share no frames.
The state (latents by stream time) goes into the learner's checkpoint, so a resumed run
continues exactly as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from agent.config import AgentConfig


class LatentCache:
    """Latents of recent stream frames by stream time. ``offsets``: the batch's window positions
    (``cfg.frame_offsets``); ``window``: W (``cfg.window``), the newest frame at W - 1."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.window = cfg.window
        p, k = cfg.past_frames, cfg.n_horizons
        self.target_index = tuple(range(p, p + k))  # the targets' columns in Batch.frames
        self.target_offsets = tuple(cfg.frame_offsets[p : p + k])
        self.input_offset = cfg.input_position
        self.target: dict[int, torch.Tensor] = {}  # stream time -> (B, D) EMA latent
        self.online: dict[int, torch.Tensor] = {}  # stream time -> (B, D) online input latent
        self.t: int | None = None  # clock of the last batch

    def time_of(self, t: int, offset: int) -> int:
        """Stream time of the frame at window position ``offset`` in the batch of clock t."""
        return t - (self.window - 1 - offset)

    def begin(self, t: int) -> None:
        """A new batch at clock t: drop what no later batch needs; everything on a gap."""
        if self.t is None or t != self.t + 1:
            self.target.clear()
            self.online.clear()
        oldest = self.time_of(t, 0)
        for store in (self.target, self.online):
            for s in [s for s in store if s < oldest]:
                del store[s]
        self.t = t

    def targets(
        self, t: int, x: torch.Tensor, encode: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """(B, K, D) EMA-target latents of the batch x (B, F, 1, 64, 64) at clock t: the cached
        ones, the others encoded now (``encode``: (N, 1, 64, 64) -> (N, D), the EMA encoder
        under the learner's precision, no gradient) and kept."""
        times = [self.time_of(t, o) for o in self.target_offsets]
        missing = [j for j, s in enumerate(times) if s not in self.target]
        if missing:
            cols = [self.target_index[j] for j in missing]
            # slices, not a list index (which would travel host -> device: a GPU sync)
            x_cols = torch.cat([x[:, c : c + 1] for c in cols], 1)
            z = encode(x_cols.flatten(0, 1)).view(x.shape[0], len(cols), -1)
            for i, j in enumerate(missing):
                self.target[times[j]] = z[:, i]
        return torch.stack([self.target[s] for s in times], 1)

    def earlier(self, t: int, context: int, k: int) -> torch.Tensor | None:
        """The online latents (B, k, D) of the k frames before this batch's C = ``context``
        context frames (earlier steps' inputs), if all are held."""
        first = self.time_of(t, self.input_offset) - context - k + 1
        held = [self.online.get(s) for s in range(first, first + k)]
        return None if any(z is None for z in held) else torch.stack(held, 1)

    def keep_input(self, t: int, z: torch.Tensor) -> None:
        """Keep this batch's input latent z (B, D) (detached) for the next step's pair."""
        self.online[self.time_of(t, self.input_offset)] = z.detach()

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {"t": self.t, "target": dict(self.target), "online": dict(self.online)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.t = None if state["t"] is None else int(state["t"])
        self.target = {int(s): z for s, z in state["target"].items()}
        self.online = {int(s): z for s, z in state["online"].items()}
