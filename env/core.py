"""The batched scene state shared by the single env, the vector env and the dataset generator.

A :class:`SceneBatch` holds N independent Moving MNIST scenes: where each digit is, how fast it
moves, which MNIST images it shows and the physics (the world) of each scene. It knows nothing of Gymnasium;
randomness comes only from the ``np.random.Generator``s passed to :meth:`SceneBatch.reset_scenes`.
Its frames are rendered by ``render_frames`` (below: every scene's sprites pasted at once).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from env.digits import DIGIT_SIZE, Digits
from env.physics import PhysicsArrays, PhysicsParams, physics_step

# -- rendering -------------------------------------------------------------------------------
# Batched rendering: paste each world's digit sprites onto its canvas, composited by pixel max.
#
# This is the hot path of the env. Instead of a Python loop over worlds, the canvases are viewed as
# an array of all possible sprite windows, ``windows[n, y, x]`` being the (S, S) patch whose top-left
# corner is (x, y) on canvas ``n`` (a strided view, no copy), so one fancy-indexed gather/scatter
# per digit slot pastes that slot for every world at once.


def pixel_positions(positions: np.ndarray, limit: int) -> np.ndarray:
    """The (..., 2) intp top-left corners a render uses for ``positions`` (..., 2) (x then y):
    ``rint`` (round half to even) clipped to [0, limit] (canvas size - sprite size)."""
    out = np.rint(positions).astype(np.intp)
    np.clip(out, 0, limit, out=out)
    return out


def render_frames(
    sprites: np.ndarray,
    positions: np.ndarray,
    canvas_size: int = 64,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Render one frame per world: the pixel-wise max of its sprites pasted at their rounded
    positions (:func:`pixel_positions`) on a black canvas, (N, 1, canvas_size, canvas_size) uint8.

    Args:
        sprites: (N, D, S, S) uint8 digit images.
        positions: (N, D, 2) float, top-left corners, x then y, in [0, canvas_size - S].
        canvas_size: side of the square canvas (64).
        out: optional (N, 1, canvas_size, canvas_size) uint8 buffer (any strides, e.g. the view
            ``frames[:, t]`` of a (N, T, 1, 64, 64) array) to render into.
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


# -- the scenes ------------------------------------------------------------------------------
STATE_VERSION = 1
SCENE_ARRAYS = ("positions", "velocities", "digit_ids", "sprites")  # (N, D, ...) each


def int_at_least(value: Any, low: int) -> bool:
    """Whether ``value`` is an integer (a Python or numpy int, not a bool) of at least ``low``."""
    return not isinstance(value, bool) and isinstance(value, int | np.integer) and value >= low


def check_scene_config(n_digits: int, speed_range: tuple[float, float], canvas_size: int) -> None:
    """Raise ``ValueError`` naming the argument for a bad scene configuration."""
    if not int_at_least(n_digits, 1):
        raise ValueError(f"n_digits must be a positive integer, got {n_digits!r}")
    try:
        lo, hi = (float(v) for v in speed_range)
    except (TypeError, ValueError):
        raise ValueError(f"speed_range must be a pair (low, high), got {speed_range!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < 0 or hi < lo:
        raise ValueError(f"speed_range must be finite with 0 <= low <= high, got {speed_range!r}")
    if canvas_size < DIGIT_SIZE:
        raise ValueError(f"canvas_size must be >= {DIGIT_SIZE}, got {canvas_size!r}")


class SceneBatch:
    """N Moving MNIST scenes advanced and rendered together.

    Attributes:
        positions: (N, D, 2) float64, top-left corner of each digit, x then y, px, in [0, limit].
        velocities: (N, D, 2) float64, px/frame.
        digit_ids: (N, D) int64, indices into ``digits.images``.
        sprites: (N, D, 28, 28) uint8, the images of ``digit_ids``.
        physics: per-scene :class:`PhysicsArrays`.
    """

    def __init__(
        self,
        num_scenes: int,
        digits: Digits,
        split: str = "train",
        n_digits: int = 2,
        speed_range: tuple[float, float] = (2.0, 4.0),
        physics: PhysicsParams | None = None,
        canvas_size: int = 64,
    ) -> None:
        check_scene_config(n_digits, speed_range, canvas_size)
        self.num_scenes = int(num_scenes)
        self.n_digits = int(n_digits)
        self.canvas_size = int(canvas_size)
        self.limit = self.canvas_size - DIGIT_SIZE
        self.speed_range = (float(speed_range[0]), float(speed_range[1]))
        self.digits = digits
        self.split = split
        self.pool = digits.pool(split)  # (P,) indices of this split's digits
        n, d = self.num_scenes, self.n_digits
        self.positions = np.zeros((n, d, 2))
        self.velocities = np.zeros((n, d, 2))
        self.digit_ids = np.zeros((n, d), dtype=np.int64)
        self.sprites = np.zeros((n, d, DIGIT_SIZE, DIGIT_SIZE), dtype=np.uint8)
        self.physics = PhysicsArrays(n, physics or PhysicsParams())

    def reset_scenes(self, indices: np.ndarray, rngs: Sequence[np.random.Generator]) -> None:
        """Draw fresh episodes for the scenes ``indices`` (K,), scene ``indices[k]`` from ``rngs[k]``.

        Each scene takes exactly one draw, ``rng.random((n_digits, 5))``, whose columns are
        x, y (uniform in [0, limit]), speed (uniform in ``speed_range``), direction (uniform in
        [0, 2 pi)) and the digit (uniform over the split's pool). One call per scene keeps the
        vector env cheap, and K consecutive draws from one generator equal one draw of
        ``rng.random((K, n_digits, 5))``, which the dataset generator uses.
        """
        if len(rngs) == 0:
            return
        u = np.stack([rng.random((self.n_digits, 5)) for rng in rngs])  # (K, D, 5)
        self.apply_draws(np.asarray(indices), u)

    def apply_draws(self, indices: np.ndarray, u: np.ndarray) -> None:
        """Set scenes ``indices`` (K,) from uniforms ``u`` (K, D, 5) (see :meth:`reset_scenes`)."""
        lo, hi = self.speed_range
        speed = lo + (hi - lo) * u[..., 2]  # (K, D)
        angle = 2.0 * np.pi * u[..., 3]
        choice = np.minimum(
            (u[..., 4] * self.pool.shape[0]).astype(np.int64), self.pool.shape[0] - 1
        )
        ids = self.pool[choice]  # (K, D)
        self.positions[indices] = u[..., :2] * self.limit
        self.velocities[indices] = np.stack([speed * np.cos(angle), speed * np.sin(angle)], axis=-1)
        self.digit_ids[indices] = ids
        self.sprites[indices] = self.digits.images[ids]

    def step(self) -> None:
        """Advance every scene by one frame (deterministic: no randomness)."""
        physics_step(self.positions, self.velocities, self.physics, self.limit)

    def render(self, out: np.ndarray | None = None) -> np.ndarray:
        """(N, 1, canvas, canvas) uint8 frames of the current state."""
        return render_frames(self.sprites, self.positions, self.canvas_size, out=out)

    def rollout(self, steps: Sequence[int]) -> np.ndarray:
        """Advance every scene to each of ``steps`` frames from now (increasing, each >= 1) and
        render it there: (N, len(steps), 1, canvas, canvas) uint8. The scenes end at the last."""
        if any(b <= a for a, b in zip([0, *steps], steps, strict=False)):
            raise ValueError(f"steps must be increasing and positive, got {list(steps)!r}")
        out = np.zeros((self.num_scenes, len(steps), 1, self.canvas_size, self.canvas_size),
                       np.uint8)  # fmt: skip
        done = 0
        for k, at in enumerate(steps):
            for _ in range(at - done):
                self.step()
            done = at
            self.render(out=out[:, k])
        return out

    def copy(self) -> SceneBatch:
        """An independent copy (the digit source is shared): a branch point of the simulator."""
        twin = SceneBatch(self.num_scenes, self.digits, self.split, self.n_digits,
                          self.speed_range, None, self.canvas_size)  # fmt: skip
        twin.set_state(self.get_state())
        return twin

    def set_physics(self, mask: np.ndarray, **params: Any) -> None:
        """Change the physics of the scenes selected by ``mask`` (bool, (N,))."""
        self.physics.update(mask, **params)

    # ------------------------------------------------------------------ state

    def get_state(self) -> dict[str, Any]:
        """Copies of everything that defines the scenes (not the digit source itself)."""
        return {
            "version": STATE_VERSION,
            "num_scenes": self.num_scenes,
            "n_digits": self.n_digits,
            "digits_sha256": self.digits.sha256,
            "split": self.split,
            **{name: getattr(self, name).copy() for name in SCENE_ARRAYS},
            "physics": self.physics.state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict; raises ``ValueError`` if it does not fit this batch."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported scene state version {state.get('version')!r}")
        shape = (self.num_scenes, self.n_digits)
        n = state["num_scenes"]
        if (n, state["n_digits"]) != shape:
            raise ValueError(
                f"state is for {n} scenes x {state['n_digits']} digits, "
                f"this env has {shape[0]} x {shape[1]}"
            )
        for name in SCENE_ARRAYS:
            getattr(self, name)[:] = state[name]
        self.physics.load_state(state["physics"])
