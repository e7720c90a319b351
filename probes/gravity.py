"""The gravity probe: does what the memory tells the predictor (e_agg) carry the world?
(docs/definitions.md#the-gravity-probe)

For each sequence of a world, the frozen learner reads a memory of n transitions from other
sequences of the same world (the peer memory of ``agent.evaluation``: the pairs of ``peers``
sequences, as their shared FIFO holds them) and aggregates it into e_agg, as it does before
predicting that sequence's input frame. A world's sequences are read in two disjoint halves, each
half's memories from its own sequences; a half row is the mean of a half's rows, a world row the
mean of the two. Then within each family apart, no map leaving its family:

- **gravity**, leave one world out: a ridge map fit on the other worlds' rows predicts the world's
  gravity vector and strength |g|, each scored from the other worlds' mean: the angle of the
  vector (90 degrees by chance), the R^2 of |g| (0 or below by chance);
- **identification**: each half row names the world whose other half row is nearest; the share
  named right, against chance 1 / worlds.

Beside e_agg, the same readout on the same entries summarised by hand (``entry_statistics``) says
what the entries themselves hold of the world.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import torch

from agent.evaluation import WorldSet, encode, input_index, sequence_memory
from agent.learner import Learner
from agent.memory.read import MemoryView
from agent.step import aggregate


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
    i = input_index(learner.cfg, n)
    z = encode(learner, world.frames, i)[0]  # (N, i+1, D) online latents
    peer = [z.roll(-p, dims=0) for p in range(1, peers + 1)]
    view = sequence_memory(peer, i, n, learner.cfg.entry_frames)  # (N, cap, E, D)
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


#: The ridge penalties a fold chooses from, per target, by leave-one-out on its fitting worlds.
ALPHAS = np.logspace(-3, 3, 13)


def half_rows(
    learner: Learner, world: WorldSet, n: int, peers: int = 1, features: Sequence[str] = FEATURES
) -> dict[str, np.ndarray]:
    """{feature: (2, F)}: the mean ``peer_features`` row of each half of the world's 2h sequences
    (the first h, the next h: h = N // 2), each half's memories read from its own sequences."""
    h = len(world.frames) // 2
    if h <= peers:
        raise ValueError(f"gravity probe: halves of {h} sequences, each needs {peers} peers")
    parts = [peer_features(learner, replace(world, frames=world.frames[s], positions=None,
                                            scenes=None), n, peers, features)
             for s in (slice(0, h), slice(h, 2 * h))]  # fmt: skip
    return {f: np.stack([p[f].mean(0) for p in parts]) for f in features}


def gravity_targets(world: WorldSet) -> np.ndarray:
    """(3,) the world's gravity vector (g_x, g_y) in px/frame^2 and its strength |g|."""
    g = np.asarray(world.physics, np.float64)[:2]
    return np.array([g[0], g[1], np.hypot(*g)])


def leave_one_out(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(W, T): each world's y predicted from its row of x (W, F) by a ridge map fit on the other
    W - 1 worlds' rows (features standardised on them; the penalty per target of ``ALPHAS``)."""
    from sklearn.linear_model import RidgeCV  # (a second's import, for this probe alone)
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    pred = np.empty_like(y, dtype=np.float64)
    for w in range(len(x)):
        rest = np.arange(len(x)) != w
        model = make_pipeline(StandardScaler(), RidgeCV(alphas=ALPHAS, alpha_per_target=True))
        pred[w] = model.fit(x[rest], y[rest]).predict(x[w : w + 1])[0]
    return pred


def angle_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(W,) the angle in degrees (0-180) between the rows of a and b (W, 2); 90 for a zero row."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cos = np.divide((a * b).sum(1), norms, out=np.zeros(len(a)), where=norms > 0)
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def identified(halves: np.ndarray) -> float:
    """The share of the 2W half rows (W, 2, F) whose nearest half row of the other half
    (Euclidean, features standardised over all 2W rows) is its own world's."""
    from sklearn.preprocessing import StandardScaler

    w = len(halves)
    z = StandardScaler().fit_transform(halves.reshape(2 * w, -1)).reshape(w, 2, -1)
    dist = np.linalg.norm(z[:, None, 0] - z[None, :, 1], axis=-1)  # (first halves, second)
    hits = (dist.argmin(1) == np.arange(w)).sum() + (dist.argmin(0) == np.arange(w)).sum()
    return float(hits / (2 * w))


def readout(halves: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """One family's W worlds from their half rows (W, 2, F) and ``gravity_targets`` y (W, 3),
    each world's targets predicted by ``leave_one_out`` from the world rows (the halves' mean)
    and measured from the other worlds' mean (what tells the world from them): the angle between
    predicted and true gravity vector so measured, its mean in degrees (``direction_deg``; 90 by
    chance) and mean cosine (``direction_cos``; 0 by chance); ``strength_r2``, 1 - SSE of the
    predicted |g| / SSE of the other worlds' mean |g|; ``identified`` (``identified``) and its
    ``chance`` 1 / W; ``worlds`` W."""
    w = len(y)
    pred = leave_one_out(halves.mean(1), y)
    base = (y.sum(0) - y) / (w - 1)  # each world's other worlds' mean
    err = angle_deg(pred[:, :2] - base[:, :2], y[:, :2] - base[:, :2])
    sse, sse0 = ((pred[:, 2] - y[:, 2]) ** 2).sum(), ((base[:, 2] - y[:, 2]) ** 2).sum()
    return {
        "direction_deg": float(err.mean()),
        "direction_cos": float(np.cos(np.radians(err)).mean()),
        "strength_r2": float(1.0 - sse / sse0) if sse0 > 0 else float("nan"),
        "identified": identified(halves),
        "chance": 1.0 / w,
        "worlds": w,
    }


def gravity_probe(
    learner: Learner,
    families: Mapping[str, Sequence[WorldSet]],
    n: int = 50,
    peers: int = 1,
    features: Sequence[str] = FEATURES,
) -> dict[str, dict[str, dict[str, float]]]:
    """{feature: {family: ``readout``}}: each family's worlds (at least three, each of at least
    2 (peers + 1) sequences) read apart, from each of ``features`` of their halves'
    sequences (``half_rows``: e_agg, the entries' statistics) with memories of n transitions."""
    out: dict[str, dict[str, dict[str, float]]] = {f: {} for f in features}
    for fam, worlds in families.items():
        rows = [half_rows(learner, w, n, peers, features) for w in worlds]
        y = np.stack([gravity_targets(w) for w in worlds])
        for f in features:
            out[f][fam] = readout(np.stack([r[f] for r in rows]), y)
    return out
