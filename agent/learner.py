"""The Learner: one ``update(batch) -> StepMetrics`` per step, no host synchronisation.

Assembled from parts (``agent.build``): networks (encoder, EMA target, predictor, modulator,
experience encoder, aggregator), boundary detector, experience buffer, AdamW.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

from agent.build import Parts, build_optimizer, build_parts
from agent.config import AgentConfig
from agent.controls import FreezeControls
from agent.memory import Aggregate, ExperienceBuffer
from agent.metrics import StepMetrics, normalised_error
from agent.modulators import Modulated
from agent.objective import compute_loss
from agent.schedules import lr_at, tau_at
from agent.sources import Batch


def frames_to_float(frames: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """uint8 frames (..., 1, 64, 64) -> float32 ``frames * scale`` (the encoders' input; use
    ``Learner.encoder_input`` to apply the learner's ``cfg.input_scale``)."""
    x = frames.to(torch.float32)
    return x if scale == 1.0 else x.mul_(scale)


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
        parts = parts if parts is not None else build_parts(cfg, self.device)
        self.nets = parts.nets
        self.detector = parts.detector
        self.buffer = parts.buffer
        self.optimizer = build_optimizer(cfg, self.nets)
        self.step = 0
        self._manual_freeze = False
        self._nan = torch.full((), math.nan, device=self.device)

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast when ``precision == "bf16"``, else nothing (fp32 stays exact)."""
        if self.cfg.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # ---------------------------------------------------------------- forward pieces
    def encoder_input(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 frames (..., 1, 64, 64) -> float32 encoder input (``cfg.input_scale``)."""
        return frames_to_float(frames.to(self.device), self.cfg.input_scale)

    @torch.no_grad()
    def encode(self, frames: torch.Tensor, target: bool = False) -> torch.Tensor:
        """Latents of uint8 frames (N, 1, 64, 64) -> (N, latent) float32, online encoder (or the
        EMA target), under the learner's precision, no gradient."""
        enc = self.nets.target if target else self.nets.encoder
        with self.autocast():
            return enc(self.encoder_input(frames)).float()

    def aggregate(self, z: torch.Tensor, buffer: ExperienceBuffer) -> Aggregate | None:
        """e_agg for each z (B, latent) from ``buffer`` (encoded once: the e_i are shared by all
        samples); None for tracks without a memory pathway."""
        if not self.nets.modulator.uses_memory:
            return None
        # The memory pathway runs in fp32 even under bf16 autocast: its matmuls are tiny
        # (cap x 64), so bf16 only adds casts (measured ~2 ms slower per step on CPU).
        with torch.autocast(self.device.type, enabled=False):
            e = self.nets.experience(buffer.pairs)  # (cap, exp_dim)
            return self.nets.aggregator(z.float(), e, buffer.mask())

    def predict(
        self, z: torch.Tensor, buffer: ExperienceBuffer
    ) -> tuple[Modulated, Aggregate | None]:
        """The modulated prediction for z (B, latent) given ``buffer``."""
        agg = self.aggregate(z, buffer)
        e_agg = agg.e_agg if agg is not None else z.new_zeros(z.shape[0], self.cfg.exp_dim)
        return self.nets.modulator(self.nets.predictor, z, e_agg), agg

    # ---------------------------------------------------------------- the step
    def update(self, batch: Batch) -> StepMetrics:
        """One training step on ``batch`` (frames (B, K+2, 1, 64, 64) uint8). No host sync."""
        cfg, nets = self.cfg, self.nets
        k = cfg.n_horizons
        frozen = self.weights_frozen
        lr = lr_at(self.step, cfg.lr, cfg.total_steps, cfg.warmup_frac)
        tau = tau_at(self.step, cfg.tau_base, cfg.tau_end, cfg.total_steps)
        valid = batch.valid
        w = valid.float()  # (B,)
        n_valid = w.sum()
        x = self.encoder_input(batch.frames)  # (B, K+2, 1, 64, 64)
        b = x.shape[0]

        # 1. Forward. Each frame is encoded once: the input with gradients, the newest pair
        #    (memory only) and the K targets (EMA encoder) without.
        with self.autocast():
            with torch.no_grad():
                pair = nets.encoder(x[:, k:].flatten(0, 1)).view(b, 2, -1).flip(1)  # (B, 2, D)
                targets = nets.target(x[:, 1 : k + 1].flatten(0, 1)).view(b, k, -1)  # (B, K, D)
            with torch.set_grad_enabled(not frozen):
                z = nets.encoder(x[:, 0])  # (B, D)
                mod, agg = self.predict(z, self.buffer)
            # The BASE predictor (no modulation) for the surprisal, before the weights move.
            with torch.no_grad():
                base = nets.predictor(z.detach()) if nets.modulator.uses_memory else mod.pred
        pred, targets, base = mod.pred.float(), targets.float(), base.detach().float()

        # 2. Loss (invalid samples weigh 0).
        loss = compute_loss(pred, targets, cfg.gamma, cfg.lambda_reg, w)

        # 3. Backward and step.
        if not frozen:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.optimizer.zero_grad(set_to_none=True)
            loss.total.backward()
            self.optimizer.step()

        # 4. EMA target update.
        if not frozen and not self._frozen_at(cfg.freeze_ema_at):
            nets.target.update(nets.encoder, tau)

        # 5. Memory update: surprisal of the BASE predictor (no modulation, no circular coupling),
        #    detector, and a push of the batch-mean newest pair on a boundary - all tensor ops.
        with torch.no_grad():
            err = torch.linalg.vector_norm(targets - base.unsqueeze(1), dim=-1).mean(1)  # (B,)
            denom = n_valid.clamp(min=1.0)
            surprisal = (err * w).sum() / denom
            fired = self.detector.update(surprisal, n_valid > 0)
            if not self._frozen_at(cfg.freeze_buffer_at):
                pair_mean = (pair.float() * w.view(b, 1, 1)).sum(0) / denom  # (2, D)
                world = ((batch.world.float() * w).sum() * 2 > n_valid).long()  # majority
                self.buffer.push(pair_mean, world, self.step, fired)

            # Metrics (device tensors; read in blocks by agent.metrics.stack).
            if mod.scales is not None:
                delta_abs = (mod.scales.detach().float().abs().mean(1) * w).sum() / denom
            else:
                delta_abs = self._nan
            if agg is not None:
                ent = -torch.special.xlogy(agg.attn.detach().float(), agg.attn.detach().float())
                attn_entropy = (ent.sum(1) * w).sum() / denom
            else:
                attn_entropy = self._nan
            norm_err = normalised_error(pred.detach(), z.detach(), targets, cfg.norm_eps, valid)[0]
            metrics = StepMetrics(
                loss_total=loss.total.detach(),
                loss_pred=loss.pred.detach(),
                loss_reg=loss.reg.detach(),
                surprisal=surprisal,
                threshold=self.detector.threshold.float(),
                boundary=fired.float(),
                buffer_size=self.buffer.size.float(),
                shift_share=self.buffer.shift_share(),
                lr=torch.full((), lr, device=self.device),
                tau=torch.full((), tau, device=self.device),
                delta_abs=delta_abs,
                attn_entropy=attn_entropy,
                valid_frac=n_valid / b,
                norm_error=norm_err.float(),
            )
        self.step += 1
        return metrics

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
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.nets.load_state_dict(state["nets"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.detector.load_state_dict(state["detector"])
        self.buffer.load_state_dict(state["buffer"])
        self.step = int(state["step"])
        self._manual_freeze = bool(state["manual_freeze"])
