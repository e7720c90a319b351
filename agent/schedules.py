"""Step-based schedules: LR linear warmup then cosine decay; EMA tau cosine ramp.

Both are pure functions of the step, so a resumed run needs only the step to continue.
Past ``total_steps`` the LR stays at 0 and tau at ``tau_end``.
"""

from __future__ import annotations

import math

from agent.config import AgentConfig
from agent.step import Knobs


def warmup_steps(total_steps: int, warmup_frac: float) -> int:
    """Number of linear warmup steps (0 when warmup_frac is 0)."""
    return int(round(warmup_frac * total_steps))


def lr_at(step: int, base_lr: float, total_steps: int, warmup_frac: float) -> float:
    """LR for update number ``step`` (0-based): linear warmup to base_lr, then cosine to 0."""
    w = warmup_steps(total_steps, warmup_frac)
    if step < w:
        return base_lr * (step + 1) / w
    progress = min(1.0, (step - w) / max(1, total_steps - w))
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def tau_at(step: int, tau_base: float, tau_end: float, total_steps: int) -> float:
    """EMA decay for update ``step``: cosine from tau_base (step 0) to tau_end (total_steps)."""
    progress = min(1.0, step / total_steps)
    return tau_end - (tau_end - tau_base) * 0.5 * (1.0 + math.cos(math.pi * progress))


def fit_lr_at(cfg: AgentConfig, step: int) -> float:
    """The fit's rate at update ``step`` after the settle (``cfg.settle_at``, ``settle`` of the steps): ``cfg.fit_lr`` at
    the settle, cosine to 0 at ``total_steps``; the run's own ``lr_at`` where ``fit_lr`` is None."""
    at = cfg.settle_at
    if cfg.fit_lr is None or at is None:
        return lr_at(step, cfg.lr, cfg.total_steps, cfg.warmup_frac)
    progress = min(1.0, max(0.0, (step - at) / max(1, cfg.total_steps - at)))
    return cfg.fit_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def knobs_at(cfg: AgentConfig, step: int, frozen: bool) -> Knobs:
    """Step ``step``'s schedule values and flags (``frozen``: the weights are held, memory
    mode): lr, tau, and whether the weights, the EMA target and the memory change."""
    def reached(at: int | None) -> bool:
        return at is not None and step >= at

    return Knobs(
        step=step,
        lr=lr_at(step, cfg.lr, cfg.total_steps, cfg.warmup_frac),
        tau=tau_at(step, cfg.tau_base, cfg.tau_end, cfg.total_steps),
        learn=not frozen,
        ema=not reached(cfg.freeze_ema_at),
        write=not reached(cfg.freeze_buffer_at),
    )
