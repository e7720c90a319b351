"""What a step optimises and what it measures.

The training objective (the paper's listing), with an optional per-sample validity mask: with
every sample valid these are the listing's ``pred_loss``, ``reg_loss``, ``compute_loss`` (up to
float summation order); masked samples (stream windows spanning a reset) contribute nothing.
The measures: per-step metric records (``StepMetrics``: device tensors, read in blocks) and the
D / sigma_embed metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch


# -- the measures ------------------------------------------------------------------------------
class StepMetrics(NamedTuple):
    """One update's metrics: float32 tensors on the learner's device (no host sync), 0-dim,
    from ``Learner.update``, built by field name in ``agent.step.step_metrics`` (as columns,
    each field (S,): a stack's S seeds', each seed's ``seed(s)``). ``NAMES``: the namespaced
    names in field order."""

    loss_total: torch.Tensor
    loss_pred: torch.Tensor
    loss_reg: torch.Tensor
    surprisal: torch.Tensor  # base-predictor surprisal s_t (docs/definitions.md#surprisal)
    threshold: torch.Tensor  # mu + kappa * sigma after this step's update
    boundary: torch.Tensor  # 1.0 if a boundary fired this step
    buffer_size: torch.Tensor  # entries after this step's memory update
    shift_share: torch.Tensor  # share of buffer entries from world 1 (0 when empty)
    lr: torch.Tensor
    tau: torch.Tensor
    delta_abs: torch.Tensor  # mean |modulation scale| (C: LoRA deltas; D: FiLM; E: code); NaN A/B
    attn_entropy: torch.Tensor  # mean attention entropy over the buffer (nats); NaN for track A
    valid_frac: torch.Tensor  # share of the batch's samples that were valid
    norm_error: torch.Tensor  # D of the modulated prediction on this batch (live stream error)

    NAMES = ("loss/total", "loss/pred", "loss/reg", "memory/surprisal", "memory/threshold",
             "memory/boundary", "memory/buffer_size", "memory/shift_share", "opt/lr", "opt/tau",
             "mod/delta_abs", "memory/attn_entropy", "stream/valid_frac", "stream/norm_error")  # fmt: skip

    def as_dict(self) -> dict[str, torch.Tensor]:
        """{namespaced name: 0-dim tensor}."""
        return dict(zip(self.NAMES, self, strict=True))

    def seed(self, s: int) -> StepMetrics:
        """Seed s's 0-dim metrics of columns (each field (S,), ``agent.step.step_metrics``)."""
        return StepMetrics(*(c[s] for c in self))


#: What each head beside a settled learner records a step (``agent.step.head_metrics``), in
#: order: its ``StepMetrics`` names.
HEAD_METRICS = ("mod/delta_abs", "memory/attn_entropy", "stream/norm_error")


def head_metric_name(head: str, metric: str = "stream/norm_error") -> str:
    """Head ``head``'s ``metric`` (one of ``HEAD_METRICS``) in a run's records:
    ``heads/<head>/<metric's last part>``."""
    return f"heads/{head}/{metric.rsplit('/', 1)[-1]}"


def head_columns(records: list[dict[str, tuple[torch.Tensor, ...]]],
                 heads: Sequence[str]) -> dict[str, np.ndarray]:  # fmt: skip
    """A block of steps' ``Learner.head_metrics`` -> {``head_metric_name``: (N,) float32}, NaN
    where a step has none (before the settle); one host sync for the block."""
    k = len(HEAD_METRICS)
    table = np.full((len(records), len(heads) * k), np.nan, np.float32)
    rows = [i for i, r in enumerate(records) if r]
    if rows and heads:
        table[rows] = torch.stack([torch.stack([m.float() for h in heads for m in records[i][h]])
                                   for i in rows]).cpu().numpy()  # fmt: skip
    return {head_metric_name(h, m): table[:, j * k + i]
            for j, h in enumerate(heads) for i, m in enumerate(HEAD_METRICS)}


def columns(records: list[StepMetrics]) -> dict[str, np.ndarray]:
    """A block of records -> {name: (N,) float32 array}, one host sync for the whole block."""
    if not records:
        return {name: np.zeros(0, np.float32) for name in StepMetrics.NAMES}
    table = torch.stack([torch.stack(list(r)).float() for r in records]).cpu().numpy()  # (N, M)
    return {name: table[:, i] for i, name in enumerate(StepMetrics.NAMES)}


def per_horizon(pred: torch.Tensor) -> torch.Tensor:
    """A prediction as (B, K, D): per-horizon outputs as they are, the paper's single (B, D)
    output as (B, 1, D), which broadcasts against the K targets."""
    return pred if pred.dim() == 3 else pred.unsqueeze(1)


class NormErrorSums(NamedTuple):
    """Sufficient statistics of the normalised error, summable over batches."""

    ratio_sum: torch.Tensor  # (K,) float64 sum of ||t - zhat|| / ||t - z|| over included samples
    count: torch.Tensor  # (K,) int64 included samples per horizon
    excluded: torch.Tensor  # 0-dim int64: valid (sample, horizon) pairs with ||t - z|| < eps


def norm_error_sums(
    pred: torch.Tensor, z: torch.Tensor, targets: torch.Tensor, eps: float = 1e-3,
    valid: torch.Tensor | None = None,
) -> NormErrorSums:  # fmt: skip
    """Per-horizon sums of ``||zbar_k - zhat|| / ||zbar_k - z||`` (D,
    docs/definitions.md#d-the-normalised-error): pred (B, D) or (B, K, D) (per horizon); z (B,
    D); targets (B, K, D); valid (B,) bool or None. Denominators below ``eps`` are excluded and
    counted (of the valid samples)."""
    pred, z, targets = pred.float(), z.float(), targets.float()
    num = torch.linalg.vector_norm(targets - per_horizon(pred), dim=-1)  # (B, K)
    den = torch.linalg.vector_norm(targets - z.unsqueeze(1), dim=-1)  # (B, K)
    ok, small = den >= eps, den < eps
    if valid is not None:
        ok, small = ok & valid.unsqueeze(1), small & valid.unsqueeze(1)
    excluded = small.sum()
    ratio = torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), 0.0)
    return NormErrorSums(ratio.double().sum(0), ok.sum(0), excluded)


def total(parts: list[NormErrorSums]) -> NormErrorSums:
    """The sums of several batches (in order)."""
    if not parts:
        raise ValueError("no samples to score")
    return NormErrorSums(*(sum(x) for x in zip(*parts, strict=True)))


def norm_error(sums: NormErrorSums) -> tuple[torch.Tensor, torch.Tensor]:
    """(overall, per_horizon): per-horizon means (NaN where nothing was included), then their mean
    over horizons."""
    per_h = sums.ratio_sum / sums.count.double()  # 0/0 = NaN where nothing included
    return per_h.mean(), per_h


def normalised_error(
    pred: torch.Tensor, z: torch.Tensor, targets: torch.Tensor, eps: float = 1e-3,
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """D on one batch: (overall 0-dim, per_horizon (K,), excluded count 0-dim)."""
    sums = norm_error_sums(pred, z, targets, eps, valid)
    overall, per_h = norm_error(sums)
    return overall, per_h, sums.excluded


def spread(*parts: torch.Tensor) -> torch.Tensor:
    """sigma_embed's statistic of any N samples (N, ...), e.g. latents or predictions, whole or
    in parts (their float64 sums and squared sums added part by part): the mean over dimensions
    of their (unbiased) std across the samples. The evaluations' sigma_embed, sigma_z and
    sigma_target."""
    flat = [x.flatten(1).double() for x in parts]
    n = sum(f.shape[0] for f in flat)
    mean = sum(f.sum(0) for f in flat) / n
    var = (sum(f.pow(2).sum(0) for f in flat) - n * mean * mean) / max(n - 1, 1)
    return var.clamp(min=0).sqrt().mean()


# -- the objective ----------------------------------------------------------------------------
class Loss(NamedTuple):
    total: torch.Tensor  # 0-dim: pred + lambda * reg
    pred: torch.Tensor  # 0-dim: mean over horizons of the MSE against the targets
    reg: torch.Tensor  # 0-dim: variance hinge, mean_d max(0, gamma - std_b)


def pred_loss(
    pred: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor | None = None,
    current: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """Mean over horizons of the MSE between pred and the stop-gradient targets.

    pred (B, D) (the paper's one output for every horizon) or (B, K, D) (one per horizon);
    targets (B, K, D), detached here; weight (B,) 0/1 float or None (all valid). With the
    input frame's latent ``current`` (B, D), each horizon's MSE is divided by the batch's mean
    squared "no change" distance ||zbar_k - z_t||^2 at that horizon (detached; the weights
    normalised to mean 1 over the horizons), so that every horizon weighs as it does in D.
    """
    sq = (per_horizon(pred) - targets.detach()).pow(2)  # (B, K, D)
    b, k, d = sq.shape
    if current is None:
        if weight is None:
            return sq.mean()
        n = weight.sum().clamp(min=1.0)
        return (sq.sum(dim=(1, 2)) * weight).sum() / (n * k * d)
    w = sq.new_ones(b) if weight is None else weight
    n = w.sum().clamp(min=1.0)
    per_k = (sq.sum(2) * w.unsqueeze(1)).sum(0) / (n * d)  # (K,) each horizon's MSE
    with torch.no_grad():
        still = (targets - current.detach().float().unsqueeze(1)).pow(2).sum(2)  # (B, K)
        still = (still * w.unsqueeze(1)).sum(0) / n  # (K,)
        scale = 1.0 / still.clamp(min=1e-8)
        scale = scale / scale.mean()
    return (per_k * scale).mean()


def reg_loss(pred: torch.Tensor, gamma: float, weight: torch.Tensor | None = None) -> torch.Tensor:
    """VICReg variance term: mean_d max(0, gamma - std_b(pred[:, d])), std unbiased.

    pred (B, D), or (B, K, D) per horizon (each horizon's dimensions count apart); weight (B,)
    0/1 float or None.
    """
    pred = pred.flatten(1)
    if weight is None:
        std = pred.std(dim=0)
    else:
        n = weight.sum()
        w = weight.unsqueeze(1)  # (B, 1)
        mean = (pred * w).sum(0) / n.clamp(min=1.0)
        var = ((pred - mean).pow(2) * w).sum(0) / (n - 1.0).clamp(min=1.0)
        # sqrt'(0) is inf: with < 2 valid samples (or identical ones) the gradient would be NaN.
        pos = var > 0
        std = torch.where(pos, torch.where(pos, var, 1.0).sqrt(), 0.0)
    return torch.clamp(gamma - std, min=0.0).mean()


def compute_loss(
    pred: torch.Tensor, targets: torch.Tensor, gamma: float, lambda_reg: float,
    weight: torch.Tensor | None = None, latents: torch.Tensor | None = None,
    current: torch.Tensor | None = None,
) -> Loss:  # fmt: skip
    """Loss(total, pred, reg) for pred (B, D) and targets (B, K, D). The variance hinge is on
    the predictions (the paper), or on the online encoder's ``latents`` (B, [C,] D) where given
    (each context frame a row). With the input latent ``current`` (B, D) the horizons' errors
    are relative (``pred_loss``)."""
    lp = pred_loss(pred, targets, weight, current)
    src, w = pred, weight
    if latents is not None:
        c = latents.shape[1] if latents.dim() == 3 else 1
        src = latents.float().reshape(-1, latents.shape[-1])
        w = None if weight is None else weight.repeat_interleave(c)
    lr = reg_loss(src, gamma, w)
    return Loss(lp + lambda_reg * lr, lp, lr)


@dataclass(frozen=True)
class Objective:
    """The step's loss settings (from ``AgentConfig``): the variance hinge's target std and
    weight, whether it holds the encoder's latents apart (``cfg.regularise``), and whether the
    horizons' errors are relative (``cfg.pred_error``)."""

    gamma: float = 0.75
    lambda_reg: float = 0.05
    on_latents: bool = False
    relative: bool = False

    def __call__(
        self, pred: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor, z: torch.Tensor
    ) -> Loss:
        """The loss of pred against targets for the online context latents z (B, [C,] D)."""
        return compute_loss(pred, targets, self.gamma, self.lambda_reg, weight,
                            z if self.on_latents else None,
                            _current(z) if self.relative else None)

    def prediction(self, pred: torch.Tensor, targets: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The prediction error alone (``pred_loss``: every sample valid), relative where the
        step's is: the settled fit's loss (``agent.step.fit_update``)."""
        return pred_loss(pred, targets, None, _current(z) if self.relative else None)


def _current(z: torch.Tensor) -> torch.Tensor:
    """The input frame's latent (B, D) of the context latents z (B, [C,] D)."""
    return z[:, -1] if z.dim() == 3 else z
