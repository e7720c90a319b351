"""The held-out evaluator: D^n of the frozen learner through a memory of n entries.

One evaluator, two uses: ``encode`` a set of test sequences once (online latents up to the
input frame i, EMA targets at i+h), score D of the predictions through each n's memory
(``curve``) and against the EMA target's own "no change" too (``references``). The learner's
weights, memory and RNGs are untouched.

- The paper (``adaptation_curve``, i = C-1): a copy of the training buffer receives n
  shift-world transitions (batch means of the pair training pushes, of shift *train* sequences
  drawn from a local ``np.random.default_rng(seed)``: a smaller n's a prefix of a larger n's),
  bypassing the detector, so n is exact; the shift and base test sets are predicted through it.
- The held-out worlds (``world_curves``; docs/agent.md): does the learner predict a world it
  never trained on better once its memory holds n transitions of that world?

    frame:  0 ... i-n-1, i-n, ..., i-1, i (input; C context frames end here), ..., i+h_max
            |---- the n memory pairs ----|

  Sample b's memory holds n pairs (z_{j-1}, z_j), j = i-n .. i-1 (a stream's push at step j),
  of ``own``: its own sequence (its stream's history); ``same``: other sequences of the same
  world (one, or with ``peers=P`` the P a group memory shares: the *peer* read); ``wrong``: as
  many of another held-out world (the control). The oracle (``cfg.oracle``) reads the world's
  true physics instead, track A nothing: their D does not depend on n (ceiling and floor).

D (docs/definitions.md#d-the-normalised-error): per horizon, the mean over samples of
``||zbar_k - zhat|| / ||zbar_k - z||``, denominators below ``cfg.norm_eps`` excluded (counted in
``excluded``, as (sample, horizon) pairs); then the mean over horizons. sigma_embed: the mean
per-dimension std of the predictions; sigma_z and sigma_target: of the input frames' online and
EMA target latents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import torch

from agent.learner import Learner
from agent.memory import ExperienceBuffer
from agent.memory.read import MemoryView
from agent.objective import (
    NormErrorSums,
    norm_error,
    norm_error_sums,
    per_horizon,
    spread,
    total,
)
from agent.sources import read_frames
from agent.step import encodes_memory, modulated_prediction

CURVE_NS = (0, 10, 25, 50, 100, 256)
WORLD_NS = (0, 1, 5, 10, 25, 50)
MEMORIES = ("own", "same", "wrong")


@dataclass
class EvalData:
    """uint8 (N, T, 1, 64, 64) arrays (numpy or zarr): shift train (memory), the test sets."""

    shift_train: Any
    shift_test: Any
    base_test: Any


@dataclass
class WorldSet:
    """Test sequences of one world: frames (N, L, 1, 64, 64) uint8 with L >=
    ``sequence_length(cfg, max(ns))``; physics (PHYSICS_DIM,) its true parameters; the digits'
    positions (N, L, digits, 2) where known (for the probes, ``probes.digits``); ``scenes``,
    where known, the simulator's exact state of the N sequences at frame 0 (an
    ``env.SceneBatch``, to re-run or branch them: ``probes.ceiling``)."""

    name: str
    family: str
    physics: np.ndarray
    frames: Any
    positions: Any = None
    scenes: Any = None


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


@dataclass
class Curve:
    """D over n of one set of sequences through one memory source (a held-out world's: its
    ``world``, ``family`` and ``memory``, one of ``MEMORIES``)."""

    ns: list[int]
    d: list[float] = field(default_factory=list)
    d_per_h: list[list[float]] = field(default_factory=list)
    sigma_embed: list[float] = field(default_factory=list)  # of the predictions, per n
    excluded: list[int] = field(default_factory=list)  # (sample, horizon) pairs, per n
    sigma_z: float = np.nan  # of the input frames' online latents z_i (NaN: not encoded)
    sigma_target: float = np.nan  # and of their EMA target latents zbar_i
    world: str = ""
    family: str = ""
    memory: str = ""
    # at the n asked to be kept (``curve``'s ``keep``): the predictions (N, K, D), the EMA
    # target's latents of the true future (N, K, D) and of the input frame (N, D)
    kept: dict[str, torch.Tensor] | None = None
    # at each n asked for (``curve``'s ``samples``): each sample's ratio per horizon (N, K)
    # float64 and whether it is included (N, K) bool (D's parts, for paired intervals)
    samples: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def input_index(cfg: Any, n_max: int) -> int:
    """Index i of the input frame in a world's test sequences: room for n_max entries (of E =
    ``entry_frames`` frames each; pairs: n_max + 1 frames) and the C context frames before it."""
    return max(n_max + getattr(cfg, "entry_frames", 2) - 1, cfg.context_frames - 1)


def sequence_length(cfg: Any, n_max: int) -> int:
    """Frames a world's test sequences need for memories of up to ``n_max`` pairs."""
    return input_index(cfg, n_max) + cfg.horizons[-1] + 1


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


Encoded = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]


@torch.no_grad()
def encode(
    learner: Learner, frames: Any, i: int, first: int = 0, input_target: bool = False
) -> Encoded:
    """(z, targets, zbar): the online latents (N, i+1-first, D) of frames first..i of each
    sequence (i the input frame), the EMA target's (N, K, D) at i+h (the paper: i = 0, and 5,
    10, 20) and, with ``input_target``, its (N, D) of frame i (a call of its own, so the
    horizons' latents are those computed without it; else None); ~``eval_batch_size`` frames a
    chunk."""
    cfg = learner.cfg
    past, k = i + 1 - first, cfg.n_horizons
    cols = np.asarray((*range(first, i + 1), *(i + h for h in cfg.horizons)))
    zs, ts, zbar = [], [], []
    for sl in _chunks(frames.shape[0], max(1, cfg.eval_batch_size // (past + k + input_target))):
        x = torch.from_numpy(read_frames(frames, sl, cols))
        zs.append(learner.encode(x[:, :past].flatten(0, 1)).view(x.shape[0], past, -1))
        ts.append(learner.encode(x[:, past:].flatten(0, 1), target=True).view(x.shape[0], k, -1))
        if input_target:
            zbar.append(learner.encode(x[:, past - 1], target=True))
    return torch.cat(zs), torch.cat(ts), torch.cat(zbar) if input_target else None


@torch.no_grad()
def _predictions(
    learner: Learner, z: torch.Tensor, memory: MemoryView, physics: torch.Tensor | None
) -> list[tuple[slice, torch.Tensor]]:
    """The float predictions for the context latents z (N, >= C, D) through ``memory``, a chunk
    of samples at a time: (sl, the predictions of samples sl). One memory for every sample (the
    paper's FIFO: mask (cap,)) or one a sample (mask (N, n)); physics (N, PHYSICS_DIM) the
    oracle's."""
    c, own = learner.cfg.context_frames, memory.mask.dim() == 2
    # eval_batch_size bounds the frames encoded at once; the entries of a sample's own memory are
    # latents already, far cheaper: up to 64 per frame of that bound.
    ebs = learner.cfg.eval_batch_size
    chunk = max(1, 64 * ebs // max(1, memory.pairs.shape[1])) if own else ebs
    out = []
    for sl in _chunks(z.shape[0], chunk):
        view = MemoryView(memory.pairs[sl], memory.mask[sl]) if own else memory
        phys = None if physics is None else physics[sl]
        with learner.autocast():
            pred = modulated_prediction(learner.nets, z[sl, -c:], view, learner.spec, phys)[0].pred
        out.append((sl, pred.float()))
    return out


def curve(
    learner: Learner, enc: Encoded, views: Callable[[int], MemoryView], ns: tuple[int, ...],
    physics: torch.Tensor | None = None, keep: int | None = None,
    samples: tuple[int, ...] = (), **labels: str,
) -> Curve:  # fmt: skip
    """D^n of an encoded set (``encode``; "no change" its input latents z[:, -1]) through the
    memory ``views(n)`` for each n of ``ns`` (one that is the same object as the last n's scored
    once); ``labels``: the curve's world, family and memory; at n = ``keep`` the predictions and
    the target latents are kept (``Curve.kept``), at each n of ``samples`` each sample's part
    of D (``Curve.samples``: ``sample_ratios``)."""
    z, targets, zbar = enc
    out, last = Curve(list(ns), **labels), None
    if zbar is not None:
        out.sigma_z, out.sigma_target = float(spread(z[:, -1])), float(spread(zbar))
    for n in ns:
        view = views(n)
        if view is not last:
            last, parts = view, _predictions(learner, z, view, physics)
            eps = learner.cfg.norm_eps
            sums = total([norm_error_sums(p, z[sl, -1], targets[sl], eps) for sl, p in parts])
            sigma = spread(*(p for _, p in parts))
        if n == keep:
            out.kept = {"pred": torch.cat([p for _, p in parts]), "target": targets, "input": zbar}
        if n in samples:
            pred = torch.cat([p for _, p in parts])
            out.samples[n] = sample_ratios(pred, z[:, -1], targets, learner.cfg.norm_eps)
        d, d_h = norm_error(sums)
        out.d.append(float(d))
        out.d_per_h.append(d_h.tolist())
        out.sigma_embed.append(float(sigma))
        out.excluded.append(int(sums.excluded))
    return out


def sample_ratios(pred: torch.Tensor, z: torch.Tensor, targets: torch.Tensor, eps: float
                  ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Each sample's D ratio per horizon, ``||zbar_k - zhat|| / ||zbar_k - z||`` (N, K) float64,
    and whether it counts (N, K) bool: its denominator at least ``eps`` (D of the samples is the
    mean over horizons of each horizon's mean over the counted ones: ``norm_error_sums``)."""
    pred, z, targets = pred.float(), z.float(), targets.float()
    num = torch.linalg.vector_norm(targets - per_horizon(pred), dim=-1)
    den = torch.linalg.vector_norm(targets - z.unsqueeze(1), dim=-1)
    ok = den >= eps
    ratio = torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), 0.0)
    return ratio.double().cpu().numpy(), ok.cpu().numpy()


@torch.no_grad()
def references(
    learner: Learner, z: torch.Tensor, zbar: torch.Tensor, targets: torch.Tensor,
    memory: MemoryView, physics: torch.Tensor | None = None,
) -> tuple[torch.Tensor, NormErrorSums, NormErrorSums]:  # fmt: skip
    """The reference check: the predictions for z (N, >= C, D) through ``memory`` and D's sums
    over all N against the online encoder's "no change" z[:, -1] (D as defined) and against the
    EMA target's, zbar (N, D)."""
    pred = torch.cat([p for _, p in _predictions(learner, z, memory, physics)])
    eps = learner.cfg.norm_eps
    ours, theirs = (norm_error_sums(pred, ref, targets, eps) for ref in (z[:, -1], zbar))
    return pred, ours, theirs


def results(shift: Curve, base: list[Curve]) -> list[EvalResult]:
    """One EvalResult per n of ``shift``: D_shift^n, sigma_embed, sigma_z and sigma_target of the
    shift curve, D_base^n the mean of the ``base`` curves; excluded: all of them together."""

    def mean(attr: str) -> np.ndarray:
        return np.mean(np.asarray([getattr(c, attr) for c in base], np.float64), axis=0)

    d_base, d_base_h = mean("d"), mean("d_per_h")
    return [
        EvalResult(n=int(n), d_shift=shift.d[j], d_shift_per_h=list(shift.d_per_h[j]),
                   d_base=float(d_base[j]), d_base_per_h=d_base_h[j].tolist(),
                   sigma_embed=shift.sigma_embed[j], sigma_z=shift.sigma_z,
                   sigma_target=shift.sigma_target,
                   excluded=shift.excluded[j] + sum(c.excluded[j] for c in base))
        for j, n in enumerate(shift.ns)
    ]  # fmt: skip


# ---------------------------------------------------------------- the paper's evaluation


@torch.no_grad()
def shift_transitions(learner: Learner, shift_train: Any, n: int, seed: int = 0) -> torch.Tensor:
    """(n, 2, D): n batch-mean memory-pair latents, each from ``cfg.batch_size`` shift train
    sequences drawn with ``np.random.default_rng(seed)`` (prefix-stable in n). The pair's frames
    are those training pushes, in the evaluation window (input frame C-1): the newest two (the
    paper: 19, 20), or the input frame and its predecessor (its first two frames when C = 1)."""
    cfg = learner.cfg
    cols = np.asarray(cfg.pair_offsets)  # the window positions of the pair training pushes
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, shift_train.shape[0], size=(n, cfg.batch_size))
    per = max(1, cfg.eval_batch_size // (2 * cfg.batch_size))  # transitions per chunk
    out = []
    for sl in _chunks(n, per):
        rows = idx[sl].reshape(-1)
        z = learner.encode(torch.from_numpy(read_frames(shift_train, rows, cols)).flatten(0, 1))
        out.append(z.view(-1, cfg.batch_size, 2, z.shape[-1]).mean(1))  # (m*B*2, D) -> (m, 2, D)
    return torch.cat(out) if out else torch.zeros(0, 2, cfg.latent_dim, device=learner.device)


def with_transitions(buffer: ExperienceBuffer, pairs: torch.Tensor, n: int) -> ExperienceBuffer:
    """A copy of ``buffer`` with the first n of ``pairs`` (m, 2, D) pushed in FIFO order as
    shift-world entries (world tag 1), bypassing the detector; ``buffer`` is untouched."""
    out = buffer.clone()
    for i in range(n):
        out.push(pairs[i], 1, -1)
    return out


def adaptation_curve(
    learner: Learner, data: EvalData, ns: tuple[int, ...] = CURVE_NS, seed: int = 0
) -> list[EvalResult]:
    """One EvalResult per n in ``ns``. Test sets and transitions are encoded once."""
    i = learner.cfg.context_frames - 1
    shift = encode(learner, data.shift_test, i, input_target=True)
    base = encode(learner, data.base_test, i)
    pairs = shift_transitions(learner, data.shift_train, max(ns, default=0), seed)
    views = {n: MemoryView.of(with_transitions(learner.buffer, pairs, n)) for n in ns}
    return results(curve(learner, shift, views.__getitem__, ns),
                   [curve(learner, base, views.__getitem__, ns)])  # fmt: skip


def evaluate(learner: Learner, data: EvalData, n: int = 50, seed: int = 0) -> EvalResult:
    """``adaptation_curve``'s EvalResult at one n (the headline is n = 50)."""
    return adaptation_curve(learner, data, (n,), seed)[0]


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
    z, targets, _ = encode(learner, data.shift_test, 0)  # (N, 1, D), (N, K, D)
    inputs = (torch.from_numpy(read_frames(data.shift_test, sl, np.asarray([0])))[:, 0]
              for sl in _chunks(z.shape[0], cfg.eval_batch_size))  # fmt: skip
    zbar = torch.cat([learner.encode(x, target=True) for x in inputs])  # (N, D)
    pairs = shift_transitions(learner, data.shift_train, n, seed)
    memory = MemoryView.of(with_transitions(learner.buffer, pairs, n))
    pred, ours, theirs = references(learner, z, zbar, targets, memory)
    z = z[:, 0]

    def mean_norm(t: torch.Tensor) -> float:
        return float(torch.linalg.vector_norm(t, dim=-1).mean())

    return TargetReference(
        n=int(n),
        d_shift=float(norm_error(ours)[0]),
        d_shift_target_ref=float(norm_error(theirs)[0]),
        latent_gap=mean_norm(z - zbar),
        latent_norm=mean_norm(zbar),
        error=mean_norm(targets - per_horizon(pred)),
        ref_online=mean_norm(targets - z.unsqueeze(1)),
        ref_target=mean_norm(targets - zbar.unsqueeze(1)),
    )


# ---------------------------------------------------------------- the held-out worlds


def sequence_memory(
    z_src: torch.Tensor | list[torch.Tensor], i: int, n: int, frames: int = 2
) -> MemoryView:
    """The newest n entries (z_{j-E+1}, ..., z_j), j < i, E = ``frames`` (2: pairs), of each
    sample's source sequences, as a shared FIFO holds them when every source writes one entry a
    step (step by step, sources in order): (B, max(n,1), E, D). One source: its entries j = i-n
    .. i-1. (An empty memory is one masked slot: e_agg = 0 exactly.)"""
    sources = z_src if isinstance(z_src, list) else [z_src]
    b, _, d = sources[0].shape
    if n == 0:
        empty = sources[0].new_zeros(b, 1, frames, d)
        return MemoryView(empty, torch.zeros(b, 1, dtype=torch.bool, device=empty.device))
    steps = -(-n // len(sources))  # ceil: the steps that fill n entries
    j = torch.arange(i - steps, i, device=sources[0].device)
    entry = [
        torch.stack([z[:, j - frames + 1 + e] for e in range(frames)], 2) for z in sources
    ]  # each (B, steps, E, D)
    pairs = torch.stack(entry, 2).flatten(1, 2)[:, -n:]  # (B, steps * P, E, D) -> newest n
    return MemoryView(pairs, torch.ones(b, n, dtype=torch.bool, device=pairs.device))


def _physics(learner: Learner, world: WorldSet, b: int) -> torch.Tensor:
    return torch.as_tensor(world.physics, dtype=torch.float32, device=learner.device).expand(b, -1)


@torch.no_grad()
def world_curves(
    learner: Learner, worlds: list[WorldSet], ns: tuple[int, ...] = WORLD_NS,
    memories: tuple[str, ...] = MEMORIES, peers: int = 1, keep: int | None = None,
    samples: tuple[int, ...] = (), encoded: list[Encoded] | None = None,
) -> list[Curve]:  # fmt: skip
    """D^n of the frozen learner on every world for every memory source (see the module doc);
    at n = ``keep`` each curve keeps its latents (``Curve.kept``, for ``runners.online.pixels``),
    at each n of ``samples`` each sample's part of D (``Curve.samples``, for paired intervals);
    ``encoded``: the worlds' ``encode_worlds`` by a learner with the same encoders (heads on one
    latent share it), else encoded here.

    ``same`` gives sample b the pairs of sequences b+1 .. b+peers of its world (the peer read
    of a group memory shared by peers + 1 streams: the newest n of their pairs, as their shared
    FIFO holds them), ``wrong`` those of sequences b .. b+peers-1 of ``wrong_world``'s (another
    world of its family, the farthest in gravity; needs two worlds a family). The learner is not
    changed.
    """
    if unknown := sorted(set(memories) - set(MEMORIES)):
        raise ValueError(f"memories: unknown source {unknown[0]!r}, expected {MEMORIES}")
    wrong = wrong_worlds(worlds) if "wrong" in memories else None
    cfg = learner.cfg
    i, e = input_index(cfg, max(ns, default=0)), cfg.entry_frames
    # A learner that reads no memory (track A, the oracle) has one D for every n and source:
    # only its context frames are encoded, and it is scored once, with an empty memory.
    blind = not encodes_memory(learner.nets)
    if encoded is None:
        encoded = encode_worlds(learner, worlds, max(ns, default=0), full=not blind)
    elif not blind and encoded[0][0].shape[1] < i + 1:
        raise ValueError("world_curves: a learner with memory needs every frame up to its input "
                         "encoded (encode_worlds(..., full=True))")
    elif blind:  # only its context frames
        encoded = [(z[:, -cfg.context_frames :], t, zb) for z, t, zb in encoded]
    out = []
    for wi, (world, enc) in enumerate(zip(worlds, encoded, strict=True)):
        z = enc[0]
        other = encoded[wrong[wi]][0] if wrong is not None else z
        rows = torch.arange(z.shape[0], device=other.device)
        sources = {"own": z, "same": [z.roll(-p, dims=0) for p in range(1, peers + 1)],
                   "wrong": [other[(rows + p) % other.shape[0]] for p in range(peers)]}  # fmt: skip
        empty = sequence_memory(z, 0, 0, e)
        for source in memories:
            views = (dict.fromkeys(ns, empty).__getitem__ if blind
                     else partial(sequence_memory, sources[source], i, frames=e))  # fmt: skip
            out.append(curve(learner, enc, views, ns, _physics(learner, world, z.shape[0]), keep,
                             samples, world=world.name, family=world.family, memory=source))  # fmt: skip
    return out


def encode_worlds(learner: Learner, worlds: list[WorldSet], n_max: int, full: bool = True
                  ) -> list[Encoded]:  # fmt: skip
    """Each world's ``encode`` at the input frame of memories of up to ``n_max`` entries, with
    its EMA-target input latent: every frame up to the input (``full``: what a learner with
    memory reads) or only the context frames (enough for one without)."""
    cfg = learner.cfg
    i = input_index(cfg, n_max)
    first = 0 if full else i + 1 - cfg.context_frames
    return [encode(learner, w.frames, i, first, input_target=True) for w in worlds]


def wrong_worlds(worlds: list[WorldSet]) -> list[int]:
    """For each world, the index of the world whose memory is its control (``wrong``): the
    world of its family whose gravity vector (the physics' first two numbers) is the farthest
    from its own (the first of equals), so that the control is never a near-duplicate of the
    world. ValueError where a family has one world."""
    out = []
    for w in worlds:
        others = [j for j, o in enumerate(worlds) if o.family == w.family and o is not w]
        if not others:
            raise ValueError(f"memories: the 'wrong' control needs two worlds of each family, "
                             f"{w.family!r} has one")  # fmt: skip
        g = np.asarray(w.physics[:2], np.float64)
        out.append(max(others, key=lambda j: (
            float(np.hypot(*(np.asarray(worlds[j].physics[:2], np.float64) - g))), -j)))
    return out


REFERENCES = ("d", "d_target_ref", "d_future_online")


@torch.no_grad()
def reference_check(learner: Learner, worlds: list[WorldSet]) -> dict[str, dict[str, list[float]]]:
    """How much of D is predicted motion: per family, per horizon (then their mean, last), with
    an empty memory, at each sequence's first input frame (C - 1):

    - ``d``: the learner's D (the paper's: against the online latent's "no change" z_t);
    - ``d_target_ref``: the same predictions against the EMA target's own "no change" zbar_t;
    - ``d_future_online``: D of the online latent of the true future frame, z_{t+h}: a predictor
      that knows the future exactly but answers in the online encoder's space. Its distance
      from 0 is the gap between the online and the EMA-target encoders, which the paper's
      "no change" pays and a predictor can learn without predicting any motion.
    """
    cfg, eps = learner.cfg, learner.cfg.norm_eps
    c = cfg.context_frames
    future = np.asarray([c - 1 + h for h in cfg.horizons])
    sums: dict[tuple[str, str], list[NormErrorSums]] = {}
    for world in worlds:
        arr = torch.from_numpy(np.ascontiguousarray(np.asarray(world.frames)[:, : future[-1] + 1]))
        b = arr.shape[0]
        online = learner.encode(arr.flatten(0, 1)).view(b, arr.shape[1], -1)
        target = learner.encode(arr.flatten(0, 1), target=True).view(b, arr.shape[1], -1)
        targets, empty = target[:, future], sequence_memory(online, 0, 0, cfg.entry_frames)
        _, d, d_target_ref = references(learner, online[:, :c], target[:, c - 1], targets, empty,
                                        _physics(learner, world, b))  # fmt: skip
        d_future = norm_error_sums(online[:, future], online[:, c - 1], targets, eps)
        for name, s in zip(REFERENCES, (d, d_target_ref, d_future), strict=True):
            sums.setdefault((world.family, name), []).append(s)
    out: dict[str, dict[str, list[float]]] = {}
    for (fam, name), parts in sums.items():
        d, d_h = norm_error(total(parts))
        out.setdefault(fam, {})[name] = [*d_h.tolist(), float(d)]
    return out


def family_means(curves: list[Curve]) -> dict[str, dict[str, list[float]]]:
    """{family: {memory: D over n averaged over the family's worlds}}."""
    groups: dict[str, dict[str, list[list[float]]]] = {}
    for c in curves:
        groups.setdefault(c.family, {}).setdefault(c.memory, []).append(c.d)
    return {fam: {mem: np.mean(np.asarray(rows), axis=0).tolist() for mem, rows in by.items()}
            for fam, by in groups.items()}  # fmt: skip
