"""A fake metrics feed with the driver interface, for developing and testing the view alone.

``FakeDriver`` imitates what the paper predicts a track does around a gravity switch: surprisal
spikes and decays, the detector fires and fills the buffer with shift-world entries, the rolling
error jumps and comes back down, faster with memory (tracks B, C) than without (A). Its frames
are two bouncing squares under the same gravity (``FakeWorld(worlds=True)``: each stream in its
own world, redrawn every episode, until ``hold`` puts every stream in one, as the worlds
protocol's ``ScheduledStreams`` does). Nothing here is a model of the learner; it only produces
plausible shapes so that every panel has something to draw.
"""

from __future__ import annotations

import math

import numpy as np

from agent import tracks
from runners.live.model import (
    BOUNDARY,
    BUFFER_SIZE,
    DELTA_ABS,
    NORM_ERROR,
    SHIFT_SHARE,
    SURPRISAL,
    THRESHOLD,
    Predictions,
)

#: The fake predictions' horizons (frames ahead).
FAKE_HORIZONS = (2, 4, 8)

#: The fake training worlds (``worlds=True``): gravity in this range, pointing within
#: ``FAKE_SPREAD`` degrees of an axis, for an episode of ``FAKE_EPISODE`` steps (low, high).
FAKE_GRAVITY = (0.1, 0.5)
FAKE_SPREAD = 30.0
FAKE_EPISODE = (40, 120)


class FakeWorld:
    """Two 12x12 squares bouncing in a 64x64 canvas, per stream, under one gravity; with
    ``worlds=True`` each stream under its own (``streams``: (S, 2) gravity, direction), drawn
    afresh every episode, until ``hold`` puts every stream in one world (``release`` ends it)."""

    def __init__(self, n_streams: int = 4, seed: int = 0, worlds: bool = False) -> None:
        self._rng = np.random.default_rng(seed)
        self.pos = self._rng.uniform(0, 52, size=(n_streams, 2, 2))
        self.vel = self._rng.uniform(-3, 3, size=(n_streams, 2, 2))
        self.gravity = 0.0
        self.direction = 90.0
        self.owner: str | None = None
        self.worlds = worlds
        self.held = False
        self.streams = np.zeros((n_streams, 2))  # (S, 2) gravity, direction of each stream
        self.left = np.zeros(n_streams, np.int64)  # steps left in each stream's episode
        if worlds:
            self._draw(np.ones(n_streams, bool))

    def _draw(self, mask: np.ndarray) -> None:
        """New episodes for the streams in ``mask``: new squares, a length and (unless held) a
        training world each."""
        k = int(mask.sum())
        self.pos[mask] = self._rng.uniform(0, 52, size=(k, 2, 2))
        self.vel[mask] = self._rng.uniform(-3, 3, size=(k, 2, 2))
        self.left[mask] = self._rng.integers(*FAKE_EPISODE, size=k)
        if not self.held:
            axes = 90.0 * self._rng.integers(0, 4, size=k)
            spread = self._rng.uniform(-FAKE_SPREAD, FAKE_SPREAD, size=k)
            self.streams[mask, 0] = self._rng.uniform(*FAKE_GRAVITY, size=k)
            self.streams[mask, 1] = (axes + spread) % 360.0

    def hold(self, gravity: float, direction: float) -> None:
        """Every stream in one world from a new episode (``worlds=True``)."""
        if self.held and (gravity, direction) == (self.gravity, self.direction):
            return
        self.held, self.gravity, self.direction = True, gravity, direction
        self.streams[:] = (gravity, direction)
        self._draw(np.ones(len(self.pos), bool))

    def release(self) -> None:
        """Every stream back in a training world of its own, from a new episode."""
        if not self.held:
            return
        self.held, self.gravity, self.direction = False, 0.0, 90.0
        self._draw(np.ones(len(self.pos), bool))

    def step(self) -> None:
        if self.worlds:
            a = np.radians(self.streams[:, 1])
            acc = self.streams[:, :1] * np.stack([np.cos(a), np.sin(a)], axis=1)  # (S, 2)
            self.vel += acc[:, None, :]
            self.left -= 1
            if (self.left <= 0).any():
                self._draw(self.left <= 0)
        else:
            a = math.radians(self.direction)
            self.vel += self.gravity * np.array([math.cos(a), math.sin(a)])
        self.pos += self.vel
        low, high = self.pos < 0, self.pos > 52
        self.pos = np.where(low, -self.pos, np.where(high, 104 - self.pos, self.pos))
        self.vel = np.where(low | high, -self.vel, self.vel)

    def frames(self) -> np.ndarray:
        out = np.zeros((len(self.pos), 64, 64), np.uint8)  # (S, 64, 64)
        for s, digits in enumerate(self.pos.round().astype(int)):
            for x, y in digits:
                out[s, y : y + 12, x : x + 12] = 255
        return out


class FakeDriver:
    """One fake track; see ``drivers.TrackDriver`` for the interface."""

    def __init__(self, track: str, world: FakeWorld, capacity: int = 64, seed: int = 0) -> None:
        self.name = track
        self.world = world
        self.capacity = capacity
        self.generates = tracks.track(track).generates if track in tracks.TRACKS else ""
        self.buffer_title = "buffer"
        self.starts = 0
        self.frozen = False
        self.step_count = 0
        self._rng = np.random.default_rng(seed + ord(track))
        self._mu, self._var = 1.0, 0.01
        self._err = 0.6
        self._since_switch = 10**9
        self._last_g = 0.0
        self._buffer: list[int] = []
        self.checkpoints: list[int] = []
        self.recording = False
        self._pending: list[tuple[int, dict[str, float]]] = []
        if world.owner is None:
            world.owner = track

    # driver interface ------------------------------------------------------------------
    def step(self) -> None:
        self._pending.append((self.step_count + 1, self._metrics()))

    def drain(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        steps = np.array([s for s, _ in self._pending], np.int64)
        keys = self._pending[0][1].keys() if self._pending else ()
        block = {k: np.array([m[k] for _, m in self._pending]) for k in keys}
        self._pending.clear()
        return steps, block

    def _metrics(self) -> dict[str, float]:
        if self.name == self.world.owner:  # the first track moves the shared world
            self.world.step()
        self.step_count += 1
        g = self.world.gravity
        if g != self._last_g:
            self._since_switch, self._last_g = 0, g
        self._since_switch += 1
        shifted = g > 0
        memory = {"A": 0.0, "B": 0.5, "C": 1.0}.get(self.name, 0.7)
        shock = math.exp(-self._since_switch / 60.0) if self._since_switch < 10**8 else 0.0
        s = 1.0 + 2.5 * shock + 0.05 * self._rng.standard_normal()
        thr = self._mu + 1.5 * math.sqrt(self._var)
        boundary = self.step_count > 10 and s > thr
        self._mu = 0.99 * self._mu + 0.01 * s
        self._var = 0.99 * self._var + 0.01 * (s - self._mu) ** 2
        if boundary:
            self._buffer = (self._buffer + [int(shifted)])[-self.capacity :]
        shift_n = sum(self._buffer)
        target = 0.35 + (0.5 * (1 - memory * min(1, shift_n / 20)) if shifted else 0.0)
        self._err += 0.05 * (target + 0.6 * shock - self._err)
        return {
            SURPRISAL: s,
            THRESHOLD: thr,
            BOUNDARY: float(boundary),
            BUFFER_SIZE: float(len(self._buffer)),
            SHIFT_SHARE: shift_n / max(len(self._buffer), 1),
            DELTA_ABS: 0.01 * shift_n / self.capacity + 0.001 if self.generates else float("nan"),
            NORM_ERROR: self._err + 0.03 * self._rng.standard_normal(),
        }

    def frames(self) -> np.ndarray:
        return self.world.frames()

    def buffer_worlds(self) -> np.ndarray:
        return np.asarray(self._buffer, np.int8)

    def attention(self) -> np.ndarray | None:
        n = len(self._buffer)
        if n == 0 or self.name == "A":
            return None
        logits = 2.0 * np.asarray(self._buffer, np.float64) * (self.world.gravity > 0)
        logits += 0.3 * self._rng.standard_normal(n)
        w = np.exp(logits - logits.max())
        return w / w.sum()

    def predictions(self) -> Predictions | None:
        """The newest frames moved down h px as the "true future" at each horizon h, and a
        blurred copy as the prediction, the worse the less memory the track has (A: not
        moved at all); None before the first step."""
        if self.step_count == 0:
            return None
        now = self.world.frames().astype(np.float64)  # (S, 64, 64)
        memory = {"A": 0.0, "B": 0.5, "C": 1.0}.get(self.name, 0.7)
        true = np.stack([np.roll(now, h, axis=1) for h in FAKE_HORIZONS], 1)
        moved = np.stack([np.roll(now, round(memory * h), axis=1) for h in FAKE_HORIZONS], 1)
        blurred = sum(np.roll(moved, d, axis=a) for d in (-2, 0, 2) for a in (2, 3)) / 6
        return Predictions(step=self.step_count, horizons=FAKE_HORIZONS,
                           true=true.astype(np.uint8), decoded=blurred.astype(np.uint8),
                           loss=0.2, pairs=64)  # fmt: skip

    def wrong_world(self) -> tuple[float, float] | None:
        # worlds protocol, a memory track, streams in their own worlds: another world's memory
        # is worse than peer memory by a margin that grows with the memory's fill
        if not self.world.worlds or self.world.held or self.name == "A":
            return None
        return self._err, self._err + 0.1 * len(self._buffer) / self.capacity

    def set_physics(self, gravity: float, direction: float) -> None:
        # every fake track shares the FakeWorld; setting it twice is harmless
        if self.world.worlds:
            self.world.hold(gravity, direction)
        else:
            self.world.gravity, self.world.direction = gravity, direction

    def physics(self) -> tuple[float, float]:
        return self.world.gravity, self.world.direction

    @property
    def held(self) -> bool:
        return self.world.held

    def release(self) -> None:
        self.world.release()

    def stream_physics(self) -> np.ndarray | None:
        return self.world.streams.copy() if self.world.worlds else None

    def set_frozen(self, frozen: bool) -> None:
        self.frozen = frozen

    def set_recording(self, on: bool) -> bool:
        self.recording = on
        return on

    def checkpoint(self) -> None:
        self.checkpoints.append(self.step_count)

    def close(self) -> None:
        pass
