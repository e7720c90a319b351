"""What the visualizer shows, as plain numpy records (no pygame here).

The app fills each track's ``History`` with its driver's per-step metrics and builds a
``Snapshot`` at each redraw; ``screen.py`` turns it into pixels. What the app asks of a track
is ``TrackDriver`` (``drivers.LoopDriver`` is one). Free of pygame and torch, this layer is
tested alone, and the view developed against a fake feed (``tests/runners/live_fake.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

# Metric names, as in ``agent.StepMetrics.NAMES`` (docs/architecture.md).
SURPRISAL = "memory/surprisal"
THRESHOLD = "memory/threshold"
BOUNDARY = "memory/boundary"
BUFFER_SIZE = "memory/buffer_size"
SHIFT_SHARE = "memory/shift_share"
DELTA_ABS = "mod/delta_abs"
NORM_ERROR = "stream/norm_error"

#: Columns the charts read; other metrics passed to ``History.append`` are ignored.
CHART_KEYS = (SURPRISAL, THRESHOLD, BOUNDARY, BUFFER_SIZE, SHIFT_SHARE, DELTA_ABS, NORM_ERROR)
#: Derived column: rolling mean of ``stream/norm_error`` over ``History.rolling`` steps.
ROLLING_ERROR = "stream/norm_error_rolling"


class History:
    """The last ``window`` steps of the chart metrics, a ring buffer per column.

    ``append(step, metrics)`` takes one step (scalars) and ``extend(steps, block)`` a block
    (1-D arrays, e.g. ``agent.objective.columns`` output); ``view(key)`` returns the visible
    ``(steps, values)`` oldest first. Missing metrics are stored as NaN, which the charts skip.
    """

    def __init__(self, window: int = 600, rolling: int = 50) -> None:
        if window < 2 or rolling < 1:
            raise ValueError("History needs window >= 2 and rolling >= 1")
        self.window = window
        self.rolling = rolling
        self._steps = np.zeros(window, np.int64)
        self._cols = {k: np.full(window, np.nan, np.float64) for k in (*CHART_KEYS, ROLLING_ERROR)}
        self._n = 0  # steps appended so far
        self._err_sum = 0.0
        self._err_queue: list[float] = []
        self._restarts: list[int] = []  # steps at which the rolling error starts afresh

    def __len__(self) -> int:
        return min(self._n, self.window)

    def restart_rolling(self, step: int) -> None:
        """From ``step`` on, the rolling error forgets the steps before it (a new phase: its
        error is not averaged with the last one's)."""
        self._restarts = sorted([*self._restarts, int(step)])

    def append(self, step: int, metrics: Mapping[str, float]) -> None:
        while self._restarts and step >= self._restarts[0]:
            self._restarts.pop(0)
            self._err_queue.clear()
            self._err_sum = 0.0
        i = self._n % self.window
        self._steps[i] = step
        for key, col in self._cols.items():
            if key != ROLLING_ERROR:
                value = metrics.get(key)
                col[i] = np.nan if value is None else float(value)
        err = self._cols[NORM_ERROR][i]
        if np.isfinite(err):  # rolling mean over the last `rolling` finite errors
            self._err_queue.append(err)
            self._err_sum += err
            if len(self._err_queue) > self.rolling:
                self._err_sum -= self._err_queue.pop(0)
        n = len(self._err_queue)
        self._cols[ROLLING_ERROR][i] = self._err_sum / n if n else np.nan
        self._n += 1

    def extend(self, steps: np.ndarray, block: Mapping[str, np.ndarray]) -> None:
        for j, step in enumerate(np.asarray(steps).tolist()):
            self.append(int(step), {k: float(v[j]) for k, v in block.items()})

    def view(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """Visible ``(steps (n,), values (n,))`` of a column, oldest first."""
        n = len(self)
        idx = (np.arange(self._n - n, self._n)) % self.window
        return self._steps[idx], self._cols[key][idx]

    def last(self, key: str) -> float:
        """The newest value of a column (NaN before the first step)."""
        return float(self._cols[key][(self._n - 1) % self.window]) if self._n else float("nan")


def overlay(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """A decoded frame ``pred`` in magenta, scaled to its brightest pixel (a blurred prediction is
    dim), over the true one ``true`` in green, white where they agree: (H, W, 3) float in [0, 1]
    of two uint8 frames (H, W). The colouring of figures/predictions.png
    (``runners.online.strips``) and of the view's predictions."""
    pred = pred / max(1.0, float(pred.max()))
    return np.stack([pred, true / 255.0, pred], -1)


@dataclass(frozen=True)
class Predictions:
    """What a track predicts for the shown streams, drawn as frames (``live.predictions``): the
    true frames at each horizon of the last step's batch and the track's predicted latents there
    through a pixel decoder fit beside it."""

    step: int  # the learner step whose batch it is
    horizons: tuple[int, ...]  # (K,) frames ahead of the input frame
    true: np.ndarray  # (S, K, 64, 64) uint8: the true frame at each horizon
    decoded: np.ndarray  # (S, K, 64, 64) uint8: the predicted latent there, decoded
    loss: float  # the decoder's fit loss (binary cross-entropy) at its last step
    pairs: int  # (latent, frame) pairs the decoder is fit on


def world_label(gravity: float, direction: float, family: str = "") -> str:
    """A world as the view's lines name it: "g 0.30 @ 45 deg (interp)" (its family if known)."""
    return f"g {gravity:.2f} @ {direction:.0f} deg" + (f" ({family})" if family else "")


@dataclass
class TrackView:
    """One track's column: its chart history and its memory buffer at this redraw."""

    name: str
    history: History
    capacity: int = 256
    #: world of origin of each buffer entry, oldest first, (n,) int; 0 base, 1 shifted.
    buffer_worlds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    #: attention weight the current query puts on each entry, (n,) float, or None if unknown.
    attention: np.ndarray | None = None
    frozen: bool = False
    #: (peer D, wrong-world D) on the training stream, or None (no group memory read, or the
    #: streams held in one world): does memory carry the world?
    wrong_world: tuple[float, float] | None = None
    #: what the track's e_agg generates (the title of its ``mod/delta_abs`` chart; "": none)
    generates: str = ""
    #: what ``buffer_worlds`` is: the one buffer (paper), or one stream's own memory (worlds)
    buffer_title: str = "buffer"
    #: the shown streams' true future and the track's prediction of it, decoded; None: none
    #: yet (before the first step), or the view's predictions are off
    predictions: Predictions | None = None
    #: the step from which the track predicts: a head's settle (``agent.heads``), else 0
    starts: int = 0


@dataclass
class WorldView:
    """The shared stream: a few frames and the physics every track sees.

    Paper protocol: one physics for every stream (``gravity``, ``direction``). Worlds protocol
    (``streams`` is set): each shown stream has its own world until the streams are held in one
    (``held``: every stream in ``gravity``, ``direction``); ``target`` is the world G holds them
    in. A switch back to the training worlds is recorded with ``base_gravity``.
    """

    frames: np.ndarray  # (S, 64, 64) uint8, the newest frame of the first S streams
    gravity: float = 0.0
    direction: float = 90.0  # degrees, image coordinates: 0 right, 90 down
    base_gravity: float = 0.0
    #: (step, gravity) of every physics switch so far (scripted or by key), oldest first
    switches: list[tuple[int, float]] = field(default_factory=list)
    #: worlds protocol: (S, 2) gravity and direction of each shown stream's own world; None:
    #: one physics for every stream (paper protocol)
    streams: np.ndarray | None = None
    #: worlds protocol: the family of each shown stream's world ("" unknown)
    stream_families: list[str] = field(default_factory=list)
    #: worlds protocol: every stream is held in (gravity, direction)
    held: bool = False
    family: str = ""  # worlds protocol: the family of the held world
    target: tuple[float, float] | None = None  # worlds protocol: (gravity, direction) G holds
    target_family: str = ""

    @property
    def worlds(self) -> bool:
        return self.streams is not None

    @property
    def shifted(self) -> bool:
        return self.held if self.worlds else abs(self.gravity - self.base_gravity) > 1e-9

    @property
    def phase(self) -> str:
        if self.worlds:
            return f"held in one world ({self.family or '?'})" if self.held else "training worlds"
        return "shifted" if self.shifted else "base"


@dataclass
class Snapshot:
    """Everything one redraw shows."""

    step: int
    steps_per_s: float
    world: WorldView
    tracks: list[TrackView]
    mode: str = "memory"  # adaptation mode after a switch: memory | continual
    paused: bool = False
    recording: bool = False
    message: str = ""  # a short status line (last key action, screenshot path, ...)


class TrackDriver(Protocol):
    """What the app needs from one track (``drivers.LoopDriver`` wraps an ``OnlineLoop``; the
    tests' ``FakeDriver`` imitates one)."""

    name: str
    capacity: int
    generates: str  # what the track's e_agg generates, charted ("": none)
    buffer_title: str  # what ``buffer_worlds`` shows: "buffer", or one stream's own memory
    starts: int  # the step from which it predicts: a head's settle, else 0

    @property
    def step_count(self) -> int: ...  # learner steps done
    @property
    def frozen(self) -> bool: ...
    def set_frozen(self, frozen: bool) -> None: ...
    def step(self) -> None: ...  # one learner step; metrics kept until ``drain``
    def drain(self) -> tuple[np.ndarray, Mapping[str, np.ndarray]]: ...  # (steps, block)
    def set_recording(self, on: bool) -> bool: ...  # returns whether recording is now on
    def checkpoint(self) -> None: ...
    def close(self) -> None: ...

    # what is shown
    def frames(self) -> np.ndarray: ...  # (S, 64, 64) uint8 newest frames
    def buffer_worlds(self) -> np.ndarray: ...  # (n,) world tags, oldest first
    def attention(self) -> np.ndarray | None: ...  # (n,) weights of the current query
    def wrong_world(self) -> tuple[float, float] | None: ...  # (peer D, wrong-world D) or None
    def predictions(self) -> Predictions | None: ...  # the shown streams' future, decoded

    # the physics (worlds protocol: ``set_physics`` holds every stream in that world; a
    # paper-protocol driver: ``held`` is False, ``stream_physics`` None)
    def physics(self) -> tuple[float, float]: ...  # (gravity, direction) the stream has now
    def set_physics(self, gravity: float, direction: float) -> None: ...
    @property
    def held(self) -> bool: ...  # every stream is held in one world (``set_physics``)
    def release(self) -> None: ...  # the streams go back to the training worlds
    def stream_physics(self) -> np.ndarray | None: ...  # (S, 2) gravity, direction per shown stream
