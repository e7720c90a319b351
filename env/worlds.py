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

A :class:`WorldSchedule` runs every episode of every stream of the vector env in a world drawn
from a family (docs/env.md, "A schedule of worlds").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium.vector import VectorWrapper

from env.blocks import EnvBlock
from env.core import int_at_least
from env.physics import PhysicsParams
from env.vector import NO_EPISODE_LIMIT, MovingMNISTVectorEnv, check_mask, rng_from_state


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
        return [PhysicsParams(*map(float, w)) for w in zip(g, direction, r, f, strict=True)]

    def overlaps(self, other: WorldFamily) -> bool:
        """Whether some world lies in both families: their gravity, restitution and friction
        ranges intersect and so do their direction arcs (a shared edge counts)."""

        def meet(a: tuple[float, float], b: tuple[float, float]) -> bool:
            return a[0] <= b[1] + 1e-12 and b[0] <= a[1] + 1e-12

        def arcs_meet(a: tuple[float, float], b: tuple[float, float]) -> bool:
            # b's start within a (mod 360), or a's start within b: half-open arcs [s, e)
            return (b[0] - a[0]) % 360.0 < a[1] - a[0] or (a[0] - b[0]) % 360.0 < b[1] - b[0]

        return (
            meet(self.gravity, other.gravity)
            and meet(self.restitution, other.restitution)
            and meet(self.friction, other.friction)
            and any(arcs_meet(a, b) for a in self.arcs for b in other.arcs)
        )

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


def check_disjoint(families: Sequence[WorldFamily]) -> None:
    """``ValueError`` naming the first two families that share a world."""
    for i, a in enumerate(families):
        for b in families[i + 1 :]:
            if a.overlaps(b):
                raise ValueError(
                    f"world families {a.name} and {b.name} overlap (their gravity, direction, "
                    f"restitution and friction ranges all meet): held-out worlds must be unseen"
                )


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
        if not int_at_least(s, 0):
            raise ValueError(f"seed must hold integers >= 0 or None, got {seed!r}")
        entropy += [i, int(s)]
    return np.random.default_rng(entropy) if len(entropy) > 1 else None


class WorldSchedule(VectorWrapper):
    """Every episode of every sub-env in its own world, drawn from a :class:`WorldFamily`.

    Wraps a :class:`~env.vector.MovingMNISTVectorEnv`. Each episode of sub-env ``i`` runs, from
    its reset frame to its truncation, in one world drawn from ``family`` and lasts a number of
    steps drawn uniformly from ``episode_steps`` = (low, high) (both included); both are drawn
    when the sub-env is truncated, and the next step resets it (NEXT_STEP) into that world.
    ``infos`` gain ``world_id`` (N,) int64 (and ``_world_id``): a new id for every draw, never
    reused, so two frames share an id only if they share a world (-1 before the first reset).

    **Groups.** With ``group_size=S`` (dividing N) sub-envs ``g*S .. g*S+S-1`` form group ``g``,
    the unit of the schedule: its S sub-envs share one world and one length per episode, each
    starting its own next episode from its own generator. A group keeps its world for R
    episodes, R drawn uniformly from ``residency`` = (low, high) with the world. ``infos`` gain
    ``group`` (N,) int64 (and ``_group``). The defaults ``group_size=1, residency=(1, 1)`` are one
    world per episode of every sub-env. Masks given to :meth:`hold`, :meth:`release`,
    :meth:`set_physics` and ``reset_mask`` must select whole groups.

    :meth:`hold` keeps sub-envs in one given world until :meth:`release`. Reset ``options`` may
    hold only ``reset_mask``: the schedule owns the physics. Draws come from the schedule's own
    generator, seeded from ``seed`` here or from ``reset(seed=s)``.

    Args:
        env: the vector env to schedule (its physics and episode limits are overwritten).
        family: the worlds, a :class:`WorldFamily` or the name of one (:func:`family`).
        episode_steps: (low, high) integers, 1 <= low <= high: each episode's steps.
        seed: seeds the schedule's generator (as ``reset(seed=seed)`` would).
        group_size: sub-envs per group (a divisor of N).
        residency: (low, high) integers, 1 <= low <= high: episodes a group spends in one world.
    """

    def __init__(
        self,
        env: MovingMNISTVectorEnv,
        family: WorldFamily | str,
        episode_steps: tuple[int, int] = (100, 400),
        seed: int | None = None,
        group_size: int = 1,
        residency: tuple[int, int] = (1, 1),
    ) -> None:
        if not isinstance(env, MovingMNISTVectorEnv | EnvBlock):  # a block drives as an env
            raise ValueError(f"env must be a MovingMNISTVectorEnv, got {type(env).__name__}")
        if isinstance(family, str):
            family = _family_named(family)
        elif not isinstance(family, WorldFamily):
            raise ValueError(f"family must be a WorldFamily or a family name, got {family!r}")
        self.family = family
        self.episode_steps = _check_episode_steps(episode_steps)
        self.residency = _check_episode_steps(residency, "residency")
        n = env.num_envs
        if not int_at_least(group_size, 1) or n % group_size:
            raise ValueError(
                f"group_size must be a positive divisor of num_envs={n}, got {group_size!r}"
            )
        self.group_size = int(group_size)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
            raise ValueError(f"seed must be an integer >= 0 or None, got {seed!r}")
        super().__init__(env)
        self.env: MovingMNISTVectorEnv = env
        self._rng = _schedule_rng(seed) or np.random.default_rng()
        self._world_ids = np.full(n, -1, dtype=np.int64)  # (N,) id of each sub-env's world
        self._next_id = 0
        self._held = np.zeros(n, dtype=bool)  # (N,) sub-envs kept in their world
        self._endless = np.zeros(n, dtype=bool)  # (N,) held ones whose next episodes never end
        self._left = np.zeros(self.num_groups, dtype=np.int64)  # (W,) episodes left in a world
        self._has_reset = False

    # ------------------------------------------------------------------ properties

    @property
    def device(self) -> Any:
        """The env's worlds' torch device (None: numpy on the host)."""
        return self.env.device

    @property
    def num_groups(self) -> int:
        """W = N / group_size."""
        return self.num_envs // self.group_size

    @property
    def groups(self) -> np.ndarray:
        """(N,) int64 group of each sub-env: ``i // group_size``."""
        return np.arange(self.num_envs, dtype=np.int64) // self.group_size

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
        mask = self._group_mask(options.get("reset_mask"))
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
        self._left[self._of_groups(mask)] = 0  # a reset starts a group's residency afresh
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
        mask = self._group_mask(mask)
        self.env.set_physics(mask=mask, **world.as_dict())
        self._world_ids[mask] = self._new_ids(1)[0]
        self._held |= mask
        if endless:
            self._endless |= mask

    def release(self, mask: Any = None) -> None:
        """Resume drawing worlds for all sub-envs, or those in ``mask``, at their next episode
        end (the current episode, and one already pending reset, stay in the held world). An
        endless held episode gets a drawn length, counted from now."""
        mask = self._group_mask(mask)
        self._left[self._of_groups(mask & self._held)] = 1  # a new world at the next end
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
        mask = self._group_mask(mask)
        self.env.set_physics(mask=mask, **params)
        groups = self._of_groups(mask)
        self._world_ids[mask] = np.repeat(self._new_ids(int(groups.sum())), self.group_size)

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
            "group_size": self.group_size,
            "residency": self.residency,
            "left": self._left.copy(),
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
        layout = (int(state["group_size"]), tuple(state["residency"]))
        if layout != (self.group_size, self.residency):
            raise ValueError(
                f"state is for group_size {layout[0]}, residency {layout[1]}; this schedule has "
                f"group_size {self.group_size}, residency {self.residency}"
            )
        self.env.set_state(state["env"])
        self._left = np.asarray(state["left"], np.int64).copy()
        self._rng = rng_from_state(state["rng"])
        self._world_ids = np.asarray(state["world_ids"], dtype=np.int64).copy()
        self._next_id = int(state["next_world_id"])
        self._held = np.asarray(state["held"], dtype=bool).copy()
        self._endless = np.asarray(state["endless"], bool).copy()
        self._has_reset = bool(state["has_reset"])

    # ------------------------------------------------------------------ helpers

    def _new_ids(self, k: int) -> np.ndarray:
        """(k,) int64 fresh world ids."""
        ids = np.arange(self._next_id, self._next_id + k, dtype=np.int64)
        self._next_id += k
        return ids

    def _group_mask(self, mask: Any) -> np.ndarray:
        """A validated (N,) bool mask (None: all) that selects whole groups."""
        mask = check_mask(mask, self.num_envs)
        rows = mask.reshape(self.num_groups, self.group_size)
        if not (rows.all(1) | ~rows.any(1)).all():
            raise ValueError(
                f"mask must select whole groups of {self.group_size} sub-envs "
                f"(sub-envs g*{self.group_size} .. g*{self.group_size}+{self.group_size - 1}), "
                f"got {mask!r}"
            )
        return mask

    def _of_groups(self, mask: np.ndarray) -> np.ndarray:
        """(W,) bool: the groups with a sub-env in the (N,) ``mask``."""
        return mask.reshape(self.num_groups, self.group_size).any(1)

    def _draw(self, mask: np.ndarray) -> None:
        """For the groups in ``mask`` (whose episodes end): count the episode off their
        residency; those at its end (and not held) draw their next world, in group order; then
        every one of them its next episode length; then the new worlds' residencies (drawn only
        when low < high). All from the schedule's generator; set on the env from its next step."""
        s = self.group_size
        groups = self._of_groups(mask)
        held = self._of_groups(self._held)
        self._left[groups] -= 1
        new = groups & ~held & (self._left <= 0)
        k = int(new.sum())
        drawn = np.repeat(new, s)
        self.env.set_worlds(
            [w for w in self.family.sample(self._rng, k) for _ in range(s)], mask=drawn
        )
        self._world_ids[drawn] = np.repeat(self._new_ids(k), s)
        lo, hi = self.episode_steps
        lengths = self.env.episode_limits
        per_group = self._rng.integers(lo, hi, endpoint=True, size=int(groups.sum()))
        lengths[np.repeat(groups, s)] = np.repeat(per_group, s)
        ending = np.repeat(groups, s)
        lengths[ending & self._endless] = NO_EPISODE_LIMIT
        self.env.set_episode_limits(lengths, mask=ending)
        r_lo, r_hi = self.residency
        if r_lo == r_hi:
            self._left[new] = r_lo
        else:
            self._left[new] = self._rng.integers(r_lo, r_hi, endpoint=True, size=k)

    def _infos(self, infos: dict[str, Any]) -> dict[str, Any]:
        infos["world_id"] = self._world_ids.copy()
        infos["_world_id"] = np.ones(self.num_envs, dtype=bool)
        infos["group"] = self.groups
        infos["_group"] = np.ones(self.num_envs, dtype=bool)
        return infos


def _check_episode_steps(episode_steps: Any, name: str = "episode_steps") -> tuple[int, int]:
    """``(low, high)`` ints with 1 <= low <= high, else ``ValueError`` naming ``name``."""
    try:
        lo, hi = episode_steps
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (low, high), got {episode_steps!r}") from None
    if not (int_at_least(lo, 1) and int_at_least(hi, lo)):
        raise ValueError(f"{name} must be integers with 1 <= low <= high, got {episode_steps!r}")
    return int(lo), int(hi)
