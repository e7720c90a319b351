"""The live visualizer, headless (SDL dummy driver, set in tests/conftest.py).

The view and the keys are tested against the fake metrics feed (fast); the command line against
the real ``OnlineLoop`` with the tiny preset.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pygame
import pytest

from runners.live.app import App, AppConfig
from runners.live.draw import SWITCH
from runners.live.fake import FakeDriver, FakeWorld
from runners.live.model import History
from runners.live.screen import SIZE

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


@pytest.fixture
def surface() -> pygame.Surface:
    pygame.display.init()
    pygame.font.init()
    surf = pygame.display.set_mode(SIZE)
    yield surf
    pygame.display.quit()


def fake_app(surface: pygame.Surface, tracks: str = "AC", **kw: object) -> App:
    world = FakeWorld()
    drivers = [FakeDriver(t, world) for t in tracks]
    return App(drivers, AppConfig(**kw), surface)  # type: ignore[arg-type]


def test_history_rolls_and_keeps_window() -> None:
    h = History(window=5, rolling=2)
    for i in range(8):
        h.append(i, {"stream/norm_error": float(i)})
    steps, err = h.view("stream/norm_error_rolling")
    assert steps.tolist() == [3, 4, 5, 6, 7]
    assert err.tolist() == [2.5, 3.5, 4.5, 5.5, 6.5]
    assert np.isnan(h.view("memory/surprisal")[1]).all()


def test_fake_run_draws_switch_into_charts(surface: pygame.Surface, tmp_path: Path) -> None:
    app = fake_app(
        surface,
        draw_every=10,
        max_steps=200,
        schedule=[(100, 0.5)],
        video_dir=tmp_path / "video",
        screenshot=tmp_path / "final.png",
    )
    app.run()
    frames = sorted((tmp_path / "video").glob("*.png"))
    assert len(frames) >= 19 and (tmp_path / "final.png").exists()
    assert app.switches == [(100, 0.5)]
    assert all(d.frozen for d in app.drivers)  # memory mode: frozen at the first switch
    rect = app.screen.chart_rect
    assert rect is not None
    before = chart_pixels(frames[8], rect)  # step 90
    after = chart_pixels(frames[-1], rect)
    assert not np.array_equal(before, after)
    assert count_color(before, SWITCH) == 0  # no switch line before the switch
    assert count_color(after, SWITCH) > 50


def test_keys_through_event_queue(surface: pygame.Surface) -> None:
    app = fake_app(surface, draw_every=5, max_steps=10_000, mode="continual")
    post_key(pygame.K_g)
    app.pump()
    assert app.gravity == pytest.approx(0.5)
    assert app.drivers[0].physics()[0] == pytest.approx(0.5)
    assert not any(d.frozen for d in app.drivers)  # continual mode: weights keep learning
    for key in (pygame.K_UP, pygame.K_RIGHT, pygame.K_f, pygame.K_SPACE):
        post_key(key)
    app.pump()
    assert app.gravity == pytest.approx(0.55)
    assert app.direction == pytest.approx(105.0)
    assert all(d.frozen for d in app.drivers)
    assert app.paused
    post_key(pygame.K_g)
    app.pump()
    assert app.gravity == 0.0 and [g for _, g in app.switches] == [0.5, 0.55, 0.0]
    post_key(pygame.K_q)
    app.run()  # returns at once: Q is in the queue; every track is checkpointed
    assert app.quit
    assert all(d.checkpoints == [d.step_count] for d in app.drivers)  # type: ignore[attr-defined]


def post_key(key: int) -> None:
    pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=key, mod=0, unicode="", scancode=0))


def chart_pixels(path: Path, rect: pygame.Rect) -> np.ndarray:
    img = pygame.surfarray.array3d(pygame.image.load(str(path)))  # (W, H, 3)
    return img[rect.left : rect.right, rect.top : rect.bottom]


def count_color(img: np.ndarray, color: tuple[int, int, int]) -> int:
    return int(np.all(img == np.array(color), axis=-1).sum())


# -- the command line on the real OnlineLoop (tiny preset) -----------------------------------

SMALL_EVAL = ["--set", "eval_shift_train=16", "eval_shift_test=8", "eval_base_test=8"]


def test_cli_switch_screenshot_and_video(tmp_path: Path) -> None:
    from runners import visualize

    shot, video = tmp_path / "final.png", tmp_path / "video"
    argv = [
        "--headless",
        "--tracks",
        "A",
        "C",
        "--steps",
        "40",
        "--switch",
        "20:0.5",
        "--draw-every",
        "5",
        "--window",
        "40",
        "--out",
        str(tmp_path),
        "--name",
        "s",
        "--screenshot",
        str(shot),
        "--video",
        str(video),
        *SMALL_EVAL,
    ]
    session = visualize.setup(argv, log=lambda _: None)
    session.run()
    app = session.app
    assert app.step == 40 and app.switches == [(20, 0.5)]
    img = pygame.surfarray.array3d(pygame.image.load(str(shot)))
    assert img.std() > 10  # not blank
    frames = sorted(video.glob("*.png"))
    rect = app.screen.chart_rect
    before = chart_pixels(frames[2], rect)  # step 15
    after = chart_pixels(frames[-1], rect)  # step 40
    assert not np.array_equal(before, after)
    assert count_color(before, SWITCH) == 0 and count_color(after, SWITCH) > 50
    # the tracks saw the same stream: identical frame windows in both loops
    a, c = session.loops
    assert np.array_equal(a.source.frames, c.source.frames)
    pygame.display.quit()


def test_cli_keys_quit_and_resume(tmp_path: Path) -> None:
    import zarr

    from runners import visualize

    argv = [
        "--headless",
        "--tracks",
        "C",
        "--steps",
        "200",
        "--draw-every",
        "2",
        "--out",
        str(tmp_path),
        "--name",
        "k",
        *SMALL_EVAL,
    ]
    session = visualize.setup(argv, log=lambda _: None)
    session.app.cfg.on_checkpoint = session.save_state
    app = session.app
    for _ in range(6):
        app.advance()
    post_key(pygame.K_g)
    post_key(pygame.K_SPACE)
    app.pump()
    assert app.gravity == pytest.approx(0.5) and app.paused
    loop = session.loops[0]
    assert loop.gravity == pytest.approx(0.5) and loop.learner.weights_frozen  # memory mode
    assert int(loop.source.world[0]) == 1  # the new frames are tagged as the shifted world
    post_key(pygame.K_SPACE)
    app.pump()
    assert not app.paused
    for _ in range(4):
        app.advance()
    post_key(pygame.K_q)
    app.run()  # Q: stops at once, checkpointed
    session.release()  # what main does at the end (the process's exit would too)
    assert app.quit and app.step == 10
    root = tmp_path / "k"
    assert (root / "C" / "checkpoints" / "latest.pt").exists()
    pygame.display.quit()

    again = visualize.setup(
        ["--headless", "--resume", str(root), "--steps", "14", "--draw-every", "2"],
        log=lambda _: None,
    )
    assert again.app.step == 10 and again.app.gravity == pytest.approx(0.5)
    assert again.app.switches == [(6, 0.5)]
    again.run()
    steps = zarr.open_group(str(root / "C" / "run.zarr"))["metrics/step"][:]
    assert steps.tolist() == list(range(14))  # no gap, no duplicate
    pygame.display.quit()
