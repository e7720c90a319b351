"""Adaptation on held-out worlds: D^n from an empty memory plus n transitions, per world.

The question of the protocol beyond the paper (docs/agent.md): does the frozen learner predict a
world it never trained on better once its memory holds n transitions of that world? For each
held-out world, test sequences are long enough to hold a history before the input frame:

    frame:  0 ... i-n-1, i-n, ..., i-1, i (input; C context frames end here), ..., i+h_max
            |---- the n memory pairs ----|

Sample b's memory holds n pairs (z_{j-1}, z_j), j = i-n .. i-1 (online encoder, the pair a
stream pushes at step j: no frame at or after the input), taken from one of three sources:

- ``own``: its own sequence (its stream's history: same world, same digits);
- ``same``: other sequences of the same world (same world, other digits): one, or with
  ``peers=P`` the P sequences a group memory shares with a stream (the *peer* read);
- ``wrong``: as many sequences of another held-out world (the control: the wrong world).

``same`` vs ``wrong`` isolates what the memory says about the *world*; ``own`` is what a stream
has after a switch. The oracle learner (``cfg.oracle``) reads the world's true physics instead,
and track A nothing: their D does not depend on n or the memory (the ceiling and the floor).
D is the paper's normalised error (``agent.metrics``) against the EMA targets at i+h.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agent.learner import Learner
from agent.memory.view import MemoryView
from agent.metrics import NormErrorSums, norm_error, norm_error_sums, score_predictions, spread
from agent.step import encodes_memory, modulated_prediction

MEMORIES = ("own", "same", "wrong")
WORLD_NS = (0, 1, 5, 10, 25, 50)


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
class WorldCurve:
    """D over n for one world and one memory source (``MEMORIES``)."""

    world: str
    family: str
    memory: str
    ns: list[int]
    d: list[float]
    d_per_h: list[list[float]] = field(default_factory=list)
    sigma_embed: list[float] = field(default_factory=list)  # of the predictions, per n
    excluded: list[int] = field(default_factory=list)  # (sample, horizon) pairs, per n
    # sigma_embed's statistic of the input frames' online latents z_i and EMA target latents
    # zbar_i (the world's, the same for every n and memory source)
    sigma_z: float = math.nan
    sigma_target: float = math.nan


def input_index(cfg: Any, n_max: int) -> int:
    """Index i of the input frame in a world's test sequences: room for n_max entries (of E =
    ``entry_frames`` frames each; pairs: n_max + 1 frames) and the C context frames before it."""
    return max(n_max + getattr(cfg, "entry_frames", 2) - 1, cfg.context_frames - 1)


def sequence_length(cfg: Any, n_max: int) -> int:
    """Frames a world's test sequences need for memories of up to ``n_max`` pairs."""
    return input_index(cfg, n_max) + cfg.horizons[-1] + 1


@torch.no_grad()
def _encode(
    learner: Learner, frames: Any, n_max: int, first: int = 0, input_target: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Online latents (N, i+1-first, D) of frames first..i and EMA targets (N, K, D) at i+h;
    with ``input_target`` the EMA latent of the input frame i first: (N, 1 + K, D) (a call of
    its own, so the horizons' latents are those computed without it)."""
    cfg = learner.cfg
    i = input_index(cfg, n_max)
    past = np.arange(first, i + 1)
    future = np.asarray([i + h for h in cfg.horizons])
    arr = np.asarray(frames[:, : i + cfg.horizons[-1] + 1])
    per = max(1, cfg.eval_batch_size // (len(past) + len(future) + input_target))
    zs, ts = [], []
    for start in range(0, arr.shape[0], per):
        chunk = torch.from_numpy(np.ascontiguousarray(arr[start : start + per]))
        b = chunk.shape[0]
        zs.append(learner.encode(chunk[:, past].flatten(0, 1)).view(b, len(past), -1))
        t = learner.encode(chunk[:, future].flatten(0, 1), target=True).view(b, len(future), -1)
        if input_target:
            t = torch.cat([learner.encode(chunk[:, i], target=True).unsqueeze(1), t], 1)
        ts.append(t)
    return torch.cat(zs), torch.cat(ts)


def _memory(
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


def _score(
    learner: Learner,
    z: torch.Tensor,
    targets: torch.Tensor,
    memory: MemoryView,
    physics: torch.Tensor,
) -> tuple[NormErrorSums, float]:
    """The normalised-error sums and sigma_embed of the predictions through ``memory``."""
    c, device = learner.cfg.context_frames, learner.device

    def predict(sl: slice) -> torch.Tensor:
        ctx = z[sl, -c:] if c > 1 else z[sl, -1]
        view = MemoryView(memory.pairs[sl].to(device), memory.mask[sl].to(device))
        with learner.autocast():
            return modulated_prediction(learner.nets, ctx, view, learner.spec, physics[sl])[0].pred

    # eval_batch_size bounds the frames encoded at once; the memory entries of a chunk are
    # latents already, far cheaper: up to 64 per frame of that bound.
    chunk = max(1, 64 * learner.cfg.eval_batch_size // max(1, memory.pairs.shape[1]))
    sums, sigma = score_predictions(predict, z[:, -1], targets, chunk, learner.cfg.norm_eps)
    return sums, float(sigma)


@torch.no_grad()
def world_curves(
    learner: Learner,
    worlds: list[WorldSet],
    ns: tuple[int, ...] = WORLD_NS,
    memories: tuple[str, ...] = MEMORIES,
    peers: int = 1,
) -> list[WorldCurve]:
    """D^n of the frozen learner on every world for every memory source (see the module doc).

    ``same`` gives sample b the pairs of sequences b+1 .. b+peers of its world (the peer read
    of a group memory shared by peers + 1 streams: the newest n of their pairs, as their shared
    FIFO holds them), ``wrong`` those of sequences b .. b+peers-1 of the next world in
    ``worlds`` (cyclically; needs two worlds). The learner is not changed.
    """
    unknown = sorted(set(memories) - set(MEMORIES))
    if unknown:
        raise ValueError(f"memories: unknown source {unknown[0]!r}, expected {MEMORIES}")
    if "wrong" in memories and len(worlds) < 2:
        raise ValueError("memories: the 'wrong' control needs at least two worlds")
    n_max = max(ns, default=0)
    cfg = learner.cfg
    i = input_index(cfg, n_max)
    # A learner that reads no memory (track A, the oracle) has one D for every n and source:
    # only its context frames are encoded, and it is scored once, with an empty memory.
    blind = not encodes_memory(learner.nets)
    first = i + 1 - cfg.context_frames if blind else 0
    encoded = [_encode(learner, w.frames, n_max, first, input_target=True) for w in worlds]
    out = []
    for wi, world in enumerate(worlds):
        z, targets = encoded[wi]
        sigma_z, sigma_target = float(spread(z[:, i - first])), float(spread(targets[:, 0]))
        targets = targets[:, 1:]
        z_in = z[:, : i + 1 - first]
        physics = torch.as_tensor(world.physics, dtype=torch.float32, device=learner.device)
        physics = physics.expand(z.shape[0], -1)
        for source in memories:
            if source == "own":
                z_src = z
            elif source == "same":
                z_src = [z.roll(-p, dims=0) for p in range(1, peers + 1)]
            else:
                other = encoded[(wi + 1) % len(worlds)][0]
                rows = torch.arange(z.shape[0], device=other.device)
                z_src = [other[(rows + p) % other.shape[0]] for p in range(peers)]
            curve = WorldCurve(world.name, world.family, source, list(ns), [],
                               sigma_z=sigma_z, sigma_target=sigma_target)  # fmt: skip
            if blind:
                scored = _score(learner, z_in, targets, _memory(z, 0, 0, cfg.entry_frames), physics)
            for n in ns:
                if not blind:
                    memory = _memory(z_src, i, n, cfg.entry_frames)
                    scored = _score(learner, z_in, targets, memory, physics)
                sums, sigma = scored
                d, d_h = norm_error(sums)
                curve.d.append(float(d))
                curve.d_per_h.append(d_h.tolist())
                curve.sigma_embed.append(sigma)
                curve.excluded.append(int(sums.excluded))
            out.append(curve)
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
    c, hs = cfg.context_frames, list(cfg.horizons)
    future = np.asarray([c - 1 + h for h in hs])
    sums: dict[tuple[str, str], list[NormErrorSums]] = {}
    for world in worlds:
        arr = torch.from_numpy(np.ascontiguousarray(np.asarray(world.frames)[:, : future[-1] + 1]))
        b = arr.shape[0]
        online = learner.encode(arr.flatten(0, 1)).view(b, arr.shape[1], -1)
        target = learner.encode(arr.flatten(0, 1), target=True).view(b, arr.shape[1], -1)
        z, zbar, targets = online[:, c - 1], target[:, c - 1], target[:, future]
        physics = torch.as_tensor(world.physics, dtype=torch.float32).expand(b, -1)
        empty = _memory(online, 0, 0, cfg.entry_frames)  # one masked slot a sample: e_agg = 0
        view = MemoryView(empty.pairs.to(learner.device), empty.mask.to(learner.device))
        ctx = online[:, :c] if c > 1 else z
        with learner.autocast():
            pred = modulated_prediction(learner.nets, ctx, view, learner.spec,
                                        physics.to(learner.device))[0].pred.float()  # fmt: skip
        for name, p, ref in (("d", pred, z), ("d_target_ref", pred, zbar),
                             ("d_future_online", online[:, future], z)):  # fmt: skip
            sums.setdefault((world.family, name), []).append(norm_error_sums(p, ref, targets, eps))
    out: dict[str, dict[str, list[float]]] = {}
    for (fam, name), parts in sums.items():
        total = NormErrorSums(*(sum(x) for x in zip(*parts, strict=True)))
        d, d_h = norm_error(total)
        out.setdefault(fam, {})[name] = [*d_h.tolist(), float(d)]
    return out


def family_means(curves: list[WorldCurve]) -> dict[str, dict[str, list[float]]]:
    """{family: {memory: D over n averaged over the family's worlds}}."""
    groups: dict[tuple[str, str], list[list[float]]] = {}
    for c in curves:
        groups.setdefault((c.family, c.memory), []).append(c.d)
    out: dict[str, dict[str, list[float]]] = {}
    for (fam, mem), rows in groups.items():
        out.setdefault(fam, {})[mem] = np.mean(np.asarray(rows), axis=0).tolist()
    return out
