"""A pixel decoder, as a probe: a latent drawn as the frame it stands for.

A JEPA predicts latents, so what it predicts cannot be looked at. A small decoder maps the EMA
target encoder's latent of a frame back to the frame (docs/definitions.md#the-pixel-decoder),
and the predicted latents through it: fit apart from the learner on latents computed without
gradient, with an optimiser of its own, it shows what a latent holds and shapes nothing (as
DINO-WM's decoder, trained beside its world model).

Where the decoded frame puts each digit (``digit_positions``): each digit's own sprite (the
simulator knows the scene's digit images) matched against the frame at every placement, the
strongest match first, its ink then taken out of the frame before the next digit is placed
(matching pursuit); a digit's position is the top-left corner of its sprite, as the simulator's.
``position_error``: the distance in pixels between those placements and the true positions,
the digits paired as fits best.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

#: The frame's side and the digits' sprite side (the env's Moving MNIST).
CANVAS, SPRITE = 64, 28


@dataclass(frozen=True)
class DecoderConfig:
    """The decoder's size and its fit (the defaults: docs/definitions.md#the-pixel-decoder)."""

    hidden: int = 256  # the width of its two hidden layers
    steps: int = 1000  # AdamW steps of the fit
    batch: int = 128  # frames a step
    lr: float = 2e-2  # peak rate (cosine to 0)
    seed: int = 0  # init and batches (the fit leaves the global generators as they were)


class PixelDecoder(nn.Module):
    """latent (N, D) -> frame logits (N, 1, 32, 32), half the frame's side: the latent
    standardised (``center``, ``scale``: buffers, per dimension; 0 and 1 until ``fit_decoder``
    sets them from the latents it fits on), then a two-hidden-layer MLP (on a CPU a
    deconvolution stack costs ten times as much for no better placement); the frame
    (``decode``) is its image upsampled bilinearly to 64 x 64."""

    def __init__(self, latent_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.register_buffer("center", torch.zeros(latent_dim))
        self.register_buffer("scale", torch.ones(latent_dim))
        self.net = nn.Sequential(nn.Linear(latent_dim, hidden), nn.GELU(),
                                 nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, (CANVAS // 2) ** 2))  # fmt: skip

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = (z - self.center) / self.scale
        return self.net(x).view(z.shape[0], 1, CANVAS // 2, CANVAS // 2)


def fit_decoder(latents: torch.Tensor, frames: torch.Tensor, cfg: DecoderConfig) -> PixelDecoder:
    """A decoder fit to map M latents (M, D) to their frames (M, 1, 64, 64) uint8, in eval mode
    and frozen: ``cfg.steps`` AdamW steps on the per-pixel binary cross-entropy against the ink
    at half the side (each 2 x 2 block's mean of frame / 255), batches drawn with replacement,
    the latents standardised by their own mean and standard deviation per dimension (a latent's
    scale is the learner's: unscaled, the fit needs twice the steps for the same placement).
    Deterministic for ``cfg.seed``: its init and batches are drawn from it, the global
    generators left as they were. The latents are data here: no gradient reaches whatever
    computed them."""
    m = latents.shape[0]
    if frames.shape[0] != m:
        raise ValueError(f"a decoder fit on {m} latents needs as many frames, got {frames.shape[0]}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        dec = PixelDecoder(latents.shape[1], cfg.hidden)
        rows = torch.randint(0, m, (cfg.steps, cfg.batch))
    z = latents.detach().float()
    ink = F.avg_pool2d(frames.detach().to(z.device, torch.float32) / 255.0, 2)
    dec = dec.to(z.device)
    with torch.no_grad():
        dec.center.copy_(z.mean(0))
        dec.scale.copy_(z.std(0, correction=0).clamp(min=1e-6))
    with torch.enable_grad():
        opt = torch.optim.AdamW(dec.parameters(), lr=cfg.lr, weight_decay=0.0)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, len(rows))
        for idx in rows:
            loss = F.binary_cross_entropy_with_logits(dec(z[idx]), ink[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return dec.eval().requires_grad_(False)


@torch.no_grad()
def decode(decoder: PixelDecoder, z: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """The frames (..., 1, 64, 64) uint8 of latents ``z`` (..., D)."""
    flat = z.reshape(-1, z.shape[-1]).float()
    parts = [F.interpolate(torch.sigmoid(decoder(flat[i:i + chunk])), scale_factor=2,
                           mode="bilinear", align_corners=False)
             for i in range(0, flat.shape[0], chunk)]  # fmt: skip
    out = torch.cat(parts) if parts else flat.new_zeros(0, 1, CANVAS, CANVAS)
    return (out * 255.0).round().to(torch.uint8).view(*z.shape[:-1], 1, CANVAS, CANVAS)


@torch.no_grad()
def digit_positions(frames: torch.Tensor, sprites: torch.Tensor) -> torch.Tensor:
    """Where frames (N, 1, 64, 64) put each of their scene's digits, sprites (N, digits, 28, 28)
    (both uint8 or float): (N, digits, 2) float, top-left corners x then y, by matching pursuit
    (the module doc; the matches by FFT correlation)."""
    n, d = sprites.shape[:2]
    x = frames.float().reshape(n, CANVAS, CANVAS) / 255.0
    s = sprites.float() / 255.0
    sprite_f = torch.fft.rfft2(s, s=(CANVAS, CANVAS)).conj()  # (N, d, 64, 33)
    out = torch.zeros(n, d, 2)
    todo = torch.ones(n, d, dtype=torch.bool)
    rows, side, span = torch.arange(n), CANVAS - SPRITE + 1, torch.arange(SPRITE)
    for _ in range(d):
        corr = torch.fft.irfft2(torch.fft.rfft2(x).unsqueeze(1) * sprite_f, s=(CANVAS, CANVAS))
        best, at = corr[..., :side, :side].reshape(n, d, -1).max(-1)  # every placement
        k = best.masked_fill(~todo, -torch.inf).argmax(-1)  # (N,): the strongest still to place
        py, px = at[rows, k] // side, at[rows, k] % side
        out[rows, k, 0], out[rows, k, 1] = px.float(), py.float()
        todo[rows, k] = False
        ys, xs = (py[:, None] + span)[:, :, None], (px[:, None] + span)[:, None, :]
        x[rows[:, None, None], ys, xs] -= s[rows, k]  # its ink out of the frame
        x.clamp_(min=0.0)
    return out


def position_error(found: torch.Tensor, positions: np.ndarray | torch.Tensor) -> torch.Tensor:
    """(N,) the mean over a scene's digits of the distance (px) between ``found`` (N, digits, 2)
    and the true positions (N, digits, 2), each rounded and clipped as a render places it, the
    digits paired as fits best (which is which is the latent's to forget: the probes' targets
    are permutation invariant for the same reason)."""
    true = torch.as_tensor(np.asarray(positions), dtype=torch.float32).round()
    true = true.clamp(0, CANVAS - SPRITE)
    found = found.float()
    return torch.stack([
        torch.linalg.vector_norm(found[:, list(order)] - true, dim=-1).mean(-1)
        for order in itertools.permutations(range(true.shape[1]))
    ]).amin(0)
