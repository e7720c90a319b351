"""Modulators, one per track, behind one interface (``Modulator``)."""

from __future__ import annotations

from agent.config import AgentConfig
from agent.modulators.base import Modulated, Modulator
from agent.modulators.film import FiLMModulator
from agent.modulators.hyper import HyperModulator
from agent.modulators.lora import LoRAModulator
from agent.modulators.none import NoModulator
from agent.modulators.residual import ResidualModulator


def build_modulator(cfg: AgentConfig) -> Modulator:
    """The track's modulator with the config's sizes."""
    if cfg.track == "A":
        return NoModulator(cfg.exp_dim, cfg.hidden_dim)
    if cfg.track == "B":
        return ResidualModulator(cfg.exp_dim, cfg.hidden_dim)
    c_in, c_out = cfg.predictor_widths  # fc1's input and fc2's output (per cell of a map)
    if cfg.track == "C":
        return LoRAModulator(c_in, cfg.hidden_dim, cfg.exp_dim, cfg.lora_rank, c_out)
    if cfg.track == "D":
        return FiLMModulator(cfg.exp_dim, cfg.hidden_dim)
    if cfg.track == "E":
        return HyperModulator(c_in, cfg.hidden_dim, cfg.exp_dim, cfg.hyper_dim)
    raise ValueError(f"track: unknown track {cfg.track!r}")


__all__ = [
    "FiLMModulator",
    "HyperModulator",
    "LoRAModulator",
    "Modulated",
    "Modulator",
    "NoModulator",
    "ResidualModulator",
    "build_modulator",
]
