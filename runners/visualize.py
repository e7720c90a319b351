"""Live pygame visualization of shift adaptation: ``python -m runners.visualize``.

Watch the mechanism for several tracks side by side on the same streams. Each track is one
``OnlineLoop`` (the loop of ``train_online``) with the same seed, so all tracks see identical
frames; the app (``runners.live.app``: what G does under each of train_online's protocols)
steps them in lockstep and redraws at a steady rate.

A session folder ``<out>/<name>/`` holds ``screenshots/`` and one ``train_online`` run folder per
track (``A/``, ``C/``, ``oracle/``: config.json, run.zarr, checkpoints), made, held and continued
by the run folder's own helpers (``runners.online.rundir``, ``resume_config``); every checkpoint
also keeps the view's state (``view_state``). See docs/visualize.md (examples, the window).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import tyro

from agent import tracks as agent_tracks
from agent.config import Track
from runners.cli import CliError, ensure_output_dir, run_main
from runners.cli import parse as parse_cli
from runners.online.config import AfterSwitch, Device, Preset, ProtocolName, RunConfig, flat
from runners.online.protocols import PROTOCOLS
from runners.online.rundir import (
    RunFolder,
    StopRequest,
    default_name,
    existing_run_folder,
    new_folder,
    new_run_folder,
)
from runners.online.switch import SWITCH_SYNTAX, Switch, SwitchArg

if TYPE_CHECKING:
    from runners.live.app import App
    from runners.online.loop import OnlineLoop

PROG = "visualize"
DEFAULT_STEPS = 3000
DEFAULT_TRACKS = (agent_tracks.FLOOR, agent_tracks.MEMORY_DEFAULT)
DEFAULT_PROTOCOL = "worlds"
#: The options that belong to one protocol's sessions (``view_options``), refused for another's.
VIEW_OPTIONS = {name for p in PROTOCOLS.values() for name in p.view_options}

KEYS = """keys (worlds protocol):
  G             hold every stream of every track in the target world (each starts a new
                episode there, empty memory; memory mode freezes the weights), press again:
                back to the training worlds (each stream a new episode in a new world)
  Up / Down     target gravity +/- 0.05 (while held: every stream moves there at once)
  Left / Right  target direction -/+ 15 degrees (while held: at once)

keys (--protocol paper):
  G             gravity on/off: toggles between the base gravity and the shift value
  Up / Down     shift value +/- 0.05 (applied at once when the shift is on)
  Left / Right  rotate gravity's direction by -/+ 15 degrees

both:
  F freeze/unfreeze the weights   Space pause   S screenshot   R record frames
  Q, Esc quit (every track is checkpointed; --resume continues)"""


@dataclass
class Visualize:
    """The visualizer's options (``--help``: their help, then the keys)."""

    tracks: tuple[Track, ...] = ()
    """tracks side by side (default A C)"""
    bounds: bool = True
    """worlds protocol: also run the floor (track A) and the ceiling (the oracle of the first memory track, shown as "oracle") on the same streams"""
    protocol: Annotated[ProtocolName | None, tyro.conf.arg(metavar="{worlds,paper}")] = None
    """as in train_online: worlds (default; each stream its own world, G holds them all in one) or paper (one gravity for every stream, G switches it); --resume keeps the session's"""
    seed: int | None = None
    """seed of agents and stream (default 0)"""
    preset: Preset | None = None
    """run preset, as train_online's --preset (default cpu)"""
    steps: int | None = None
    """learner steps of the run (default 3000)"""
    switch: Annotated[
        tuple[SwitchArg, ...], tyro.conf.UseAppendAction, tyro.conf.arg(
            help="scripted physics switch before STEP, repeatable (as in train_online: "
            f"{SWITCH_SYNTAX}); default: one at 2/3 of --steps into G's target world "
            "(--no-switch: none, G alone switches)")
    ] = ()
    after_switch: AfterSwitch | None = None
    """memory: freeze weights at the first switch (default); continual: keep learning"""
    shift_gravity: float | None = None
    """gravity the G key switches to (default: the first --switch's, else worlds 0.75, paper 0.5)"""
    shift_direction: float | None = None
    """worlds protocol: direction (degrees, 90 = down) of the world G holds the streams in (default: the first --switch's, else 90)"""
    from_runs: Annotated[
        tuple[str, ...], tyro.conf.UseAppendAction, tyro.conf.arg(name="from", metavar="RUN_DIR")
    ] = ()
    """start a track from this run's best checkpoint (repeatable; its track is used; a session folder: its tracks)"""
    fresh_memory: bool = False
    """with --from: empty buffer, fresh detector"""
    resume: Annotated[str | None, tyro.conf.arg(metavar="SESSION_DIR")] = None
    """continue a visualizer session (with only the changes train_online --resume allows: --steps, --switch, --device, --eval-every, --checkpoint-every)"""
    out: str | None = None
    """parent folder of sessions (default runs/)"""
    name: str | None = None
    """session folder name (default <time>-viz-<tracks>-s<seed>)"""
    device: Device | None = None
    """default auto"""
    train_args: tyro.conf.Suppress[tuple[str, ...]] = ()
    """the other options: train_online's, for every track (``parse``)"""
    eval_every: int | None = None
    """steps between evaluations (default: none but at scripted switches and the end; an evaluation pauses the stream)"""
    checkpoint_every: int | None = None
    """steps between checkpoints (default 500)"""
    headless: bool = False
    """no window (SDL_VIDEODRIVER=dummy)"""
    fps: float = 25.0
    """redraws per second"""
    draw_every: int | None = None
    """redraw every N steps instead of by the clock"""
    no_draw: bool = False
    """draw only the final frame (benchmark)"""
    window: int = 600
    """steps shown in the charts"""
    predictions: bool = True
    """draw each track's predictions as frames (a pixel decoder fit beside each track, shown 3 times a second); they cost about 7% of the steps per second and a third of the redraws (docs/visualize.md#what-it-predicts): --no-predictions leaves them out"""
    screenshot: Annotated[str | None, tyro.conf.arg(metavar="PNG")] = None
    """write the final frame here"""
    video: Annotated[str | None, tyro.conf.arg(metavar="DIR")] = None
    """write every redraw as DIR/NNNNNN.png"""


def parse(argv: Sequence[str] | None) -> Visualize:
    """The view's options; any other option is train_online's, for every track's learner
    (``--lr 1e-3``, ``--no-stream-cache``), checked when the tracks' configs are built."""
    args, extra = parse_cli(
        Visualize, argv, f"python -m runners.{PROG}", unknown=True,
        description="Live view of EPM-JEPA tracks adapting to physics switches: under the "
        "worlds protocol (default) each stream in its own training world until G holds them "
        "all in one held-out world; under --protocol paper one gravity for all, switched by G. "
        f"Any other option is train_online's, for every track (e.g. --lr 1e-3).\n\n{KEYS}",
    )
    return dataclasses.replace(args, train_args=tuple(extra))


# -- configuration ----------------------------------------------------------------------------

#: The ceiling's name among the view's tracks (and its run folder's): the oracle of the first
#: memory track.
ORACLE = "oracle"


def given(args: Visualize, names: Sequence[str]) -> list[str]:
    """The train_online tokens of those of the view's options ``names`` that were given."""
    return [token for name in names if getattr(args, name) is not None
            for token in ("--" + name.replace("_", "-"), str(getattr(args, name)))]  # fmt: skip


def track_config(args: Visualize, name: str, from_dir: Path | None, protocol: str,
                 tracks: Sequence[str], heads: Sequence[str] = ()) -> RunConfig:  # fmt: skip
    """The ``RunConfig`` of one of the view's ``tracks`` (``ORACLE``: the first memory track's,
    C if none, fed the true physics), with ``heads`` beside it on its latent (``--heads``):
    train_online's command line, made of the --from run's config.json (but its schedule's length
    and memory pair, which follow the view's own stream), the visualizer's options, then
    train_online's options given to the view."""
    from runners.online.command import build_config

    saved: dict | None = None
    if from_dir is not None:  # the run's own config, its preset included (unless --preset)
        saved = RunFolder(from_dir).read_config()
        theirs = flat(saved).get("protocol", protocol)  # (none: refused by its version)
        if theirs != protocol:
            other = f" (--protocol {theirs} shows it)" if theirs in PROTOCOLS else ""
            raise CliError(f"--from {from_dir}: a {theirs}-protocol run, the view runs the "
                           f"{protocol} protocol{other}")  # fmt: skip
        agent = {k: v for k, v in (saved.get("agent") or {}).items()  # the view's own stream
                 if k not in ("total_steps", "push_pair", "heads")}  # and its own tracks
        saved = {**saved, "agent": agent}
    steps = args.steps or DEFAULT_STEPS
    track = agent_tracks.ceiling_track(t for t in tracks if t != ORACLE) if name == ORACLE else name
    tokens = ["--protocol", protocol, "--track", track, "--seed", str(args.seed or 0),
               "--steps", str(steps), "--record-frames", "0",
               "--eval-every", str(args.eval_every or steps + 1)]
    tokens += ["--oracle"] if name == ORACLE else []
    tokens += ["--decoder-steps", "0"]  # no held-out report here: the view's decoder draws
    tokens += ["--no-bounds"]  # its floor and ceiling: the view's tracks (--bounds)
    tokens += ["--heads", *heads] if heads else []
    tokens += [t for sw in args.switch or default_switch(args, protocol, steps)
               for t in ("--switch", str(sw))]  # fmt: skip
    if "source" in {f.name for f in dataclasses.fields(PROTOCOLS[protocol])}:
        tokens += ["--source", "stream", "--data", "None"]  # the view's own stream
    tokens += given(args, ("after_switch", "preset", "device", "checkpoint_every"))
    tokens += list(args.train_args)
    return build_config(tokens, saved, f"--from {from_dir}")


def default_switch(args: Visualize, protocol: str, steps: int) -> list[str]:
    """The view's scripted switch where no --switch is given: the run's default one, at 2/3 of
    --steps into the protocol's switch world (worlds: gravity 0.75 straight down, held out;
    paper: gravity 0.5), or into G's target where --shift-gravity / --shift-direction name
    another; none with train_online's --no-switch (G alone switches) or fewer than 3 steps."""
    if "--no-switch" in args.train_args or steps < 3:
        return []
    world = dict(PROTOCOLS[protocol].switch)
    for name, value in (("gravity", args.shift_gravity), ("gravity_direction", args.shift_direction)):
        if value is not None:
            world[name] = value
    return [str(Switch.make(steps * 2 // 3, world))]


def session_runs(root: Path) -> list[Path]:
    """A session folder's run folders, one a track (none where ``root`` is no folder)."""
    return sorted(p for p in root.iterdir() if RunFolder(p).is_run()) if root.is_dir() else []


def from_dirs(args: Visualize) -> dict[str, Path]:
    """--from RUN_DIR -> {track: run folder}; a session folder gives all of its tracks."""
    out: dict[str, Path] = {}
    for raw in args.from_runs:
        root = Path(raw)  # a session's tracks, but its ceiling (--bounds adds one again)
        runs = [root] if RunFolder(root).is_run() else [
            p for p in session_runs(root) if p.name != ORACLE]  # fmt: skip
        if not runs:
            raise CliError(f"--from {raw}: neither a run folder (no {RunFolder.CONFIG} in it) "
                           "nor a session")  # fmt: skip
        for run in runs:
            track = flat(RunFolder(run).read_config()).get("track")
            if track in out:
                raise CliError(f"--from: two runs of track {track}")
            out[str(track)] = run
    return out


def start_from(loop: OnlineLoop, run_dir: Path, fresh_memory: bool,
               log: Callable[[str], None]) -> None:  # fmt: skip
    """Load a run's best (else latest) weights and memory into a fresh loop's learner; the new
    run counts its own steps from 0 (its LR schedule starts again)."""
    from agent.checkpoint import CheckpointError, load_checkpoint

    folder = RunFolder(run_dir)
    ckpt = folder.best
    if not ckpt.exists():
        ckpt = folder.latest
        if not ckpt.exists():
            raise CliError(f"--from {run_dir}: no checkpoints/best.pt or latest.pt")
        log(f"{PROG}: {run_dir} has no best.pt, using latest.pt")
    try:
        load_checkpoint(ckpt, learner=loop.learner, map_location=loop.device)
    except CheckpointError as err:
        raise CliError(f"--from {run_dir}: {err}") from None
    learner = loop.learner
    learner.step = 0
    learner.unfreeze_weights()
    if fresh_memory:
        learner.buffer.clear()
        learner.detector.reset()
    log(f"{PROG}: track {learner.cfg.track} starts from {ckpt}")


# -- the session ------------------------------------------------------------------------------


@dataclass
class Session:
    """A session folder and its runs (``names``: their run folders' names; a run's heads are
    tracks of the view too), each with its config and, once made or continued, its run folder
    held by this process; ``open`` builds their loops and the app."""

    root: Path
    names: list[str]
    configs: list[RunConfig]
    order: list[str] = field(default_factory=list)  # the view's tracks, left to right
    folders: list[RunFolder] = field(default_factory=list)  # a new session's: made by ``open``
    starts: dict[str, Path] = field(default_factory=dict)  # --from runs by track
    loops: list[OnlineLoop] = field(default_factory=list)
    app: App | None = None

    def run(self) -> None:
        self.app.run()

    def release(self) -> None:
        """Let go of the run folders (their locks)."""
        for folder in self.folders:
            folder.release()

    def open(self, args: Visualize, log: Callable[[str], None]) -> None:
        """A new session's run folders (``new_run_folder``), then each track's loop (a resume:
        from its checkpoint; ``--from``: its run's weights and memory), then the app; every
        checkpoint keeps the view's state from then on."""
        from runners.online.loop import OnlineLoop

        resume = bool(self.folders)
        if not resume:
            for name, cfg in zip(self.names, self.configs, strict=True):
                self.folders.append(new_run_folder(self.root, name, name, cfg.agent.seed))
        for cfg, folder in zip(self.configs, self.folders, strict=True):
            loop = OnlineLoop.open(cfg, folder, resume=resume, log=log)
            if cfg.agent.track in self.starts and not cfg.agent.oracle:  # the ceiling: afresh
                start_from(loop, self.starts[cfg.agent.track], args.fresh_memory, log)
            self.loops.append(loop)
        if resume:
            self.order, target, switches = resumed_view(self.root, self.loops)
        else:
            target, switches = shift_target(args, self.configs[0]), []
        self.app = make_app(args, self.loops, self.order, self.root, target, switches)
        for loop in self.loops:
            loop.view_state = partial(view_state, self.app)


def new_session(args: Visualize) -> Session:
    """A new session: each track's config (the --from runs' checked), then its folder, made
    fresh (``new_folder``; its run folders are made by ``Session.open``)."""
    protocol = args.protocol or DEFAULT_PROTOCOL
    kind = PROTOCOLS[protocol]
    for name in VIEW_OPTIONS - set(kind.view_options):
        if getattr(args, name) is not None:
            mine = [k for k, p in PROTOCOLS.items() if name in p.view_options]
            raise CliError(f"--{name.replace('_', '-')} belongs to the {' or '.join(mine)} "
                           f"protocol, not {protocol}")
    starts = from_dirs(args)
    tracks = list(args.tracks or (starts.keys() if starts else DEFAULT_TRACKS))
    if len(set(tracks)) != len(tracks):
        raise CliError("--tracks: each track at most once")
    if missing := set(starts) - set(tracks):
        raise CliError(f"--from gives track {', '.join(sorted(missing))}, not in --tracks")
    if args.bounds and kind.bound_heads:  # the floor (track A) first, the ceiling last
        tracks = ([] if agent_tracks.FLOOR in tracks else [agent_tracks.FLOOR]) + tracks + [ORACLE]
    names, cfgs = one_latent(args, protocol, tracks) if not starts else ([], [])
    if not cfgs:  # a run a track
        names, cfgs = tracks, [track_config(args, t, starts.get(t), protocol, tracks) for t in tracks]
    out = ensure_output_dir(args.out or "runs", "--out")
    seed = cfgs[0].agent.seed
    root = new_folder(out, args.name, default_name(f"viz-{''.join(tracks)}", seed), "session folder")
    return Session(root, names, cfgs, order=tracks, starts=starts)


def one_latent(args: Visualize, protocol: str, tracks: Sequence[str]) -> tuple[list[str], list[RunConfig]]:
    """The view's tracks as heads on one latent (``agent.heads``), where its run settles: one
    run of the first memory track (else the first track), the others its heads; ([], []) where
    the run does not settle (``--settle None``, a preset without it): then a run a track."""
    trainer = next((t for t in tracks if t != ORACLE and agent_tracks.reads_memory(t)), tracks[0])
    heads = [t for t in tracks if t != trainer]
    cfg = track_config(args, trainer, None, protocol, tracks)
    if cfg.agent.settle is None:
        return [], []
    return [trainer], [track_config(args, trainer, None, protocol, tracks, heads)]


def resume_session(args: Visualize) -> Session:
    """--resume: the session's run folders, held (``existing_run_folder``), each with its saved
    config changed by the options given (``resume_config``, which refuses those a run keeps) and
    saved again."""
    from runners.online.command import resume_config

    if args.from_runs or args.tracks:
        raise CliError("--from and --tracks cannot be used with --resume")
    root = Path(args.resume)
    if RunFolder(root).is_run():
        raise CliError(f"--resume {root}: a run folder, not a session (--from {root} starts one)")
    runs = session_runs(root)
    if not runs:
        raise CliError(f"--resume {root}: not a visualizer session (no run folder in it)")
    changes = given(args, ("protocol", "seed", "preset", "steps", "after_switch", "device",
                           "eval_every", "checkpoint_every"))  # fmt: skip
    changes += [t for sw in args.switch for t in ("--switch", str(sw))] + list(args.train_args)
    folders = [existing_run_folder(run) for run in runs]
    configs = [resume_config(f.read_config(), changes, f"python -m runners.{PROG}") for f in folders]
    for folder, cfg in zip(folders, configs, strict=True):  # as train_online --resume does
        cfg.save(folder.config)
    return Session(root, [run.name for run in runs], configs, folders=folders)


def view_state(app: App) -> dict[str, Any]:
    """What every track's checkpoint keeps of the view (``OnlineLoop.view_state``) for
    ``resumed_view``: the tracks in their order, G's target and the switches so far. Where the
    streams are (held or not), the physics and the frozen weights are the loop's own state."""
    return {"tracks": [d.name for d in app.drivers],
            "target": [app.shift_gravity, app.shift_direction],
            "switches": [[step, gravity] for step, gravity in app.switches]}  # fmt: skip


def resumed_view(
    root: Path, loops: list[OnlineLoop]
) -> tuple[list[str], tuple[float, float], list[tuple[int, float]]]:
    """A resumed session's tracks in their order, G's target and the switches so far, from the
    view its checkpoints keep (``view_state``); ``CliError`` where they keep none of these tracks
    (a session of an earlier version, a run that is no session's)."""
    view = loops[0].view
    names = sorted(name for lp in loops for name in (lp.folder.root.name, *lp.learner.heads))
    try:
        order = [str(t) for t in view["tracks"]]
        target = (float(view["target"][0]), float(view["target"][1]))
        switches = [(int(step), float(gravity)) for step, gravity in view["switches"]]
    except (KeyError, IndexError, TypeError, ValueError):
        order = []
    if sorted(order) != names:
        raise CliError(f"--resume {root}: {loops[0].folder.latest} keeps no view of a session of "
                       f"tracks {' '.join(names)} (a session of an earlier version?)")  # fmt: skip
    return order, target, switches


def shift_target(args: Visualize, cfg: RunConfig) -> tuple[float, float]:
    """The (gravity, direction) G switches to: --shift-gravity and --shift-direction, else the
    first scripted switch's world, else the protocol's default switch world (worlds: gravity 0.75
    straight down, held out; paper: its shift gravity, down)."""
    fs = cfg.first_switch
    p = cfg.physics_at(fs) if fs is not None else cfg.base_physics.replace(**dict(cfg.protocol.switch))
    return (p.gravity if args.shift_gravity is None else args.shift_gravity,
            p.gravity_direction if args.shift_direction is None else args.shift_direction)  # fmt: skip


def setup(argv: Sequence[str] | None = None, log: Callable[[str], None] = print) -> Session:
    """Parse, make or continue the session, build one OnlineLoop per track, open the window (or
    the dummy one), build the app."""
    args = parse(argv)
    if args.headless:
        os.environ["SDL_VIDEODRIVER"] = "dummy"
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    if args.screenshot:  # outputs are checked before any work
        ensure_output_dir(Path(args.screenshot).parent, "the folder of --screenshot")
    if args.video:
        ensure_output_dir(args.video, "--video")
    from runners.online.parts import resolve_device, set_threads

    session = resume_session(args) if args.resume else new_session(args)
    try:
        set_threads(resolve_device(session.configs[0].device))
        session.open(args, log)
    except CliError:
        session.release()
        if not args.resume:  # a new session that could not start leaves nothing behind
            shutil.rmtree(session.root, ignore_errors=True)
        raise
    return session


def family_name(gravity: float, direction: float) -> str:
    """The world family (``env.FAMILIES``) of a gravity and direction, for the view's labels."""
    import env
    from runners.online.world_sets import family_of

    return family_of(env.PhysicsParams(gravity=gravity, gravity_direction=direction))


def make_app(args: Visualize, loops: list[OnlineLoop], order: Sequence[str], root: Path,
             target: tuple[float, float], switches: list[tuple[int, float]]) -> App:  # fmt: skip
    """The window (``CliError`` where none opens) and the app on the tracks' loops: a driver for
    each loop's learner and each of its heads, in the view's ``order``."""
    import pygame

    from runners.live.app import App, AppConfig
    from runners.live.controls import CONTROLS
    from runners.live.drivers import drivers_of
    from runners.live.screen import SIZE

    pygame.display.init()
    pygame.font.init()
    try:
        surface = pygame.display.set_mode(SIZE)
    except pygame.error as err:
        raise CliError(f"cannot open a window ({err}); use --headless") from None
    pygame.display.set_caption("EPM-JEPA live: " + " ".join(order))
    cfg0 = loops[0].cfg
    app_cfg = AppConfig(
        fps=args.fps, draw_every=args.draw_every, draw=not args.no_draw,
        max_steps=cfg0.schedule.steps, hold_at_end=os.environ.get("SDL_VIDEODRIVER") != "dummy",
        controls=CONTROLS[cfg0.protocol.kind], mode=cfg0.schedule.after_switch,
        base_gravity=cfg0.base_physics.gravity, shift_gravity=target[0], shift_direction=target[1],
        switches=switches, family=family_name,
        window=args.window, rolling=cfg0.schedule.rolling_window,
        screenshot=Path(args.screenshot) if args.screenshot else None,
        video_dir=Path(args.video) if args.video else None, shots_dir=root / "screenshots",
    )  # fmt: skip
    drivers = [d for i, lp in enumerate(loops) for d in drivers_of(lp, i == 0, args.predictions)]
    return App(sorted(drivers, key=lambda d: order.index(d.name)), app_cfg, surface)


def main(argv: Sequence[str] | None = None) -> int:
    session = setup(argv)
    app = session.app
    stop = StopRequest()
    app.cfg.should_stop = lambda: stop.requested
    with stop:
        t0 = time.perf_counter()
        start = app.step
        try:
            session.run()
        finally:
            session.release()
        dt = time.perf_counter() - t0
    rate = (app.step - start) / max(dt, 1e-9)
    draw_ms = 1000 * app.draw_time / max(app.draws, 1)
    print(f"{PROG}: {app.step - start} steps in {dt:.1f} s ({rate:.1f} steps/s), {app.draws} "
          f"redraws ({draw_ms:.1f} ms each); session {session.root}")  # fmt: skip
    if app.cfg.screenshot is not None:
        print(f"{PROG}: final frame {app.cfg.screenshot}")
    print(f"{PROG}: checkpointed; continue with  python -m runners.{PROG} --resume {session.root}")
    return 0


if __name__ == "__main__":
    run_main(main, f"python -m runners.{PROG}")
