"""The Learner: one ``update(batch) -> StepMetrics`` per step, no host synchronisation.

Assembled from parts (``agent.build``): networks (encoder, EMA target, predictor, modulator,
experience encoder, aggregator), boundary detector, experience buffer, AdamW. The step's
forward and loss are ``agent.step.forward_step`` (the same function ``MultiLearner`` runs
under vmap); this class adds the optimiser, the EMA and the memory writes.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from agent.build import Parts, build_optimizer, build_parts
from agent.config import AgentConfig
from agent.controls import FreezeControls
from agent.latents import StreamLatents
from agent.memory import Aggregate, ExperienceBuffer
from agent.metrics import StepMetrics
from agent.modulators import Modulated
from agent.schedules import lr_at, tau_at
from agent.sources import Batch
from agent.step import (
    MemoryView,
    StepSpec,
    aggregate,
    encode,
    forward_step,
    memory_codes,
    modulated_prediction,
    newest_pair,
    step_metrics,
    target_latents,
    valid_mean,
)


def frames_to_float(frames: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """uint8 frames (..., 1, 64, 64) -> float32 ``frames * scale`` (the encoders' input; use
    ``Learner.encoder_input`` to apply the learner's ``cfg.input_scale``)."""
    x = frames.to(torch.float32)
    return x if scale == 1.0 else x.mul_(scale)


@functools.cache
def _spare_core() -> bool:
    """More than one core is available to this process."""
    cores = (
        os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    )
    return len(cores) > 1


class _Codes:
    """The memory's e_i computed on the learner's second thread: calling it (where the
    aggregator needs them) waits for them and gives a detached leaf, the boundary between the
    step's graph and theirs (``Learner._backward``)."""

    def __init__(self, future: Future) -> None:
        self.future = future
        self.leaf: torch.Tensor | None = None

    def __call__(self) -> torch.Tensor | None:
        codes = self.future.result()
        if codes is not None and self.leaf is None:
            self.leaf = codes.detach().requires_grad_(codes.requires_grad)
        return self.leaf


class Learner(FreezeControls):
    """EMA-JEPA learner of one track.

    ``step``: updates done. Controls: ``freeze_weights()`` / ``unfreeze_weights()`` (memory
    mode: no weight or EMA updates while the detector and buffer stay live), and the config's
    ``freeze_buffer_at``, ``freeze_ema_at``, ``freeze_weights_at`` (steps, compared with
    ``step`` before the update).
    """

    def __init__(
        self, cfg: AgentConfig, device: torch.device | str = "cpu", parts: Parts | None = None
    ) -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        self.spec = StepSpec.from_config(cfg, self.device)
        parts = parts if parts is not None else build_parts(cfg, self.device)
        self.nets = parts.nets
        self.detector = parts.detector
        self.buffer = parts.buffer
        self.optimizer = build_optimizer(cfg, self.nets)
        self.step = 0
        self._manual_freeze = False
        # Draws of how much memory each training sample sees (cfg.vary_memory), on the device.
        self.memory_rng = torch.Generator(self.device)
        self.memory_rng.manual_seed(cfg.seed)
        # Latents of stream frames shared between consecutive batches (cfg.stream_cache).
        self.latents = StreamLatents(cfg) if cfg.stream_cache else None
        self._beside: ThreadPoolExecutor | None = None  # the second thread (``overlap``)

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast when ``precision == "bf16"``, else nothing (fp32 stays exact)."""
        return self.spec.autocast()

    # ---------------------------------------------------------------- forward pieces
    def encoder_input(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 frames (..., 1, 64, 64) -> float32 encoder input (``cfg.input_scale``)."""
        return frames_to_float(frames.to(self.device), self.cfg.input_scale)

    @torch.no_grad()
    def encode(self, frames: torch.Tensor, target: bool = False) -> torch.Tensor:
        """Latents of uint8 frames (N, 1, 64, 64) -> (N, latent) float32, online encoder (or the
        EMA target), under the learner's precision, no gradient."""
        enc = self.nets.target.target if target else self.nets.encoder
        with self.autocast():
            return encode(enc, self.encoder_input(frames), self.spec).float()

    def aggregate(self, z: torch.Tensor, buffer: ExperienceBuffer) -> Aggregate | None:
        """e_agg (B, exp_dim) and attention (B, cap) for each z (B, latent) from ``buffer``;
        None for tracks without a memory pathway (``agent.step.aggregate``)."""
        return aggregate(self.nets, z, MemoryView.of(buffer), self.spec)

    def predict(
        self,
        z: torch.Tensor,
        buffer: ExperienceBuffer,
        physics: torch.Tensor | None = None,
    ) -> tuple[Modulated, Aggregate | None]:
        """The modulated prediction for the context latents z (B, C, latent), or (B, latent),
        given ``buffer`` (``agent.step.modulated_prediction``, the step's own); ``physics``
        (B, PHYSICS_DIM) the true worlds, read instead of the memory by the oracle."""
        return modulated_prediction(self.nets, z, MemoryView.of(buffer), self.spec, physics)

    def memory_view(self, training: bool) -> MemoryView:
        """What this step's samples read of the buffer: all of it, or while training with
        ``cfg.vary_memory`` each sample its newest k entries, k uniform over 0..size."""
        if not (training and self.cfg.vary_memory):
            return MemoryView.of(self.buffer)
        b = self.cfg.batch_size
        u = torch.rand(b, generator=self.memory_rng, device=self.device)
        return MemoryView.visible(self.buffer, u)

    # ---------------------------------------------------------------- the step
    def update(self, batch: Batch) -> StepMetrics:
        """One training step on ``batch`` (frames (B, F, 1, 64, 64) uint8, valid / world (B,)
        on the device). Returns StepMetrics of 0-dim device tensors; no host sync."""
        cfg = self.cfg
        frozen = self.weights_frozen
        lr = lr_at(self.step, cfg.lr, cfg.total_steps, cfg.warmup_frac)
        tau = tau_at(self.step, cfg.tau_base, cfg.tau_end, cfg.total_steps)

        # 1.-2. Forward and loss (agent.step.forward_step: also the memory / metric reductions),
        #       with the latents of the frames the stream's earlier batches already encoded.
        x = batch.frames.to(self.device)  # (B, F, 1, 64, 64) uint8, converted where encoded
        w = batch.valid.float()  # (B,)
        memory = self.memory_view(training=not frozen)
        codes = self._codes(memory, grad=not frozen)  # first in line on the second thread
        targets, prev = self._targets(x, batch.clock)
        out = forward_step(
            self.nets,
            x,
            w,
            batch.world,
            memory,
            gamma=cfg.gamma,
            lambda_reg=cfg.lambda_reg,
            grad=not frozen,
            spec=self.spec,
            physics=batch.physics,
            targets=targets,
            prev=prev,
            codes=codes,
        )
        if self.latents is not None and batch.clock is not None and cfg.push_pair == "input":
            self.latents.keep_input(batch.clock, out.pairs[:, 1])

        # 3. Boundary: the detector on the BASE predictor's surprisal (its own state only; the
        #    buffer, which the backward still reads, is written in 6). Per stream each valid
        #    stream feeds its own detector; with memory_write "every", every valid step writes.
        with torch.no_grad():
            if cfg.memory_scope == "per_stream":
                valid = batch.valid
                fired = self.detector.update(out.sample_surprisal, valid)
                pair, world = out.pairs, batch.world
            else:
                valid = out.n_valid > 0
                fired = self.detector.update(out.surprisal, valid)
                pair, world = out.pair, out.world
            write = valid if cfg.memory_write == "every" else fired
            buffer_live = not self._frozen_at(cfg.freeze_buffer_at)
            # The paper's pair, on a CPU, only when it is pushed: a free host read saves an
            # online-encoder pass over 2B frames at every other step (spec.lazy_pair).
            if self.spec.lazy_pair and buffer_live and bool(write):
                with self.autocast():
                    pair = valid_mean(newest_pair(self.nets, x, self.spec), w)

        # 4. Backward and step.
        if not frozen:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.zero_grad(set_to_none=True)
            self._backward(out.loss_total, codes)
            self.optimizer.step()

        # 5. EMA target update.
        if not frozen and not self._frozen_at(cfg.freeze_ema_at):
            self.nets.target.update(self.nets.encoder, tau)

        # 6. Memory write: a push of the batch-mean memory pair on a boundary - all tensor ops.
        #    Per stream: a stream whose window spans an episode start (a new world) empties its
        #    memory, and each stream pushes its own pair when its detector fired.
        with torch.no_grad():
            if cfg.memory_scope == "per_stream":
                self.buffer.clear(~batch.valid)
            if buffer_live:
                self.buffer.push(pair, world, self.step, write)
            # Metrics (device tensors; read in blocks by agent.metrics.stack).
            metrics = step_metrics(
                out,
                fired,
                self.detector,
                self.buffer,
                lr=torch.full((), lr, device=self.device),
                tau=torch.full((), tau, device=self.device),
            )
        self.step += 1
        return metrics

    def _targets(
        self, x: torch.Tensor, clock: int | None
    ) -> tuple[torch.Tensor | Callable[[], torch.Tensor] | None, torch.Tensor | None]:
        """This batch's EMA-target latents (B, K, D) and its input's predecessor's online latent
        (B, D) from the step before (None where not held).

        From a stream (a clock) with ``stream_cache``: each frame encoded once when it arrives
        (``agent.latents``). On a CPU with one torch thread and a core to spare (``overlap``)
        the EMA pass runs on a second thread while this one runs the online forward, and the
        targets come back as a callable that ``forward_step`` calls when the loss needs them:
        the same kernels on the same inputs, so the same values. Otherwise (None, prev) lets
        ``forward_step`` encode them itself."""
        cached = self.latents is not None and clock is not None
        if not cached and not self.overlap:
            return None, None
        prev = None
        if cached:
            self.latents.begin(clock)  # type: ignore[union-attr]
            if self.cfg.push_pair == "input" and self.cfg.context_frames == 1:
                prev = self.latents.previous_input(clock)  # type: ignore[union-attr]

        def ema_pass() -> torch.Tensor:
            with torch.no_grad(), self.autocast():
                if not cached:
                    return target_latents(self.nets, x, self.spec)
                target = self.nets.target.target
                return self.latents.targets(  # type: ignore[union-attr]
                    clock, x, lambda f: encode(target, f, self.spec)
                )

        if not self.overlap:
            return ema_pass(), prev
        return self._thread().submit(ema_pass).result, prev

    def _codes(self, memory: MemoryView, grad: bool) -> _Codes | None:
        """The memory's e_i (``agent.step.memory_codes``) computed on the second thread while
        this one runs the online encoder (``overlap``); None (computed in ``forward_step``)
        otherwise."""
        nets = self.nets
        if not self.overlap or not nets.modulator.uses_memory or nets.aggregator is None:
            return None

        def run() -> torch.Tensor | None:
            with torch.set_grad_enabled(grad):
                return memory_codes(nets, memory, self.spec)

        return _Codes(self._thread().submit(run))

    def _backward(self, loss: torch.Tensor, codes: _Codes | None) -> None:
        """``loss.backward()``; with codes from the second thread, the experience encoder's part
        runs there, beside this thread's backward through the online encoder: the step's graph
        stops at the codes' leaf, and the leaf's gradient, once complete, starts the backward
        of the codes' own graph on the second thread. Disjoint parameters, the same gradients."""
        if codes is None or codes.leaf is None or not codes.leaf.requires_grad:
            loss.backward()
            return
        jobs = []
        source = codes.future.result()

        def launch(grad: torch.Tensor) -> None:
            jobs.append(self._thread().submit(source.backward, grad))

        handle = codes.leaf.register_hook(launch)
        try:
            loss.backward()
        finally:
            handle.remove()
            for job in jobs:
                job.result()

    def _thread(self) -> ThreadPoolExecutor:
        """The second thread (``overlap``), started on first use."""
        if self._beside is None:
            self._beside = ThreadPoolExecutor(1, thread_name_prefix="beside")
        return self._beside

    @property
    def overlap(self) -> bool:
        """Whether work independent of the online encoder runs beside it on a second thread
        (the EMA pass, the memory's e_i and their backward): a CPU learner with one torch thread
        (``train_online``'s default) on a machine with a second core. With more torch threads
        each op already uses the cores, and a second thread would oversubscribe them."""
        return self.device.type == "cpu" and torch.get_num_threads() == 1 and _spare_core()

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """Weights, EMA target, optimizer, detector, buffer, step, freeze flag."""
        return {
            "step": self.step,
            "manual_freeze": self._manual_freeze,
            "nets": self.nets.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "detector": self.detector.state_dict(),
            "buffer": self.buffer.state_dict(),
            "memory_rng": self.memory_rng.get_state(),
            "latents": None if self.latents is None else self.latents.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.nets.load_state_dict(state["nets"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.detector.load_state_dict(state["detector"])
        self.buffer.load_state_dict(state["buffer"])
        self.step = int(state["step"])
        self._manual_freeze = bool(state["manual_freeze"])
        if "memory_rng" in state:  # absent in checkpoints written before vary_memory existed
            self.memory_rng.set_state(state["memory_rng"].cpu())
        if self.latents is not None:  # absent (None) in checkpoints written before the cache
            self.latents.load_state_dict(state.get("latents"))
