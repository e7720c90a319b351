"""The interactive loop: learner steps between steady redraws, keys that change the world.

``App.run`` alternates two things. It advances every track by one step at a time (one
``TrackDriver.step`` each, so all tracks stay on the same step and see the same frames) until the
next redraw is due, then pumps pygame's events and draws one frame. Redraws happen at ``fps`` by
wall clock (or every ``draw_every`` steps, which makes ``--video`` frames reproducible), so a slow
learner is never starved by drawing and a fast one is never stalled by it.

What G and the arrows do, and what a switch is, differ by protocol: ``runners.live.controls``
(``AppConfig.controls``; the worlds protocol's ``HeldWorlds`` holds every stream in one target
world and gives them back, the paper protocol's ``OnePhysics`` toggles the one gravity).

The keys (``App.key``; the tests post them through pygame's event queue) are listed in
``runners.visualize.KEYS``, the command's ``--help``; Q or the window's close button quits, every
track checkpointed.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pygame

from runners.live.controls import NUDGE, TURN, HeldWorlds, OnePhysics
from runners.live.model import History, Snapshot, TrackDriver, TrackView, WorldView, world_label
from runners.live.screen import Screen


def save_png(surface: pygame.Surface, path: Path) -> Path:
    """``pygame.image.save`` into ``path``, its folder made; a failure (``pygame.error``) raises
    ``OSError`` naming ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        pygame.image.save(surface, str(path))
    except pygame.error as err:
        raise OSError(errno.EIO, f"cannot write the image ({err})", str(path)) from None
    return path


@dataclass
class AppConfig:
    """How the app runs; ``runners/visualize.py`` fills it from the command line."""

    fps: float = 25.0  # redraws per second (wall clock) when draw_every is None
    draw_budget: float = 0.1  # at most this share of wall time goes to drawing (lowers the fps)
    draw_every: int | None = None  # redraw every N steps instead (reproducible video)
    draw: bool = True  # False: no redraws while running (benchmarks); the final frame still is
    max_steps: int | None = None  # stop after this learner step (absolute), None: until Q
    hold_at_end: bool = False  # at max_steps keep the window open (until Q) instead of returning
    #: what G and the arrows do, and what a switch is (``controls.CONTROLS[protocol kind]``)
    controls: type[HeldWorlds] | type[OnePhysics] = HeldWorlds
    mode: str = "memory"  # after the first switch: memory (freeze weights) | continual
    base_gravity: float = 0.0
    shift_gravity: float = 0.5  # what G switches to
    shift_direction: float = 45.0  # worlds: the direction of the world G holds the streams in
    #: worlds: a world's family name (``runners.online.world_sets.family_of``); default: none
    family: Callable[[float, float], str] = lambda gravity, direction: ""
    #: scripted (step, gravity); worlds: hold in (gravity, shift_direction), base gravity releases
    schedule: list[tuple[int, float]] = field(default_factory=list)
    window: int = 600  # steps visible in the strip charts
    rolling: int = 100  # steps in the rolling stream error
    screenshot: Path | None = None  # write the final frame here
    video_dir: Path | None = None  # write every redraw as NNNNNN.png here
    shots_dir: Path = Path(".")  # where S puts screenshots
    should_stop: Callable[[], bool] | None = None  # e.g. Ctrl-C / SIGTERM seen by a StopRequest
    #: a resumed session's switches so far, (step, gravity) as ``App.switches``
    switches: list[tuple[int, float]] = field(default_factory=list)


class App:
    """Runs the drivers, draws snapshots, handles keys. One instance per window."""

    def __init__(self, drivers: Sequence[TrackDriver], cfg: AppConfig,
                 surface: pygame.Surface) -> None:  # fmt: skip
        if not drivers:
            raise ValueError("App needs at least one track")
        self.drivers = list(drivers)
        self.cfg = cfg
        self.surface = surface
        self.screen = Screen(surface)
        self.histories = {d.name: History(cfg.window, cfg.rolling) for d in self.drivers}
        self.gravity, self.direction = self.drivers[0].physics()
        self.held = False  # every stream held in one world (``HeldWorlds``)
        self.shift_gravity = cfg.shift_gravity
        self.shift_direction = float(cfg.shift_direction % 360.0)
        self.controls = cfg.controls(self)
        self.switches = list(cfg.switches)
        self.paused = self.recording = self.quit = False
        self.message = ""
        self.frames_written = 0
        self._schedule = sorted(cfg.schedule)
        self._rate = 0.0  # steps/s, exponential average over redraw intervals
        self._rate_t = time.perf_counter()
        self._rate_step = self.step
        self.draws = 0
        self.draw_time = 0.0

    # ----------------------------------------------------------------- state
    @property
    def step(self) -> int:
        return self.drivers[0].step_count

    @property
    def done(self) -> bool:
        return self.cfg.max_steps is not None and self.step >= self.cfg.max_steps

    def world_label(self, gravity: float, direction: float) -> str:
        return world_label(gravity, direction, self.cfg.family(gravity, direction))

    def freeze(self) -> None:
        """Memory mode: every track's weights freeze at a switch (from the first on)."""
        for d in self.drivers if self.cfg.mode == "memory" else ():
            if not d.frozen:
                d.set_frozen(True)

    def switched(self, step: int, gravity: float) -> None:
        """Record a switch into a held world or back before ``step`` (``gravity``: the held
        world's, the base gravity for the training worlds); the rolling errors restart there."""
        self.switches.append((step, gravity))
        for h in self.histories.values():
            h.restart_rolling(step)

    # ----------------------------------------------------------------- keys
    def key(self, key: int) -> None:
        """One key of ``runners.visualize.KEYS``; G and the arrows act as the protocol says."""
        if key in (pygame.K_q, pygame.K_ESCAPE):
            self.quit = True
        elif key == pygame.K_g or key in NUDGE or key in TURN:
            self.controls.key(key)
        elif key == pygame.K_f:
            frozen = not all(d.frozen for d in self.drivers)
            for d in self.drivers:
                d.set_frozen(frozen)
            self.message = f"weights {'frozen (memory only)' if frozen else 'learning (continual)'}"
        elif key == pygame.K_SPACE:
            self.paused = not self.paused
            self.message = "paused" if self.paused else "running"
        elif key == pygame.K_s:
            try:
                self.message = f"saved {self.save_screenshot().name}"
            except OSError as err:  # a live session goes on; the line says why
                self.message = f"screenshot not saved: {err.strerror}"
        elif key == pygame.K_r:
            want = not self.recording
            self.recording = any([d.set_recording(want) for d in self.drivers])  # every one asked
            if want and not self.recording:
                self.message = "recording not available"
            else:
                self.message = "recording frames" if self.recording else "recording stopped"

    # ----------------------------------------------------------------- stepping
    def advance(self) -> None:
        """One learner step of every track, scripted switches applied first."""
        while self._schedule and self._schedule[0][0] <= self.step:
            self.controls.scripted(*self._schedule.pop(0))
        s = self.step
        for d in self.drivers:
            d.step()
        g, direction = self.drivers[0].physics()  # a switch the loop made itself (its schedule)
        self.controls.observe(s, g, direction)
        self.gravity, self.direction = g, direction

    def snapshot(self) -> Snapshot:
        """What the next redraw shows: the metrics drained so far (one host sync a track), the
        rate of steps and what the drivers show now."""
        for d in self.drivers:
            steps, block = d.drain()
            if len(steps):
                self.histories[d.name].extend(steps, block)
        now = time.perf_counter()
        if self.paused or now - self._rate_t > 0.25:
            if not self.paused:
                rate = (self.step - self._rate_step) / (now - self._rate_t)
                self._rate = rate if self._rate == 0 else 0.7 * self._rate + 0.3 * rate
            self._rate_t, self._rate_step = now, self.step
        first = self.drivers[0]
        world = WorldView(frames=first.frames(), gravity=self.gravity, direction=self.direction,
                          base_gravity=self.cfg.base_gravity, switches=list(self.switches))
        self.controls.show(world)
        tracks = [
            TrackView(name=d.name, history=self.histories[d.name], capacity=d.capacity,
                      buffer_worlds=d.buffer_worlds(), attention=d.attention(),
                      wrong_world=d.wrong_world(), frozen=d.frozen, generates=d.generates,
                      buffer_title=d.buffer_title, predictions=d.predictions(),
                      starts=d.starts)  # fmt: skip
            for d in self.drivers
        ]
        return Snapshot(step=self.step, steps_per_s=self._rate, world=world, tracks=tracks,
                        mode=self.cfg.mode, paused=self.paused, recording=self.recording,
                        message=self.message)  # fmt: skip

    def redraw(self) -> None:
        t0 = time.perf_counter()
        self.screen.draw(self.snapshot())
        if pygame.display.get_init() and pygame.display.get_surface() is self.surface:
            pygame.display.flip()
        if self.cfg.video_dir is not None:
            save_png(self.surface, self.cfg.video_dir / f"{self.frames_written:06d}.png")
            self.frames_written += 1
        self.draws += 1
        self.draw_time += time.perf_counter() - t0

    def save_screenshot(self, path: Path | None = None) -> Path:
        if path is None:
            path = self.cfg.shots_dir / f"screenshot_{self.step:07d}.png"
        return save_png(self.surface, path)

    def pump(self) -> None:
        """Pygame's events: a key, or the window's close button (quits)."""
        for event in pygame.event.get():
            if event.type == pygame.QUIT:
                self.quit = True
            elif event.type == pygame.KEYDOWN:
                self.key(event.key)

    def run(self) -> None:
        """Until Q, the window's close button or ``max_steps``; then checkpoint every track."""
        period = 1.0 / max(self.cfg.fps, 1e-3)
        next_draw = time.perf_counter()
        try:
            while not self.quit:
                self.pump()
                if self.cfg.should_stop is not None and self.cfg.should_stop():
                    self.quit = True
                if self.quit or (self.done and not self.cfg.hold_at_end):
                    break
                if self.done:
                    self.message = f"run complete at step {self.step}: Q quits"
                if self.paused or self.done:
                    self.redraw()
                    time.sleep(period)
                    next_draw = time.perf_counter() + period
                    continue
                # learn until the next redraw is due (at least one step)
                every = self.cfg.draw_every
                while True:
                    self.advance()
                    if self.done or (every is not None and self.step % every == 0):
                        break
                    if every is None and time.perf_counter() >= next_draw:
                        break
                if self.cfg.draw and not self.done:
                    t0 = time.perf_counter()
                    self.redraw()
                    # a steady rate, but drawing never takes more than draw_budget of the time
                    spent = time.perf_counter() - t0
                    wait = max(period, spent / max(self.cfg.draw_budget, 1e-3))
                    next_draw = max(next_draw + period, t0 + wait)
                else:
                    next_draw = max(next_draw + period, time.perf_counter())
        finally:
            self.finish()

    def finish(self) -> None:
        """Draw the final frame, checkpoint and close every track, then write the frame if asked
        (a frame that cannot be written never costs the checkpoint)."""
        self.redraw()
        for d in self.drivers:
            d.checkpoint()
            d.close()
        if self.cfg.screenshot is not None:
            self.save_screenshot(self.cfg.screenshot)
