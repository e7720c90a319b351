"""Blocks of one vector env: S envs of B sub-envs each, stepped and rendered as one env of S * B.

Stacked seeds (``agent.stacked``) need S worlds streams, one a seed, each exactly the stream
that seed's own run would see, without S times the host's bookkeeping and a device's kernels. A
:class:`SharedWorlds` holds one :class:`~env.vector.MovingMNISTVectorEnv` of S * B sub-envs and
hands out S :class:`EnvBlock` s, each a vector env of B sub-envs (rows k * B .. (k + 1) * B - 1)
that a :class:`~env.worlds.WorldSchedule` drives as its own env: a block's reset seeds and
resets only its rows; its physics, worlds and episode limits are its rows'; the first block to
step in a round steps the shared env, and every block returns its rows of that step (each must
step once a round); its ``get_state()`` is a lone B-env env's, which ``set_state`` takes back.
Each block's frames and states are those of a lone env, bit for bit (``tests/env/test_blocks.py``;
docs/env.md, "Blocks").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space

from env.core import int_at_least
from env.physics import PhysicsParams
from env.vector import MovingMNISTVectorEnv, check_mask, sub_env_seeds


class SharedWorlds:
    """One vector env ``env`` of ``blocks`` equal blocks; ``blocks[k]`` is block k."""

    def __init__(self, env: MovingMNISTVectorEnv, blocks: int) -> None:
        if not isinstance(env, MovingMNISTVectorEnv):
            raise ValueError(f"env must be a MovingMNISTVectorEnv, got {type(env).__name__}")
        if not int_at_least(blocks, 1) or env.num_envs % blocks:
            raise ValueError(f"blocks must be a positive divisor of num_envs={env.num_envs}, "
                             f"got {blocks!r}")  # fmt: skip
        self.env = env
        self.size = env.num_envs // blocks
        self.round = 0  # shared steps done
        self._last: tuple[Any, ...] | None = None
        self.blocks = [EnvBlock(self, k) for k in range(blocks)]

    def _step(self) -> None:
        self._last = self.env.step()
        self.round += 1


_COUNTS = ("num_envs", "num_scenes")  # a state dict's sub-env counts


def _rows(value: Any, rows: slice, n: int, size: int) -> Any:
    """``value`` (a state dict's entry) cut to ``rows`` of its n sub-envs: arrays and lists of
    length n sliced, dicts recursed, the counts ``num_envs`` / ``num_scenes`` set to size."""
    if isinstance(value, dict):
        return {key: size if key in _COUNTS else _rows(v, rows, n, size)
                for key, v in value.items()}  # fmt: skip
    if isinstance(value, np.ndarray) and value.ndim and value.shape[0] == n:
        return value[rows].copy()
    if isinstance(value, list) and len(value) == n:
        return value[rows]
    return value


def _put_rows(full: Any, part: Any, rows: slice, n: int) -> Any:
    """``full`` (a state dict of n sub-envs) with ``part``'s rows (``_rows``' inverse) put in."""
    if isinstance(full, dict):
        return {key: v if key in _COUNTS else _put_rows(v, part[key], rows, n)
                for key, v in full.items()}  # fmt: skip
    if isinstance(full, np.ndarray) and full.ndim and full.shape[0] == n:
        merged = full.copy()
        merged[rows] = np.asarray(part, dtype=full.dtype)
        return merged
    if isinstance(full, list) and len(full) == n:
        merged_list = list(full)
        merged_list[rows] = list(part)
        return merged_list
    return full


class EnvBlock(VectorEnv):
    """Block k of a :class:`SharedWorlds`: a vector env of its B sub-envs (module docstring)."""

    metadata = MovingMNISTVectorEnv.metadata

    def __init__(self, shared: SharedWorlds, index: int) -> None:
        self.shared, self.index = shared, index
        env, b = shared.env, shared.size
        self.num_envs = b
        self.rows = slice(index * b, (index + 1) * b)
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space
        self.observation_space = batch_space(self.single_observation_space, b)
        self.action_space = batch_space(self.single_action_space, b)
        self.render_mode = None
        self.steps = 0  # shared rounds this block has stepped

    # ------------------------------------------------------------------ the lone env's view
    @property
    def device(self) -> Any:
        return self.shared.env.device

    @property
    def max_episode_steps(self) -> int | None:
        return self.shared.env.max_episode_steps

    @property
    def elapsed_steps(self) -> np.ndarray:
        return self.shared.env.elapsed_steps[self.rows]

    @property
    def episode_limits(self) -> np.ndarray:
        return self.shared.env.episode_limits[self.rows]

    def physics(self, i: int) -> PhysicsParams:
        return self.shared.env.physics(self.rows.start + int(i))

    def _full(self, mask: Any) -> np.ndarray:
        """This block's (B,) mask (None: all) as the shared env's (N,) one."""
        full = np.zeros(self.shared.env.num_envs, dtype=bool)
        full[self.rows] = check_mask(mask, self.num_envs)
        return full

    def _cut(self, result: tuple[Any, ...]) -> tuple[Any, ...]:
        """A shared reset's or step's (obs, ..., infos) cut to this block's rows."""
        *arrays, infos = result
        return (*(a[self.rows] for a in arrays), self._cut_infos(infos))

    def _cut_infos(self, infos: dict[str, Any]) -> dict[str, Any]:
        n = self.shared.env.num_envs
        return {k: v[self.rows] if hasattr(v, "shape") and v.shape[:1] == (n,) else v
                for k, v in infos.items()}  # fmt: skip

    # ------------------------------------------------------------------ API
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset this block's sub-envs (or those in ``options["reset_mask"]``), sub-env i seeded
        with ``seed + i`` (or ``seed[i]``), as a lone env's reset."""
        options = dict(options or {})
        mask = self._full(options.pop("reset_mask", None))
        n, b = self.shared.env.num_envs, self.num_envs
        seeds: list[int | None] = [None] * n
        seeds[self.rows] = sub_env_seeds(seed, b)
        return self._cut(self.shared.env.reset(seed=seeds, options={**options, "reset_mask": mask}))

    def step(self, actions: Any = None) -> tuple[Any, ...]:
        """This block's rows of this round's shared step (the first block to step takes it)."""
        shared = self.shared
        if self.steps == shared.round:
            shared._step()
        elif self.steps != shared.round - 1:
            raise RuntimeError(
                f"block {self.index} is {shared.round - self.steps} rounds behind: every block "
                "of a SharedWorlds steps once a round"
            )
        self.steps += 1
        assert shared._last is not None
        return self._cut(shared._last)

    def set_worlds(self, worlds: Sequence[PhysicsParams], mask: Any = None) -> None:
        self.shared.env.set_worlds(worlds, mask=self._full(mask))

    def set_physics(self, mask: Any = None, **params: Any) -> None:
        self.shared.env.set_physics(mask=self._full(mask), **params)

    def set_gravity(self, gravity: float, mask: Any = None) -> None:
        self.set_physics(mask=mask, gravity=gravity)

    def set_episode_limits(self, limits: int | np.ndarray | None, mask: Any = None) -> None:
        env = self.shared.env
        full = env.episode_limits
        if limits is None or isinstance(limits, int | np.integer):
            own: Any = limits
        else:
            own = np.asarray(limits)
            if own.shape != (self.num_envs,):
                raise ValueError(f"limits must be an int or ({self.num_envs},), got {own.shape}")
            full[self.rows] = own
            own = full
        env.set_episode_limits(own, mask=self._full(mask))

    def get_state(self) -> dict[str, Any]:
        """The state of a lone ``MovingMNISTVectorEnv`` of this block's sub-envs."""
        return _rows(self.shared.env.get_state(), self.rows, self.shared.env.num_envs,
                     self.num_envs)  # fmt: skip

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a ``get_state`` dict (a block's, or a lone B-env env's) into this block."""
        if int(state["num_envs"]) != self.num_envs:
            raise ValueError(f"state is for {state['num_envs']} envs, this block has {self.num_envs}")
        env = self.shared.env
        full = _put_rows(env.get_state(), state, self.rows, env.num_envs)
        full["has_reset"] = bool(env.get_state()["has_reset"] or state["has_reset"])
        env.set_state(full)

    def render(self) -> Any:
        return None
