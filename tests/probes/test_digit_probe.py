"""Probes (probes.digits): targets, ridge, the MLP, R^2 and px, and recovery of known states."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import env
from probes.digits import (
    ProbeSet,
    RidgePath,
    fit_mlp,
    fit_probes,
    probe_report,
    r2_score,
    state_targets,
)


def test_targets_are_permutation_invariant() -> None:
    pos = np.array([[[30.0, 2.0], [10.0, 20.0]]])  # digit 0 right and up, digit 1 left and down
    prev = np.array([[[28.0, 5.0], [11.0, 18.0]]])
    t = state_targets(pos, prev)
    np.testing.assert_array_equal(t["position"], [[10, 30, 2, 20]])  # x sorted, then y sorted
    np.testing.assert_array_equal(t["centroid"], [[20, 11]])
    np.testing.assert_array_equal(t["velocity"], [[-1, 2, -3, 2]])  # the moves, in that order
    swapped = state_targets(pos[:, ::-1], prev[:, ::-1])
    for k in t:
        np.testing.assert_array_equal(swapped[k], t[k])


def test_ridge_recovers_a_linear_map_and_r2_is_exact() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6)) * [1, 10, 0.1, 1, 1, 1] + 3
    w = rng.normal(size=(6, 2))
    y = x @ w + [1.0, -2.0]
    probe = RidgePath.fit(x).ridge(y, alpha=1e-9)
    np.testing.assert_allclose(probe.predict(x), y, atol=1e-5)
    assert r2_score(y, y) == 1.0
    assert r2_score(y, np.broadcast_to(y.mean(0), y.shape)) == pytest.approx(0.0, abs=1e-12)

    def held_out_r2(x: np.ndarray) -> float:  # a probe fit on the first 400, scored on the rest
        return r2_score(y[400:], fit_probes(x[:400], {"y": y[:400]})["y"].predict(x[400:]))

    assert held_out_r2(x) > 0.999
    assert held_out_r2(rng.normal(size=(500, 2))) < 0.05  # nothing to read


@pytest.mark.parametrize("n", [200, 12])  # more samples than features (primal), fewer (dual)
def test_ridge_path_is_the_ridge_solution_at_every_penalty(n: int) -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(n, 30)) + 2.0, rng.normal(size=(n, 3))
    path = RidgePath.fit(x)
    mean, scale = x.mean(0), x.std(0)
    xs = (x - mean) / scale
    for alpha in (1e-3, 1.0, 100.0):
        direct = np.linalg.solve(xs.T @ xs + alpha * n * np.eye(30), xs.T @ (y - y.mean(0)))
        np.testing.assert_allclose(path.ridge(y, alpha).weight, direct, rtol=1e-7, atol=1e-10)
    shared = fit_probes(x, {"a": y, "b": y[:, :1]})  # targets sharing x's decompositions
    alone = fit_probes(x, {"b": y[:, :1]})["b"]
    np.testing.assert_allclose(shared["b"].predict(x), alone.predict(x), atol=1e-12)


def _world(seed: int, gravity: float) -> ProbeSet:
    seqs = env.generate_sequences(
        64, seed=seed, split="test", seq_len=20, gravity=gravity, n_digits=1
    )
    return ProbeSet(seqs["frames"], seqs["positions"])


def _marginals(frames: torch.Tensor, target: bool) -> torch.Tensor:
    """A stand-in encoder: the frame's row and column pixel mass, normalised (M, 128). The
    mass-weighted mean column (row) is linear in it: the digit's x (y) up to its shape."""
    x = frames.double()[:, 0]
    return torch.cat([x.sum(1), x.sum(2)], 1) / x.sum((1, 2)).unsqueeze(1)


def test_probes_recover_known_positions_on_rendered_frames() -> None:
    """One digit: its position is linear in the pixel marginals, its move over the last frame
    in two frames' marginals, and one frame holds no move."""
    rep = probe_report(_marginals, [_world(1, 0.0), _world(2, 0.3)], [_world(3, 0.2)], context=2)
    assert rep["online"]["position"] > 0.99 and rep["online"]["centroid"] > 0.99
    assert rep["target"] == rep["online"]  # the stand-in has one encoder
    # The move: a difference of two frames' marginals (rendering rounds positions to whole
    # pixels, an error of up to one pixel in each frame's position).
    assert rep["context"]["velocity"] > 0.85
    assert abs(rep["online"]["velocity"]) < 0.1  # one frame: no move
    assert rep["online"]["position_px"] < 1.5  # about the rendering's rounding
    # the nonlinear probe of the context reads the move too; its px errors beside its R^2
    mlp = rep["context_mlp"]
    assert set(mlp) == {"position", "centroid", "velocity", "position_px", "velocity_px"}
    assert mlp["velocity"] > 0.5 and mlp["velocity_px"] < 2 * rep["context"]["velocity_px"]


def test_the_mlp_probe_reads_what_a_linear_one_cannot_and_is_deterministic() -> None:
    """y = |x_0| and x_0 x_1 are not linear in x: ridge reads nothing of them, the MLP most; the
    same data and seed give the same probe, and the global generator is left as it was."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1200, 4))
    y = np.stack([np.abs(x[:, 0]), x[:, 0] * x[:, 1]], 1) * 3.0 + 1.0
    linear = fit_probes(x[:1000], {"y": y[:1000]})["y"].predict(x[1000:])
    assert r2_score(y[1000:], linear) < 0.05
    state = torch.random.get_rng_state()
    a, b = fit_mlp(x[:1000], y[:1000], steps=1500), fit_mlp(x[:1000], y[:1000], steps=1500)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert r2_score(y[1000:], a.predict(x[1000:])) > 0.8
    np.testing.assert_array_equal(a.predict(x[1000:]), b.predict(x[1000:]))
