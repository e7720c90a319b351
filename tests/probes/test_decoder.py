"""The pixel decoder (probes.decoder): digit placement, the fit's determinism and isolation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import env
from probes.decoder import (
    DecoderConfig,
    PixelDecoder,
    decode,
    digit_positions,
    fit_decoder,
    position_error,
)


def _scenes(n: int, steps: int = 12) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    phys = env.PhysicsParams(gravity=0.3)
    seqs = env.generate_sequences(n, seed=[4], split="test", seq_len=steps, **phys.as_dict())
    scenes = env.initial_scenes(n, seed=[4], split="test", physics=phys)
    return seqs["frames"], seqs["positions"], scenes.sprites


def test_true_frames_place_every_digit_where_the_simulator_put_it() -> None:
    frames, positions, sprites = _scenes(64)
    for t in (0, 6, 11):
        found = digit_positions(torch.from_numpy(frames[:, t]), torch.from_numpy(sprites))
        true = np.clip(np.rint(positions[:, t]), 0, 36)
        exact = (found.numpy() == true).all(-1)  # (N, digits): placed on the pixel
        assert exact.mean() >= 0.95  # (a digit hidden under the other one may not be)
        assert float(position_error(found, positions[:, t]).mean()) < 0.5


def test_position_error_pairs_each_digit_with_its_own_sprite() -> None:
    frames, positions, sprites = _scenes(64)
    moved = positions[:, 0].copy()
    moved[:, 1] += [3.0, 4.0]  # digit 1 drawn 5 px away from where it is said to be
    inside = (moved[:, 1] <= 36).all(-1)
    frame = env.render_frames(sprites, moved)
    found = digit_positions(torch.from_numpy(frame), torch.from_numpy(sprites))
    err = position_error(found, positions[:, 0]).numpy()[inside]
    assert inside.sum() > 30 and np.mean(np.abs(err - 2.5) <= 0.75) >= 0.9  # (0 + 5) / 2


def test_fit_is_deterministic_leaves_the_global_generator_and_sends_no_gradient() -> None:
    frames, _, _ = _scenes(16, steps=4)
    x = torch.from_numpy(frames.reshape(-1, 1, 64, 64))
    source = torch.nn.Linear(8, 8)
    z = source(torch.randn(x.shape[0], 8))  # latents with a graph behind them
    cfg = DecoderConfig(steps=5, batch=8, hidden=32)
    state = torch.get_rng_state()
    a, b = fit_decoder(z, x, cfg), fit_decoder(z, x, cfg)
    assert torch.equal(torch.get_rng_state(), state)
    for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(p, q)
    assert source.weight.grad is None and not any(p.requires_grad for p in a.parameters())
    other = fit_decoder(z, x, DecoderConfig(steps=5, batch=8, hidden=32, seed=1))
    assert not torch.equal(other.net[0].weight, a.net[0].weight)


def test_a_fit_standardises_the_latents_and_leaves_the_global_generators_alone() -> None:
    frames, _, _ = _scenes(8, steps=4)
    x = torch.from_numpy(frames.reshape(-1, 1, 64, 64))
    z = torch.randn(x.shape[0], 6) * 0.05 + 3.0  # a latent's own scale and offset
    cfg = DecoderConfig(steps=20, batch=8, hidden=32)
    torch.manual_seed(5)
    expected = torch.randn(4)
    torch.manual_seed(5)
    here = fit_decoder(z, x, cfg)
    assert torch.equal(torch.randn(4), expected)  # the caller's draws as they would have been
    assert torch.allclose(here.center, z.mean(0)) and torch.allclose(here.scale, z.std(0, correction=0))
    with pytest.raises(ValueError, match="32 latents needs as many frames, got 5"):
        fit_decoder(z, x[:5], cfg)


def test_a_fit_learns_the_frames_it_is_shown() -> None:
    frames, _, _ = _scenes(4, steps=2)
    x = torch.from_numpy(frames.reshape(-1, 1, 64, 64))  # 8 frames, each its own code
    z = torch.eye(8)
    before = fit_decoder(z, x, DecoderConfig(steps=1, batch=8, hidden=32))
    after = fit_decoder(z, x, DecoderConfig(steps=300, batch=8, hidden=32, lr=1e-2))

    def err(dec: PixelDecoder) -> float:
        return float((decode(dec, z).float() - x.float()).abs().mean())

    assert err(after) < 0.5 * err(before)


def test_decode_keeps_the_leading_shape() -> None:
    dec = PixelDecoder(6, hidden=32)
    out = decode(dec, torch.zeros(2, 3, 6), chunk=4)
    assert out.shape == (2, 3, 1, 64, 64) and out.dtype == torch.uint8
    with pytest.raises(RuntimeError):
        decode(dec, torch.zeros(2, 5))
