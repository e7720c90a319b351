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


#: What the probe reads of a sequence's peer memory: "e_agg" (what the memory tells the predictor)
#: and "entries" (``entry_statistics`` of the same entries).
FEATURES = ("e_agg", "entries")


@torch.no_grad()
def peer_features(
    learner: Learner, world: WorldSet, n: int, peers: int = 1, features: Sequence[str] = FEATURES
) -> dict[str, np.ndarray]:
    """``features`` of each of the world's N sequences (one row a sequence), read from the newest
    n pairs of the next ``peers`` sequences of the same world, its latents encoded once: "e_agg"
    (N, exp_dim) at the sequence's input frame, "entries" the entries' ``entry_statistics``."""
    z, i, view = _peer_view(learner, world, n, peers)
    out = {}
    if "e_agg" in features:
        codes = []
        chunk = max(1, learner.cfg.eval_batch_size)
        for start in range(0, z.shape[0], chunk):
            sl = slice(start, start + chunk)
            part = MemoryView(view.pairs[sl].to(learner.device), view.mask[sl].to(learner.device))
            agg = aggregate(learner.nets, z[sl, i].to(learner.device), part, learner.spec)
            if agg is None:
                raise ValueError("gravity probe: this learner reads no memory (track A, the oracle)")
            codes.append(agg.e_agg.float().cpu().numpy())
        out["e_agg"] = np.concatenate(codes)
    if "entries" in features:
        out["entries"] = entry_statistics(view.pairs, view.mask).cpu().numpy()
    return out


def _gravity(world: WorldSet, rows: int) -> np.ndarray:
    """(rows, 2) the world's gravity vector (PHYSICS_FEATURES' first two), one row a sequence."""
    return np.repeat(np.asarray(world.physics, np.float64)[None, :2], rows, axis=0)


def gravity_probe(
    learner: Learner,
    fit: Sequence[WorldSet],
    test: Sequence[WorldSet],
    n: int = 50,
    peers: int = 1,
    features: Sequence[str] = FEATURES,
) -> dict[str, dict[str, float]]:
    """Held-out R^2 of a ridge probe of the gravity vector from each of ``features`` of a
    world's sequences (``peer_features``: e_agg, the entries' statistics), by feature: fit on
    ``fit``'s worlds, scored on ``test``'s, per family and pooled (``"all"``). The penalty is
    chosen on the last fifth of the fitting worlds (``probes.digits.fit_probes``)."""
    x_fit = [peer_features(learner, w, n, peers, features) for w in fit]
    x_test = [peer_features(learner, w, n, peers, features) for w in test]
    rows = [len(next(iter(x.values()))) for x in (*x_fit, *x_test)]
    y_fit = np.concatenate([_gravity(w, r) for w, r in zip(fit, rows, strict=False)])
    y_test = [_gravity(w, r) for w, r in zip(test, rows[len(fit):], strict=True)]
    families = dict.fromkeys(w.family for w in test)
    out: dict[str, dict[str, float]] = {}
    for name in features:
        probe = fit_probes(np.concatenate([x[name] for x in x_fit]), {"gravity": y_fit})["gravity"]
        scores = {}
        for fam in (*families, "all"):
            k = [j for j, w in enumerate(test) if fam in (w.family, "all")]
            scores[fam] = r2_score(np.concatenate([y_test[j] for j in k]),
                                   probe.predict(np.concatenate([x_test[j][name] for j in k])))
        out[name] = scores
    return out
