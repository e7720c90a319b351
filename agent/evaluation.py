"""Evaluation: D_shift^n, D_base, sigma_embed, sigma_z, sigma_target on a copy of the learner's
memory.

For each n, a copy of the training buffer receives n shift-world transitions (each the
batch-mean (frame h_max-1, frame h_max) online latent pair of a batch of shift *train*
sequences, pushed directly, bypassing the detector, so n is exact), then the frozen learner
predicts the shift and base test sets through that memory. The training buffer, the weights and
every RNG are untouched; sampling is from a local ``np.random.default_rng(seed)``, and the
transitions of a smaller n are a prefix of those of a larger n.

D (docs/definitions.md#d-the-normalised-error): per horizon, the mean over samples of ``||zbar_k - zhat|| / ||zbar_k - z||``
with denominators below ``cfg.norm_eps`` excluded (and counted in ``excluded``, as (sample,
horizon) pairs); then the mean over horizons. ``D_base`` uses the same memory copy as D_shift (so
the curve also shows how shift experience affects the base world). sigma_embed is the mean
per-dimension std of the predictions on the shift test set; sigma_z and sigma_target the same
statistic of the latents of its input frames, by the online encoder and by the EMA target
(encoded with the test set, once for every n).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agent.learner import Learner
from agent.memory import ExperienceBuffer
from agent.metrics import (
    NormErrorSums,
    norm_error,
    norm_error_sums,
    per_horizon,
    score_predictions,
    spread,
)

CURVE_NS = (0, 10, 25, 50, 100, 256)


@dataclass
class EvalData:
    """uint8 (N, T, 1, 64, 64) arrays (numpy or zarr): shift train (memory), the test sets."""

    shift_train: Any
    shift_test: Any
    base_test: Any


@dataclass
class EvalResult:
    n: int  # shift transitions pushed to the memory copy
    d_shift: float
    d_shift_per_h: list[float]  # one per horizon
    d_base: float
    d_base_per_h: list[float]
    sigma_embed: float  # spread of the predictions on the shift test set
    sigma_z: float  # spread of its input frames' online latents z_t (the same for every n)
    sigma_target: float  # spread of their EMA target latents zbar_t
    excluded: int  # excluded (sample, horizon) pairs, shift + base test sets

    def as_dict(self, prefix: str = "eval/") -> dict[str, Any]:
        """Namespaced flat dict (``eval/d_shift``, ...)."""
        return {prefix + k: v for k, v in self.__dict__.items()}


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


@torch.no_grad()
def _encode_set(
    learner: Learner, frames: Any, chunk: int, input_target: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """z (N, C, D) online latents of the context frames (the last one the input frame) and
    targets (N, K, D) EMA latents at the horizons: frames 0..C-1 of each sequence, and C-1+k
    (the paper: frame 0, and 5, 10, 20). With ``input_target`` the EMA latent of the input frame
    C-1 comes first: targets (N, 1 + K, D) (a call of its own, so the horizons' latents are
    those computed without it)."""
    cfg, nets = learner.cfg, learner.nets
    k, c = cfg.n_horizons, cfg.context_frames
    cols = np.asarray((*range(c), *(c - 1 + h for h in cfg.horizons)))
    zs, ts = [], []
    per = max(1, chunk // (k + c + input_target))  # sequences per chunk: ~chunk frames a chunk
    for sl in _chunks(frames.shape[0], per):
        x = learner.encoder_input(torch.from_numpy(_take(frames, sl, cols)))
        b = x.shape[0]
        with learner.autocast():
            zs.append(nets.encoder(x[:, :c].flatten(0, 1)).float().view(b, c, -1))
            t = nets.target(x[:, c:].flatten(0, 1)).float().view(b, k, -1)
            if input_target:
                t = torch.cat([nets.target(x[:, c - 1]).float().unsqueeze(1), t], 1)
            ts.append(t)
    return torch.cat(zs), torch.cat(ts)


def _take(frames: Any, rows: slice | np.ndarray, cols: np.ndarray) -> np.ndarray:
    """frames[rows][:, cols] for numpy or zarr (orthogonal read) -> (n, len(cols), 1, 64, 64)."""
    if isinstance(frames, np.ndarray):
        return np.ascontiguousarray(frames[rows][:, cols])
    if isinstance(rows, np.ndarray):
        uniq, inverse = np.unique(rows, return_inverse=True)
        return np.asarray(frames.oindex[uniq, cols])[inverse]
    return np.asarray(frames.oindex[rows, cols])


@torch.no_grad()
def shift_transitions(learner: Learner, shift_train: Any, n: int, seed: int = 0) -> torch.Tensor:
    """(n, 2, D): n batch-mean memory-pair latents, each from ``cfg.batch_size`` shift train
    sequences drawn with ``np.random.default_rng(seed)`` (prefix-stable in n). The pair's frames
    are those training pushes, in the evaluation window (input frame C-1): the newest two (the
    paper: 19, 20), or the input frame and its predecessor (its first two frames when C = 1)."""
    cfg = learner.cfg
    c, h = cfg.context_frames, cfg.horizons[-1]
    cols = np.asarray((c + h - 2, c + h - 1) if cfg.push_pair == "newest" else (0, 1))
    if cfg.push_pair == "input" and c >= 2:
        cols = np.asarray((c - 2, c - 1))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, shift_train.shape[0], size=(n, cfg.batch_size))
    per = max(1, cfg.eval_batch_size // (2 * cfg.batch_size))  # transitions per chunk
    out = []
    for sl in _chunks(n, per):
        rows = idx[sl].reshape(-1)
        x = learner.encoder_input(torch.from_numpy(_take(shift_train, rows, cols)))
        with learner.autocast():
            z = learner.nets.encoder(x.flatten(0, 1)).float()  # (m * B * 2, D)
        out.append(z.view(-1, cfg.batch_size, 2, z.shape[-1]).mean(1))  # (m, 2, D)
    return torch.cat(out) if out else torch.zeros(0, 2, cfg.latent_dim, device=learner.device)


def with_transitions(buffer: ExperienceBuffer, pairs: torch.Tensor, n: int) -> ExperienceBuffer:
    """A copy of ``buffer`` with the first n of ``pairs`` (m, 2, D) pushed in FIFO order as
    shift-world entries (world tag 1), bypassing the detector; ``buffer`` is untouched."""
    out = buffer.clone()
    for i in range(n):
        out.push(pairs[i], 1, -1)
    return out


def memory_with_shift(learner: Learner, shift_train: Any, n: int, seed: int = 0) -> ExperienceBuffer:
    """A copy of the learner's memory plus the n shift-world transitions that D_shift^n uses."""
    return with_transitions(learner.buffer, shift_transitions(learner, shift_train, n, seed), n)


def _score(
    learner: Learner, buffer: ExperienceBuffer, z: torch.Tensor, targets: torch.Tensor, chunk: int
) -> tuple[NormErrorSums, torch.Tensor]:
    """D's sums and sigma_embed of the memory-conditioned predictor on z (N, C, D)."""

    def predict(sl: slice) -> torch.Tensor:
        with learner.autocast():
            return learner.predict(z[sl], buffer)[0].pred

    return score_predictions(predict, z[:, -1], targets, chunk, learner.cfg.norm_eps)


def adaptation_curve(
    learner: Learner, data: EvalData, ns: tuple[int, ...] = CURVE_NS, seed: int = 0
) -> list[EvalResult]:
    """One EvalResult per n in ``ns``. Test sets and transitions are encoded once."""
    chunk = learner.cfg.eval_batch_size
    z_s, t_s = _encode_set(learner, data.shift_test, chunk, input_target=True)
    sigma_z, sigma_target = float(spread(z_s[:, -1])), float(spread(t_s[:, 0]))
    t_s = t_s[:, 1:]
    z_b, t_b = _encode_set(learner, data.base_test, chunk)
    pairs = shift_transitions(learner, data.shift_train, max(ns, default=0), seed)
    results = []
    for n in ns:
        buffer = with_transitions(learner.buffer, pairs, n)
        sums_s, sigma = _score(learner, buffer, z_s, t_s, chunk)
        sums_b = _score(learner, buffer, z_b, t_b, chunk)[0]
        d_s, d_s_h = norm_error(sums_s)
        d_b, d_b_h = norm_error(sums_b)
        results.append(
            EvalResult(
                n=int(n),
                d_shift=float(d_s),
                d_shift_per_h=d_s_h.tolist(),
                d_base=float(d_b),
                d_base_per_h=d_b_h.tolist(),
                sigma_embed=float(sigma),
                sigma_z=sigma_z,
                sigma_target=sigma_target,
                excluded=int(sums_s.excluded + sums_b.excluded),
            )
        )
    return results


@dataclass
class TargetReference:
    """D_shift^n split into its parts, and against the EMA target's own "no change".

    D's reference ("no change") is the online encoder's latent z of the input frame, while its
    targets zbar come from the EMA target encoder. The two agree while the EMA follows the online
    encoder; when the EMA stops (``freeze_ema_at``) and the online encoder keeps training, z
    moves away from zbar of the same frame, the denominator ``||zbar_k - z||`` grows, and D falls
    without any prediction getting better. ``latent_gap`` measures that drift;
    ``d_shift_target_ref`` is D_shift^n with the EMA latent of the input frame as the reference
    (the predictor still reads z), which the drift does not move."""

    n: int
    d_shift: float  # the metric as defined (reference: the online latent of the input frame)
    d_shift_target_ref: float  # reference: the EMA target's latent of the input frame
    latent_gap: float  # mean ||z - zbar|| of the input frames (online against EMA target)
    latent_norm: float  # mean ||zbar|| of the input frames (the gap's scale)
    error: float  # mean ||zbar_k - zhat||, over samples and horizons (D's numerator)
    ref_online: float  # mean ||zbar_k - z||: the denominator as defined
    ref_target: float  # mean ||zbar_k - zbar||: the denominator with the EMA's reference


@torch.no_grad()
def target_reference(learner: Learner, data: EvalData, n: int = 50, seed: int = 0) -> TargetReference:
    """D_shift^n (the memory of ``evaluate``) with the online and with the EMA target's
    reference, and the parts behind both, on the shift test split (context frames C = 1)."""
    cfg = learner.cfg
    if cfg.context_frames != 1:
        raise ValueError("target_reference: one context frame (the paper's predictor) only")
    chunk = cfg.eval_batch_size
    z, targets = _encode_set(learner, data.shift_test, chunk)  # (N, 1, D), (N, K, D)
    z = z[:, 0]
    refs = []
    for sl in _chunks(data.shift_test.shape[0], chunk):
        x = learner.encoder_input(torch.from_numpy(_take(data.shift_test, sl, np.asarray([0]))))
        with learner.autocast():
            refs.append(learner.nets.target(x[:, 0]).float())
    zbar = torch.cat(refs)  # (N, D): the input frames by the EMA target
    buffer = memory_with_shift(learner, data.shift_train, n, seed)
    preds = []
    for sl in _chunks(z.shape[0], chunk):
        with learner.autocast():
            preds.append(learner.predict(z[sl], buffer)[0].pred.float())
    pred = torch.cat(preds)
    ours = norm_error(norm_error_sums(pred, z, targets, cfg.norm_eps))[0]
    theirs = norm_error(norm_error_sums(pred, zbar, targets, cfg.norm_eps))[0]

    def mean_norm(t: torch.Tensor) -> float:
        return float(torch.linalg.vector_norm(t, dim=-1).mean())

    return TargetReference(
        n=int(n),
        d_shift=float(ours),
        d_shift_target_ref=float(theirs),
        latent_gap=mean_norm(z - zbar),
        latent_norm=mean_norm(zbar),
        error=mean_norm(targets - per_horizon(pred)),
        ref_online=mean_norm(targets - z.unsqueeze(1)),
        ref_target=mean_norm(targets - zbar.unsqueeze(1)),
    )


def evaluate(learner: Learner, data: EvalData, n: int = 50, seed: int = 0) -> EvalResult:
    """D_shift^n (the headline is n = 50), D_base, sigma_embed, sigma_z, sigma_target, excluded
    count."""
    return adaptation_curve(learner, data, (n,), seed)[0]
