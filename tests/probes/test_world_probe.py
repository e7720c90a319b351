"""The world probe (probes.world): offline predictors on frozen latents, with and without
the world's physics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from probes.world import ProbeConfig, ProbeWorld, d_per_horizon, windows, world_probe

HORIZONS = (2, 4, 8)
SMALL = ProbeConfig(hidden=64, blocks=2, steps=1500, batch=128, lr=3e-3, seed=0)


def ballistic(rng: np.random.Generator, gravity: tuple[float, float], n: int,
              family: str) -> ProbeWorld:
    """n sequences of a point under constant acceleration, the "frames" its position (N, L, 2)
    (an identity encoder's latent): x_{t+1} = x_t + v_t, v_{t+1} = v_t + g."""
    g = np.asarray(gravity)
    x, v = rng.normal(size=(n, 2)), rng.normal(size=(n, 2)) * 0.5
    out = []
    for _ in range(2 + HORIZONS[-1]):
        out.append(x.copy())
        x, v = x + v, v + g
    physics = np.asarray([*g, 1.0, 0.0], np.float32)
    return ProbeWorld(np.stack(out, 1).astype(np.float32), physics, family)


def identity(frames: torch.Tensor) -> torch.Tensor:
    return frames


def test_windows_read_the_context_and_the_horizons_frames() -> None:
    w = ProbeWorld(np.arange(3 * 11 * 2, dtype=np.float32).reshape(3, 11, 2), np.zeros(4), "f")
    ctx, tgt, phys, fams = windows(identity, [w, w], context=2, horizons=HORIZONS)
    assert ctx.shape == (6, 2, 2) and tgt.shape == (6, 3, 2) and phys.shape == (6, 4)
    np.testing.assert_array_equal(ctx[0].numpy(), w.frames[0, [0, 1]])
    np.testing.assert_array_equal(tgt[0].numpy(), w.frames[0, [3, 5, 9]])  # C - 1 + h
    assert fams == ["f"] * 6


def test_d_is_one_for_no_change_and_zero_for_the_truth() -> None:
    still, tgt = torch.randn(5, 3), torch.randn(5, 2, 3)
    np.testing.assert_allclose(d_per_horizon(still.unsqueeze(1).expand(5, 2, 3), still, tgt), 1)
    np.testing.assert_allclose(d_per_horizon(tgt, still, tgt), 0)


def test_knowing_the_world_is_worth_what_the_world_decides() -> None:
    """Under strong, varied gravity the state alone cannot say where the point goes, the world
    can: the world predictor's D is a fraction of the latent-only one's, per horizon and pooled;
    with no gravity anywhere the world has nothing to add."""
    rng = np.random.default_rng(0)
    dirs = [(0.6, 0.0), (-0.6, 0.0), (0.0, 0.6), (0.0, -0.6)]
    fit = [ballistic(rng, g, 256, "train") for g in dirs for _ in range(2)]
    test = [ballistic(rng, (0.42, 0.42), 128, "interp"), ballistic(rng, (-0.5, 0.3), 128, "far")]
    out = world_probe(identity, fit, test, context=2, horizons=HORIZONS, cfg=SMALL)
    assert set(out) == {"interp", "far", "pooled"}
    for fam in out:
        assert all(len(v) == len(HORIZONS) + 1 for v in out[fam].values())
        assert out[fam]["gain"][-1] > 0.8, out[fam]
        assert out[fam]["latent_world"][-1] < 0.1 < 0.9 < out[fam]["latent"][-1], out[fam]
    pooled = out["pooled"]
    assert pooled["latent"][-1] == pytest.approx(np.mean([out["interp"]["latent"][-1],
                                                          out["far"]["latent"][-1]]))
    # No gravity: the context's velocity says it all, with or without the world.
    flat_fit = [ballistic(rng, (0.0, 0.0), 512, "train")]
    flat = world_probe(identity, flat_fit, [ballistic(rng, (0.0, 0.0), 128, "none")], 2,
                       HORIZONS, SMALL)["none"]
    assert flat["latent"][-1] < 0.05 and abs(flat["latent_world"][-1] - flat["latent"][-1]) < 0.02


def test_the_probe_is_deterministic_and_leaves_the_random_state_alone() -> None:
    rng = np.random.default_rng(1)
    fit = [ballistic(rng, (0.3, 0.0), 64, "train"), ballistic(rng, (0.0, 0.3), 64, "train")]
    test = [ballistic(rng, (0.2, 0.2), 32, "interp")]
    cfg = ProbeConfig(hidden=16, blocks=1, steps=20, batch=32)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = world_probe(identity, fit, test, 2, HORIZONS, cfg)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert world_probe(identity, fit, test, 2, HORIZONS, cfg) == a


def test_windows_start_where_the_config_says() -> None:
    w = ProbeWorld(np.arange(2 * 14 * 2, dtype=np.float32).reshape(2, 14, 2), np.zeros(4), "f")
    ctx, tgt, _, _ = windows(identity, [w], context=2, horizons=HORIZONS, start=3)
    np.testing.assert_array_equal(ctx[1].numpy(), w.frames[1, [3, 4]])
    np.testing.assert_array_equal(tgt[1].numpy(), w.frames[1, [6, 8, 12]])  # start + C - 1 + h



def test_told_and_blind_start_as_the_same_function() -> None:
    """The told predictor is the blind one plus the world in every block by adaLN-Zero, zero at
    the start: seeded alike, both give the same prediction before any step, whatever the world."""
    from probes.world import _Predictor

    cfg = ProbeConfig(hidden=32, blocks=2)
    torch.manual_seed(7)
    blind = _Predictor(2, 8, 3, 0, cfg)
    torch.manual_seed(7)
    told = _Predictor(2, 8, 3, 4, cfg)
    ctx = torch.randn(5, 2, 8)
    pred = blind(ctx, torch.zeros(5, 0))
    assert pred.shape == (5, 3, 8)
    torch.testing.assert_close(told(ctx, torch.randn(5, 4)), pred, rtol=0, atol=0)
    # The world does act once its modulation has moved from zero.
    with torch.no_grad():
        told.world[1].film.weight.normal_()
    assert not torch.allclose(told(ctx, torch.randn(5, 4)), pred)
