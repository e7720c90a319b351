"""Native vector env for ``MovingMNIST-v0``: N worlds stepped and rendered as one numpy batch.

``gymnasium.make_vec("MovingMNIST-v0", num_envs=64)`` builds this class. Sub-env ``i`` behaves
exactly like a :class:`~env.moving_mnist.MovingMNISTEnv` reset with seed ``seed + i`` (each has its
own generator, drawn from in the same order), and autoreset follows Gymnasium's ``NEXT_STEP``
mode: the step after a sub-env is truncated resets it and returns the reset observation and info
with reward 0 and ``terminated = truncated = False``. Each sub-env has its own episode limit
(:meth:`MovingMNISTVectorEnv.set_episode_limits`), ``max_episode_steps`` for all by default.
What both envs share (``SceneEnv``: the scenes, the checks, the human window) is written here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from env.core import SceneBatch, int_at_least
from env.digits import Digits, load_digits
from env.physics import PhysicsParams, check_physics_names

INFO_KEYS: tuple[str, ...] = ("positions", "velocities", "gravity", "digit_ids", "physics")
NO_EPISODE_LIMIT: int = int(np.iinfo(np.int64).max)
"""The episode limit of an endless sub-env: ``elapsed >= limit`` never holds."""


# -- what the single env (``env.moving_mnist``) and this vector env share ------------------
RENDER_MODES = ("rgb_array", "human")


def check_max_episode_steps(value: int | None) -> int | None:
    """``None`` (endless) or a positive int, else ``ValueError``."""
    if value is None:
        return None
    if not int_at_least(value, 1):
        raise ValueError(f"max_episode_steps must be a positive integer or None, got {value!r}")
    return int(value)


def check_render_mode(render_mode: str | None) -> str | None:
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode must be one of {RENDER_MODES} or None, got {render_mode!r}")
    return render_mode


def physics_from_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """The physics parameters in reset ``options``; any other key raises ``ValueError``."""
    if not options:
        return {}
    params = {k: v for k, v in options.items() if k != "reset_mask"}
    check_physics_names(params)
    return params


class PygameWindow:
    """A minimal pygame window showing a (H, W, 3) uint8 image scaled up; works headless with
    ``SDL_VIDEODRIVER=dummy``."""

    def __init__(self, caption: str, fps: int, scale: int = 4) -> None:
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        import pygame  # imported lazily: only human rendering needs it

        self._pygame = pygame
        self.caption, self.fps, self.scale = caption, fps, scale
        self._screen: Any = None
        self._clock: Any = None

    def show(self, rgb: np.ndarray) -> None:
        pg = self._pygame
        h, w = rgb.shape[:2]
        size = (w * self.scale, h * self.scale)
        if self._screen is None:
            pg.display.init()
            pg.display.set_caption(self.caption)
            self._screen = pg.display.set_mode(size)
            self._clock = pg.time.Clock()
        surface = pg.surfarray.make_surface(np.ascontiguousarray(rgb.transpose(1, 0, 2)))
        self._screen.blit(pg.transform.scale(surface, size), (0, 0))
        pg.event.pump()
        pg.display.flip()
        self._clock.tick(self.fps)

    def close(self) -> None:
        if self._screen is not None:
            self._pygame.display.quit()
            self._screen = None


class SceneEnv:
    """What the single env and the vector env share: their scenes (``_scenes``, one a sub-env),
    the checks of their arguments, the reset before any step and the frames shown to humans."""

    metadata: dict[str, Any] = {"render_modes": list(RENDER_MODES), "render_fps": 10}

    def _setup(self, num_scenes: int, physics: PhysicsParams, digits: Any, split: str,
               n_digits: int, speed_range: tuple[float, float], max_episode_steps: int | None,
               render_mode: str | None) -> spaces.Box:  # fmt: skip
        """Check the arguments, build the scenes; the observation space of one scene."""
        self.max_episode_steps = check_max_episode_steps(max_episode_steps)
        self.render_mode = check_render_mode(render_mode)
        self._scenes = SceneBatch(num_scenes, load_digits(digits), split, n_digits, speed_range,
                                  physics)  # fmt: skip
        self._has_reset = False
        self._window: PygameWindow | None = None
        size = self._scenes.canvas_size
        return spaces.Box(0, 255, (1, size, size), np.uint8)

    @property
    def n_digits(self) -> int:
        return self._scenes.n_digits

    @property
    def digits(self) -> Digits:
        """The digit source."""
        return self._scenes.digits

    def _check_reset(self) -> None:
        if not self._has_reset:
            raise gym.error.ResetNeeded("call reset() before step()")

    def _shown(self, obs: Any) -> Any:
        """``obs``, drawn in the window first when rendering for humans."""
        if self.render_mode == "human":
            self.render()
        return obs

    def _close_window(self) -> None:
        if self._window is not None:
            self._window.close()  # reopens at the next show


def rng_from_state(state: dict[str, Any]) -> np.random.Generator:
    """A Generator whose bit generator is restored from ``bit_generator.state``."""
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = state
    return np.random.Generator(bit_generator)



def check_mask(mask: Any, num_envs: int) -> np.ndarray:
    """A validated (N,) bool mask; None selects every sub-env."""
    if mask is None:
        return np.ones(num_envs, dtype=bool)
    arr = np.asarray(mask)
    if arr.dtype != np.bool_ or arr.shape != (num_envs,):
        raise ValueError(
            f"mask must be a boolean array of length {num_envs}, got "
            f"{arr.dtype} array of shape {arr.shape}: {mask!r}"
        )
    return arr


def check_episode_limits(limits: Any, num_envs: int) -> np.ndarray:
    """(N,) int64 episode limits from an int >= 1, an (N,) integer array of them, or None
    (endless: :data:`NO_EPISODE_LIMIT`); anything else raises ``ValueError``."""
    if limits is None:
        return np.full(num_envs, NO_EPISODE_LIMIT, dtype=np.int64)
    arr = np.asarray(limits)  # (numpy's bools are not integers)
    integers = np.issubdtype(arr.dtype, np.integer) and arr.shape in ((), (num_envs,))
    if not integers or np.any(arr < 1):
        raise ValueError(
            f"limits must be None, an integer >= 1 or an integer array of {num_envs} of them, "
            f"got {limits!r}"
        )
    return np.broadcast_to(arr.astype(np.int64), (num_envs,)).copy()


def sub_env_seeds(seed: int | Sequence[int | None] | None, num_envs: int) -> list[int | None]:
    """The seed of each sub-env for a reset's ``seed``: ``seed + i`` for an int, a list of
    ``num_envs`` as it is, all None for None."""
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, int | np.integer):
        return [int(seed) + i for i in range(num_envs)]
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"seed must be an int or a list of {num_envs}, got {seed!r}")
    return seeds


class MovingMNISTVectorEnv(SceneEnv, VectorEnv):
    """``num_envs`` Moving MNIST worlds in one batch (Gymnasium 1.x ``VectorEnv``).

    ``step(actions)`` ignores ``actions`` (Moving MNIST has no actions) and returns
    observations (N, 1, 64, 64) uint8, rewards (N,) float64 zeros, terminations (N,) False,
    truncations (N,) bool and ``infos`` with the Gymnasium 1.x vector layout: for each key an
    array with leading dimension N plus a boolean ``_key`` mask (always all True here):
    ``positions``/``velocities`` (N, n_digits, 2) float64, ``gravity`` (N,) float64,
    ``digit_ids`` (N, n_digits) int64, ``physics`` (N, 4) float64 (each sub-env's world as
    :data:`~env.physics.PHYSICS_FEATURES`: gravity x, gravity y, restitution, friction).

    ``reset(seed=s)`` seeds sub-env ``i`` with ``s + i`` (or ``seed`` may be a list of N seeds);
    ``options`` may hold physics parameters and a boolean ``reset_mask`` (reset only those envs).

    Keyword arguments are those of :class:`~env.moving_mnist.MovingMNISTEnv`, and ``device``:
    a torch device (``"cuda"``) to step and render the worlds on (:class:`env.device.DeviceScenes`:
    the same frames bit for bit). Then observations, and ``positions``/``velocities`` in the
    infos, are torch tensors on that device, and a step reads nothing back to the host; the
    episode draws, the physics parameters and every other info stay numpy on the host.
    """

    metadata: dict[str, Any] = {**SceneEnv.metadata, "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int = 1,
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
        device: Any = None,
    ) -> None:
        if not int_at_least(num_envs, 1):
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        physics = PhysicsParams(gravity, gravity_direction, restitution, friction)
        self.num_envs = int(num_envs)
        self.single_observation_space = self._setup(self.num_envs, physics, digits, split,
                                                    n_digits, speed_range, max_episode_steps,
                                                    render_mode)  # fmt: skip
        self.single_action_space = spaces.Discrete(1)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._rngs: list[np.random.Generator | None] = [None] * self.num_envs
        self._elapsed = np.zeros(self.num_envs, dtype=np.int64)
        self._limits = check_episode_limits(self.max_episode_steps, self.num_envs)  # (N,) int64
        self._autoreset = np.zeros(self.num_envs, dtype=bool)
        self._device: Any = None  # env.device.DeviceScenes when the worlds live on a device
        if device is not None:
            from env.device import DeviceScenes  # torch, only when asked for

            self._device = DeviceScenes(self._scenes, device)

    # ------------------------------------------------------------------ properties

    @property
    def device(self) -> Any:
        """The torch device the worlds are stepped and rendered on; None: numpy on the host."""
        return None if self._device is None else self._device.device

    @property
    def sprites(self) -> np.ndarray:
        """(N, n_digits, 28, 28) uint8 images of each sub-env's current digits (a copy)."""
        return self._scenes.sprites.copy()

    @property
    def elapsed_steps(self) -> np.ndarray:
        """(N,) int64 steps since each sub-env's last reset (a copy)."""
        return self._elapsed.copy()

    @property
    def episode_limits(self) -> np.ndarray:
        """(N,) int64 steps after which each sub-env is truncated (a copy);
        :data:`NO_EPISODE_LIMIT` for an endless one."""
        return self._limits.copy()

    def physics(self, i: int) -> PhysicsParams:
        """The current physics of sub-env ``i``."""
        return self._scenes.physics.get(i)

    # ------------------------------------------------------------------ API

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset all sub-envs (or those in ``options["reset_mask"]``)."""
        mask = check_mask(options.get("reset_mask") if options else None, self.num_envs)
        params = physics_from_options(options)
        seeds = sub_env_seeds(seed, self.num_envs)
        if params:
            self._scenes.set_physics(mask, **params)  # validates before changing anything
            self._physics_changed()
        indices = np.flatnonzero(mask)
        for i in indices:
            if seeds[i] is not None or self._rngs[i] is None:
                self._rngs[i] = seeding.np_random(seeds[i])[0]
        self._reset_scenes(indices)
        self._elapsed[indices] = 0
        self._autoreset[indices] = False
        self._has_reset = True
        return self._shown(self._observe()), self._infos()  # (N, 1, 64, 64)

    def step(
        self, actions: Any = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Advance every sub-env one frame; those truncated on the previous step reset instead."""
        self._check_reset()
        # deterministic, so stepping the envs about to reset costs nothing
        if self._device is None:
            self._scenes.step()
        else:
            self._device.step()
        self._elapsed += 1
        pending = np.flatnonzero(self._autoreset)
        if pending.size:
            self._reset_scenes(pending)
            self._elapsed[pending] = 0
        obs = self._observe()  # (N, 1, 64, 64)
        truncations = self._elapsed >= self._limits
        terminations = np.zeros(self.num_envs, dtype=bool)
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        self._autoreset = truncations.copy()
        return self._shown(obs), rewards, terminations, truncations, self._infos()

    def set_episode_limits(self, limits: int | np.ndarray | None, mask: Any = None) -> None:
        """Set the episode limit of all sub-envs or those where ``mask`` (bool, (N,)) is True.

        ``limits`` is an int >= 1, an (N,) integer array of them (entry ``i`` for sub-env ``i``)
        or None (endless). It applies to the current episodes from the next step: a sub-env
        whose steps since reset then reach its limit is truncated. Bad limits or masks raise
        ``ValueError`` and change nothing.
        """
        mask = check_mask(mask, self.num_envs)
        self._limits = np.where(mask, check_episode_limits(limits, self.num_envs), self._limits)

    def set_gravity(self, gravity: float, mask: Any = None) -> None:
        """Set gravity (px/frame^2) on all sub-envs or those where ``mask`` (bool, (N,)) is True,
        effective from the next step."""
        self.set_physics(mask=mask, gravity=gravity)

    def set_worlds(self, worlds: Sequence[PhysicsParams], mask: Any = None) -> None:
        """Put the sub-envs where ``mask`` (bool, (N,); None = all) is True, in index order, in
        ``worlds`` (one ``PhysicsParams`` each), effective from the next step. A wrong count,
        a non-``PhysicsParams`` or a bad mask raises ``ValueError`` and changes nothing."""
        indices = np.flatnonzero(check_mask(mask, self.num_envs))
        worlds = list(worlds)
        if len(worlds) != indices.size or not all(isinstance(w, PhysicsParams) for w in worlds):
            raise ValueError(
                f"worlds must be {indices.size} PhysicsParams (one per selected sub-env), "
                f"got {worlds!r}"
            )
        self._scenes.physics.assign(indices, worlds)
        self._physics_changed()

    def set_physics(self, mask: Any = None, **params: Any) -> None:
        """Set any of ``gravity``, ``gravity_direction``, ``restitution``, ``friction`` on all
        sub-envs or those in ``mask``, effective from the next step. Bad names, values or masks
        raise ``ValueError`` and change nothing."""
        self._scenes.set_physics(check_mask(mask, self.num_envs), **params)
        self._physics_changed()

    def render(self) -> np.ndarray | None:
        """``rgb_array``: (N, 64, 64, 3) uint8; ``human``: a pygame window tiling all sub-envs."""
        if self.render_mode is None:
            return None
        frames = self._observe()
        gray = (frames if self._device is None else frames.cpu().numpy())[:, 0]  # (N, 64, 64)
        rgb = np.repeat(gray[..., None], 3, axis=3)  # (N, 64, 64, 3)
        if self.render_mode == "rgb_array":
            return rgb
        cols = int(np.ceil(np.sqrt(self.num_envs)))
        rows = int(np.ceil(self.num_envs / cols))
        size = gray.shape[1]
        tiles = np.zeros((rows * cols, size, size, 3), dtype=np.uint8)
        tiles[: self.num_envs] = rgb
        grid = tiles.reshape(rows, cols, size, size, 3).transpose(0, 2, 1, 3, 4)
        if self._window is None:
            self._window = PygameWindow("MovingMNIST-v0 (vector)", self.metadata["render_fps"], 2)
        self._window.show(grid.reshape(rows * size, cols * size, 3))
        return None

    def close_extras(self, **kwargs: Any) -> None:
        self._close_window()

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue bit-exactly (numpy arrays, ints and the generators'
        ``bit_generator.state`` dicts): each sub-env's RNG state, scene, physics, step counter,
        episode limit and pending autoreset."""
        if self._device is not None:
            self._device.save()  # the host's positions and velocities are the device's
        return {
            "num_envs": self.num_envs,
            "max_episode_steps": self.max_episode_steps,
            "rngs": [None if g is None else g.bit_generator.state for g in self._rngs],
            "scenes": self._scenes.get_state(),
            "elapsed": self._elapsed.copy(),
            "limits": self._limits.copy(),
            "autoreset": self._autoreset.copy(),
            "has_reset": self._has_reset,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict (from an env built with the same arguments)."""
        if int(state["num_envs"]) != self.num_envs:
            raise ValueError(f"state is for {state['num_envs']} envs, this env has {self.num_envs}")
        limits = check_episode_limits(state["limits"], self.num_envs)
        self._scenes.set_state(state["scenes"])
        self._rngs = [None if s is None else rng_from_state(s) for s in state["rngs"]]
        self._elapsed = np.asarray(state["elapsed"], dtype=np.int64).copy()
        self._limits = limits
        self._autoreset = np.asarray(state["autoreset"], dtype=bool).copy()
        self._has_reset = bool(state["has_reset"])
        if self._device is not None:
            self._device.load()
            self._device.load_physics()

    # ------------------------------------------------------------------ helpers

    def _reset_scenes(self, indices: np.ndarray) -> None:
        """Draw new episodes for sub-envs ``indices`` from their generators (on the host)."""
        self._scenes.reset_scenes(indices, [self._rngs[i] for i in indices])
        if self._device is not None:
            self._device.load(indices)

    def _physics_changed(self) -> None:
        if self._device is not None:
            self._device.load_physics()

    def _observe(self) -> Any:
        """(N, 1, 64, 64) uint8 frames: a numpy array, or a tensor on the worlds' device."""
        return self._scenes.render() if self._device is None else self._device.render()

    def _infos(self) -> dict[str, Any]:
        """The infos of :data:`INFO_KEYS`, each followed by its (all True) ``_key`` mask."""
        w = self._scenes
        motion = (
            {"positions": w.positions.copy(), "velocities": w.velocities.copy()}
            if self._device is None
            else self._device.infos()
        )
        values = (motion["positions"], motion["velocities"], w.physics.gravity.copy(),
                  w.digit_ids.copy(), w.physics.features())  # fmt: skip
        present = np.ones(self.num_envs, dtype=bool)
        infos: dict[str, Any] = {}
        for key, value in zip(INFO_KEYS, values, strict=True):
            infos[key], infos[f"_{key}"] = value, present
        return infos
