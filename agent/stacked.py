"""StackedLearner: S seeds of one learner configuration trained as one (``agent.seeds``).

docs/agent.md, "Seeds stacked", says what each seed keeps, what the seeds share (one forward
under ``torch.func.vmap``, one backward of the summed losses, one fused AdamW and EMA update) and
the seed-major layout (the batch (S * B, ...); the memories and detectors the S seeds' W groups
each, seed s's at s * W .. (s + 1) * W - 1). The stacked step is each seed's plain step
(``agent.step.jepa_step``) to rounding (``tests/agent/test_stacked.py``), for the worlds
protocol's memory (``memory_scope="group"``) without the stream latent cache. Its controls,
memory draws and view, update and states are ``BaseLearner``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

import torch

from agent.build import build_memory, build_networks
from agent.capture import CapturedStep
from agent.config import AgentConfig
from agent.ema import lerp_towards
from agent.learner import BaseLearner
from agent.objective import StepMetrics
from agent.seeds import SeedStack
from agent.sources import Batch
from agent.step import (
    Forward,
    Knobs,
    MemoryView,
    Model,
    StepSpec,
    adamw_step,
    boundary,
    forward,
    memory_pairs,
    push,
    step_metrics,
    world_key,
)


def seed_forward(
    nets: Any, frames: torch.Tensor, valid: torch.Tensor, pairs: torch.Tensor,
    mask: torch.Tensor, group: torch.Tensor, physics: torch.Tensor | None, spec: StepSpec,
    learn: bool,
) -> tuple[Forward, torch.Tensor]:  # fmt: skip
    """One seed's part of the step that reads its networks: ``agent.step.forward`` and each
    sample's memory entry (B, E, D), of frames (B, F, 1, 64, 64), valid (B,), its group memories
    pairs (W, cap, E, D) with each sample's mask (B, cap) and group (B,) in 0..W-1."""
    f = forward(nets, frames, valid.float(), MemoryView(pairs, mask, group), spec, learn, physics)
    with torch.no_grad():
        return f, memory_pairs(nets, spec, frames, f.z)


class StackedLearner(BaseLearner):
    """S learners of one configuration (``cfgs``: equal but for ``seed``) as one;
    ``update(batches)`` takes each seed's batch and returns each seed's metrics. ``captured``: the
    stacked step replayed from CUDA graphs (``agent.capture``)."""

    def __init__(
        self, cfgs: Sequence[AgentConfig], device: torch.device | str = "cpu",
        captured: bool = False,
    ) -> None:  # fmt: skip
        if not cfgs:
            raise ValueError("a stacked learner needs at least one seed")
        base = cfgs[0]
        for bad, why in (
            (any(replace(c, seed=base.seed) != base for c in cfgs[1:]),
             "must share their configuration but for the seed"),
            (base.memory_scope != "group", "need memory_scope='group' (the worlds protocol's)"),
            (base.stream_cache, "encode every frame afresh: set stream_cache=false"),
            (base.predictor_blocks, "run the listing's predictor: predictor_blocks=0"),
            (base.settle is not None, "have no reservoir: settle=None"),
            (base.encoder_lr_scale != 1.0, "have one rate: encoder_lr_scale=1"),
            (base.encoder_batch is not None, "give the encoder every stream: encoder_batch=None"),
            (base.recon_weight > 0, "train no pixel decoder: recon_weight=0"),
        ):  # fmt: skip
            if bad:
                raise ValueError(f"stacked seeds {why}")
        super().__init__(cfgs, device)
        self.stack = SeedStack([build_networks(c).to(self.device) for c in cfgs])
        trainable = [p for n, p in self.stack.params.items()
                     if p.requires_grad and not n.startswith("target.")]  # fmt: skip
        self.optimizer = torch.optim.AdamW(trainable, lr=base.lr, weight_decay=base.weight_decay,
                                           fused=True)  # fmt: skip
        prefix = "target.target."  # the EMA copy's parameter names, the encoder's after it
        ema = [n for n in self.stack.params if n.startswith(prefix)]
        self._ema = ([self.stack.params[n] for n in ema],  # the EMA lerp's targets, sources
                     [self.stack.params["encoder." + n[len(prefix) :]] for n in ema])  # fmt: skip
        self.detector, self.buffer = build_memory(base, self.device, self.seeds)
        self.local_groups = self.groups[: base.batch_size]  # each seed's samples' groups, 0..W-1
        # The stacked step as CUDA graphs (no stream latent cache: what it needs too), or None.
        self.captured = CapturedStep(self) if captured else None

    # ---------------------------------------------------------------- the step
    def update(self, batches: Sequence[Batch]) -> list[StepMetrics]:  # type: ignore[override]
        """One step of every seed, seed s on ``batches[s]`` (``BaseLearner.update`` of the
        stacked batch); each seed's ``StepMetrics``."""
        if len(batches) != self.seeds:
            raise ValueError(f"expected {self.seeds} batches (one a seed), got {len(batches)}")
        columns = super().update(stack_batches([b.to(self.device) for b in batches]))
        return [columns.seed(s) for s in range(self.seeds)]

    def step_on(
        self, batch: Batch, knobs: Knobs, u: torch.Tensor | None = None
    ) -> StepMetrics:
        """The stacked step on a stacked batch on the device; its metrics as columns (each
        field (S,), seed s's at s)."""
        memory = self.memory_view(knobs.learn, batch, u)
        local = self.local_groups.repeat(self.seeds)
        fwd, entry = self.stack.map(
            seed_forward, batch.frames, batch.valid, memory.pairs, memory.mask, local,
            batch.physics, self.spec, knobs.learn,
        )  # fmt: skip
        w = batch.valid.float()
        err = fwd.err.flatten(0, 1)
        m = Model(None, self.optimizer, self.detector, self.buffer, self.spec)  # type: ignore[arg-type]
        with torch.no_grad():
            fired, write = boundary(m, err, batch.valid, w, self.groups)
        if knobs.learn:
            adamw_step(self.optimizer, fwd.loss.total.sum(), knobs.lr)
            if knobs.ema:
                lerp_towards(*self._ema, knobs.tau)
        with torch.no_grad():
            self.buffer.enter(self.groups, world_key(batch))
            if knobs.write:
                push(m, entry.flatten(0, 1), batch, w, write, knobs.step, self.groups)
            return step_metrics(m, knobs, fwd.loss, err, w, fired, fwd.parts, self.seeds)

    # ---------------------------------------------------------------- state
    def _parts(self) -> list[dict[str, Any]]:
        """Each seed's weights, optimizer state, detector and world memories (``_seed_rows``)."""
        nets, opt = self.stack.state_dicts(), self.optimizer.state_dict()
        det, buf = self.detector.state_dict(), self.buffer.state_dict()
        return [{
            "nets": nets[s],
            "optimizer": {
                "state": {i: {k: (v if k == "step" else v[s]).clone() for k, v in st.items()}
                          for i, st in opt["state"].items()},
                "param_groups": opt["param_groups"],
            },
            "detector": self._seed_rows(det, s),
            "buffer": self._seed_rows(buf, s),
        } for s in range(self.seeds)]  # fmt: skip

    def _seed_rows(self, state: dict[str, torch.Tensor], s: int) -> dict[str, torch.Tensor]:
        """Seed s's part of the stack's detector or memory state: its W groups' rows; of the
        memory's flat slots its W * cap, then the spare row (where non-writing streams scatter
        and nothing reads: the stack's)."""
        w, out = self.cfg.num_groups, {}
        for name, t in state.items():
            flat = t.shape[0] != self.seeds * w
            n = w * self.cfg.buffer_capacity if flat else w
            rows = t[s * n : (s + 1) * n]
            out[name] = torch.cat([rows, t[-1:]]) if flat else rows.clone()
        return out

    def _stacked_rows(self, parts: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """The seeds' detector or memory states as the stack's (``_seed_rows`` undone; the spare
        row the first seed's)."""
        w, out = self.cfg.num_groups, {}
        for name, t in parts[0].items():
            flat = t.shape[0] != w
            out[name] = torch.cat([p[name][:-1] if flat else p[name] for p in parts]
                                  + ([t[-1:]] if flat else []))  # fmt: skip
        return out

    def _load_parts(self, states: Sequence[dict[str, Any]]) -> None:
        """``_parts`` undone, in place for the weights (the optimizer keeps them)."""
        self.stack.load_state_dicts([st["nets"] for st in states])  # in place: AdamW's params
        first = states[0]["optimizer"]
        self.optimizer.load_state_dict({
            "state": {i: {k: v.clone() if k == "step" else torch.stack(
                [st["optimizer"]["state"][i][k] for st in states]) for k, v in part.items()}
                for i, part in first["state"].items()},
            "param_groups": first["param_groups"],
        })  # fmt: skip
        self.detector.load_state_dict(self._stacked_rows([st["detector"] for st in states]))
        self.buffer.load_state_dict(self._stacked_rows([st["buffer"] for st in states]))


def stack_batches(batches: Sequence[Batch]) -> Batch:
    """The seeds' batches as one, seed-major (each tensor field concatenated; None where any
    seed's is not a tensor, as the clock, which the seeds' streams do not share)."""

    def cat(name: str) -> torch.Tensor | None:
        parts = [getattr(b, name) for b in batches]
        return torch.cat(parts) if all(isinstance(p, torch.Tensor) for p in parts) else None

    return Batch(**{f.name: cat(f.name) for f in fields(Batch)})
