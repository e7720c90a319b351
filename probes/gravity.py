"""The gravity probe: does what the memory tells the predictor (e_agg) carry the world?

For each sequence of a world, the frozen learner reads a memory of n transitions from other
sequences of the same world (the peer memory of ``agent.adaptation``: the pairs of ``peers``
sequences, as their shared FIFO holds them) and aggregates it into e_agg, as it does before
predicting that sequence's input frame. A linear (ridge) probe maps e_agg to the world's gravity
vector (g_x, g_y) in px/frame^2; it is fit on worlds of the training family and scored by R^2
on held-out worlds (docs/definitions.md#the-gravity-probe). R^2 near 1: the memory's summary
says which way and how hard things fall in a world the learner never trained on; near 0 or
below: it does not (whatever else it holds).

Beside it, the same probe on the same n entries summarised by hand (``entry_statistics``: the
mean newest latent, the mean change, the median change of velocity) says what the entries
themselves hold of the world: where that reads gravity and e_agg does not, the memory's
encoder and attention lose it; where neither does, the latents never had it. The median
change of velocity, because a bounce off a wall is a second difference many times gravity's:
the mean of a world's second differences is its walls', the median its gravity.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from agent.adaptation import WorldSet, _encode, _memory, input_index
from agent.learner import Learner
from agent.memory.view import MemoryView
from agent.step import aggregate
from probes.digits import fit_probes, r2_score


def entry_statistics(pairs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, 3D) - (N, 2D) for pairs - each sample's entries (N, cap, E, D) where ``mask`` (N,
    cap) summarised: the mean newest latent, the mean change and, for E >= 3, the median change
    of velocity. Zeros where a sample has no entry."""
    x = pairs.float()
    w = mask.float().unsqueeze(-1)
    count = w.sum(1).clamp(min=1.0)
    feats = [(x[:, :, -1] * w).sum(1) / count, ((x[:, :, -1] - x[:, :, -2]) * w).sum(1) / count]
    if x.shape[2] >= 3:
        d2 = x[:, :, -1] - 2 * x[:, :, -2] + x[:, :, -3]
        d2 = d2.masked_fill(~mask.unsqueeze(-1), float("nan"))
        feats.append(torch.nanmedian(d2, dim=1).values.nan_to_num(0.0))
    return torch.cat(feats, 1)


def _peer_view(
    learner: Learner, world: WorldSet, n: int, peers: int
) -> tuple[torch.Tensor, int, MemoryView]:
    """(z (N, i+1, D) online latents, i the input index, the peer MemoryView (N, cap, E, D))."""
    cfg = learner.cfg
    i = input_index(cfg, n)
    z, _ = _encode(learner, world.frames, n)
    view = _memory([z.roll(-p, dims=0) for p in range(1, peers + 1)], i, n, cfg.entry_frames)
    return z, i, view


@torch.no_grad()
def context_codes(learner: Learner, world: WorldSet, n: int, peers: int = 1) -> np.ndarray:
    """e_agg (N, exp_dim) of each of the world's N sequences at its input frame, read from the
    newest n pairs of the next ``peers`` sequences of the same world."""
    z, i, view = _peer_view(learner, world, n, peers)
    out = []
    chunk = max(1, learner.cfg.eval_batch_size)
    for start in range(0, z.shape[0], chunk):
        sl = slice(start, start + chunk)
        part = MemoryView(view.pairs[sl].to(learner.device), view.mask[sl].to(learner.device))
        agg = aggregate(learner.nets, z[sl, i].to(learner.device), part, learner.spec)
        if agg is None:
            raise ValueError("gravity probe: this learner reads no memory (track A, the oracle)")
        out.append(agg.e_agg.float().cpu().numpy())
    return np.concatenate(out)


@torch.no_grad()
def peer_entry_statistics(
    learner: Learner, world: WorldSet, n: int, peers: int = 1
) -> np.ndarray:
    """``entry_statistics`` of the peer memory ``context_codes`` reads, one row a sequence."""
    _, _, view = _peer_view(learner, world, n, peers)
    return entry_statistics(view.pairs, view.mask).cpu().numpy()  # the latents are on the device


def _gravity(world: WorldSet, rows: int) -> np.ndarray:
    """(rows, 2) the world's gravity vector (PHYSICS_FEATURES' first two), one row a sequence."""
    return np.repeat(np.asarray(world.physics, np.float64)[None, :2], rows, axis=0)


def gravity_probe(
    learner: Learner,
    fit: Sequence[WorldSet],
    test: Sequence[WorldSet],
    n: int = 50,
    peers: int = 1,
    features=context_codes,
) -> dict[str, float]:
    """Held-out R^2 of a ridge probe of the gravity vector from ``features`` of a world's
    sequences (e_agg, ``context_codes``; or ``peer_entry_statistics``): fit on ``fit``'s
    worlds, scored on ``test``'s, per family and pooled (``"all"``). The penalty is chosen on
    the last fifth of the fitting worlds (``probes.digits.fit_probes``)."""
    x_fit, y_fit = [], []
    for w in fit:
        x_fit.append(features(learner, w, n, peers))
        y_fit.append(_gravity(w, len(x_fit[-1])))
    xf, yf = np.concatenate(x_fit), np.concatenate(y_fit)
    by_family: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for w in test:
        x = features(learner, w, n, peers)
        xs, ys = by_family.setdefault(w.family, ([], []))
        xs.append(x)
        ys.append(_gravity(w, len(x)))
    probe = fit_probes(xf, {"gravity": yf})["gravity"]
    out = {}
    everything = ([], [])
    for fam, (xs, ys) in by_family.items():
        out[fam] = r2_score(np.concatenate(ys), probe.predict(np.concatenate(xs)))
        everything[0].extend(xs)
        everything[1].extend(ys)
    out["all"] = r2_score(np.concatenate(everything[1]), probe.predict(np.concatenate(everything[0])))
    return out
