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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from env.physics import PhysicsParams


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

