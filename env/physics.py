"""Physics of the Moving MNIST world: the switchable parameters and one batched integration step.

Per frame, for every digit (semi-implicit Euler, velocities in px/frame, accelerations in
px/frame^2, image coordinates: x right, y down, positions are the top-left corner of the digit)::

    v <- (1 - friction) * v + gravity * (cos(theta), sin(theta))     theta = gravity_direction
    p <- p + v
    a coordinate past 0 or `limit` is mirrored back inside, and that velocity component flips
    sign and is scaled by `restitution`

The step is written once for a batch of worlds, each with its own parameters, and is used by the
single env (a batch of one), the vector env and the dataset generator.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PHYSICS_FIELDS: tuple[str, ...] = ("gravity", "gravity_direction", "restitution", "friction")
PHYSICS_FEATURES: tuple[str, ...] = ("gravity_x", "gravity_y", "restitution", "friction")
"""The columns of :func:`physics_features`: a world as a vector with no angle wrap-around."""


def _as_float(name: str, value: Any) -> float:
    """``float(value)`` or a ValueError naming the parameter and the value."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return out


@dataclass(frozen=True)
class PhysicsParams:
    """The switchable physics of one world. Invalid values raise ``ValueError`` naming the field."""

    gravity: float = 0.0
    """Magnitude of the constant acceleration, px/frame^2 (the paper's shift is 0.5)."""
    gravity_direction: float = 90.0
    """Direction of gravity in degrees, image coordinates: 0 = +x right, 90 = +y down, 270 = up."""
    restitution: float = 1.0
    """Factor applied to the flipped velocity component at a wall bounce (>= 0; 1 = elastic)."""
    friction: float = 0.0
    """Fraction of the velocity lost every frame, in [0, 1)."""

    def __post_init__(self) -> None:
        for name in PHYSICS_FIELDS:
            object.__setattr__(self, name, _as_float(name, getattr(self, name)))
        if self.restitution < 0.0:
            raise ValueError(f"restitution must be >= 0, got {self.restitution!r}")
        if not 0.0 <= self.friction < 1.0:
            raise ValueError(f"friction must be in [0, 1), got {self.friction!r}")

    def replace(self, **changes: Any) -> PhysicsParams:
        """A copy with ``changes`` applied; an unknown name raises ``ValueError``."""
        check_physics_names(changes)
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, float]:
        """``{name: value}`` for the four parameters."""
        return {name: getattr(self, name) for name in PHYSICS_FIELDS}

    @property
    def acceleration(self) -> tuple[float, float]:
        """Gravity as an (x, y) vector in px/frame^2."""
        ux, uy = direction_vector(self.gravity_direction)
        return self.gravity * ux, self.gravity * uy


def physics_features(params: PhysicsParams) -> np.ndarray:
    """(4,) float64 ``(ax, ay, restitution, friction)`` of one world (see ``PHYSICS_FEATURES``),
    where (ax, ay) is its gravity vector in px/frame^2 (:attr:`PhysicsParams.acceleration`)."""
    ax, ay = params.acceleration
    return np.array([ax, ay, params.restitution, params.friction], dtype=np.float64)


def check_physics_names(params: dict[str, Any]) -> None:
    """Raise ``ValueError`` for any key of ``params`` that is not a physics parameter."""
    for name, value in params.items():
        if name not in PHYSICS_FIELDS:
            raise ValueError(
                f"unknown physics parameter {name!r} (value {value!r}); "
                f"expected one of {', '.join(PHYSICS_FIELDS)}"
            )


def direction_vector(degrees: float) -> tuple[float, float]:
    """Unit vector for an angle in degrees; exact for multiples of 90 (cos(90 deg) is not 0.0)."""
    quarter, rest = divmod(float(degrees), 90.0)
    if rest == 0.0:
        return ((1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0))[int(quarter) % 4]
    rad = math.radians(degrees)
    return math.cos(rad), math.sin(rad)


class PhysicsArrays:
    """Per-world physics of a batch of worlds, as arrays of shape (N,) plus gravity as (N, 2)."""

    def __init__(self, num_worlds: int, params: PhysicsParams) -> None:
        self.gravity = np.full(num_worlds, params.gravity)
        self.gravity_direction = np.full(num_worlds, params.gravity_direction)
        self.restitution = np.full(num_worlds, params.restitution)
        self.friction = np.full(num_worlds, params.friction)
        self.acceleration = np.zeros((num_worlds, 2))  # (N, 2) px/frame^2, x then y
        self._refresh()

    def _refresh(self) -> None:
        """Recompute the derived acceleration and the fast-path flags after a change."""
        for deg in np.unique(self.gravity_direction):
            sel = self.gravity_direction == deg
            ux, uy = direction_vector(float(deg))
            self.acceleration[sel, 0] = self.gravity[sel] * ux
            self.acceleration[sel, 1] = self.gravity[sel] * uy
        self._refresh_flags()

    def _refresh_flags(self) -> None:
        self.any_gravity = bool(np.any(self.acceleration != 0.0))
        self.any_friction = bool(np.any(self.friction != 0.0))
        self.all_elastic = bool(np.all(self.restitution == 1.0))

    def get(self, i: int) -> PhysicsParams:
        """The parameters of world ``i``."""
        return PhysicsParams(*(float(getattr(self, name)[i]) for name in PHYSICS_FIELDS))

    def features(self) -> np.ndarray:
        """(N, 4) float64 :func:`physics_features` of every world, in order."""
        return np.column_stack(
            [self.acceleration[:, 0], self.acceleration[:, 1], self.restitution, self.friction]
        )

    def update(self, mask: np.ndarray, **params: Any) -> None:
        """Set ``params`` on the worlds where ``mask`` (bool, (N,)) is True, after validation.

        Validation happens first for every selected world, so a bad value changes nothing.
        """
        check_physics_names(params)
        for i in np.flatnonzero(mask):
            self.get(int(i)).replace(**params)  # raises ValueError naming the field
        for name, value in params.items():
            getattr(self, name)[mask] = float(value)
        self._refresh()

    def assign(self, indices: np.ndarray, worlds: Sequence[PhysicsParams]) -> None:
        """Set world ``indices[k]`` (K,) to ``worlds[k]`` (K ``PhysicsParams``, valid by
        construction); one update of the derived values, whatever K."""
        if len(indices) != len(worlds):
            raise ValueError(f"worlds must hold {len(indices)} PhysicsParams, got {len(worlds)}")
        for i, world in zip(indices, worlds, strict=True):
            for name in PHYSICS_FIELDS:
                getattr(self, name)[i] = getattr(world, name)
            self.acceleration[i] = world.acceleration  # what _refresh computes, bit for bit
        self._refresh_flags()

    def state(self) -> dict[str, np.ndarray]:
        """Copies of the four per-world arrays."""
        return {name: getattr(self, name).copy() for name in PHYSICS_FIELDS}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Inverse of :meth:`state`."""
        for name in PHYSICS_FIELDS:
            arr = np.asarray(state[name], dtype=np.float64)
            if arr.shape != self.gravity.shape:
                raise ValueError(
                    f"physics {name} has shape {arr.shape}, expected {self.gravity.shape}"
                )
            getattr(self, name)[:] = arr
        self._refresh()


def physics_step(
    positions: np.ndarray, velocities: np.ndarray, physics: PhysicsArrays, limit: float
) -> None:
    """Advance every world by one frame, in place.

    Args:
        positions: (N, D, 2) float64, top-left corners, x then y, in [0, limit].
        velocities: (N, D, 2) float64, px/frame.
        physics: the per-world parameters (N worlds).
        limit: the largest coordinate of a top-left corner (canvas size - digit size, 36).
    """
    if physics.any_friction:
        velocities *= (1.0 - physics.friction)[:, None, None]
    if physics.any_gravity:
        velocities += physics.acceleration[:, None, :]
    positions += velocities
    low = positions < 0.0
    high = positions > limit
    if low.any() or high.any():
        np.negative(positions, out=positions, where=low)
        np.subtract(2.0 * limit, positions, out=positions, where=high)
        bounced = low | high
        np.negative(velocities, out=velocities, where=bounced)
        if not physics.all_elastic:
            scale = np.broadcast_to(physics.restitution[:, None, None], velocities.shape)
            np.multiply(velocities, scale, out=velocities, where=bounced)
        # A very fast digit could be mirrored past the other wall: keep it on the canvas.
        np.clip(positions, 0.0, limit, out=positions)
