"""Live pygame visualization of shift adaptation: ``python -m runners.visualize``.

Watch the mechanism for several tracks side by side on the same streams. Each track is one
``OnlineLoop`` (the loop of ``train_online``) with the same seed, so all tracks see identical
frames; the app steps them in lockstep and redraws at a steady rate.

The protocol is train_online's (``--protocol``). Under ``worlds`` (the default) each stream lives
in its own world drawn from the training family (an arrow per stream shows it); G (or a scripted
``--switch``) holds every stream of every track in one held-out world, where each starts a new
episode with an empty memory and, in ``memory`` mode, the weights freeze: does a track's stream
error come down from its memory alone? G again gives the streams back to the training worlds.
Under ``paper`` one gravity acts on every stream and G switches it: surprisal spikes, the
boundary detector fires, the buffer fills with the new world's transitions.

    python -m runners.visualize                                  # tracks A and C, from scratch
    python -m runners.visualize --tracks A B C --switch 1500:gravity=0.3,direction=45
    python -m runners.visualize --protocol paper --switch 1500:0.5
    python -m runners.visualize --from runs/<a-run> --tracks C   # start from its best.pt
    python -m runners.visualize --headless --steps 400 --switch 200:gravity=0.3,direction=45 \
        --screenshot out.png
    python -m runners.visualize --resume runs/<session>          # continue a session

A session folder ``<out>/<name>/`` holds ``viz.json`` (the options and the world's state at the
last checkpoint), ``screenshots/`` and one ``train_online`` run folder per track (``A/``, ``C/``,
... with config.json, run.zarr and checkpoints). See docs/visualize.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import tyro

from agent import tracks as agent_tracks
from agent.config import Track
from runners.cli import CliError, ensure_output_dir, run_main
from runners.cli import parse as parse_cli
from runners.online.config import (
    DEFAULT_SHIFT_GRAVITY,
    DEFAULT_WORLD_SWITCH,
    PROTOCOLS,
    AfterSwitch,
    Device,
    Preset,
    ProtocolName,
    RunConfig,
    flat,
)
from runners.online.rundir import RunFolder, existing_run_folder
from runners.online.switch import SWITCH_SYNTAX, SwitchArg

PROG = "visualize"
SESSION_FILE = "viz.json"
DEFAULT_STEPS = 3000
DEFAULT_TRACKS = (agent_tracks.FLOOR, agent_tracks.MEMORY_DEFAULT)
DEFAULT_PROTOCOL = "worlds"

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
    """learner preset, as in train_online (default cpu)"""
    steps: int | None = None
    """learner steps of the run (default 3000)"""
    switch: Annotated[
        tuple[SwitchArg, ...], tyro.conf.UseAppendAction, tyro.conf.arg(
            help=f"scripted physics switch before STEP, repeatable (as in train_online: {SWITCH_SYNTAX})")
    ] = ()
    after_switch: AfterSwitch | None = None
    """memory: freeze weights at the first switch (default); continual: keep learning"""
    shift_gravity: float | None = None
    """gravity the G key switches to (default: the first --switch's, else worlds 0.3, paper 0.5)"""
    shift_direction: float | None = None
    """worlds protocol: direction (degrees, 90 = down) of the world G holds the streams in (default: the first --switch's, else 45)"""
    from_runs: Annotated[
        tuple[str, ...], tyro.conf.UseAppendAction, tyro.conf.arg(name="from", metavar="RUN_DIR")
    ] = ()
    """start a track from this run's best checkpoint (repeatable; its track is used)"""
    fresh_memory: bool = False
    """with --from: empty buffer, fresh detector"""
    resume: Annotated[str | None, tyro.conf.arg(metavar="SESSION_DIR")] = None
    """continue a visualizer session"""
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


def track_config(
    args: Visualize, track: str, from_dir: Path | None, protocol: str = DEFAULT_PROTOCOL
) -> RunConfig:
    """The ``RunConfig`` of one track: train_online's command line, made of the --from run's
    config.json (but its schedule's length and memory pair, which follow the view's own
    stream), the visualizer's options, then train_online's options given to the view."""
    from runners.online.command import build_config

    saved: dict | None = None
    if from_dir is not None:  # the run's own config, its preset included (unless --preset)
        saved = RunFolder(from_dir).read_config()
        theirs = flat(saved).get("protocol", "paper")  # before the worlds protocol: paper
        if theirs != protocol:
            other = f" (--protocol {theirs} shows it)" if theirs in PROTOCOLS else ""
            raise CliError(
                f"--from {from_dir}: a {theirs}-protocol run, the view runs the {protocol} "
                f"protocol{other}"
            )
        agent = {k: v for k, v in (saved.get("agent") or {}).items()  # the view's own stream
                 if k not in ("total_steps", "push_pair")}
        saved = {**saved, "agent": agent}
    steps = args.steps or DEFAULT_STEPS
    tokens = ["--protocol", protocol, "--track", track, "--seed", str(args.seed or 0),
               "--steps", str(steps), "--record-frames", "0",
               "--eval-every", str(args.eval_every or steps + 1)]
    # no scripted switch: the G key makes them
    tokens += [t for sw in args.switch for t in ("--switch", str(sw))] or ["--no-switch"]
    if protocol == "paper":
        tokens += ["--source", "stream", "--data", "None"]
    for name in ("after_switch", "preset", "device", "checkpoint_every"):
        if getattr(args, name) is not None:
            tokens += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    tokens += list(args.train_args)
    return build_config(tokens, saved, f"--from {from_dir}")


#: The ceiling's name among the view's tracks: the oracle of the first memory track.
ORACLE = "oracle"


def with_bounds(tracks: Sequence[str]) -> list[str]:
    """The tracks with the floor (track A, first) and the ceiling (``ORACLE``, last) added."""
    floor = [] if agent_tracks.FLOOR in tracks else [agent_tracks.FLOOR]
    return floor + list(tracks) + [ORACLE]


def bound_config(args: Visualize, name: str, from_dir: Path | None, protocol: str,
                 tracks: Sequence[str]) -> RunConfig:  # fmt: skip
    """``track_config`` of a track, or of the ceiling: the first memory track of ``tracks``
    (C if none) fed the true physics."""
    if name != ORACLE:
        return track_config(args, name, from_dir, protocol)
    base = next((t for t in tracks if t != ORACLE and agent_tracks.reads_memory(t)),
                agent_tracks.MEMORY_DEFAULT)
    cfg = track_config(args, base, None, protocol)
    cfg.agent = cfg.agent.replace(oracle=True)
    return cfg


def read_session(path: Path) -> dict[str, Any]:
    """A session's ``viz.json``; ``CliError`` naming it when it is damaged."""
    try:
        meta = json.loads(path.read_text())
    except ValueError as err:
        raise CliError(f"{path}: damaged, not valid JSON ({err})") from None
    if not (isinstance(meta, dict) and isinstance(meta.get("tracks"), list)):
        raise CliError(f"{path}: damaged, no list of tracks")
    return meta


def from_dirs(args: Visualize) -> dict[str, Path]:
    """--from RUN_DIR -> {track: run folder}; a session folder gives all of its tracks."""
    out: dict[str, Path] = {}
    for raw in args.from_runs or []:
        root = Path(raw)
        session = root / SESSION_FILE
        runs = (  # a session's tracks, but its ceiling (--bounds adds one again)
            [root / t for t in read_session(session)["tracks"] if t != ORACLE]
            if session.exists()
            else [root]
        )
        for run in runs:
            folder = RunFolder(run)
            if not folder.is_run():
                raise CliError(f"--from {raw}: not a run folder (no {folder.CONFIG} in {run})")
            track = flat(folder.read_config()).get("track")
            if track in out:
                raise CliError(f"--from: two runs of track {track}")
            out[str(track)] = run
    return out


def start_from(loop: Any, run_dir: Path, fresh_memory: bool, log: Any) -> None:
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
    """What ``setup`` built: the app (window, drivers) and the session folder."""

    app: Any
    root: Path
    loops: list[Any]

    def run(self) -> None:
        self.app.run()

    def release(self) -> None:
        """Let go of the run folders (their locks)."""
        for loop in self.loops:
            loop.folder.release()

    def save_state(self, app: Any) -> None:
        """Write the world's state next to the runs (read back by --resume; the worlds
        protocol's streams and whether they are held are in the tracks' checkpoints)."""
        path = self.root / SESSION_FILE
        data = json.loads(path.read_text()) if path.exists() else {}
        data["world"] = {
            "gravity": app.gravity,
            "direction": app.direction,
            "shift_gravity": app.shift_gravity,
            "shift_direction": app.shift_direction,
            "held": app.held,
            "switches": [list(s) for s in app.switches],
            "step": app.step,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)


def new_session_dir(args: Visualize, tracks: Sequence[str]) -> Path:
    out = Path(args.out or "runs")
    name = args.name or f"{time.strftime('%Y%m%d-%H%M%S')}-viz-{''.join(tracks)}-s{args.seed or 0}"
    root = out / name
    if root.exists():
        raise CliError(f"session folder {root} already exists: continue it with --resume {root}")
    ensure_output_dir(out, "--out")
    try:
        root.mkdir()
    except OSError as err:
        raise CliError(f"cannot create session folder {root}: {err.strerror or err}") from None
    return root


def resume_session(
    args: Visualize,
) -> tuple[Path, list[tuple[RunConfig, RunFolder]], tuple[float, float], dict[str, Any]]:
    """--resume: the session folder, each track's config (changed by the options that may
    change) and run folder, the (gravity, direction) G switches to and the world's saved state."""
    from runners.online.command import resume_config

    if args.from_runs or args.tracks:
        raise CliError("--from and --tracks cannot be used with --resume")
    root = Path(args.resume)
    meta_path = root / SESSION_FILE
    if not meta_path.exists():
        raise CliError(f"--resume {root}: not a visualizer session (no {SESSION_FILE})")
    meta = read_session(meta_path)
    tracks = list(meta["tracks"])
    world_state = meta.get("world", {})
    changes = [
        token
        for name in ("steps", "device", "eval_every", "checkpoint_every")
        if getattr(args, name) is not None
        for token in ("--" + name.replace("_", "-"), str(getattr(args, name)))
    ]
    configs = []
    for t in tracks:
        folder = existing_run_folder(root / t)
        configs.append((resume_config(folder.read_config(), changes), folder))
    protocol = configs[0][0].protocol.kind  # the session's own (each track's config.json)
    if args.protocol is not None and args.protocol != protocol:
        raise CliError(
            f"--resume {root}: a {protocol}-protocol session; it cannot continue under "
            f"--protocol {args.protocol}"
        )
    default_g, default_d = session_target(configs[0][0])
    shift_gravity = float(
        world_state.get("shift_gravity", meta.get("shift_gravity", default_g))
    )
    shift_direction = float(world_state.get("shift_direction", default_d))
    return root, configs, (shift_gravity, shift_direction), world_state


def new_session(
    args: Visualize,
) -> tuple[Path, list[tuple[RunConfig, RunFolder]], tuple[float, float], dict[str, Path]]:
    """A new session: its folder (made, with its viz.json), each track's config and held run
    folder, the (gravity, direction) G switches to and the --from runs by track."""
    from runners.online.parts import resolve_device, set_threads

    protocol = args.protocol or DEFAULT_PROTOCOL
    if args.shift_direction is not None and protocol != "worlds":
        raise CliError("--shift-direction belongs to the worlds protocol (paper: Left/Right)")
    starts = from_dirs(args)
    tracks = list(args.tracks or (starts.keys() if starts else DEFAULT_TRACKS))
    if len(set(tracks)) != len(tracks):
        raise CliError("--tracks: each track at most once")
    missing = set(starts) - set(tracks)
    if missing:
        raise CliError(f"--from gives track {', '.join(sorted(missing))}, not in --tracks")
    if args.bounds and protocol == "worlds":
        tracks = with_bounds(tracks)
    cfgs = [bound_config(args, t, starts.get(t), protocol, tracks) for t in tracks]
    default_g, default_d = session_target(cfgs[0])
    shift_gravity = args.shift_gravity if args.shift_gravity is not None else default_g
    shift_direction = args.shift_direction if args.shift_direction is not None else default_d
    set_threads(resolve_device(cfgs[0].device))
    root = new_session_dir(args, tracks)
    meta = {
        "tracks": tracks,
        "seed": cfgs[0].agent.seed,
        "protocol": protocol,
        "shift_gravity": shift_gravity,
        "shift_direction": shift_direction,
    }
    (root / SESSION_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    configs = []
    for t, cfg in zip(tracks, cfgs, strict=True):
        folder = RunFolder(root / t).hold()
        folder.make()
        configs.append((cfg, folder))
    return root, configs, (shift_gravity, shift_direction), starts


def setup(argv: Sequence[str] | None = None, log: Any = print) -> Session:
    """Parse, build one OnlineLoop per track, open the window (or the dummy one), build the app."""
    args = parse(argv)
    if args.headless:
        os.environ["SDL_VIDEODRIVER"] = "dummy"
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    if args.screenshot:  # outputs are checked before any work
        ensure_output_dir(Path(args.screenshot).parent, "the folder of --screenshot")
    if args.video:
        ensure_output_dir(args.video, "--video")
    from runners.online.loop import OnlineLoop
    from runners.online.parts import resolve_device, set_threads

    world_state: dict[str, Any] = {}
    starts: dict[str, Path] = {}
    if args.resume:
        root, configs, target, world_state = resume_session(args)
    else:
        root, configs, target, starts = new_session(args)
    set_threads(resolve_device(configs[0][0].device))
    loops = []
    try:
        for cfg, folder in configs:
            loop = OnlineLoop.open(cfg, folder, resume=bool(args.resume), log=log)
            if cfg.agent.track in starts and not cfg.agent.oracle:  # the ceiling starts afresh
                start_from(loop, starts[cfg.agent.track], args.fresh_memory, log)
            loops.append(loop)
        app = make_app(args, loops, root, target, world_state, log)
    except CliError:
        if not args.resume:  # a new session that could not start leaves nothing behind
            for _, folder in configs:
                folder.release()
            shutil.rmtree(root, ignore_errors=True)
        raise
    return Session(app, root, loops)


def session_target(cfg: RunConfig) -> tuple[float, float]:
    """The (gravity, direction) G switches to by default: the first scripted switch's world,
    else the worlds protocol's default switch world (gravity 0.3 towards 45 degrees, held out)
    or the paper's shift gravity (its direction: down)."""
    if cfg.first_switch is not None:
        p = cfg.physics_at(cfg.first_switch)
        return p.gravity, p.gravity_direction
    if cfg.worlds_protocol:
        p = cfg.base_physics.replace(**dict(DEFAULT_WORLD_SWITCH))
        return p.gravity, p.gravity_direction
    return DEFAULT_SHIFT_GRAVITY, cfg.base_physics.gravity_direction


def family_name(gravity: float, direction: float) -> str:
    """The world family (``env.FAMILIES``) of a gravity and direction, for the view's labels."""
    import env
    from runners.online.world_sets import family_of

    return family_of(env.PhysicsParams(gravity=gravity, gravity_direction=direction))


def make_app(
    args: Visualize,
    loops: list[Any],
    root: Path,
    target: tuple[float, float],
    world_state: dict[str, Any],
    log: Any,
) -> Any:
    import pygame

    from runners.live.app import App, AppConfig
    from runners.live.drivers import LoopDriver
    from runners.live.screen import SIZE

    pygame.display.init()
    pygame.font.init()
    try:
        surface = pygame.display.set_mode(SIZE)
    except pygame.error as err:
        raise CliError(f"cannot open a window ({err}); use --headless") from None
    pygame.display.set_caption("EPM-JEPA live: " + " ".join(lp.cfg.agent.track for lp in loops))
    headless = os.environ.get("SDL_VIDEODRIVER") == "dummy"
    drivers = [LoopDriver(lp, records=i == 0) for i, lp in enumerate(loops)]
    cfg0 = loops[0].cfg
    app_cfg = AppConfig(
        fps=args.fps,
        draw_every=args.draw_every,
        draw=not args.no_draw,
        max_steps=cfg0.schedule.steps,
        hold_at_end=not headless,
        protocol=cfg0.protocol.kind,
        mode=cfg0.schedule.after_switch,
        base_gravity=cfg0.base_physics.gravity,
        shift_gravity=target[0],
        shift_direction=target[1],
        family=family_name,
        window=args.window,
        rolling=cfg0.schedule.rolling_window,
        screenshot=Path(args.screenshot) if args.screenshot else None,
        video_dir=Path(args.video) if args.video else None,
        shots_dir=root / "screenshots",
    )
    app = App(drivers, app_cfg, surface)
    if world_state:  # an interactive world outlives the checkpoint: put it back
        app.restore_world(
            float(world_state.get("gravity", app.gravity)),
            float(world_state.get("direction", app.direction)),
            [(int(s), float(g)) for s, g in world_state.get("switches", [])],
        )
    return app


def main(argv: Sequence[str] | None = None) -> int:
    session = setup(argv)
    session.app.cfg.on_checkpoint = session.save_state
    app = session.app
    from runners.online.rundir import StopRequest

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
    print(
        f"{PROG}: {app.step - start} steps in {dt:.1f} s ({rate:.1f} steps/s), {app.draws} "
        f"redraws ({draw_ms:.1f} ms each); session {session.root}"
    )
    if app.cfg.screenshot is not None:
        print(f"{PROG}: final frame {app.cfg.screenshot}")
    print(f"{PROG}: checkpointed; continue with  python -m runners.{PROG} --resume {session.root}")
    return 0


if __name__ == "__main__":
    run_main(main, f"python -m runners.{PROG}")
