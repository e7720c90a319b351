"""StepSpec: the settings of a training step that are not tensors, fixed for a run."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from agent.config import AgentConfig
from agent.objective import Objective


@dataclass(frozen=True)
class StepSpec:
    """The step's settings that are not tensors (from ``AgentConfig``, fixed for a run)."""

    n_horizons: int  # K
    exp_dim: int
    norm_eps: float
    bf16: bool  # forward under bf16 autocast (``cfg.precision == "bf16"``)
    device_type: str  # "cpu" / "cuda": the autocast device
    past: int = 1  # P: frames at or before the input in a batch (``cfg.past_frames``)
    context: int = 1  # C: latents the predictor reads (``cfg.context_frames``)
    push_pair: str = "newest"  # ``cfg.push_pair``
    input_scale: float = 1.0  # uint8 frames -> encoder input (``cfg.input_scale``)
    objective: Objective = Objective()  # the loss (gamma, lambda_reg, regularise, ...)
    write_every: bool = False  # write the memory at every valid step (``cfg.memory_write``)
    group_memory: bool = False  # one memory and detector per world (``cfg.memory_scope``)
    entry: int = 2  # E, latents a memory entry holds (``cfg.entry_frames``)
    encoder_stride: int = 1  # every s-th stream's context gives the encoder its gradient

    @classmethod
    def from_config(cls, cfg: AgentConfig, device: torch.device | str) -> StepSpec:
        return cls(
            n_horizons=cfg.n_horizons,
            exp_dim=cfg.exp_dim,
            norm_eps=cfg.norm_eps,
            bf16=cfg.precision == "bf16",
            device_type=torch.device(device).type,
            past=cfg.past_frames,
            context=cfg.context_frames,
            push_pair=cfg.push_pair,
            input_scale=cfg.input_scale,
            objective=Objective(
                gamma=cfg.gamma,
                lambda_reg=cfg.lambda_reg,
                on_latents=cfg.regularise == "latents",
                relative=cfg.pred_error == "relative",
            ),
            write_every=cfg.memory_write == "every",
            group_memory=cfg.memory_scope == "group",
            entry=cfg.entry_frames,
            encoder_stride=cfg.encoder_stride,
        )

    def frames(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder input from frames: uint8 -> float32 times ``input_scale`` (converted where a
        slice is used, so frames a step does not encode are never converted); float as is."""
        if x.dtype != torch.uint8:
            return x
        x = x.to(torch.float32)
        return x if self.input_scale == 1.0 else x.mul_(self.input_scale)

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast when ``bf16``, else nothing (fp32 stays exact)."""
        if self.bf16:
            return torch.autocast(self.device_type, dtype=torch.bfloat16)
        return contextlib.nullcontext()
