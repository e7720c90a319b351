"""The live visualizer, headless (SDL dummy driver, set in tests/conftest.py).

The view and the keys are tested against the fake metrics feed (fast); the command line against
the real ``OnlineLoop`` (the paper protocol's tests with the cpu preset for a few steps, the
worlds protocol's, the default, with the tiny preset).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pygame
import pytest
from live_fake import FakeDriver, FakeWorld

from runners.live.app import App, AppConfig
from runners.live.controls import CONTROLS, HeldWorlds
from runners.live.draw import SWITCH
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


def fake_app(
    surface: pygame.Surface, tracks: str = "AC", protocol: str = "paper", **kw: object
) -> App:
    world = FakeWorld(worlds=protocol == "worlds")
    drivers = [FakeDriver(t, world) for t in tracks]
    return App(drivers, AppConfig(controls=CONTROLS[protocol], **kw), surface)  # type: ignore[arg-type]


def test_history_rolls_and_keeps_window() -> None:
    h = History(window=5, rolling=2)
    for i in range(8):
        h.append(i, {"stream/norm_error": float(i)})
    steps, err = h.view("stream/norm_error_rolling")
    assert steps.tolist() == [3, 4, 5, 6, 7]
    assert err.tolist() == [2.5, 3.5, 4.5, 5.5, 6.5]
    assert np.isnan(h.view("memory/surprisal")[1]).all()


def test_history_rolling_restarts_at_a_switch() -> None:
    h = History(window=10, rolling=4)
    h.restart_rolling(3)  # marked before its step arrives (the app marks it at the switch)
    for i in range(6):
        h.append(i, {"stream/norm_error": float(i)})
    _, err = h.view("stream/norm_error_rolling")
    assert err.tolist() == [0.0, 0.5, 1.0, 3.0, 3.5, 4.0]  # from step 3 on: steps 3.. only


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

PAPER = ["--protocol", "paper"]
SMALL_EVAL = ["--set", "eval_shift_train=16", "--set", "eval_shift_test=8", "--set", "eval_base_test=8"]


def test_cli_switch_screenshot_and_video(tmp_path: Path) -> None:
    from runners import visualize

    shot, video = tmp_path / "final.png", tmp_path / "video"
    argv = [
        *PAPER,
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
    assert np.array_equal(a.feed.frames, c.feed.frames)
    pygame.display.quit()


def test_cli_keys_quit_and_resume(tmp_path: Path) -> None:
    import zarr

    from runners import visualize

    argv = [
        *PAPER,
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
        "--no-switch",  # G alone switches
        *SMALL_EVAL,
    ]
    session = visualize.setup(argv, log=lambda _: None)
    app = session.app
    for _ in range(6):
        app.advance()
    post_key(pygame.K_g)
    post_key(pygame.K_SPACE)
    app.pump()
    assert app.gravity == pytest.approx(0.5) and app.paused
    loop = session.loops[0]
    assert loop.gravity == pytest.approx(0.5) and loop.learner.weights_frozen  # memory mode
    assert int(loop.feed.shifted[0]) == 1  # the new frames are tagged as the shifted world
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


# -- the worlds protocol (the default) --------------------------------------------------------

#: The tiny worlds run of tests/runners/cli_helpers.py's TINY_WORLDS: short episodes, few and
#: small evaluation worlds.
TINY_WORLDS = ["--preset", "tiny", "--set", "eval_shift_test=8", "--eval-world-seqs", "4", "--eval-worlds", "2", "--base-world-seqs", "4", "--base-worlds", "2", "--episode-steps", "21", "40"]  # fmt: skip
SWITCH_WORLD = (0.3, 45.0)  # an interp switch world (held out)
DEFAULT_WORLD = (0.75, 90.0)  # the default switch world (family extrap, held out)


def distinct(streams: np.ndarray) -> int:
    return len({tuple(np.round(row, 6)) for row in np.asarray(streams).tolist()})


def test_fake_worlds_g_holds_every_stream_then_gives_them_back(surface: pygame.Surface) -> None:
    from runners.visualize import family_name

    app = fake_app(
        surface, protocol="worlds", shift_gravity=0.3, shift_direction=45.0, family=family_name
    )
    for _ in range(20):
        app.advance()
    snap = app.snapshot()
    before = snap.world.streams
    assert before.shape == (4, 2) and distinct(before) == 4  # each stream its own world
    assert not snap.world.held and snap.world.target == SWITCH_WORLD
    assert snap.world.target_family == "interp"
    app.screen.draw(snap)
    app.key(pygame.K_g)
    assert app.held and app.switches == [(20, 0.3)]
    assert all(d.frozen for d in app.drivers)  # memory mode: frozen at the switch
    held = app.snapshot().world
    assert held.held and held.family == "interp" and held.phase == "held in one world (interp)"
    assert np.allclose(held.streams, SWITCH_WORLD)  # every stream in the switch world
    app.advance()
    app.key(pygame.K_RIGHT)  # while held the new target applies at once
    assert np.allclose(app.snapshot().world.streams, (0.3, 60.0))
    assert app.switches == [(20, 0.3), (21, 0.3)]
    app.key(pygame.K_g)  # again: back to the training worlds
    app.advance()
    back = app.snapshot().world
    assert not back.held and back.phase == "training worlds" and distinct(back.streams) == 4
    assert app.switches[-1] == (21, 0.0) and all(d.frozen for d in app.drivers)
    app.screen.draw(app.snapshot())


@pytest.mark.parametrize("argv, switches, target", [
    ([], [(20, {"gravity": 0.75, "gravity_direction": 90.0})], DEFAULT_WORLD),  # the default
    (["--shift-gravity", "0.5"], [(20, {"gravity": 0.5, "gravity_direction": 90.0})], (0.5, 90.0)),
    (["--shift-direction", "45"], [(20, {"gravity": 0.75, "gravity_direction": 45.0})], (0.75, 45.0)),
    (["--switch", "10:gravity=0.3,direction=45"], [(10, {"gravity": 0.3, "gravity_direction": 45.0})],
     SWITCH_WORLD),
    (["--no-switch"], [], DEFAULT_WORLD),  # G alone switches
    (["--protocol", "paper"], [(20, {"gravity": 0.5})], (0.5, 90.0)),
    (["--steps", "2"], [], DEFAULT_WORLD),  # too short for a switch
])  # fmt: skip
def test_default_command_switches_at_two_thirds_into_gs_target(
    argv: list[str], switches: list, target: tuple[float, float]
) -> None:
    """With no --switch the view's run switches at 2/3 of --steps into the world G targets, so
    the default command shows the adaptation; --no-switch leaves G alone."""
    from runners import visualize

    args = visualize.parse(["--steps", "30", *argv])
    protocol = args.protocol or visualize.DEFAULT_PROTOCOL
    for name in ("C", "A", visualize.ORACLE):
        cfg = visualize.track_config(args, name, None, protocol, ("A", "C"))
        assert [(sw.step, sw.params) for sw in cfg.schedule.switches] == switches
        assert visualize.shift_target(args, cfg) == target


def test_cli_worlds_scripted_switch_holds_every_stream(tmp_path: Path) -> None:
    from runners import visualize

    shot = tmp_path / "final.png"
    argv = [
        "--headless", "--tracks", "A", "C", "--steps", "40",
        "--switch", "20:gravity=0.3,direction=45", "--draw-every", "5", "--window", "40",
        "--out", str(tmp_path), "--name", "w", "--screenshot", str(shot), *TINY_WORLDS,
    ]  # fmt: skip
    session = visualize.setup(argv, log=lambda _: None)
    app = session.app
    assert isinstance(app.controls, HeldWorlds)
    assert all(lp.cfg.protocol.kind == "worlds" for lp in session.loops)
    for _ in range(10):
        app.advance()
    snap = app.snapshot()
    assert not snap.world.held and distinct(snap.world.streams) > 1  # arrows differ
    assert {visualize.family_name(g, d) for g, d in snap.world.streams} == {"train"}
    # Does memory carry the world: peer against another world's memory, for the memory track
    # alone (the floor reads none, the oracle the true physics), and only while worlds differ.
    wrong = {t.name: t.wrong_world for t in snap.tracks}
    assert wrong["A"] is None and wrong["oracle"] is None
    # The first reading is the last step's batch read with peer memory and with another
    # world's, unsmoothed; the two memories predict differently.
    from runners.live.drivers import peer_and_wrong_error

    (driver,) = [d for d in app.drivers if d.name == "C"]
    reading = peer_and_wrong_error(driver.learner, driver._batch)  # the last step's batch
    assert wrong["C"] == pytest.approx(reading, rel=1e-6)
    assert wrong["C"][0] != wrong["C"][1]
    a, c, o = session.loops  # lockstep: the same worlds in every track, the bounds included
    assert a.feed.stream_physics() == c.feed.stream_physics() == o.feed.stream_physics()
    assert (o.cfg.agent.track, o.cfg.agent.oracle) == ("C", True)  # the ceiling
    assert [d.name for d in app.drivers] == ["A", "C", "oracle"]
    # The session folder: a run folder a track (the ceiling's too), nothing else.
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["A", "C", "oracle"]
    assert all(lp.folder.root.parent == tmp_path / "w" and lp.folder.is_run() for lp in session.loops)
    session.run()
    from agent.checkpoint import read_checkpoint

    for loop in session.loops:  # each checkpoint keeps the view: its tracks, G's target, switches
        view = read_checkpoint(loop.folder.latest)["extra"]["view"]
        assert view == {"tracks": ["A", "C", "oracle"], "target": [0.3, 45.0], "switches": [[20, 0.3]]}
    assert app.step == 40 and app.switches == [(20, 0.3)] and app.held
    assert app.snapshot().tracks[1].wrong_world is None  # held: one world, no other memory
    assert np.allclose(app.snapshot().world.streams, SWITCH_WORLD)
    for loop in session.loops:  # every stream, not only the shown ones
        worlds = {(p.gravity, p.gravity_direction) for p in loop.feed.stream_physics()}
        assert worlds == {SWITCH_WORLD} and loop.learner.weights_frozen
    img = pygame.surfarray.array3d(pygame.image.load(str(shot)))
    assert img.std() > 10
    session.release()
    pygame.display.quit()

    # --from a worlds session (both its tracks) starts a new worlds session from its best.pt
    more = visualize.setup(["--headless", "--from", str(tmp_path / "w"), "--steps", "30",
                            "--out", str(tmp_path), "--name", "more"], log=lambda _: None)  # fmt: skip
    assert isinstance(more.app.controls, HeldWorlds) and not more.app.held and more.app.step == 0
    for loop in more.loops:
        assert loop.cfg.protocol.kind == "worlds" and not loop.learner.weights_frozen
    more.release()
    pygame.display.quit()


def test_cli_worlds_key_g_and_resume_in_the_held_world(tmp_path: Path) -> None:
    import zarr

    from runners import visualize

    argv = ["--headless", "--tracks", "C", "A", "--steps", "200", "--out", str(tmp_path),
            "--name", "k", "--no-switch", *TINY_WORLDS]  # fmt: skip
    session = visualize.setup(argv, log=lambda _: None)
    app = session.app
    loops = session.loops

    def stream_worlds(loop: object) -> set[tuple[float, float]]:
        return {(p.gravity, p.gravity_direction) for p in loop.feed.stream_physics()}  # type: ignore[attr-defined]

    for _ in range(6):
        app.advance()
    assert len(stream_worlds(loops[0])) > 1 and not any(lp.learner.weights_frozen for lp in loops)
    app.key(pygame.K_g)  # every stream of every track in the switch world
    assert app.held and app.switches == [(6, 0.75)]
    for loop in loops:
        assert stream_worlds(loop) == {DEFAULT_WORLD} and loop.learner.weights_frozen
        assert (loop.feed.shifted == 1).all()  # the new transitions are tagged as its world
    for _ in range(2):
        app.advance()
    app.key(pygame.K_g)  # again: back to the training worlds (the weights stay frozen)
    for _ in range(2):
        app.advance()
    assert not app.held and app.switches[-1] == (8, 0.0)
    for loop in loops:
        assert {visualize.family_name(*w) for w in stream_worlds(loop)} == {"train"}
        assert (loop.feed.shifted == 0).all() and loop.learner.weights_frozen
    app.key(pygame.K_g)  # and into it again, then quit
    for _ in range(2):
        app.advance()
    post_key(pygame.K_q)
    app.run()
    session.release()
    assert app.step == 12 and app.switches == [(6, 0.75), (8, 0.0), (10, 0.75)]
    pygame.display.quit()

    root = tmp_path / "k"
    assert sorted(p.name for p in root.iterdir()) == ["A", "C", "oracle"]
    again = visualize.setup(
        ["--headless", "--resume", str(root), "--steps", "16", "--draw-every", "2"],
        log=lambda _: None,
    )
    app = again.app
    assert [d.name for d in app.drivers] == ["C", "A", "oracle"]  # the session's order
    assert isinstance(app.controls, HeldWorlds) and app.step == 12 and app.held
    assert app.switches == [(6, 0.75), (8, 0.0), (10, 0.75)]
    assert app.snapshot().world.target == DEFAULT_WORLD
    for loop in again.loops:  # the checkpoint's world: every stream still held in it
        assert stream_worlds(loop) == {DEFAULT_WORLD} and loop.learner.weights_frozen
        assert (loop.physics.gravity, loop.physics.gravity_direction) == DEFAULT_WORLD
    again.run()
    assert app.held and app.switches[-1] == (10, 0.75)  # no switch at the resume
    for loop in again.loops:
        assert stream_worlds(loop) == {DEFAULT_WORLD}
        steps = zarr.open_group(str(loop.folder.root / "run.zarr"))["metrics/step"][:]
        assert steps.tolist() == list(range(16))  # no gap, no duplicate
    pygame.display.quit()


@pytest.mark.parametrize("run_protocol, view", [("paper", []), ("worlds", PAPER)])
def test_from_a_run_of_the_other_protocol_is_refused(
    tmp_path: Path, run_protocol: str, view: list[str]
) -> None:
    from runners import visualize
    from runners.cli import CliError
    from runners.online.command import build_config

    run = tmp_path / "run"
    run.mkdir()
    cfg = build_config(["--protocol", run_protocol, "--preset", "tiny", "--steps", "30"])
    cfg.save(run / "config.json")
    argv = [*view, "--headless", "--from", str(run), "--out", str(tmp_path), "--name", "s"]
    with pytest.raises(CliError) as err:
        visualize.setup(argv, log=lambda _: None)
    message = str(err.value)
    assert "\n" not in message and "paper" in message and "worlds" in message
    assert f"--protocol {run_protocol}" in message  # how to show it
    assert not (tmp_path / "s").exists()


def test_help_lists_the_protocols_and_keys(capsys: pytest.CaptureFixture[str]) -> None:
    from runners import visualize

    with pytest.raises(SystemExit):
        visualize.parse(["--help"])
    out = capsys.readouterr().out
    assert "--protocol {worlds,paper}" in out and "back to the training worlds" in out


def test_cli_worlds_tracks_are_heads_on_one_latent_where_the_run_settles(tmp_path: Path) -> None:
    """Where the view's run settles (the default preset does), its tracks are heads on one
    latent (agent.heads): one run folder, the memory track's, its floor and ceiling heads
    beside it; each column shows its own stream error, the run's records' (NaN until the
    settle); G freezes every head; a resume shows the same columns."""
    from runners import visualize
    from runners.online.recorder import Recorder

    settled = [*TINY_WORLDS, "--settle", "0.5", "--set", "fit_batch=8", "--set", "fit_worlds=2"]
    argv = ["--headless", "--steps", "40", "--draw-every", "5", "--out", str(tmp_path),
            "--name", "h", *settled]  # fmt: skip
    session = visualize.setup(argv, log=lambda _: None)
    app = session.app
    (loop,) = session.loops
    assert list(loop.learner.heads) == ["A", "oracle"] and loop.cfg.agent.track == "C"
    assert [d.name for d in app.drivers] == ["A", "C", "oracle"]
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == ["C"]
    for _ in range(30):
        app.advance()
    snap = app.snapshot()
    loop.flush()
    m = Recorder(loop.folder.root, create=False).read_metrics()
    settle = loop.learner.settle_at
    for view in snap.tracks:
        steps, err = view.history.view("stream/norm_error")
        column = "stream/norm_error" if view.name == "C" else f"heads/{view.name}/norm_error"
        assert steps.tolist() == list(range(30))
        np.testing.assert_allclose(err, m[column][:30], rtol=1e-6)
        if view.name != "C":
            assert np.isnan(err[:settle]).all() and np.isfinite(err[settle:]).any()
        assert view.predictions is not None  # decoded by the run's one decoder
    assert snap.tracks[0].wrong_world is None and snap.tracks[2].wrong_world is None  # no memory read
    assert [t.starts for t in snap.tracks] == [settle, 0, settle]  # a head's title says when
    app.screen.draw(snap)
    app.key(pygame.K_g)
    assert all(d.frozen for d in app.drivers) and loop.learner.heads["A"].weights_frozen
    post_key(pygame.K_q)
    app.run()
    session.release()
    pygame.display.quit()
    again = visualize.setup(["--headless", "--resume", str(tmp_path / "h"), "--steps", "34",
                             "--draw-every", "2"], log=lambda _: None)  # fmt: skip
    assert [d.name for d in again.app.drivers] == ["A", "C", "oracle"] and again.app.step == 30
    again.run()
    again.release()
    pygame.display.quit()


def test_an_option_of_the_other_protocol_is_refused(tmp_path: Path) -> None:
    """--shift-direction belongs to the worlds protocol's view (``view_options``): under the
    paper protocol one line says so and nothing is made."""
    from runners import visualize
    from runners.cli import CliError

    argv = [*PAPER, "--headless", "--shift-direction", "45", "--out", str(tmp_path), "--name", "s"]
    with pytest.raises(CliError, match="^--shift-direction belongs to the worlds protocol, not paper$"):
        visualize.setup(argv, log=lambda _: None)
    assert not (tmp_path / "s").exists()
