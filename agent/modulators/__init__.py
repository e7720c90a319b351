"""Modulators, one per track, behind one interface (``Modulator``)."""

from __future__ import annotations

from agent.config import AgentConfig
from agent.modulators.base import Modulated, Modulator
from agent.modulators.blocks import BlockFiLM, BlockHyper, BlockLoRA, BlockResidual
from agent.modulators.hidden import (
    FiLMModulator,
    HyperModulator,
    LoRAModulator,
    NoModulator,
    ResidualModulator,
)


def build_modulator(cfg: AgentConfig) -> Modulator:
    """The track's modulator with the config's sizes."""
    if cfg.track == "A":
        return NoModulator(cfg.exp_dim, cfg.hidden_dim)
    if cfg.predictor_blocks:  # the track's modulation in every block (agent.modulators.blocks)
        n, hid, exp = cfg.predictor_blocks, cfg.hidden_dim, cfg.exp_dim
        if cfg.track == "B":
            return BlockResidual(exp, hid, n)
        if cfg.track == "C":
            return BlockLoRA(exp, hid, n, cfg.lora_rank)
        if cfg.track == "D":
            return BlockFiLM(exp, hid, n)
        return BlockHyper(exp, hid, n, cfg.hyper_dim)
    if cfg.track == "B":
        return ResidualModulator(cfg.exp_dim, cfg.hidden_dim)
    c_in, c_out = cfg.predictor_widths  # fc1's input and fc2's output
    if cfg.track == "C":
        return LoRAModulator(c_in, cfg.hidden_dim, cfg.exp_dim, cfg.lora_rank, c_out)
    if cfg.track == "D":
        return FiLMModulator(cfg.exp_dim, cfg.hidden_dim)
    if cfg.track == "E":
        return HyperModulator(c_in, cfg.hidden_dim, cfg.exp_dim, cfg.hyper_dim)
    raise ValueError(f"track: unknown track {cfg.track!r}")


__all__ = ["LoRAModulator", "Modulated", "Modulator", "build_modulator"]
