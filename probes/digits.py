"""Probes: how much of the digits' state (positions, velocities) the latents hold.

A probe is ridge regression from a latent to a state target (and, for the predictor's input, a
small MLP beside it: ``fit_mlp``), fit on one set of sequences and scored by R^2 and by the
error in px on another (held-out worlds; docs/definitions.md#probes). The targets are
*permutation invariant*, since which digit is "first" is arbitrary and nothing asks the latent to
tell the digits apart by index:

- ``position``: the digits' x coordinates sorted, then their y coordinates sorted (2 x digits);
- ``centroid``: the mean position of the digits (2);
- ``velocity``: the digits' moves over the last frame, positions[t] - positions[t-1] (top-left
  corners, px), in the order of the sorted coordinates (2 x digits): the velocity except at a
  wall bounce, and what two frames show (one frame shows none).

Three latents are probed at each probe frame t: the online encoder's z_t (``online``), the EMA
target's (``target``), and the predictor's input, the C context latents z_{t-C+1..t}
concatenated (``context``; with C = 1 the same as ``online``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

TARGETS = ("position", "centroid", "velocity")
LATENTS = ("online", "target", "context")
#: Ridge penalties tried (on standardised features); the one with the best R^2 on the last fifth
#: of the fitting set is refit on all of it.
ALPHAS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)


def state_targets(positions: np.ndarray, previous: np.ndarray) -> dict[str, np.ndarray]:
    """The probe targets (see the module doc) of the digits' positions (N, digits, 2) at frame
    t and ``previous`` at t-1: {"position": (N, 2 digits), "centroid": (N, 2), "velocity":
    (N, 2 digits)}."""
    pos = np.asarray(positions, np.float64)
    vel = pos - np.asarray(previous, np.float64)
    order = np.argsort(pos, axis=1, kind="stable")  # (N, digits, 2): per coordinate
    sorted_pos = np.take_along_axis(pos, order, axis=1)
    sorted_vel = np.take_along_axis(vel, order, axis=1)
    return {
        "position": sorted_pos.transpose(0, 2, 1).reshape(len(pos), -1),  # x sorted, y sorted
        "centroid": pos.mean(axis=1),
        "velocity": sorted_vel.transpose(0, 2, 1).reshape(len(pos), -1),
    }


@dataclass(frozen=True)
class Ridge:
    """A fitted ridge probe: y = ((x - mean) / scale) @ weight + bias."""

    mean: np.ndarray  # (F,)
    scale: np.ndarray  # (F,)
    weight: np.ndarray  # (F, T)
    bias: np.ndarray  # (T,)

    def predict(self, x: np.ndarray) -> np.ndarray:
        return ((np.asarray(x, np.float64) - self.mean) / self.scale) @ self.weight + self.bias


@dataclass(frozen=True)
class RidgePath:
    """Ridge fits of any target at any penalty on one standardised x (N, F), from one
    eigendecomposition: of the Gram matrix xs^T xs (F x F) when N >= F, else of the kernel
    xs xs^T (N x N), whose ridge solution is the same (``(X^T X + l I)^-1 X^T = X^T (X X^T + l
    I)^-1``). A fit costs two matrix products instead of a solve, so trying every penalty of
    ``ALPHAS`` on every target costs about one solve."""

    mean: np.ndarray  # (F,)
    scale: np.ndarray  # (F,)
    xs: np.ndarray  # (N, F): x standardised
    basis: np.ndarray  # eigenvectors: (F, F) primal, (N, N) dual
    eig: np.ndarray  # their eigenvalues

    @classmethod
    def fit(cls, x: np.ndarray) -> RidgePath:
        x = np.asarray(x, np.float64)
        mean, scale = x.mean(0), x.std(0)
        scale = np.where(scale > 1e-8, scale, 1.0)
        xs = (x - mean) / scale
        eig, basis = np.linalg.eigh(xs.T @ xs if len(xs) >= xs.shape[1] else xs @ xs.T)
        return cls(mean, scale, xs, basis, eig)

    def ridge(self, y: np.ndarray, alpha: float) -> Ridge:
        """The ridge probe of y (N, T), penalty ``alpha * N`` on the weights (so alpha does not
        depend on the number of samples), intercept unpenalised."""
        y = np.asarray(y, np.float64)
        yc = y - y.mean(0)
        shrink = 1.0 / (self.eig + alpha * len(self.xs))[:, None]
        if self.basis.shape[0] == self.xs.shape[1]:  # primal: V diag(1 / (e + l)) V^T X^T y
            weight = self.basis @ (shrink * (self.basis.T @ (self.xs.T @ yc)))
        else:  # dual: X^T U diag(1 / (e + l)) U^T y
            weight = self.xs.T @ (self.basis @ (shrink * (self.basis.T @ yc)))
        return Ridge(self.mean, self.scale, weight, y.mean(0))


def r2_score(y: np.ndarray, pred: np.ndarray) -> float:
    """R^2 averaged over the target columns: mean_j 1 - SSE_j / SST_j (1 perfect, 0 the
    columns' means, below 0 worse than them). Columns without variance are left out."""
    y, pred = np.asarray(y, np.float64), np.asarray(pred, np.float64)
    sst = ((y - y.mean(0)) ** 2).sum(0)
    sse = ((y - pred) ** 2).sum(0)
    keep = sst > 1e-12
    return float(np.mean(1.0 - sse[keep] / sst[keep])) if keep.any() else float("nan")


def fit_probes(
    x_fit: np.ndarray, y_fit: Mapping[str, np.ndarray], alphas: Sequence[float] = ALPHAS
) -> dict[str, Ridge]:
    """A ridge probe of each target of ``y_fit`` on ``x_fit``: its penalty chosen on the last
    fifth of the fitting set (fit on the rest), then refit on all of it. The targets share the
    two decompositions of x (``RidgePath``)."""
    cut = max(1, len(x_fit) - len(x_fit) // 5)
    head, full = RidgePath.fit(x_fit[:cut]), RidgePath.fit(x_fit)
    out = {}
    for name, y in y_fit.items():
        best = max(alphas, key=lambda a: r2_score(y[cut:], head.ridge(y[:cut], a).predict(x_fit[cut:])))
        out[name] = full.ridge(y, best)
    return out


@dataclass(frozen=True)
class MLPProbe:
    """A fitted nonlinear probe: y = net((x - x_mean) / x_scale) * y_scale + y_mean."""

    net: torch.nn.Module
    x_mean: np.ndarray
    x_scale: np.ndarray
    y_mean: np.ndarray
    y_scale: np.ndarray

    @torch.no_grad()
    def predict(self, x: np.ndarray) -> np.ndarray:
        xs = torch.as_tensor((np.asarray(x, np.float64) - self.x_mean) / self.x_scale, dtype=torch.float32)
        with one_thread():
            return self.net(xs).double().numpy() * self.y_scale + self.y_mean


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch's intra-op threads at one inside, as they were after: the MLP probe's numbers the
    same in any process (a run's, ``runners.evaluate``'s, a test's), whatever its threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


#: The nonlinear probe (``fit_mlp``): two hidden layers of MLP_WIDTH (ReLU), AdamW at MLP_LR on
#: minibatches of MLP_BATCH, at most MLP_STEPS steps and MLP_EPOCHS passes over the fitting rows
#: (a run's 1,728 rows take the 1,500 steps, 222 passes; a test's 96 rows 150 steps, not
#: 4,000 passes); the step count (of every MLP_CHECK) is chosen by R^2 on the last fifth of
#: the fitting set, as the ridge probe's penalty is.
MLP_WIDTH, MLP_LR, MLP_BATCH, MLP_STEPS, MLP_EPOCHS, MLP_CHECK = 256, 1e-3, 256, 1500, 400, 250


def fit_mlp(x_fit: np.ndarray, y_fit: np.ndarray, seed: int = 0, steps: int | None = None) -> MLPProbe:
    """A small MLP from x (N, F) to y (N, T), fit on the first four fifths of the set and kept at
    the checkpoint (every ``MLP_CHECK`` steps) with the best R^2 on the last fifth; its own
    generators (the global ones untouched). ``steps``: None, ``MLP_STEPS`` or ``MLP_EPOCHS``
    passes over the fitting rows, the fewer."""
    x, y = np.asarray(x_fit, np.float64), np.asarray(y_fit, np.float64)
    x_mean, x_scale = x.mean(0), np.where(x.std(0) > 1e-8, x.std(0), 1.0)
    y_mean, y_scale = y.mean(0), np.where(y.std(0) > 1e-8, y.std(0), 1.0)
    xs = torch.as_tensor((x - x_mean) / x_scale, dtype=torch.float32)
    ys = torch.as_tensor((y - y_mean) / y_scale, dtype=torch.float32)
    cut = max(1, len(x) - len(x) // 5)
    if steps is None:
        steps = min(MLP_STEPS, -(-MLP_EPOCHS * cut // MLP_BATCH))
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], MLP_WIDTH), torch.nn.ReLU(),
                                  torch.nn.Linear(MLP_WIDTH, MLP_WIDTH), torch.nn.ReLU(),
                                  torch.nn.Linear(MLP_WIDTH, y.shape[1]))  # fmt: skip
    opt = torch.optim.AdamW(net.parameters(), lr=MLP_LR, weight_decay=1e-4)
    with one_thread():
        best_state = _fit(net, opt, xs, ys, cut, gen, steps)
    net.load_state_dict(best_state)
    return MLPProbe(net.eval(), x_mean, x_scale, y_mean, y_scale)


def _fit(net: torch.nn.Module, opt: torch.optim.Optimizer, xs: torch.Tensor, ys: torch.Tensor,
         cut: int, gen: torch.Generator, steps: int) -> dict[str, torch.Tensor]:  # fmt: skip
    """``fit_mlp``'s steps: the state with the best R^2 on rows ``cut:`` at a checkpoint."""
    best, best_state = -np.inf, None
    for step in range(1, steps + 1):
        idx = torch.randint(0, cut, (min(MLP_BATCH, cut),), generator=gen)
        loss = torch.nn.functional.mse_loss(net(xs[idx]), ys[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % MLP_CHECK == 0 or step == steps:
            with torch.no_grad():
                score = r2_score(ys[cut:].numpy(), net(xs[cut:]).numpy()) if cut < len(xs) else -loss.item()
            if score > best:
                best, best_state = score, {k: v.clone() for k, v in net.state_dict().items()}
    return best_state


@dataclass
class ProbeSet:
    """Sequences to probe: frames (N, L, 1, 64, 64) uint8 and the digits' positions
    (N, L, digits, 2) (``env.generate_sequences``)."""

    frames: np.ndarray
    positions: np.ndarray


#: frames (M, 1, 64, 64) uint8 -> latents (M, D); the flag asks for the EMA target's.
Encode = Callable[[torch.Tensor, bool], torch.Tensor]


def probe_features(
    encode: Encode, sets: Sequence[ProbeSet], context: int, every: int = 4
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The latents ({"online", "target", "context"}: (M, D), (M, D), (M, C * D)) and state
    targets (``state_targets``) at every ``every``-th frame t >= max(C - 1, 1) of every
    sequence."""
    feats: dict[str, list[np.ndarray]] = {k: [] for k in LATENTS}
    states: dict[str, list[np.ndarray]] = {k: [] for k in TARGETS}
    for s in sets:
        n, length = s.frames.shape[:2]
        ts = np.arange(max(context - 1, 1), length, every)
        for i in range(n):
            frames = torch.from_numpy(np.ascontiguousarray(s.frames[i, : ts[-1] + 1]))
            z = encode(frames, False).float().cpu().numpy()  # (L', D)
            zt = encode(frames[ts], True).float().cpu().numpy()
            feats["online"].append(z[ts])
            feats["target"].append(zt)
            feats["context"].append(np.concatenate([z[ts - j] for j in range(context - 1, -1, -1)], 1))
            for k, v in state_targets(s.positions[i, ts], s.positions[i, ts - 1]).items():
                states[k].append(v)
    return ({k: np.concatenate(v) for k, v in feats.items()},
            {k: np.concatenate(v) for k, v in states.items()})  # fmt: skip


#: The targets whose error is also reported in px (px/frame for the velocity): the root mean
#: square over their coordinates, ``<target>_px``.
IN_PX = ("position", "velocity")
#: The latent also read by the nonlinear probe (``fit_mlp``): the predictor's input, as the row
#: ``context_mlp``.
NONLINEAR = "context"


def probe_report(
    encode: Encode, fit: Sequence[ProbeSet], test: Sequence[ProbeSet], context: int,
    nonlinear: bool = True,
) -> dict[str, dict[str, float]]:  # fmt: skip
    """{latent: {target: held-out R^2, and ``<target>_px`` for ``IN_PX``}}: linear probes fit on
    ``fit``'s sequences, scored on ``test``'s (for every latent of ``LATENTS`` and target of
    ``TARGETS``), and with ``nonlinear`` one MLP of the context latents to every target at once
    (``context_mlp``)."""
    x_fit, y_fit = probe_features(encode, fit, context)
    x_test, y_test = probe_features(encode, test, context)
    out = {}
    for latent in LATENTS:
        probes = fit_probes(x_fit[latent], {t: y_fit[t] for t in TARGETS})
        out[latent] = scores(y_test, {t: probes[t].predict(x_test[latent]) for t in TARGETS})
    if nonlinear:
        widths = [y_fit[t].shape[1] for t in TARGETS]
        mlp = fit_mlp(x_fit[NONLINEAR], np.concatenate([y_fit[t] for t in TARGETS], 1))
        pred = np.split(mlp.predict(x_test[NONLINEAR]), np.cumsum(widths)[:-1], axis=1)
        out[f"{NONLINEAR}_mlp"] = scores(y_test, dict(zip(TARGETS, pred, strict=True)))
    return out


def scores(y: Mapping[str, np.ndarray], pred: Mapping[str, np.ndarray]) -> dict[str, float]:
    """{target: R^2} of the predictions, then {``<target>_px``: root mean square error} of
    ``IN_PX``'s."""
    out = {t: r2_score(y[t], pred[t]) for t in TARGETS}
    return out | {f"{t}_px": float(np.sqrt(np.mean((y[t] - pred[t]) ** 2))) for t in IN_PX}
