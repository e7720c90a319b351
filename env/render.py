"""Batched rendering: paste each world's digit sprites onto its canvas, composited by pixel max.

This is the hot path of the env. Instead of a Python loop over worlds, the canvases are viewed as
an array of all possible sprite windows, ``windows[n, y, x]`` being the (S, S) patch whose top-left
corner is (x, y) on canvas ``n`` (a strided view, no copy), so one fancy-indexed gather/scatter
per digit slot pastes that slot for every world at once.
"""

from __future__ import annotations

import numpy as np


def pixel_positions(positions: np.ndarray, limit: int) -> np.ndarray:
    """Rounded top-left corners used for rendering.

    Args:
        positions: (..., 2) float, x then y, in [0, limit].
        limit: largest valid corner coordinate (canvas size - sprite size).

    Returns:
        (..., 2) intp, ``rint(positions)`` (round half to even) clipped to [0, limit].
    """
    out = np.rint(positions).astype(np.intp)
    np.clip(out, 0, limit, out=out)
    return out


def render_frames(
    sprites: np.ndarray,
    positions: np.ndarray,
    canvas_size: int = 64,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Render one frame per world.

    Args:
        sprites: (N, D, S, S) uint8 digit images.
        positions: (N, D, 2) float, top-left corners, x then y, in [0, canvas_size - S].
        canvas_size: side of the square canvas (64).
        out: optional (N, 1, canvas_size, canvas_size) uint8 buffer (any strides, e.g. the view
            ``frames[:, t]`` of a (N, T, 1, 64, 64) array) to render into.

    Returns:
        (N, 1, canvas_size, canvas_size) uint8: pixel-wise max of the sprites pasted at their
        rounded positions on a black canvas.
    """
    n, d, size = sprites.shape[0], sprites.shape[1], sprites.shape[2]
    limit = canvas_size - size
    if out is None:
        out = np.zeros((n, 1, canvas_size, canvas_size), dtype=np.uint8)
    else:
        if out.shape != (n, 1, canvas_size, canvas_size) or out.dtype != np.uint8:
            raise ValueError(f"out must be uint8 with shape {(n, 1, canvas_size, canvas_size)}")
        out.fill(0)
    if n == 0 or d == 0:
        return out
    canvas = out[:, 0]  # (N, H, W) view
    s_n, s_y, s_x = canvas.strides
    windows = np.lib.stride_tricks.as_strided(  # (N, limit+1, limit+1, S, S) view of the canvases
        canvas,
        shape=(n, limit + 1, limit + 1, size, size),
        strides=(s_n, s_y, s_x, s_y, s_x),
        writeable=True,
    )
    px = pixel_positions(positions, limit)  # (N, D, 2)
    worlds = np.arange(n)
    windows[worlds, px[:, 0, 1], px[:, 0, 0]] = sprites[:, 0]  # the canvas is black: max = paste
    for slot in range(1, d):
        ys, xs = px[:, slot, 1], px[:, slot, 0]
        windows[worlds, ys, xs] = np.maximum(windows[worlds, ys, xs], sprites[:, slot])
    return out
