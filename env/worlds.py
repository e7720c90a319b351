"""Families of worlds: physics drawn from a named, disjoint set (training, held-out).

A world is one ``PhysicsParams``. A ``WorldFamily`` is a box of them: gravity magnitude in a
range, its direction in a union of arcs, restitution and friction in ranges, each drawn
uniformly. The families below are disjoint by construction, so a learner trained across
``train`` worlds is tested on worlds it never saw:

- ``train``: gravity 0.1-0.5 px/frame^2 pointing within 30 degrees of an axis (down, up, left or
  right), elastic walls, no friction;
- ``interp``: held out, *between* training worlds: gravity 0.15-0.45 pointing within 15 degrees
  of a diagonal (the arcs the training family leaves out);
- ``extrap``: held out, *beyond* them: gravity 0.6-0.8 (stronger than any training world) in the
  training directions.

(The paper's single shift, gravity 0.5 straight down, lies on the edge of ``train``.)

A ``WorldSchedule`` wraps the vector env so that every episode of every stream runs in a world
freshly drawn from a family, with a random length; ``hold`` moves streams into one given
(e.g. held-out) world mid-episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium.vector import VectorWrapper

from env.moving_mnist import rng_from_state
from env.physics import PhysicsParams
from env.vector import NO_EPISODE_LIMIT, MovingMNISTVectorEnv, check_mask


@dataclass(frozen=True)
class WorldFamily:
    """Worlds with gravity in ``gravity`` = (lo, hi) px/frame^2, its direction in one of the
    ``arcs`` (start, end) degrees (end > start; may pass 360), restitution and friction in
    their (lo, hi) ranges; each drawn uniformly (a direction uniformly over the arcs' total
    length)."""

    name: str
    gravity: tuple[float, float]
    arcs: tuple[tuple[float, float], ...]
    restitution: tuple[float, float] = (1.0, 1.0)
    friction: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        for field in ("gravity", "restitution", "friction"):
            lo, hi = getattr(self, field)
            if not lo <= hi:
                raise ValueError(f"{self.name}: {field} range ({lo}, {hi}) is empty")
        if not self.arcs or any(not s < e <= s + 360.0 for s, e in self.arcs):
            raise ValueError(f"{self.name}: arcs must be (start, end) with start < end <= start+360")
        PhysicsParams(self.gravity[0], 0.0, self.restitution[0], self.friction[0])  # validates
        PhysicsParams(self.gravity[1], 0.0, self.restitution[1], self.friction[1])

    def sample(self, rng: np.random.Generator, n: int) -> list[PhysicsParams]:
        """``n`` worlds drawn from ``rng`` (one ``rng.random((n, 4))`` draw)."""
        u = rng.random((n, 4))
        lengths = np.asarray([e - s for s, e in self.arcs])
        at = u[:, 1] * lengths.sum()  # a point along the arcs laid end to end
        which = np.minimum(np.searchsorted(np.cumsum(lengths), at, side="right"), len(lengths) - 1)
        starts = np.asarray([s for s, _ in self.arcs])
        offset = at - np.concatenate([[0.0], np.cumsum(lengths)[:-1]])[which]
        direction = np.mod(starts[which] + offset, 360.0)

        def between(lohi: tuple[float, float], v: np.ndarray) -> np.ndarray:
            return lohi[0] + (lohi[1] - lohi[0]) * v

        g = between(self.gravity, u[:, 0])
        r = between(self.restitution, u[:, 2])
        f = between(self.friction, u[:, 3])
        return [
            PhysicsParams(float(g[i]), float(direction[i]), float(r[i]), float(f[i]))
            for i in range(n)
        ]

    def contains(self, world: PhysicsParams) -> bool:
        """Whether ``world`` lies in this family (ranges closed; an arc's end excluded)."""

        def within(lohi: tuple[float, float], v: float) -> bool:
            return lohi[0] - 1e-12 <= v <= lohi[1] + 1e-12

        d = world.gravity_direction % 360.0
        in_arc = any((d - s) % 360.0 < e - s for s, e in self.arcs)
        return (
            within(self.gravity, world.gravity)
            and in_arc
            and within(self.restitution, world.restitution)
            and within(self.friction, world.friction)
        )


def _around(centres: tuple[float, ...], half: float) -> tuple[tuple[float, float], ...]:
    return tuple((c - half, c + half) for c in centres)


AXES = (0.0, 90.0, 180.0, 270.0)
DIAGONALS = (45.0, 135.0, 225.0, 315.0)
FAMILIES: dict[str, WorldFamily] = {
    "train": WorldFamily("train", (0.1, 0.5), _around(AXES, 30.0)),
    "interp": WorldFamily("interp", (0.15, 0.45), _around(DIAGONALS, 15.0)),
    "extrap": WorldFamily("extrap", (0.6, 0.8), _around(AXES, 30.0)),
}
HELD_OUT = ("interp", "extrap")


def family(name: str) -> WorldFamily:
    """The named family; ``ValueError`` listing the names for an unknown one."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(
            f"unknown world family {name!r}; expected one of {', '.join(FAMILIES)}"
        ) from None


_family_named = family  # the class below has an argument named ``family``

SCHEDULE_SEED_SALT = 0x5C4ED
"""Mixed into a :class:`WorldSchedule`'s seed so its draws are independent of the env's own
per-sub-env generators (seeded ``seed + i``)."""


def _schedule_rng(seed: int | Sequence[int | None] | None) -> np.random.Generator | None:
    """The schedule's generator for a reset ``seed`` (None: keep the current one)."""
    if seed is None:
        return None
    if isinstance(seed, bool):
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if isinstance(seed, int | np.integer):
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed!r}")
        return np.random.default_rng([int(seed), SCHEDULE_SEED_SALT])
    entropy = [SCHEDULE_SEED_SALT]
    for i, s in enumerate(seed):
        if s is None:
            continue
        if isinstance(s, bool) or not isinstance(s, int | np.integer) or s < 0:
            raise ValueError(f"seed must hold integers >= 0 or None, got {seed!r}")
        entropy += [i, int(s)]
    return np.random.default_rng(entropy) if len(entropy) > 1 else None


class WorldSchedule(VectorWrapper):
    """Every episode of every sub-env in its own world, drawn from a :class:`WorldFamily`.

    Wraps a :class:`~env.vector.MovingMNISTVectorEnv`. Each episode of sub-env ``i`` runs, from
    its reset frame to its truncation, in one world drawn from ``family`` and lasts a number of
    steps drawn uniformly from ``episode_steps`` = (low, high) (both included). When a sub-env
    is truncated, its next world and length are drawn at once; the following step resets it
    (NEXT_STEP autoreset) into that world. ``infos`` gain ``world_id`` (N,) int64 (and its
    ``_world_id`` mask, all True): a counter that gives every draw a new id, never reused, so
    two frames share an id only if they are in the same world (-1 before the first reset).

    :meth:`hold` puts sub-envs in one given world from the next step, mid-episode, and keeps
    them there across episode ends (lengths still drawn, or, ``endless``, one last episode that
    never ends) until :meth:`release`. Reset
    ``options`` may hold only ``reset_mask``: the schedule owns the physics. Draws come from
    the schedule's own generator, seeded from ``seed`` here or from ``reset(seed=s)``.

    Args:
        env: the vector env to schedule (its physics and episode limits are overwritten).
        family: the worlds, a :class:`WorldFamily` or the name of one (:func:`family`).
        episode_steps: (low, high) integers, 1 <= low <= high: each episode's steps.
        seed: seeds the schedule's generator (as ``reset(seed=seed)`` would).
    """

    def __init__(
        self,
        env: MovingMNISTVectorEnv,
        family: WorldFamily | str,
        episode_steps: tuple[int, int] = (100, 400),
        seed: int | None = None,
    ) -> None:
        if not isinstance(env, MovingMNISTVectorEnv):
            raise ValueError(f"env must be a MovingMNISTVectorEnv, got {type(env).__name__}")
        if isinstance(family, str):
            family = _family_named(family)
        elif not isinstance(family, WorldFamily):
            raise ValueError(f"family must be a WorldFamily or a family name, got {family!r}")
        self.family = family
        self.episode_steps = _check_episode_steps(episode_steps)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
            raise ValueError(f"seed must be an integer >= 0 or None, got {seed!r}")
        super().__init__(env)
        self.env: MovingMNISTVectorEnv = env
        self._rng = _schedule_rng(seed) or np.random.default_rng()
        n = env.num_envs
        self._world_ids = np.full(n, -1, dtype=np.int64)  # (N,) id of each sub-env's world
        self._next_id = 0
        self._held = np.zeros(n, dtype=bool)  # (N,) sub-envs kept in their world
        self._endless = np.zeros(n, dtype=bool)  # (N,) held ones whose next episodes never end
        self._has_reset = False

    # ------------------------------------------------------------------ properties

    @property
    def world_ids(self) -> np.ndarray:
        """(N,) int64 id of each sub-env's current world (a copy; -1 before the first reset)."""
        return self._world_ids.copy()

    @property
    def held(self) -> np.ndarray:
        """(N,) bool, the sub-envs :meth:`hold` keeps in their world (a copy)."""
        return self._held.copy()

    @property
    def elapsed_steps(self) -> np.ndarray:
        """(N,) int64 steps since each sub-env's last reset (a copy)."""
        return self.env.elapsed_steps

    @property
    def episode_limits(self) -> np.ndarray:
        """(N,) int64 drawn length of each sub-env's current (or pending) episode (a copy)."""
        return self.env.episode_limits

    def physics(self, i: int) -> PhysicsParams:
        """The current physics of sub-env ``i`` (after a truncation: its next episode's)."""
        return self.env.physics(i)

    # ------------------------------------------------------------------ API

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Draw a world and a length for every sub-env reset (all, or ``options["reset_mask"]``;
        held ones keep their world), then reset them. ``seed`` re-seeds the env's sub-envs
        (``seed + i``) and the schedule's generator (independently of them)."""
        options = dict(options or {})
        extra = sorted(set(options) - {"reset_mask"})
        if extra:
            raise ValueError(
                f"options may hold only reset_mask (the schedule owns the physics), got {extra}"
            )
        mask = check_mask(options.get("reset_mask"), self.num_envs)
        if seed is not None and not isinstance(seed, int | np.integer):
            try:
                seed = list(seed)
            except TypeError:
                raise ValueError(f"seed must be an int or a list of ints, got {seed!r}") from None
            if len(seed) != self.num_envs:
                raise ValueError(f"seed must be an int or a list of {self.num_envs}, got {seed!r}")
        rng = _schedule_rng(seed)  # validates before anything changes
        if rng is not None:
            self._rng = rng
        self._draw(mask)
        obs, infos = self.env.reset(seed=seed, options=options)
        self._has_reset = True
        return obs, self._infos(infos)

    def step(
        self, actions: Any = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step the env; every sub-env whose episode ended gets its next world and length now,
        in which the next step resets it."""
        if not self._has_reset:
            from gymnasium.error import ResetNeeded

            raise ResetNeeded("call reset() before step()")
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        infos = self._infos(infos)  # the ids of the frames just returned
        ended = np.logical_or(terminations, truncations)
        if ended.any():
            self._draw(ended)
        return obs, rewards, terminations, truncations, infos

    def hold(self, world: PhysicsParams, mask: Any = None, *, endless: bool = False) -> None:
        """Put all sub-envs, or those where ``mask`` (bool, (N,)) is True, in ``world`` from the
        next step (mid-episode) and keep them there across episode ends until :meth:`release`.
        They report one new ``world_id``, assigned now. With ``endless`` the episodes they start
        from their next episode end on never end (until :meth:`release`); the current one keeps
        its length."""
        if not isinstance(world, PhysicsParams):
            raise ValueError(f"world must be a PhysicsParams, got {world!r}")
        mask = check_mask(mask, self.num_envs)
        self.env.set_physics(mask=mask, **world.as_dict())
        self._world_ids[mask] = self._new_ids(1)[0]
        self._held |= mask
        if endless:
            self._endless |= mask

    def release(self, mask: Any = None) -> None:
        """Resume drawing worlds for all sub-envs, or those in ``mask``, at their next episode
        end (the current episode, and one already pending reset, stay in the held world). An
        endless held episode gets a drawn length, counted from now."""
        mask = check_mask(mask, self.num_envs)
        self._held &= ~mask
        ending = mask & self._endless
        self._endless &= ~mask
        if ending.any():
            lo, hi = self.episode_steps
            limits = self.env.episode_limits
            drawn = self._rng.integers(lo, hi, endpoint=True, size=int(ending.sum()))
            limits[ending] = self.env.elapsed_steps[ending] + drawn
            self.env.set_episode_limits(limits, mask=ending)

    def set_physics(self, mask: Any = None, **params: Any) -> None:
        """Change the current world of all sub-envs or those in ``mask`` from the next step
        (see :meth:`MovingMNISTVectorEnv.set_physics`); each gets a new ``world_id``. The
        schedule replaces it at the sub-env's episode end unless it is held."""
        mask = check_mask(mask, self.num_envs)
        self.env.set_physics(mask=mask, **params)
        self._world_ids[mask] = self._new_ids(int(mask.sum()))

    def set_gravity(self, gravity: float, mask: Any = None) -> None:
        """``set_physics(mask, gravity=gravity)``."""
        self.set_physics(mask=mask, gravity=gravity)

    def get_state(self) -> dict[str, Any]:
        """The env's :meth:`~MovingMNISTVectorEnv.get_state` (key ``env``) plus the schedule's
        generator state, world ids, id counter and held mask: a bit-exact continuation."""
        return {
            "env": self.env.get_state(),
            "family": self.family.name,
            "episode_steps": self.episode_steps,
            "rng": self._rng.bit_generator.state,
            "world_ids": self._world_ids.copy(),
            "next_world_id": self._next_id,
            "held": self._held.copy(),
            "endless": self._endless.copy(),
            "has_reset": self._has_reset,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict (from a schedule built with the same arguments)."""
        if state["family"] != self.family.name:
            raise ValueError(
                f"state is for world family {state['family']!r}, this schedule draws from "
                f"{self.family.name!r}"
            )
        if tuple(state["episode_steps"]) != self.episode_steps:
            raise ValueError(
                f"state is for episode_steps {tuple(state['episode_steps'])}, this schedule "
                f"has {self.episode_steps}"
            )
        self.env.set_state(state["env"])
        self._rng = rng_from_state(state["rng"])
        self._world_ids = np.asarray(state["world_ids"], dtype=np.int64).copy()
        self._next_id = int(state["next_world_id"])
        self._held = np.asarray(state["held"], dtype=bool).copy()
        # States written before ``endless`` existed had none.
        self._endless = np.asarray(state.get("endless", np.zeros_like(self._held)), bool).copy()
        self._has_reset = bool(state["has_reset"])

    # ------------------------------------------------------------------ helpers

    def _new_ids(self, k: int) -> np.ndarray:
        """(k,) int64 fresh world ids."""
        ids = np.arange(self._next_id, self._next_id + k, dtype=np.int64)
        self._next_id += k
        return ids

    def _draw(self, mask: np.ndarray) -> None:
        """Next worlds (not for held sub-envs) then lengths for the sub-envs in ``mask``, in
        index order, from the schedule's generator; set on the env from its next step."""
        drawn = mask & ~self._held
        self.env.set_worlds(self.family.sample(self._rng, int(drawn.sum())), mask=drawn)
        self._world_ids[drawn] = self._new_ids(int(drawn.sum()))
        lo, hi = self.episode_steps
        lengths = self.env.episode_limits
        lengths[mask] = self._rng.integers(lo, hi, endpoint=True, size=int(mask.sum()))
        lengths[mask & self._endless] = NO_EPISODE_LIMIT
        self.env.set_episode_limits(lengths, mask=mask)

    def _infos(self, infos: dict[str, Any]) -> dict[str, Any]:
        infos["world_id"] = self._world_ids.copy()
        infos["_world_id"] = np.ones(self.num_envs, dtype=bool)
        return infos


def _check_episode_steps(episode_steps: Any) -> tuple[int, int]:
    """``(low, high)`` ints with 1 <= low <= high, else ``ValueError``."""
    try:
        lo, hi = episode_steps
    except (TypeError, ValueError):
        raise ValueError(
            f"episode_steps must be a pair (low, high), got {episode_steps!r}"
        ) from None
    if any(isinstance(v, bool) or not isinstance(v, int | np.integer) for v in (lo, hi)) or not (
        1 <= lo <= hi
    ):
        raise ValueError(
            f"episode_steps must be integers with 1 <= low <= high, got {episode_steps!r}"
        )
    return int(lo), int(hi)
