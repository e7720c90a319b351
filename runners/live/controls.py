"""What G and the arrows do, and what a switch is, under each protocol: the live view's one
difference between the protocols (``CONTROLS``, by the protocol's kind).

- ``HeldWorlds`` (the worlds protocol): each stream lives in its own training world (the
  drivers' ``stream_physics``) until G holds every stream of every track in one *target* world
  (each a new episode there, with an empty memory); G again gives them back to the training
  worlds, each a new episode in a freshly drawn one. Up/Down and Left/Right move the target
  (applied at once while the streams are held).
- ``OnePhysics`` (the paper protocol): one physics acts on every stream; G toggles its gravity
  between the base and the shift value, Up/Down move the shift value, Left/Right turn gravity.

The state they change (the physics shown, the target, the switches so far, the message line) is
the ``App``'s; the weights freeze at a switch away from the base world in memory mode
(``App.freeze``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np
import pygame

from runners.live.model import world_label

if TYPE_CHECKING:
    from collections.abc import Callable

    from runners.live.model import TrackDriver, WorldView

GRAVITY_STEP = 0.05
DIRECTION_STEP = 15.0
MAX_GRAVITY = 2.0
#: Up / Down: the shift (worlds: target) gravity +/- ``GRAVITY_STEP``
NUDGE = {pygame.K_UP: GRAVITY_STEP, pygame.K_DOWN: -GRAVITY_STEP}
#: Left / Right: the direction (worlds: the target's) -/+ ``DIRECTION_STEP`` degrees
TURN = {pygame.K_LEFT: -DIRECTION_STEP, pygame.K_RIGHT: DIRECTION_STEP}


class Settings(Protocol):
    """The app's settings the controls read (``runners.live.app.AppConfig`` is one)."""

    base_gravity: float  # the base world's (paper) or the training worlds' sign (worlds)
    family: Callable[[float, float], str]  # a world's family name ("": none)


class App(Protocol):
    """The app's state the controls read and change (``runners.live.app.App`` is one)."""

    drivers: list[TrackDriver]
    cfg: Settings
    gravity: float  # the physics shown: the one physics, or the world the streams are held in
    direction: float
    held: bool  # every stream held in one world (``HeldWorlds``)
    shift_gravity: float  # G's target (paper: the shift value)
    shift_direction: float
    switches: list[tuple[int, float]]  # (step, gravity) so far
    message: str

    @property
    def step(self) -> int: ...
    def freeze(self) -> None: ...
    def switched(self, step: int, gravity: float) -> None: ...
    def world_label(self, gravity: float, direction: float) -> str: ...


def clip_gravity(gravity: float) -> float:
    """A target or shift gravity: at least ``GRAVITY_STEP`` (no gravity is the base world's),
    at most ``MAX_GRAVITY``."""
    return float(np.clip(gravity, GRAVITY_STEP, MAX_GRAVITY))


class OnePhysics:
    """The paper protocol's controls: one physics for every stream, G toggles its gravity."""

    def __init__(self, app: App) -> None:
        self.app = app

    def set_physics(self, gravity: float, direction: float, why: str = "") -> None:
        """Apply new physics to every track at the current step boundary."""
        app = self.app
        gravity = float(np.clip(gravity, 0.0, MAX_GRAVITY))
        direction = float(direction % 360.0)
        if gravity == app.gravity and direction == app.direction:
            return
        changed_g = abs(gravity - app.gravity) > 1e-12
        for d in app.drivers:
            d.set_physics(gravity, direction)
        app.gravity, app.direction = gravity, direction
        if changed_g:
            app.switches.append((app.step, gravity))
            if abs(gravity - app.cfg.base_gravity) > 1e-12:  # a switch away from the base world
                app.freeze()
        app.message = why or world_label(gravity, direction)

    def key(self, key: int) -> None:
        """G, Up/Down, Left/Right: they act on the one physics."""
        app = self.app
        base = app.cfg.base_gravity
        shifted = abs(app.gravity - base) > 1e-12
        if key == pygame.K_g:
            self.set_physics(base if shifted else app.shift_gravity, app.direction)
        elif key in NUDGE:
            app.shift_gravity = clip_gravity(app.shift_gravity + NUDGE[key])
            if shifted:
                self.set_physics(app.shift_gravity, app.direction)
            else:
                app.message = f"shift value {app.shift_gravity:.2f} (G applies it)"
        else:
            self.set_physics(app.gravity, app.direction + TURN[key])

    def scripted(self, at: int, gravity: float) -> None:
        """A scripted switch due before step ``at``: the gravity changes."""
        self.set_physics(gravity, self.app.direction, f"scripted switch @ {at}: g {gravity:.2f}")

    def observe(self, step: int, gravity: float, direction: float) -> None:
        """A switch the loop made itself before ``step``: recorded where the gravity changed."""
        if abs(gravity - self.app.gravity) > 1e-12:
            self.app.switches.append((step, gravity))

    def show(self, world: WorldView) -> None:
        """Nothing beyond the one physics."""


class HeldWorlds:
    """The worlds protocol's controls: G holds every stream in the target world, or gives them
    back to the training worlds."""

    def __init__(self, app: App) -> None:
        self.app = app
        app.held = bool(app.drivers[0].held)
        app.shift_gravity = clip_gravity(app.shift_gravity)

    def hold(self, gravity: float, direction: float, why: str = "") -> None:
        """Hold every stream of every track in one world from the next step: each starts a new
        episode there with an empty memory (as at train_online's switch)."""
        app = self.app
        gravity, direction = clip_gravity(gravity), float(direction % 360.0)
        if app.held and gravity == app.gravity and direction == app.direction:
            return
        for d in app.drivers:
            d.set_physics(gravity, direction)
        app.gravity, app.direction = gravity, direction
        app.held = bool(app.drivers[0].held)
        app.switched(app.step, gravity)
        app.freeze()
        app.message = why or "every stream in " + app.world_label(gravity, direction)

    def release(self, why: str = "") -> None:
        """Give every stream back to the training worlds: each starts a new episode in a world
        freshly drawn from the training family (the weights stay as they are)."""
        app = self.app
        if not app.held:
            return
        for d in app.drivers:
            d.release()
        app.gravity, app.direction = app.drivers[0].physics()
        app.held = bool(app.drivers[0].held)
        app.switched(app.step, app.cfg.base_gravity)
        app.message = why or "back to the training worlds (each stream its own)"

    def key(self, key: int) -> None:
        """G, Up/Down, Left/Right: they act on the target world."""
        app = self.app
        if key == pygame.K_g:
            if app.held:
                self.release()
            else:
                self.hold(app.shift_gravity, app.shift_direction)
            return
        if key in NUDGE:
            app.shift_gravity = clip_gravity(app.shift_gravity + NUDGE[key])
        else:
            app.shift_direction = float((app.shift_direction + TURN[key]) % 360.0)
        if app.held:  # applied at once: every stream starts again in the new target
            self.hold(app.shift_gravity, app.shift_direction)
        else:
            label = app.world_label(app.shift_gravity, app.shift_direction)
            app.message = f"target {label} (G applies it)"

    def scripted(self, at: int, gravity: float) -> None:
        """A scripted switch due before step ``at``: into (gravity, the target's direction), or
        back to the training worlds at the base gravity."""
        if abs(gravity - self.app.cfg.base_gravity) > 1e-12:
            self.hold(gravity, self.app.shift_direction, f"scripted switch @ {at}")
        else:
            self.release(f"scripted switch @ {at}: back to the training worlds")

    def observe(self, step: int, gravity: float, direction: float) -> None:
        """A hold or a release the loop made itself before ``step``."""
        app = self.app
        held = bool(app.drivers[0].held)
        if held != app.held or (held and (gravity, direction) != (app.gravity, app.direction)):
            app.switched(step, gravity if held else app.cfg.base_gravity)
            where = "back to the training worlds"
            if held:
                where = "every stream in " + app.world_label(gravity, direction)
            app.message = f"scripted switch @ {step}: {where}"
        app.held = held

    def show(self, world: WorldView) -> None:
        """Each shown stream's world and family, whether the streams are held, and the target."""
        app, family = self.app, self.app.cfg.family
        streams = app.drivers[0].stream_physics()
        world.streams = np.zeros((0, 2)) if streams is None else np.asarray(streams, float)
        world.stream_families = [family(g, d) for g, d in world.streams.tolist()]
        world.held = app.held
        world.family = family(app.gravity, app.direction) if app.held else ""
        world.target = (app.shift_gravity, app.shift_direction)
        world.target_family = family(app.shift_gravity, app.shift_direction)


Controls = OnePhysics | HeldWorlds
#: Each protocol's controls, by its kind (``runners.online.protocols.PROTOCOLS``).
CONTROLS: dict[str, type[OnePhysics] | type[HeldWorlds]] = {"worlds": HeldWorlds, "paper": OnePhysics}
