"""The run's configuration: a typed ``RunConfig`` holding the nested ``AgentConfig``.

Resolution order (later wins): the defaults below -> ``--config FILE`` (JSON) -> the named
command-line options -> ``--set field=value`` overrides (any ``RunConfig`` or ``AgentConfig``
field). Derived values are computed once, right after parsing (``resolve``), and the resolved
config is saved next to the run as ``config.json``; ``--resume`` reads it back.

Every mistake a user can make here raises ``CliError`` with one line naming the field.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.cli import CliError

# Calibrated on a 2-core CPU so the default run tells the whole story in about five minutes
# (see docs/train_online.md, "The default run").
DEFAULT_STEPS = 4500
DEFAULT_SWITCH = (3000, 0.5)  # = (2/3 of the steps, 0.5): the default when --switch is not given
DEFAULT_SHIFT_GRAVITY = 0.5
DEFAULT_EVAL_EVERY = 250
DEFAULT_CHECKPOINT_EVERY = 500

TRACKS = ("A", "B", "C", "D", "E")
AFTER_SWITCH = ("memory", "continual")
SOURCES = ("stream", "dataset")
PRESETS = ("cpu", "tiny", "paper")
# Runner presets on top of the agent's: name -> (agent preset, agent overrides). "cpu" is the
# default run's learner: the tiny networks with 64 streams, a lower LR and a stronger variance
# hinge, measured to beat "no change" within minutes on a 2-core CPU without collapsing
# (the tiny preset as is collapses in the stream: sigma_embed ~0.02, see docs/train_online.md).
RUN_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "cpu": ("tiny", {"batch_size": 64, "lr": 1e-3, "lambda_reg": 0.2, "buffer_capacity": 64}),
    "tiny": ("tiny", {}),
    "paper": ("paper", {}),
}
DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "bf16")

# RunConfig fields that are also AgentConfig fields: the run's value is passed down.
SHARED_WITH_AGENT = ("track", "seed", "precision")


@dataclass
class RunConfig:
    """One online run. ``agent`` is the learner's resolved ``AgentConfig`` (set by ``resolve``)."""

    steps: int = DEFAULT_STEPS  # total online steps (one learner update each)
    # (step, gravity), applied before that step; None: one switch to g=0.5 at 2/3 of the run
    switches: tuple[tuple[int, float], ...] | None = None
    after_switch: str = "memory"  # memory: weights frozen after the first switch; continual: keep learning
    base_gravity: float = 0.0  # gravity of the base world (px/frame^2) before any switch
    source: str = "stream"  # stream: live vector env; dataset: i.i.d. sequences from --data
    data: str | None = None  # zarr store from make_dataset (dataset source and/or eval splits)
    preset: str = "cpu"  # cpu (default: tiny nets, 64 streams), tiny (tests) or paper (Tables 4-5)
    track: str = "C"  # A none, B residual, C LoRA, D FiLM, E hypernetwork
    seed: int = 0  # seeds the agent, the streams and the generated eval splits
    device: str = "auto"  # auto = cuda when available, else cpu
    precision: str = "fp32"  # fp32 or bf16 (autocast)
    eval_every: int = DEFAULT_EVAL_EVERY  # steps between periodic evaluations (also at switches, end)
    eval_ns: tuple[int, ...] = (0, 10, 50)  # memory sizes n of D_shift^n at periodic evaluations
    final_ns: tuple[int, ...] = (0, 10, 25, 50, 100, 256)  # adaptation curve at the end of the run
    headline_n: int = 50  # the n of the headline D_shift^n (best.pt keeps its lowest value)
    eval_shift_train: int = 512  # shift-world train sequences (memory pushes) for evaluation
    eval_shift_test: int = 128  # shift-world test sequences for D_shift
    eval_base_test: int = 128  # base-world test sequences for D_base
    eval_seed_offset: int = 10_000  # generated eval splits use seed + this offset
    episode_length: int | None = 400  # stream episode length in steps (None: endless)
    stagger: bool = True  # start the parallel streams at staggered phases of their episodes
    record_frames: int = 0  # keep every N-th frame batch + ground truth in run.zarr (0: none)
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY  # steps between checkpoints/latest.pt
    log_every: int = 25  # steps per metrics block (one host sync, one zarr append, one bar update)
    rolling_window: int = 100  # steps in the rolling stream error
    out: str = "runs"  # parent folder of run folders
    name: str | None = None  # run folder name (default: time-track-seed)
    agent: Any = None  # resolved agent.AgentConfig
    agent_overrides: dict[str, Any] = field(default_factory=dict)  # AgentConfig fields set by the user

    # -- derived ---------------------------------------------------------------------------
    @property
    def first_switch(self) -> int | None:
        return self.switches[0][0] if self.switches else None

    @property
    def shift_gravity(self) -> float:
        """Gravity of the evaluation's shift world: the first switch's, else 0.5."""
        return self.switches[0][1] if self.switches else DEFAULT_SHIFT_GRAVITY

    def gravity_at(self, step: int) -> float:
        """The world's gravity during step ``step`` (switches apply before their step)."""
        g = self.base_gravity
        for s, gs in self.switches or ():
            if s <= step:
                g = gs
        return g

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["switches"] = [list(s) for s in self.switches or ()]
        d["eval_ns"] = list(self.eval_ns)
        d["final_ns"] = list(self.final_ns)
        d["agent"] = self.agent.to_dict() if self.agent is not None else None
        d["agent_overrides"] = dict(self.agent_overrides)
        return d

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, default=_json_default) + "\n")
        tmp.replace(path)


RUN_FIELDS = {f.name for f in dataclasses.fields(RunConfig)} - {"agent", "agent_overrides"}


def _json_default(o: Any) -> Any:
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# -- value parsing ---------------------------------------------------------------------------
def parse_switch(text: str) -> tuple[int, float]:
    """``"3000:0.5"`` -> ``(3000, 0.5)``."""
    if isinstance(text, (list, tuple)) and len(text) == 2:
        text = f"{text[0]}:{text[1]}"
    parts = str(text).split(":")
    if len(parts) != 2:
        raise CliError(f"malformed --switch {text!r}: expected STEP:GRAVITY, e.g. 3000:0.5")
    try:
        step = int(parts[0])
        g = float(parts[1])
    except ValueError:
        raise CliError(
            f"malformed --switch {text!r}: STEP must be an integer and GRAVITY a number"
        ) from None
    if not math.isfinite(g):
        raise CliError(f"malformed --switch {text!r}: gravity must be finite")
    return step, g


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _coerce(name: str, value: Any, current: Any) -> Any:
    """Coerce ``value`` (from JSON or the command line) to the type of ``current``."""
    if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
        return None
    if isinstance(current, bool):
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        if isinstance(value, bool):
            return value
        raise CliError(f"{name}: expected true or false, got {value!r}")
    if isinstance(current, int) and not isinstance(current, bool):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise CliError(f"{name}: expected an integer, got {value!r}") from None
        if not isinstance(value, int) or isinstance(value, bool):
            raise CliError(f"{name}: expected an integer, got {value!r}")
        return value
    if isinstance(current, float):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise CliError(f"{name}: expected a number, got {value!r}") from None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise CliError(f"{name}: expected a number, got {value!r}")
        return float(value)
    if isinstance(current, tuple):
        if isinstance(value, str):
            value = [_parse_value(v) for v in value.replace(",", " ").split()]
        if not isinstance(value, (list, tuple)):
            value = [value]
        return tuple(value)
    if isinstance(current, str) and not isinstance(value, str):
        return str(value)
    return value


# -- the command line ------------------------------------------------------------------------
def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``train_online`` (all default to None: 'not given', so the layers compose)."""
    p.add_argument("--track", choices=TRACKS, help="modulator track (default C)")
    p.add_argument("--seed", type=int, help="seed of agent, streams and eval splits (default 0)")
    p.add_argument("--steps", type=int, help=f"online steps (default {DEFAULT_STEPS})")
    p.add_argument(
        "--switch",
        action="append",
        metavar="STEP:GRAVITY",
        help=f"switch gravity before STEP, repeatable (default: at 2/3 of the steps to "
        f"{DEFAULT_SHIFT_GRAVITY}, i.e. {DEFAULT_SWITCH[0]}:{DEFAULT_SWITCH[1]} for the default steps)",
    )
    p.add_argument(
        "--no-switch", action="store_true", help="no switch at all: base-world training only"
    )
    p.add_argument(
        "--after-switch",
        choices=AFTER_SWITCH,
        help="memory: freeze weights after the first switch (default); continual: keep learning",
    )
    p.add_argument("--source", choices=SOURCES, help="stream (default) or dataset (needs --data)")
    p.add_argument("--data", metavar="PATH.zarr", help="store written by runners.make_dataset")
    p.add_argument(
        "--preset",
        choices=PRESETS,
        help="learner size: cpu (default; tiny networks, 64 streams, learns in minutes), "
        "tiny (seconds, for tests) or paper (Tables 4-5, 64 streams)",
    )
    p.add_argument("--config", metavar="FILE", help="JSON config (e.g. a run's config.json)")
    p.add_argument(
        "--set",
        action="append",
        nargs="+",
        metavar="FIELD=VALUE",
        help="override any RunConfig or AgentConfig field, e.g. --set lr=1e-3 kappa=2",
    )
    p.add_argument("--device", choices=DEVICES, help="auto (default), cpu or cuda")
    p.add_argument("--precision", choices=PRECISIONS, help="fp32 (default) or bf16")
    p.add_argument("--eval-every", type=int, help=f"steps between evaluations (default {DEFAULT_EVAL_EVERY})")
    p.add_argument(
        "--checkpoint-every",
        type=int,
        help=f"steps between checkpoints (default {DEFAULT_CHECKPOINT_EVERY})",
    )
    p.add_argument(
        "--record-frames", type=int, metavar="N", help="keep every N-th frame batch (default 0: none)"
    )
    p.add_argument("--out", metavar="DIR", help="parent folder of run folders (default runs/)")
    p.add_argument("--name", help="run folder name (default: <time>-<track>-s<seed>)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run")


# Named option -> RunConfig field.
_OPTION_FIELDS = {
    "track": "track",
    "seed": "seed",
    "steps": "steps",
    "after_switch": "after_switch",
    "source": "source",
    "data": "data",
    "preset": "preset",
    "device": "device",
    "precision": "precision",
    "eval_every": "eval_every",
    "checkpoint_every": "checkpoint_every",
    "record_frames": "record_frames",
    "out": "out",
    "name": "name",
}
# What may change on --resume (the rest belongs to the run and is read from its config.json).
RESUMABLE = {"steps", "device", "eval_every", "checkpoint_every", "switches"}


def _split_sets(sets: list[list[str]] | None) -> list[tuple[str, str]]:
    out = []
    for group in sets or []:
        for item in group:
            if "=" not in item:
                raise CliError(f"malformed --set {item!r}: expected FIELD=VALUE")
            k, v = item.split("=", 1)
            k = k.strip()
            if k.startswith("agent."):
                k = k[len("agent.") :]
            out.append((k, v))
    return out


def _agent_module() -> Any:
    """``agent.config`` (the module that defines ``AgentConfig``), imported on first use."""
    try:
        import agent.config
    except ImportError as err:  # pragma: no cover - the agent package is part of the project
        raise CliError(f"cannot import the agent package: {err}") from None
    return agent.config


def _agent_field_names() -> set[str]:
    return {f.name for f in dataclasses.fields(_agent_module().AgentConfig)}


def _layer(
    run: dict[str, Any], agent_over: dict[str, Any], items: dict[str, Any], where: str
) -> None:
    """Apply ``items`` (field -> raw value) onto the run dict / agent overrides."""
    agent_fields = _agent_field_names()
    defaults = RunConfig()
    for k, v in items.items():
        if k == "switches":
            if v is None:
                run["switches"] = ()
            elif isinstance(v, str):
                run["switches"] = tuple(parse_switch(s) for s in v.replace(",", " ").split())
            else:
                run["switches"] = tuple(parse_switch(s) for s in v)
        elif k in ("eval_ns", "final_ns"):
            run[k] = tuple(int(x) for x in _coerce(k, v, ()))
        elif k in ("data", "name", "episode_length"):
            run[k] = None if v is None or str(v).lower() in ("none", "null", "") else v
            if k == "episode_length" and run[k] is not None:
                run[k] = _coerce(k, v, 0)
        elif k in RUN_FIELDS:
            run[k] = _coerce(k, v, getattr(defaults, k))
        elif k in agent_fields:
            agent_over[k] = v
        else:
            raise CliError(f"unknown field {k!r} in {where} (not a RunConfig or AgentConfig field)")


def load_config_file(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as err:
        raise CliError(f"cannot read --config {path}: {err.strerror or err}") from None
    except json.JSONDecodeError as err:
        raise CliError(f"--config {path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise CliError(f"--config {path}: expected a JSON object of fields")
    return data


def build_config(args: argparse.Namespace) -> RunConfig:
    """Defaults -> --config -> named options -> --set, then ``resolve``."""
    run: dict[str, Any] = {}
    agent_over: dict[str, Any] = {}
    if args.config:
        data = load_config_file(args.config)
        # A run's config.json carries the resolved agent plus what the user set explicitly;
        # only the latter is an override (derived values like total_steps are recomputed).
        if "agent_overrides" in data:  # a run's config.json: a new run gets a new folder
            data.pop("name", None)
        agent_part = data.pop("agent_overrides", None)
        full_agent = data.pop("agent", None)
        if agent_part is None:
            agent_part = full_agent or {}
        if not isinstance(agent_part, dict):
            raise CliError(f"--config {args.config}: 'agent' must be an object of AgentConfig fields")
        _layer(run, agent_over, data, f"--config {args.config}")
        _layer(run, agent_over, agent_part, f"--config {args.config} (agent)")
    named = {}
    for opt, fld in _OPTION_FIELDS.items():
        v = getattr(args, opt, None)
        if v is not None:
            named[fld] = v
    if getattr(args, "no_switch", False):
        named["switches"] = []
    elif args.switch:
        named["switches"] = args.switch
    _layer(run, agent_over, named, "the options")
    _layer(run, agent_over, dict(_split_sets(args.set)), "--set")
    cfg = RunConfig(**run)
    cfg.agent_overrides = agent_over
    return resolve(cfg)


def resolve(cfg: RunConfig, *, build_agent: bool = True) -> RunConfig:
    """Validate the run fields, derive the agent's config; ``CliError`` naming the field."""
    if cfg.track not in TRACKS:
        raise CliError(f"track must be one of {', '.join(TRACKS)}, got {cfg.track!r}")
    for name, allowed in (
        ("after_switch", AFTER_SWITCH),
        ("source", SOURCES),
        ("preset", PRESETS),
        ("device", DEVICES),
        ("precision", PRECISIONS),
    ):
        if getattr(cfg, name) not in allowed:
            raise CliError(f"{name} must be one of {', '.join(allowed)}, got {getattr(cfg, name)!r}")
    if cfg.steps < 1:
        raise CliError(f"steps must be at least 1, got {cfg.steps}")
    for name in ("eval_every", "checkpoint_every", "log_every", "rolling_window", "headline_n"):
        if getattr(cfg, name) < 1:
            raise CliError(f"{name} must be at least 1, got {getattr(cfg, name)}")
    for name in ("eval_shift_train", "eval_shift_test", "eval_base_test"):
        if getattr(cfg, name) < 1:
            raise CliError(f"{name} must be at least 1, got {getattr(cfg, name)}")
    if cfg.record_frames < 0:
        raise CliError(f"record_frames must be >= 0, got {cfg.record_frames}")
    if cfg.episode_length is not None and cfg.episode_length < 21:
        raise CliError(
            f"episode_length must be at least 21 frames (one training window) or none, "
            f"got {cfg.episode_length}"
        )
    if any(n < 0 for n in cfg.eval_ns + cfg.final_ns):
        raise CliError("eval_ns and final_ns must be non-negative memory sizes")
    if cfg.headline_n not in cfg.eval_ns:
        cfg.eval_ns = tuple(sorted(set(cfg.eval_ns) | {cfg.headline_n}))
    if cfg.switches is None:
        cfg.switches = ((cfg.steps * 2 // 3, DEFAULT_SHIFT_GRAVITY),) if cfg.steps >= 3 else ()
    switches = sorted(cfg.switches)
    for step, g in switches:
        if step < 1 or step >= cfg.steps:
            raise CliError(
                f"switch step {step} is outside the run: it must be between 1 and "
                f"steps - 1 = {cfg.steps - 1} (raise --steps or move the switch)"
            )
        if not math.isfinite(g):
            raise CliError(f"switch gravity must be finite, got {g}")
    if len({s for s, _ in switches}) != len(switches):
        raise CliError("two switches at the same step")
    cfg.switches = tuple((int(s), float(g)) for s, g in switches)
    if cfg.source == "dataset" and not cfg.data:
        raise CliError("--source dataset needs --data PATH.zarr (written by runners.make_dataset)")
    if cfg.name is not None and (not cfg.name or "/" in cfg.name or cfg.name in (".", "..")):
        raise CliError(f"--name must be a plain folder name, got {cfg.name!r}")
    if build_agent:
        cfg.agent = make_agent_config(cfg)
    return cfg


def schedule_horizon(cfg: RunConfig) -> int:
    """Steps of the LR / EMA-tau schedule: in memory mode the weights stop at the first switch."""
    if cfg.after_switch == "memory" and cfg.first_switch is not None:
        return cfg.first_switch
    return cfg.steps


def make_agent_config(cfg: RunConfig) -> Any:
    agent = _agent_module()
    over = dict(cfg.agent_overrides)
    for k in SHARED_WITH_AGENT:
        if k in over:
            raise CliError(f"{k} is a run option: use --{k} (or --set {k}=...), not an agent override")
    agent_preset, preset_over = RUN_PRESETS[cfg.preset]
    base = agent.AgentConfig.from_preset(agent_preset, track=cfg.track, **preset_over)
    current = base.to_dict()
    typed: dict[str, Any] = {}
    for k, v in over.items():
        if isinstance(v, str):
            v = _parse_value(v)
        typed[k] = _coerce(k, v, current.get(k))
    typed.setdefault("total_steps", schedule_horizon(cfg))
    typed["seed"] = cfg.seed
    typed["precision"] = cfg.precision
    try:
        return agent.AgentConfig.from_preset(
            agent_preset, track=cfg.track, **{**preset_over, **typed}
        )
    except (ValueError, TypeError) as err:
        raise CliError(f"invalid agent config: {err}") from None


def config_from_dict(data: dict[str, Any]) -> RunConfig:
    """Rebuild the resolved config saved as ``config.json`` (for --resume and evaluate)."""
    agent = _agent_module()
    d = dict(data)
    agent_dict = d.pop("agent", None)
    overrides = d.pop("agent_overrides", {}) or {}
    unknown = set(d) - RUN_FIELDS
    if unknown:
        raise CliError(f"config.json has unknown fields: {', '.join(sorted(unknown))}")
    d["switches"] = tuple(tuple(s) for s in d.get("switches", ()))
    for k in ("eval_ns", "final_ns"):
        if k in d:
            d[k] = tuple(d[k])
    cfg = RunConfig(**d)
    cfg.agent_overrides = overrides
    try:
        cfg.agent = agent.AgentConfig.from_dict(agent_dict) if agent_dict else make_agent_config(cfg)
    except (ValueError, TypeError, KeyError) as err:
        raise CliError(f"config.json holds an invalid agent config: {err}") from None
    return cfg


def load_run_config(run_dir: Path) -> RunConfig:
    path = run_dir / "config.json"
    try:
        data = json.loads(path.read_text())
    except OSError:
        raise CliError(f"{run_dir} is not a run folder: {path.name} is missing") from None
    except json.JSONDecodeError as err:
        raise CliError(f"{path} is not valid JSON: {err}") from None
    return config_from_dict(data)


def apply_resume_options(cfg: RunConfig, args: argparse.Namespace) -> RunConfig:
    """On --resume only a few options may change; the rest belongs to the run."""
    given = {fld for opt, fld in _OPTION_FIELDS.items() if getattr(args, opt, None) is not None}
    if args.switch or getattr(args, "no_switch", False):
        given.add("switches")
    if args.config or args.set:
        raise CliError("--config and --set cannot be used with --resume (the run keeps its config)")
    fixed = sorted(given - RESUMABLE)
    if fixed:
        raise CliError(
            f"cannot change {', '.join('--' + f.replace('_', '-') for f in fixed)} on --resume; "
            f"only --steps, --switch, --device, --eval-every and --checkpoint-every"
        )
    if "steps" in given:
        cfg.steps = args.steps
    if "device" in given:
        cfg.device = args.device
    if "eval_every" in given:
        cfg.eval_every = args.eval_every
    if "checkpoint_every" in given:
        cfg.checkpoint_every = args.checkpoint_every
    if args.switch:
        cfg.switches = tuple(parse_switch(s) for s in args.switch)
    if getattr(args, "no_switch", False):
        cfg.switches = ()
    # The agent's config (its schedule included) stays as resolved when the run began.
    return resolve(cfg, build_agent=False)


def describe(cfg: RunConfig) -> str:
    sw = ", ".join(f"g={g:g} at step {s}" for s, g in cfg.switches or ()) or "no switch"
    return (
        f"track {cfg.track}, preset {cfg.preset}, {cfg.source} source, {cfg.steps} steps, "
        f"{sw}, after switch: {cfg.after_switch}, seed {cfg.seed}"
    )


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """argparse exits with status 2 and a usage line on bad options; keep that behaviour."""
    return parser.parse_args(argv)
