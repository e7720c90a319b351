"""Per-step metric records (device tensors, read in blocks) and the D / sigma_embed metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch


class StepMetrics(NamedTuple):
    """One update's metrics: float32 tensors on the learner's device (no host sync), 0-dim,
    from ``Learner.update``, built by field name in ``agent.step.step_metrics`` (as columns,
    each field (S,): a stack's S seeds', each seed's ``seed(s)``).

    ``NAMES`` gives the namespaced names in field order; ``as_dict()`` maps them to tensors.
    """

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

    NAMES = (
        "loss/total",
        "loss/pred",
        "loss/reg",
        "memory/surprisal",
        "memory/threshold",
        "memory/boundary",
        "memory/buffer_size",
        "memory/shift_share",
        "opt/lr",
        "opt/tau",
        "mod/delta_abs",
        "memory/attn_entropy",
        "stream/valid_frac",
        "stream/norm_error",
    )

    def as_dict(self) -> dict[str, torch.Tensor]:
        """{namespaced name: 0-dim tensor}."""
        return dict(zip(self.NAMES, self, strict=True))

    def seed(self, s: int) -> StepMetrics:
        """Seed s's 0-dim metrics of columns (each field (S,), ``agent.step.step_metrics``)."""
        return StepMetrics(*(c[s] for c in self))


def columns(records: list[StepMetrics]) -> dict[str, np.ndarray]:
    """A block of records -> {name: (N,) float32 array}, one host sync for the
    whole block."""
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
    pred: torch.Tensor,
    z: torch.Tensor,
    targets: torch.Tensor,
    eps: float = 1e-3,
    valid: torch.Tensor | None = None,
) -> NormErrorSums:
    """Per-horizon sums of ``||zbar_k - zhat|| / ||zbar_k - z||`` (D, docs/definitions.md#d-the-normalised-error).

    pred (B, D) or (B, K, D) (per horizon); z (B, D); targets (B, K, D); valid (B,) bool or None. Denominators below ``eps``
    are excluded and counted.
    """
    pred, z, targets = pred.float(), z.float(), targets.float()
    num = torch.linalg.vector_norm(targets - per_horizon(pred), dim=-1)  # (B, K)
    den = torch.linalg.vector_norm(targets - z.unsqueeze(1), dim=-1)  # (B, K)
    ok = den >= eps
    if valid is not None:
        ok = ok & valid.unsqueeze(1)
        excluded = ((den < eps) & valid.unsqueeze(1)).sum()
    else:
        excluded = (den < eps).sum()
    ratio = torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), 0.0)
    return NormErrorSums(ratio.double().sum(0), ok.sum(0), excluded)


def norm_error(sums: NormErrorSums) -> tuple[torch.Tensor, torch.Tensor]:
    """(overall, per_horizon): per-horizon means (NaN where nothing was included), then their mean
    over horizons."""
    per_h = sums.ratio_sum / sums.count.double()  # 0/0 = NaN where nothing included
    return per_h.mean(), per_h


def normalised_error(
    pred: torch.Tensor,
    z: torch.Tensor,
    targets: torch.Tensor,
    eps: float = 1e-3,
    valid: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """D on one batch: (overall 0-dim, per_horizon (K,), excluded count 0-dim)."""
    sums = norm_error_sums(pred, z, targets, eps, valid)
    overall, per_h = norm_error(sums)
    return overall, per_h, sums.excluded


def sigma_embed(pred_sum: torch.Tensor, pred_sqsum: torch.Tensor, n: int) -> torch.Tensor:
    """Mean per-dimension (unbiased) std of predictor outputs from their sums over n samples.

    pred_sum, pred_sqsum (D,) float64.
    """
    mean = pred_sum / n
    var = (pred_sqsum - n * mean * mean) / max(n - 1, 1)
    return var.clamp(min=0).sqrt().mean()


def spread(x: torch.Tensor) -> torch.Tensor:
    """sigma_embed's statistic of any N samples x (N, ...), e.g. latents: the mean over
    dimensions of their (unbiased) std across the samples, from float64 sums and squared sums
    (``sigma_embed``). The evaluations' sigma_z and sigma_target."""
    flat = x.flatten(1).double()
    return sigma_embed(flat.sum(0), flat.pow(2).sum(0), flat.shape[0])


@torch.no_grad()
def score_predictions(
    predict: Callable[[slice], torch.Tensor],
    z: torch.Tensor,
    targets: torch.Tensor,
    chunk: int,
    eps: float,
) -> tuple[NormErrorSums, torch.Tensor]:
    """D's sums and sigma_embed of predictions made ``chunk`` samples at a time: ``predict(sl)``
    gives the (b, [K,] D) predictions of samples ``sl``; z (N, D) their input latents ("no
    change"), targets (N, K, D). The one evaluation loop of ``agent.evaluation``."""
    n = z.shape[0]
    sums, s1, s2 = None, 0.0, 0.0
    for start in range(0, n, chunk):
        sl = slice(start, min(start + chunk, n))
        pred = predict(sl).float()
        part = norm_error_sums(pred, z[sl], targets[sl], eps)
        sums = part if sums is None else NormErrorSums(*(a + b for a, b in zip(sums, part, strict=True)))
        flat = pred.flatten(1).double()
        s1, s2 = flat.sum(0) + s1, flat.pow(2).sum(0) + s2
    if sums is None:
        raise ValueError("no samples to score")
    return sums, sigma_embed(s1, s2, n)  # type: ignore[arg-type]
