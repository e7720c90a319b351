"""Small factories: the learner's parts from a config (all randomness from ``cfg.seed``)."""

from __future__ import annotations

import torch
from torch import nn

from agent.config import AgentConfig
from agent.ema import EMATarget
from agent.memory import (
    AttentionAggregator,
    BoundaryDetector,
    ExperienceBuffer,
    ExperienceEncoder,
    GroupBuffer,
    OracleContext,
)
from agent.modulators import Modulator, build_modulator
from agent.networks import AnyPredictor, Encoder, InkDecoder, build_predictor


class Networks(nn.Module):
    """The learner's modules in one state dict. ``experience`` and ``aggregator`` are None for
    tracks whose modulator ignores memory (A) and with the oracle, whose ``oracle`` module
    (None otherwise) feeds the true physics in place of e_agg; ``recon`` the encoder's pixel
    decoder where ``recon_weight`` > 0 (None otherwise)."""

    def __init__(
        self, encoder: Encoder, target: EMATarget, predictor: AnyPredictor, modulator: Modulator,
        experience: ExperienceEncoder | None, aggregator: AttentionAggregator | None,
        oracle: OracleContext | None = None, recon: InkDecoder | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.encoder = encoder
        self.target = target
        self.predictor = predictor
        self.modulator = modulator
        self.experience = experience
        self.aggregator = aggregator
        self.oracle = oracle
        self.recon = recon

    def trainable(self) -> list[nn.Parameter]:
        """What the optimiser updates (everything but the EMA target and frozen dummies)."""
        return [
            p for n, p in self.named_parameters() if p.requires_grad and not n.startswith("target.")
        ]


def build_networks(cfg: AgentConfig) -> Networks:
    """Networks with a deterministic init from ``cfg.seed`` (the global RNG is left untouched).

    Built in the order encoder, predictor, modulator, memory, so every track with the same seed
    starts from the same encoder and predictor.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        encoder = Encoder.from_config(cfg)
        predictor = build_predictor(cfg)
        modulator = build_modulator(cfg)
        experience = aggregator = oracle = None
        if modulator.uses_memory and cfg.oracle:
            oracle = OracleContext.from_config(cfg)
        elif modulator.uses_memory:
            experience = ExperienceEncoder.from_config(cfg)
            aggregator = AttentionAggregator.from_config(cfg)
        # built last: the other modules' init is the same without it
        recon = InkDecoder(cfg.latent_dim) if cfg.recon_weight > 0 else None
    target = EMATarget(encoder)
    return Networks(encoder, target, predictor, modulator, experience, aggregator, oracle, recon)


def build_memory(
    cfg: AgentConfig, device: torch.device | str, seeds: int = 1
) -> tuple[BoundaryDetector, ExperienceBuffer | GroupBuffer]:
    """The detector and the buffer on ``device``: with ``memory_scope="group"`` one detector
    statistic and one FIFO per group of ``group_size`` streams (of each of ``seeds`` stacked
    seeds, seed-major)."""
    groups = seeds * cfg.num_groups if cfg.memory_scope == "group" else None
    detector = BoundaryDetector(cfg.kappa, cfg.detector_momentum, cfg.detector_warmup, device,
                                streams=groups)  # fmt: skip
    if groups is None:
        return detector, ExperienceBuffer(cfg.buffer_capacity, cfg.latent_dim, device,
                                          frames=cfg.entry_frames)  # fmt: skip
    return detector, GroupBuffer(groups, cfg.buffer_capacity, cfg.latent_dim, device,
                                 frames=cfg.entry_frames)  # fmt: skip


def build_optimizer(cfg: AgentConfig, nets: Networks, encoder: bool = True) -> torch.optim.Optimizer:
    """AdamW, one parameter group (lr is set per step by the schedule); with
    ``encoder_lr_scale`` below 1 the encoder's parameters a second group, its ``lr_scale``;
    without the encoder's parameters at all with ``encoder=False`` (a head's: ``agent.heads``).

    The fused kernel (CPU and CUDA) keeps its step counters on the device: no per-parameter
    ``.item()`` and one kernel for all parameters.
    """
    params: list = nets.trainable()
    if not encoder:
        enc = {id(p) for p in nets.encoder.parameters()}
        params = [p for p in params if id(p) not in enc]
    elif cfg.encoder_lr_scale != 1.0:  # the encoder its own group, its rate scaled (jepa_step)
        enc = {id(p) for p in nets.encoder.parameters()}
        params = [{"params": [p for p in params if id(p) in enc], "lr_scale": cfg.encoder_lr_scale},
                  {"params": [p for p in params if id(p) not in enc]}]  # fmt: skip
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)


def count_parameters(nets: Networks) -> dict[str, int]:
    """{"trainable", "frozen" (dummy proj_B), "ema_target"} parameter counts."""
    trainable = sum(p.numel() for p in nets.trainable())
    target = sum(p.numel() for p in nets.target.parameters())
    total = sum(p.numel() for p in nets.parameters())
    return {"trainable": trainable, "frozen": total - trainable - target, "ema_target": target}
