"""The Learner: one ``update(batch) -> StepMetrics`` per step.

Assembled from parts (``agent.build``): networks (encoder, EMA target, predictor, modulator,
experience encoder, aggregator), boundary detector, experience buffer, AdamW. ``update`` sets the
step's schedule values and flags and calls ``agent.step.jepa_step`` (on a GPU, replayed from
CUDA graphs with ``captured``: ``agent.capture``). ``BaseLearner``: its controls, which a stack
of seeds (``agent.stacked.StackedLearner``) shares.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from agent import heads as head_parts
from agent.build import build_memory, build_networks, build_optimizer
from agent.capture import CapturedStep
from agent.config import PHYSICS_DIM, AgentConfig, bf16_unsupported
from agent.memory import Aggregate, ExperienceBuffer, GroupBuffer
from agent.memory.read import MemoryView
from agent.modulators import Modulated
from agent.objective import StepMetrics
from agent.reservoir import Reservoir
from agent.sources import Batch, LatentCache
from agent.step import (
    Forward,
    Knobs,
    Model,
    StepSpec,
    aggregate,
    encode,
    episode_key,
    fit_lr_at,
    fit_update,
    head_metrics,
    jepa_step,
    knobs_at,
    modulated_prediction,
)

# What a lone learner's state dict holds beside ``BaseLearner.state_dicts``' controls.
_PARTS = ("nets", "optimizer", "detector", "buffer")


class BaseLearner:
    """What a lone learner (``Learner``) and a stack of seeds (``agent.stacked.StackedLearner``)
    share: the controls, the memory draws and view, the update and the state dicts. ``cfgs``: the
    seeds' configs (one for a lone learner; equal but for ``seed``), their ``seeds * B`` samples
    seed-major (seed s's at s * B .. (s + 1) * B - 1). ``step``: updates done. Controls:
    ``freeze_weights()`` / ``unfreeze_weights()`` (memory mode: no weight or EMA updates while the
    detectors and memories stay live), and the config's ``freeze_buffer_at``, ``freeze_ema_at``
    (steps, compared with ``step`` before the update). A subclass builds the networks,
    ``optimizer``, ``detector``, ``buffer``, ``captured``, ``step_on`` and its state's parts."""

    captured: CapturedStep | None

    def __init__(self, cfgs: Sequence[AgentConfig], device: torch.device | str) -> None:
        cfg = cfgs[0]
        if cfg.total_steps is None:
            raise ValueError("total_steps: None is for a runner to fill in (the schedules' length)")
        self.cfg, self.seeds, self.device = cfg, len(cfgs), torch.device(device)
        why = bf16_unsupported(self.device) if cfg.precision == "bf16" else None
        if why:
            raise ValueError(f"precision: bf16 cannot run here: {why} (use fp32)")
        self.spec = StepSpec.from_config(cfg, self.device)
        # The group memory each sample (stream) reads: each group_size streams share one.
        streams = torch.arange(self.seeds * cfg.batch_size, device=self.device)
        self.groups = streams // cfg.group_size
        self.step = 0
        self.weights_frozen = False  # memory mode (``freeze_weights``)
        # The heads fit beside this learner's predictor from the settle on (agent.heads), by name.
        self.heads: dict[str, Learner] = {}
        # Each head's metrics on the last settled step's batch (``agent.step.head_metrics``:
        # 0-dim tensors, ``agent.objective.HEAD_METRICS``), by name (``Learner.fit``); empty
        # before the settle and without heads.
        self.head_metrics: dict[str, tuple[torch.Tensor, ...]] = {}
        # Draws of how much memory each training sample sees (cfg.vary_memory), on the device.
        self.memory_rngs = [torch.Generator(self.device).manual_seed(c.seed) for c in cfgs]
        # Latents of stream frames shared between consecutive batches (cfg.stream_cache).
        self.latents = LatentCache(cfg) if cfg.stream_cache else None
        # Settle, then fit: the windows kept from the settle on (agent.reservoir), or None.
        self.settle_at = cfg.settle_at
        self.reservoir = None if self.settle_at is None else Reservoir(
            cfg.reservoir_size, cfg.context_frames, cfg.entry_frames, len(cfg.horizons),
            cfg.latent_dim, PHYSICS_DIM, self.device, seed=cfg.seed,
        )  # fmt: skip

    # ---------------------------------------------------------------- controls
    def freeze_weights(self) -> None:
        """Stop weight and EMA updates; detector and buffer stay live (``memory`` mode)."""
        for learner in (self, *self.heads.values()):
            learner.weights_frozen = True

    def unfreeze_weights(self) -> None:
        """Undo ``freeze_weights``."""
        for learner in (self, *self.heads.values()):
            learner.weights_frozen = False

    def knobs(self) -> Knobs:
        """This step's schedule values and flags (every seed's: one schedule)."""
        return knobs_at(self.cfg, self.step, self.weights_frozen)

    @property
    def settled(self) -> bool:
        """True from ``cfg.settle_at`` (``settle`` of the steps) on: the encoder and EMA target
        are fixed and the step fits the reservoir (``Learner.fit``)."""
        return self.settle_at is not None and self.step >= self.settle_at

    # ---------------------------------------------------------------- the memory read
    def memory_draws(self, training: bool) -> torch.Tensor | None:
        """This step's draws of how much memory each sample sees (``cfg.vary_memory``, while
        training): (seeds * B,) uniform in [0, 1), each seed's B from its own generator; None
        otherwise."""
        if not (training and self.cfg.vary_memory):
            return None
        b = self.cfg.batch_size
        return torch.cat([torch.rand(b, generator=g, device=self.device) for g in self.memory_rngs])

    def memory_view(
        self, training: bool, batch: Batch | None = None, u: torch.Tensor | None = None
    ) -> MemoryView:
        """What this step's samples read of the buffer: all of it, or while training with
        ``cfg.vary_memory`` each sample its newest k entries, k uniform over 0..size (``u``:
        the step's ``memory_draws``, drawn here when None). A world memory
        (``memory_scope="group"``): each sample its world's, without its own episode's
        entries under ``memory_read="peer"`` (the episodes of ``batch``)."""
        cfg = self.cfg
        if u is None:
            u = self.memory_draws(training)
        if cfg.memory_scope == "group":
            peer = cfg.memory_read == "peer"
            if peer and batch is None:
                raise ValueError("memory_view: a peer read needs the batch's episodes")
            episode = episode_key(batch.to(self.device)) if peer else None
            return MemoryView.of_group(self.buffer, self.groups, episode, u)
        return MemoryView.of(self.buffer) if u is None else MemoryView.visible(self.buffer, u)

    # ---------------------------------------------------------------- the step
    def update(self, batch: Batch) -> StepMetrics:
        """One training step on ``batch`` (frames (B, F, 1, 64, 64) uint8, valid / world (B,);
        a stack's: its seeds' batches as one): ``step_on`` (replayed from a CUDA graph with
        ``captured=True`` on a GPU: ``agent.capture``), once settled ``Learner.fit``. Returns
        StepMetrics of 0-dim device tensors (a stack's: (seeds,) columns)."""
        knobs = self.knobs()
        if self.settled:
            metrics = self.fit(batch.to(self.device), knobs)
        elif self.captured is not None:
            metrics = self.captured.update(batch, knobs)
        else:
            metrics = self.step_on(batch.to(self.device), knobs)
        self.step += 1
        for head in self.heads.values():
            head.step = self.step
        return metrics

    def every_head(self) -> dict[str, Learner]:
        """This learner's own predictor and its heads, by head name (``cfg.head_name`` first)."""
        return {self.cfg.head_name: self, **self.heads}

    # ---------------------------------------------------------------- state
    def state_dicts(self) -> list[dict[str, Any]]:
        """Each seed's state dict, as its lone learner writes it (a lone learner of its config
        loads it): its step, freeze flag, generator of memory draws, stream latent cache and
        reservoir (the last two None in a stack), and the subclass's ``_parts`` (weights,
        optimizer, detector, buffer)."""
        return [{
            "step": self.step,
            "manual_freeze": self.weights_frozen,
            "memory_rng": self.memory_rngs[s].get_state(),
            "latents": None if self.latents is None else self.latents.state_dict(),
            "reservoir": None if self.reservoir is None else self.reservoir.state_dict(),
            **parts,
        } for s, parts in enumerate(self._parts())]  # fmt: skip

    def load_state_dicts(self, states: Sequence[dict[str, Any]]) -> None:
        """Load each seed's state dict (``state_dicts``' layout; a stack's all at one step); a
        captured step captures afresh."""
        if len(states) != self.seeds:
            raise ValueError(f"expected {self.seeds} state dicts, got {len(states)}")
        steps = {int(st["step"]) for st in states}
        if len(steps) != 1:
            raise ValueError(f"stacked seeds resume at one step, got steps {sorted(steps)}")
        self._load_parts(states)
        self.step = steps.pop()
        self.weights_frozen = bool(states[0]["manual_freeze"])
        for head in self.heads.values():
            head.step, head.weights_frozen = self.step, self.weights_frozen
        for g, st in zip(self.memory_rngs, states, strict=True):
            g.set_state(st["memory_rng"].cpu())
        if self.latents is not None:
            self.latents.load_state_dict(states[0]["latents"])
        if self.reservoir is not None:
            self.reservoir.load_state_dict(states[0]["reservoir"])
        if self.captured is not None:  # the graphs read the tensors just replaced
            self.captured.reset()


class Learner(BaseLearner):
    """EMA-JEPA learner of one track (its controls: ``BaseLearner``). ``captured``: the update
    replayed from CUDA graphs on a GPU (``agent.capture``; eager with the same tensor inputs on a
    CPU)."""

    def __init__(
        self, cfg: AgentConfig, device: torch.device | str = "cpu", captured: bool = False
    ) -> None:
        super().__init__([cfg], device)
        self.detector, self.buffer = build_memory(cfg, self.device)
        self.nets = build_networks(cfg).to(self.device)
        self.optimizer = build_optimizer(cfg, self.nets)
        if captured and cfg.settle is not None:
            raise ValueError("settle: the captured step has no reservoir (use --no-capture)")
        if captured and cfg.encoder_lr_scale != 1.0:
            raise ValueError("encoder_lr_scale: the captured step has one rate (use --no-capture)")
        if captured and cfg.recon_weight > 0:
            raise ValueError("recon_weight: not measured with the captured step (use --no-capture)")
        if captured and cfg.encoder_batch is not None:
            raise ValueError("encoder_batch: not measured with the captured step (use --no-capture)")
        # The step as a CUDA graph (agent.capture), or None: the plain step.
        self.captured = CapturedStep(self) if captured else None
        self.heads = head_parts.build_heads(self)
        # The thread the heads fit in, beside this learner's own fit (agent.heads.fit_beside).
        self.head_worker: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def model(self) -> Model:
        """What ``jepa_step`` reads and writes."""
        return Model(self.nets, self.optimizer, self.detector, self.buffer, self.spec)

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast when ``precision == "bf16"``, else nothing (fp32 stays exact)."""
        return self.spec.autocast()

    # ---------------------------------------------------------------- forward pieces
    def encoder_input(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 frames (..., 1, 64, 64) -> float32 encoder input (``cfg.input_scale``)."""
        return self.spec.frames(frames.to(self.device))

    @torch.no_grad()
    def encode(self, frames: torch.Tensor, target: bool = False) -> torch.Tensor:
        """Latents of uint8 frames (N, 1, 64, 64) -> (N, latent) float32, online encoder (or the
        EMA target), under the learner's precision, no gradient."""
        enc = self.nets.target.target if target else self.nets.encoder
        with self.autocast():
            return encode(enc, self.encoder_input(frames), self.spec).float()

    def view(self, buffer: ExperienceBuffer | GroupBuffer, n: int) -> MemoryView:
        """What n samples read of ``buffer``: all of it; of a group memory, sample b the whole
        memory of the world of stream b (so n must be the batch size)."""
        if not isinstance(buffer, GroupBuffer):
            return MemoryView.of(buffer)
        if n != self.cfg.batch_size:
            raise ValueError(f"a group memory is read by its streams: {n} samples, "
                             f"{self.cfg.batch_size} streams")  # fmt: skip
        return MemoryView.of_group(buffer, self.groups, None)

    def aggregate(self, z: torch.Tensor, buffer: ExperienceBuffer | GroupBuffer) -> Aggregate | None:
        """e_agg (B, exp_dim) and attention (B, cap) for each z (B, latent) from ``buffer``
        (``view``); None for tracks without a memory pathway (``agent.step.aggregate``)."""
        return aggregate(self.nets, z, self.view(buffer, z.shape[0]), self.spec)

    def predict(
        self, z: torch.Tensor, buffer: ExperienceBuffer | GroupBuffer,
        physics: torch.Tensor | None = None,
    ) -> tuple[Modulated, Aggregate | None]:  # fmt: skip
        """The modulated prediction for the context latents z (B, C, latent), or (B, latent),
        given ``buffer`` (``view``; ``agent.step.modulated_prediction``, the step's own);
        ``physics`` (B, PHYSICS_DIM) the true worlds, read instead of the memory by the oracle."""
        view = self.view(buffer, z.shape[0])
        return modulated_prediction(self.nets, z, view, self.spec, physics)

    # ---------------------------------------------------------------- the step
    def step_on(
        self, batch: Batch, knobs: Knobs, u: torch.Tensor | None = None, keep: bool = False,
        watch: Callable[[Forward, MemoryView, Batch], None] | None = None,
    ) -> StepMetrics:  # fmt: skip
        """The step itself on a batch on the device: the memory view (``u``: this step's
        ``memory_draws``, drawn when None) and ``agent.step.jepa_step`` (``keep``: the batch's
        windows enter the reservoir; ``watch``: jepa_step's)."""
        memory = self.memory_view(training=knobs.learn, batch=batch, u=u)
        reservoir = self.reservoir if keep else None
        return jepa_step(self.model, batch, memory, knobs, self.latents, reservoir, watch)

    def watch_heads(self, f: Forward, memory: MemoryView, batch: Batch) -> None:
        """Each head's metrics on the step's windows and memory (``head_metrics``)."""
        self.head_metrics = {name: head_metrics(head.nets, f, memory, batch, self.spec)
                             for name, head in self.heads.items()}  # fmt: skip

    def fit(self, batch: Batch, knobs: Knobs) -> StepMetrics:
        """A settled step: the batch observed without learning (the detector, the memory and the
        metrics live; its windows into the reservoir; each head's metrics on it in
        ``head_metrics``), then ``cfg.fit_updates`` updates on
        minibatches of the reservoir (``agent.step.fit_update``) unless the weights are frozen.
        The metrics are the observed batch's, its ``loss_pred`` the fit updates' mean."""
        cfg = self.cfg
        if self.step == self.settle_at:
            head_parts.start(self)
        observe = knobs._replace(learn=False, ema=False)
        watch = self.watch_heads if self.heads else None
        if not knobs.learn:
            return self.step_on(batch, observe, watch=watch)
        metrics = self.step_on(batch, observe, keep=True, watch=watch)
        each, peer = cfg.fit_batch // cfg.fit_worlds, cfg.memory_read == "peer"
        total = torch.zeros((), device=self.device)
        for _ in range(cfg.fit_updates):
            draw = self.reservoir.draw(cfg.fit_worlds, each, cfg.buffer_capacity, peer,
                                       cfg.vary_memory)  # fmt: skip
            # the same draw for every head (their differences paired), the heads' updates in a
            # thread beside this one's (independent tensors: the same numbers, on two cores)
            heads = head_parts.fit_beside(self, draw) if self.heads else None
            total = total + fit_update(self.model, draw, fit_lr_at(cfg, self.step))
            if heads is not None:
                heads.result()
        return metrics._replace(loss_pred=total / cfg.fit_updates)

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Weights, EMA target, optimizer, detector, buffer and the controls (``state_dicts``)."""
        return self.state_dicts()[0]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_state_dicts([state])

    def _parts(self) -> list[dict[str, Any]]:
        parts = {name: getattr(self, name).state_dict() for name in _PARTS}
        if self.heads:  # (a learner without heads: the state of a stack's seed, key for key)
            parts["heads"] = {name: head_parts.state_dict(h) for name, h in self.heads.items()}
        return [parts]

    def _load_parts(self, states: Sequence[dict[str, Any]]) -> None:
        for name in _PARTS:
            getattr(self, name).load_state_dict(states[0][name])
        saved = states[0].get("heads", {})
        if set(saved) != set(self.heads):
            raise ValueError(f"the state holds heads {sorted(saved)}, this learner has "
                             f"{sorted(self.heads)}")  # fmt: skip
        for name, head in self.heads.items():
            head_parts.load_state_dict(head, saved[name])
