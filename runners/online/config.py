"""The run's configuration: a typed ``RunConfig`` (holding the nested ``AgentConfig``) from which the
command line of ``train_online`` is generated (tyro: one option per field, its help from the field's
docstring).

Resolution order (later wins): the defaults below -> ``--config FILE`` (JSON; a run's own
``config.json`` works as is) -> the named command-line options -> ``--set FIELD=VALUE`` (any
``RunConfig`` or ``AgentConfig`` field). Values from ``--config`` and ``--set`` are typed by the same
parser as the options (tyro, from the field annotations). Derived values are computed once
(``resolve``), and the resolved config is saved next to the run as ``config.json``; ``--resume``
reads it back.

A switch is a ``Switch(step, physics)``: before ``step`` the physics parameters it names change
(``--switch 3000:0.5`` sets the gravity, ``--switch 3000:gravity=0.5,direction=45,friction=0.01``
several parameters), validated by the env's own ``PhysicsParams``.

Every mistake a user can make here raises ``CliError`` with one line naming the field.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

import tyro

from runners.cli import CliError

if TYPE_CHECKING:  # env is imported on first use: it pulls in gymnasium
    from env import PhysicsParams

# Calibrated on a 2-core CPU so the default run tells the whole story in about five minutes
# (see docs/train_online.md, "The default run").
DEFAULT_STEPS = 4500
DEFAULT_SWITCH = (3000, 0.5)  # = (2/3 of the steps, 0.5): the default when --switch is not given
DEFAULT_SHIFT_GRAVITY = 0.5
DEFAULT_EVAL_EVERY = 250
DEFAULT_CHECKPOINT_EVERY = 500

Track = Literal["A", "B", "C", "D", "E"]
AfterSwitch = Literal["memory", "continual"]
Source = Literal["stream", "dataset"]
Preset = Literal["cpu", "tiny", "paper"]
Device = Literal["auto", "cpu", "cuda"]
Precision = Literal["fp32", "bf16"]
TRACKS: tuple[str, ...] = get_args(Track)
AFTER_SWITCH: tuple[str, ...] = get_args(AfterSwitch)
SOURCES: tuple[str, ...] = get_args(Source)
PRESETS: tuple[str, ...] = get_args(Preset)
DEVICES: tuple[str, ...] = get_args(Device)
PRECISIONS: tuple[str, ...] = get_args(Precision)
# Runner presets on top of the agent's: name -> (agent preset, agent overrides). "cpu" is the
# default run's learner: the tiny networks with 64 streams, a lower LR and a stronger variance
# hinge, measured to beat "no change" within minutes on a 2-core CPU without collapsing
# (the tiny preset as is collapses in the stream: sigma_embed ~0.02, see docs/train_online.md).
RUN_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "cpu": ("tiny", {"batch_size": 64, "lr": 1e-3, "lambda_reg": 0.2, "buffer_capacity": 64}),
    "tiny": ("tiny", {}),
    "paper": ("paper", {}),
}

# RunConfig fields that are also AgentConfig fields: the run's value is passed down.
SHARED_WITH_AGENT = ("track", "seed", "precision")


# -- switches --------------------------------------------------------------------------------
# = env.PHYSICS_FIELDS (checked in the tests; not imported here so that reading a config does
# not import the env).
PHYSICS_NAMES = ("gravity", "gravity_direction", "restitution", "friction")
PHYSICS_ALIASES = {"direction": "gravity_direction"}
_SHORT_NAMES = {"gravity": "g", "gravity_direction": "direction"}
SWITCH_SYNTAX = "STEP:GRAVITY or STEP:NAME=VALUE,... (e.g. 3000:0.5, 3000:gravity=0.5,direction=45)"


def check_physics(params: Mapping[str, Any]) -> dict[str, float]:
    """Validate physics parameters exactly as the env does (``env.PhysicsParams``); return them as
    floats under their canonical names (``direction`` -> ``gravity_direction``), in the env's
    order. ``ValueError`` naming the parameter on an unknown name or a bad value."""
    from env.physics import PhysicsParams

    named = {PHYSICS_ALIASES.get(str(k).strip(), str(k).strip()): v for k, v in params.items()}
    if not named:
        raise ValueError("a switch must set at least one physics parameter")
    checked = PhysicsParams().replace(**named)  # the env's validation: names, finiteness, ranges
    return {n: getattr(checked, n) for n in PHYSICS_NAMES if n in named}


def _as_step(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"STEP must be an integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"STEP must be an integer, got {value!r}") from None


@dataclass(frozen=True, order=True)
class Switch:
    """A scheduled physics switch: before step ``step`` the physics parameters in ``physics``
    (``(name, value)`` pairs, canonical names in the env's order) change; the others keep their
    values. In config.json: ``{"step": 3000, "physics": {"gravity": 0.5}}``."""

    step: int
    physics: tuple[tuple[str, float], ...]

    @classmethod
    def make(cls, step: Any, physics: Mapping[str, Any]) -> Switch:
        """A validated switch (``ValueError`` naming the parameter)."""
        return cls(_as_step(step), tuple(check_physics(physics).items()))

    @classmethod
    def parse(cls, text: str) -> Switch:
        """``"3000:0.5"`` (gravity) or ``"3000:gravity=0.5,direction=45,friction=0.01"``."""
        text = str(text).strip()
        step, sep, spec = text.partition(":")
        if not sep or not spec.strip():
            raise ValueError(f"malformed switch {text!r}: expected {SWITCH_SYNTAX}")
        params: dict[str, str] = {}
        if "=" not in spec:
            params["gravity"] = spec.strip()
        else:
            for item in spec.split(","):
                name, eq, value = item.partition("=")
                name = PHYSICS_ALIASES.get(name.strip(), name.strip())
                if not eq or not name or not value.strip():
                    raise ValueError(f"malformed switch {text!r}: expected NAME=VALUE, got {item!r}")
                if name in params:
                    raise ValueError(f"switch {text!r}: {name} is given twice")
                params[name] = value.strip()
        try:
            return cls.make(step, params)
        except ValueError as err:
            raise ValueError(f"switch {text!r}: {err}") from None

    @classmethod
    def from_json(cls, obj: Any) -> Switch:
        """Read a switch as written in a config: ``{"step": S, "physics": {...}}``, the old
        ``[S, GRAVITY]`` pair, ``[S, {...}]`` or the command-line text ``"S:..."``."""
        if isinstance(obj, Switch):
            return obj
        if isinstance(obj, str):
            return cls.parse(obj)
        if isinstance(obj, Mapping) and "step" in obj:
            extra = set(obj) - {"step", "physics"}
            physics = obj.get("physics")
            if physics is None:  # flat form {"step": S, "gravity": G, ...}
                physics = {k: obj[k] for k in extra}
            elif extra:
                raise ValueError(f"switch {dict(obj)!r}: unknown key(s) {', '.join(sorted(extra))}")
            step = obj["step"]
        elif isinstance(obj, (list, tuple)) and len(obj) == 2:
            step, physics = obj
        else:
            raise ValueError(
                f"cannot read switch {obj!r}: expected {{\"step\": S, \"physics\": {{...}}}}, "
                f"[S, GRAVITY] or \"{SWITCH_SYNTAX.split(' or ')[0]}\""
            )
        if isinstance(physics, (list, tuple)):
            physics = dict(physics)
        elif not isinstance(physics, Mapping):
            physics = {"gravity": physics}
        return cls.make(step, physics)

    @property
    def params(self) -> dict[str, float]:
        """``{name: value}`` of the parameters this switch sets."""
        return dict(self.physics)

    @property
    def gravity(self) -> float | None:
        """The gravity this switch sets, or None when it keeps the gravity."""
        return self.params.get("gravity")

    def label(self, arrow: str = " -> ") -> str:
        """``"g -> 0.5"``, ``"g -> 0.5, direction -> 45"`` (for plots and summaries)."""
        return ", ".join(f"{_SHORT_NAMES.get(n, n)}{arrow}{v:g}" for n, v in self.physics)

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "physics": self.params}

    def __str__(self) -> str:  # the command-line syntax (exact: floats as repr)
        if len(self.physics) == 1 and self.physics[0][0] == "gravity":
            return f"{self.step}:{self.physics[0][1]!r}"
        return f"{self.step}:" + ",".join(f"{n}={v!r}" for n, v in self.physics)


def physics_label(p: PhysicsParams) -> str:
    """``"g = 0.5"``, plus every other parameter that is not the env's default
    (``"g = 0.5, direction = 45, friction = 0.01"``)."""
    from env.physics import PhysicsParams

    default = PhysicsParams()
    parts = [f"g = {p.gravity:g}"]
    parts += [
        f"{_SHORT_NAMES.get(n, n)} = {getattr(p, n):g}"
        for n in PHYSICS_NAMES[1:]
        if getattr(p, n) != getattr(default, n)
    ]
    return ", ".join(parts)


def switches_from_json(items: Iterable[Any] | None) -> tuple[Switch, ...]:
    """Switches as written in a config.json / summary.json (any format ``Switch.from_json``
    reads), sorted by step. ``ValueError`` on a bad one."""
    return tuple(sorted(Switch.from_json(s) for s in items or ()))


def _option_error(err: ValueError) -> str:
    """``switch '10:x': ...`` -> ``--switch '10:x': ...`` (the message of a command-line value)."""
    return str(err).replace("switch ", "--switch ", 1)


def parse_switch(text: str) -> Switch:
    """``--switch`` text -> ``Switch`` (``CliError`` naming the parameter)."""
    try:
        return Switch.parse(text)
    except ValueError as err:
        raise CliError(_option_error(err)) from None


def _switch_from_cli(tokens: list[str]) -> Switch:
    (text,) = tokens
    try:
        return Switch.parse(text)
    except ValueError as err:  # tyro reports it as the option's error
        raise ValueError(_option_error(err)) from None


SwitchArg = Annotated[
    Switch,
    tyro.constructors.PrimitiveConstructorSpec(
        nargs=1,
        metavar="STEP:PHYSICS",
        instance_from_str=_switch_from_cli,
        is_instance=lambda x: isinstance(x, Switch),
        str_from_instance=lambda x: [str(x)],
    ),
]


# -- the run's configuration -----------------------------------------------------------------
@dataclass
class RunConfig:
    """One online run. ``agent`` is the learner's resolved ``AgentConfig`` (set by ``resolve``)."""

    track: Track = "C"
    """Modulator: A none, B residual, C LoRA, D FiLM, E hypernetwork."""
    seed: int = 0
    """Seeds the agent, the streams and the generated evaluation splits."""
    steps: int = DEFAULT_STEPS
    """Online steps (one learner update each)."""
    switches: tyro.conf.Suppress[tuple[Switch, ...] | None] = None
    """Physics switches (set by --switch); None: one switch to gravity 0.5 at 2/3 of the run."""
    after_switch: AfterSwitch = "memory"
    """memory: weights frozen from the first switch on (detector and buffer stay live); continual: keep learning."""
    base_gravity: float = 0.0
    """Gravity of the base world (px/frame^2) before any switch."""
    source: Source = "stream"
    """stream: the live vector env; dataset: i.i.d. sequences of a make_dataset store (--data)."""
    data: Annotated[str | None, tyro.conf.arg(metavar="PATH.zarr")] = None
    """Store written by runners.make_dataset: the dataset source's train splits and the evaluation splits."""
    preset: Preset = "cpu"
    """Learner size: cpu (tiny networks, 64 streams, learns in minutes), tiny (seconds, tests), paper (Tables 4-5)."""
    device: Device = "auto"
    """auto = cuda when available, else cpu."""
    precision: Precision = "fp32"
    """fp32, or bf16 (autocast)."""
    eval_every: int = DEFAULT_EVAL_EVERY
    """Steps between evaluations (there is also one at every switch, before it applies, and at the end)."""
    eval_ns: tuple[int, ...] = (0, 10, 50)
    """Memory sizes n of D_shift^n at the periodic evaluations."""
    final_ns: tuple[int, ...] = (0, 10, 25, 50, 100, 256)
    """Memory sizes n of the adaptation curve at the end of the run."""
    headline_n: int = 50
    """The n of the headline D_shift^n (best.pt keeps its lowest value)."""
    eval_shift_train: int = 512
    """Shift-world train sequences (memory pushes) for evaluation."""
    eval_shift_test: int = 128
    """Shift-world test sequences for D_shift."""
    eval_base_test: int = 128
    """Base-world test sequences for D_base."""
    eval_seed_offset: int = 10_000
    """Generated evaluation splits use seed + this offset."""
    episode_length: int | None = 400
    """Stream episode length in steps (None: endless)."""
    stagger: bool = True
    """Start the parallel streams at staggered phases of their episodes."""
    record_frames: Annotated[int, tyro.conf.arg(metavar="N")] = 0
    """Keep every N-th frame batch (the newest frame of every stream) and its ground truth in run.zarr (0: none)."""
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    """Steps between checkpoints/latest.pt writes."""
    log_every: int = 25
    """Steps per metrics block (one host sync, one zarr append, one progress-bar update)."""
    rolling_window: int = 100
    """Steps in the rolling stream error."""
    out: Annotated[str, tyro.conf.arg(metavar="DIR")] = "runs"
    """Parent folder of the run folders."""
    name: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """Run folder name (None: <date>-<time>-<track>-s<seed>); an existing folder is never reused."""
    agent: tyro.conf.Suppress[Any] = None
    """The resolved agent.AgentConfig."""
    agent_overrides: tyro.conf.Suppress[dict[str, Any]] = field(default_factory=dict)
    """AgentConfig fields set by the user (typed)."""

    # -- derived ---------------------------------------------------------------------------
    @property
    def first_switch(self) -> int | None:
        return self.switches[0].step if self.switches else None

    @property
    def base_physics(self) -> PhysicsParams:
        """The physics of the base world (before any switch)."""
        from env.physics import PhysicsParams

        return PhysicsParams(gravity=self.base_gravity)

    def physics_at(self, step: int) -> PhysicsParams:
        """The world's physics during step ``step``: the base physics updated by every switch at
        or before ``step`` (a switch applies before its step)."""
        p = self.base_physics
        for sw in self.switches or ():
            if sw.step <= step:
                p = p.replace(**sw.params)
        return p

    def gravity_at(self, step: int) -> float:
        """The world's gravity during step ``step`` (switches apply before their step)."""
        return self.physics_at(step).gravity

    @property
    def shift_physics(self) -> PhysicsParams:
        """Physics of the evaluation's shift world: after the first switch, else gravity 0.5."""
        if self.first_switch is not None:
            return self.physics_at(self.first_switch)
        return self.base_physics.replace(gravity=DEFAULT_SHIFT_GRAVITY)

    @property
    def shift_gravity(self) -> float:
        """Gravity of the evaluation's shift world: after the first switch, else 0.5."""
        if self.first_switch is not None:
            return self.gravity_at(self.first_switch)
        return DEFAULT_SHIFT_GRAVITY

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["switches"] = [Switch.from_json(s).to_json() for s in self.switches or ()]
        d["eval_ns"] = list(self.eval_ns)
        d["final_ns"] = list(self.final_ns)
        d["agent"] = self.agent.to_dict() if self.agent is not None else None
        d["agent_overrides"] = dict(self.agent_overrides)
        return d

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, default=_json_default) + "\n")
        tmp.replace(path)


RUN_FIELDS = frozenset(f.name for f in dataclasses.fields(RunConfig)) - {"agent", "agent_overrides"}
# What may change on --resume (the rest belongs to the run and is read from its config.json).
RESUMABLE = frozenset({"steps", "device", "eval_every", "checkpoint_every", "switches"})


def _json_default(o: Any) -> Any:
    if isinstance(o, tuple):
        return list(o)
    if isinstance(o, Switch):
        return o.to_json()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# -- the command line ------------------------------------------------------------------------
@dataclass
class TrainCommand:
    """Online EPM-JEPA training with mid-stream physics switches (defaults: track C, stream
    source, gravity 0 -> 0.5 at 2/3 of the run, memory mode). Order of resolution (later wins):
    defaults, --config, the options, --set."""

    run: Annotated[RunConfig, tyro.conf.arg(name="")] = field(default_factory=RunConfig)
    switch: Annotated[
        tuple[SwitchArg, ...],
        tyro.conf.UseAppendAction,
        tyro.conf.arg(help_behavior_hint="(default: gravity -> 0.5 at 2/3 of the steps)"),
    ] = ()
    """Switch the physics before STEP; repeatable. STEP:GRAVITY (3000:0.5) or STEP:NAME=VALUE,... with names gravity, direction (degrees, 90 = down), restitution, friction."""
    no_switch: Annotated[bool, tyro.conf.FlagCreatePairsOff] = False
    """No switch at all: base-world training only."""
    config: Annotated[str | None, tyro.conf.arg(metavar="FILE")] = None
    """JSON of RunConfig fields plus "agent": {AgentConfig fields}; a run's config.json works as is."""
    set: Annotated[
        tuple[tuple[str, ...], ...], tyro.conf.UseAppendAction, tyro.conf.arg(metavar="FIELD=VALUE")
    ] = ()
    """Any RunConfig or AgentConfig field, applied last, e.g. --set lr=1e-3 kappa=2 eval_ns=0,50."""
    resume: Annotated[str | None, tyro.conf.arg(metavar="RUN_DIR")] = None
    """Continue a stopped run (only --steps, --switch, --device, --eval-every, --checkpoint-every may change)."""

    @property
    def sets(self) -> list[str]:
        """The ``--set`` items, flattened (``CliError`` on an empty ``--set``)."""
        if any(not group for group in self.set):
            raise CliError("--set needs at least one FIELD=VALUE")
        return [item for group in self.set for item in group]


TRAIN_PROG = "python -m runners.train_online"


def parse_command(
    argv: Sequence[str], *, base: RunConfig | None = None, prog: str = TRAIN_PROG
) -> TrainCommand:
    """Parse train_online's command line; the options default to ``base`` (the defaults, or the
    ``--config`` layer). ``--help`` prints and exits 0; a bad option is one ``CliError`` line."""
    default = TrainCommand(run=base if base is not None else RunConfig())
    return _cli(TrainCommand, list(argv), default, prog=prog)


# tyro prints a boxed, multi-line error and exits 2; the runners print one line instead.
_REWRITES = (
    (re.compile(r"^Error parsing (--[\w.-]+): (.*\1\b)"), r"\2"),  # the message names it
    (re.compile(r"^Error parsing (--[\w.-]+): "), r"\1: "),
    (re.compile(r"invalid literal for int\(\) with base 10: (.*)$"), r"expected an integer, got \1"),
    (re.compile(r"could not convert string to float: (.*)$"), r"expected a number, got \1"),
    (
        re.compile(r"^invalid choice (.*) for argument '(--[\w.-]+)'\. Expected one of \((.*)\)\.?$"),
        r"\2: expected one of \3, got \1",
    ),
    (re.compile(r"^Unrecognized options?: "), "unknown option(s): "),
    (re.compile(r"^Missing value for argument '(--[\w.-]+)'\..*$"), r"\1 needs a value"),
)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _one_line(text: str) -> str:
    """The message of tyro's error box as one line: the lines between the box's top (a
    ``╭─ title ─╮`` line, or the title's ``-----`` rule where stdout is not UTF-8) and its first
    inner rule; a plain ``error:`` line as it is."""
    lines = [_ANSI.sub("", raw).strip() for raw in text.splitlines()]

    def rule(s: str) -> bool:
        return bool(s) and set(s) <= {"─", "-"}

    top = next((i for i, s in enumerate(lines) if s.startswith("╭") or rule(s)), None)
    body: list[str] = []
    if top is not None:
        for s in lines[top + 1 :]:
            s = s.strip("│").strip()
            if not s or rule(s) or s.startswith("╰"):
                break
            body.append(s)
    if not body:
        body = [s.split("error: ", 1)[1] for s in lines if "error: " in s][-1:]
    msg = " ".join(body) or "bad command line"
    for pattern, repl in _REWRITES:
        msg = pattern.sub(repl, msg)
    return msg


def _cli(
    cls: Any, argv: list[str], default: Any, *, prog: str = TRAIN_PROG, flags_off: bool = False
) -> Any:
    """``tyro.cli`` with its error box turned into one ``CliError`` line."""
    helping = any(a in ("-h", "--help") for a in argv)
    buf = io.StringIO()
    columns = os.environ.get("COLUMNS")
    try:
        if not helping:  # no line wrapping inside the error box
            os.environ["COLUMNS"] = "1000"
        with contextlib.redirect_stderr(buf):
            return tyro.cli(
                cls,
                args=argv,
                default=default,
                prog=prog,
                config=(tyro.conf.FlagConversionOff,) if flags_off else None,
            )
    except SystemExit as exc:
        if exc.code in (0, None):
            raise
        raise CliError(_one_line(buf.getvalue())) from None
    finally:
        if not helping:
            if columns is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = columns


# -- typing values from --config (JSON) and --set (text) -------------------------------------
@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _kind(hint: Any) -> tuple[str, bool]:
    """("seq" | "bool" | "str" | "other", optional) of a field's type."""
    args = get_args(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint)
    if origin is tuple:
        return "seq", optional
    if hint is bool:
        return "bool", optional
    if hint is str:
        return "str", optional
    return "other", optional


def _text_tokens(text: str, hint: Any) -> list[str]:
    """``--set`` text -> the option's tokens (``0,10,50`` -> ``0 10 50``; none -> None)."""
    kind, optional = _kind(hint)
    low = text.strip().lower()
    if optional and (low in ("none", "null") or (kind == "str" and not low)):
        return ["None"]
    if kind == "seq":
        return text.replace(",", " ").split()
    if kind == "bool":
        return [{"true": "True", "1": "True", "yes": "True", "false": "False", "0": "False",
                 "no": "False"}.get(low, text)]
    return [text]


def _json_tokens(value: Any, hint: Any) -> list[str]:
    """A JSON value -> the option's tokens (exact: floats as repr)."""
    if isinstance(value, str):
        return _text_tokens(value, hint)
    if value is None:
        return ["None"]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _json_tokens(v, Any)]
    if isinstance(value, bool):
        return [str(value)]
    if isinstance(value, float):
        return [repr(value)]
    if isinstance(value, int):
        return [str(value)]
    return [json.dumps(value)]


def _typed(cls: type, default: Any, items: Mapping[str, list[str]], where: str) -> Any:
    """``default`` with ``items`` (field -> option tokens) parsed by tyro from ``cls``'s fields."""

    def args(names: Iterable[str]) -> list[str]:
        out: list[str] = []
        for name in names:
            out += [f"--{name.replace('_', '-')}", *items[name]]
        return out

    try:
        return _cli(cls, args(items), default, flags_off=True)
    except CliError as err:
        for name in items:  # name the field at fault
            try:
                _cli(cls, args([name]), default, flags_off=True)
            except CliError as one:
                detail = re.sub(r"^--[\w.-]+:? ", "", str(one))
                raise CliError(f"{name}: {detail} (in {where})") from None
        raise CliError(f"{err} (in {where})") from None


def _agent_module() -> Any:
    """``agent.config`` (the module that defines ``AgentConfig``), imported on first use."""
    try:
        import agent.config
    except ImportError as err:  # pragma: no cover - the agent package is part of the project
        raise CliError(f"cannot import the agent package: {err}") from None
    return agent.config


@functools.cache
def _agent_fields() -> type:
    """AgentConfig's fields as a plain dataclass (same types and defaults, no validation): tyro
    types the agent overrides with it; ``AgentConfig`` validates them when the agent is built."""
    cls = _agent_module().AgentConfig
    hints = typing.get_type_hints(cls)
    return dataclasses.make_dataclass(
        "AgentFields",
        [(f.name, hints[f.name], field(default=f.default)) for f in dataclasses.fields(cls)],
    )


def agent_field_names() -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(_agent_module().AgentConfig))


def _typed_agent(items: Mapping[str, list[str]], where: str) -> dict[str, Any]:
    if not items:
        return {}
    cls = _agent_fields()
    parsed = _typed(cls, cls(), items, where)
    return {k: getattr(parsed, k) for k in items}


def agent_values(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """AgentConfig field values from JSON or text (``"1e-3"``, ``[5, 10]``, ``"5,10"``), typed."""
    fields = agent_field_names()
    for k in values:
        if k not in fields:
            raise CliError(f"unknown field {k!r} in {where} (not an AgentConfig field)")
    hints = _hints(_agent_fields())
    return _typed_agent({k: _json_tokens(v, hints[k]) for k, v in values.items()}, where)


def _check_known(names: Iterable[str], where: str) -> None:
    known = RUN_FIELDS | agent_field_names()
    for k in names:
        if k not in known:
            raise CliError(f"unknown field {k!r} in {where} (not a RunConfig or AgentConfig field)")


def _switches_layer(value: Any, where: str) -> tuple[Switch, ...]:
    """A ``switches`` value from --config (a list) or --set (text, switches separated by spaces
    or semicolons); None / none: no switch."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null", "")):
        return ()
    if isinstance(value, str):
        value = value.replace(";", " ").split()
    try:
        return switches_from_json(value)
    except (ValueError, TypeError) as err:
        raise CliError(f"switches: {err} (in {where})") from None


def apply_sets(cfg: RunConfig, sets: Iterable[str] | Mapping[str, str], where: str = "--set") -> RunConfig:
    """The ``--set`` layer: ``FIELD=VALUE`` items (or a mapping) for any RunConfig or AgentConfig
    field, typed by the options' parser; returns a new (unresolved) config."""
    pairs: list[tuple[str, str]] = []
    for item in sets.items() if isinstance(sets, Mapping) else sets:
        if isinstance(item, tuple):
            k, v = item
        else:
            k, eq, v = str(item).partition("=")
            if not eq or not k.strip():
                raise CliError(f"malformed --set {item!r}: expected FIELD=VALUE")
        k = k.strip()
        pairs.append((k[len("agent."):] if k.startswith("agent.") else k, str(v)))
    _check_known((k for k, _ in pairs), where)
    hints = _hints(RunConfig)
    run_items = {k: _text_tokens(v, hints[k]) for k, v in pairs if k in RUN_FIELDS and k != "switches"}
    out = _typed(RunConfig, cfg, run_items, where) if run_items else dataclasses.replace(cfg)
    for k, v in pairs:
        if k == "switches":
            out.switches = _switches_layer(v, where)
    agent_hints = _hints(_agent_fields())
    agent_items = {k: _text_tokens(v, agent_hints[k]) for k, v in pairs if k not in RUN_FIELDS}
    out.agent_overrides = {**cfg.agent_overrides, **_typed_agent(agent_items, where)}
    return out


def apply_json(cfg: RunConfig, data: Mapping[str, Any], where: str) -> RunConfig:
    """The ``--config`` layer: a JSON object of RunConfig fields plus ``"agent": {...}`` (AgentConfig
    fields); a run's config.json works as is (its ``agent_overrides`` are what was set, its
    resolved ``agent`` is derived and recomputed, its ``name`` is dropped: a new run, a new
    folder)."""
    d = dict(data)
    if "agent_overrides" in d:
        d.pop("name", None)
    agent_part = d.pop("agent_overrides", None)
    full_agent = d.pop("agent", None)
    if agent_part is None:
        agent_part = full_agent or {}
    if not isinstance(agent_part, Mapping):
        raise CliError(f"{where}: 'agent' must be an object of AgentConfig fields")
    _check_known(d, where)
    _check_known(agent_part, f"{where} (agent)")
    # Run fields win over agent fields (track, seed, precision of a full "agent" object).
    run_values = {k: v for k, v in d.items() if k in RUN_FIELDS}
    run_values.update((k, v) for k, v in agent_part.items() if k in RUN_FIELDS)
    values = {k: v for k, v in d.items() if k not in RUN_FIELDS}
    values.update((k, v) for k, v in agent_part.items() if k not in RUN_FIELDS)
    hints = _hints(RunConfig)
    run_items = {k: _json_tokens(v, hints[k]) for k, v in run_values.items() if k != "switches"}
    out = _typed(RunConfig, cfg, run_items, where) if run_items else dataclasses.replace(cfg)
    if "switches" in run_values:
        out.switches = _switches_layer(run_values["switches"], where)
    out.agent_overrides = {**cfg.agent_overrides, **agent_values(values, where)}
    return out


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


def command_config(cmd: TrainCommand) -> RunConfig:
    """The parsed command's config before ``resolve``: its options over its default (the
    ``--config`` layer, see ``build_config``), then --switch / --no-switch, then --set."""
    cfg = dataclasses.replace(cmd.run)
    if cmd.no_switch:
        cfg.switches = ()
    elif cmd.switch:
        cfg.switches = tuple(cmd.switch)
    return apply_sets(cfg, cmd.sets) if cmd.set else cfg


def build_config(argv: Sequence[str] = (), *, cmd: TrainCommand | None = None) -> RunConfig:
    """Defaults -> --config -> named options -> --set, then ``resolve`` (no file is written)."""
    argv = list(argv)
    cmd = cmd if cmd is not None else parse_command(argv)
    if cmd.config:
        base = apply_json(RunConfig(), load_config_file(cmd.config), f"--config {cmd.config}")
        cmd = parse_command(argv, base=base)  # the named options over the file's values
    return resolve(command_config(cmd))


# -- resolution ------------------------------------------------------------------------------
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
    try:
        check_physics({"gravity": cfg.base_gravity})
    except ValueError as err:
        raise CliError(f"base_gravity: {err}") from None
    if cfg.switches is None:
        steps = cfg.steps * 2 // 3
        cfg.switches = (Switch(steps, (("gravity", DEFAULT_SHIFT_GRAVITY),)),) if cfg.steps >= 3 else ()
    try:
        switches = switches_from_json(cfg.switches)
    except (ValueError, TypeError) as err:
        raise CliError(f"switches: {err}") from None
    for sw in switches:
        if sw.step < 1 or sw.step >= cfg.steps:
            raise CliError(
                f"switch step {sw.step} is outside the run: it must be between 1 and "
                f"steps - 1 = {cfg.steps - 1} (raise --steps or move the switch)"
            )
    if len({sw.step for sw in switches}) != len(switches):
        raise CliError("two switches at the same step")
    cfg.switches = switches
    if cfg.source == "dataset":
        if not cfg.data:
            raise CliError("--source dataset needs --data PATH.zarr (written by runners.make_dataset)")
        for sw in switches:
            if set(sw.params) != {"gravity"}:
                raise CliError(
                    f"--source dataset: the switch at step {sw.step} changes "
                    f"{', '.join(n for n in sw.params if n != 'gravity')}; the store only holds its "
                    f"two gravities (use the stream source)"
                )
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
    # Overrides are typed when they are set; text from an older config.json is typed here.
    over.update(agent_values({k: v for k, v in over.items() if isinstance(v, (str, list))},
                             "agent_overrides"))
    agent_preset, preset_over = RUN_PRESETS[cfg.preset]
    typed = {**preset_over, **over}
    typed.setdefault("total_steps", schedule_horizon(cfg))
    typed["seed"] = cfg.seed
    typed["precision"] = cfg.precision
    try:
        return agent.AgentConfig.from_preset(agent_preset, track=cfg.track, **typed)
    except (ValueError, TypeError) as err:
        raise CliError(f"invalid agent config: {err}") from None


# -- a run's config.json, --resume -----------------------------------------------------------
def config_from_dict(data: dict[str, Any]) -> RunConfig:
    """Rebuild the resolved config saved as ``config.json`` (for --resume and evaluate); reads the
    older formats too (switches as ``[step, gravity]`` pairs, overrides as text)."""
    agent = _agent_module()
    d = dict(data)
    agent_dict = d.pop("agent", None)
    overrides = d.pop("agent_overrides", {}) or {}
    unknown = set(d) - RUN_FIELDS
    if unknown:
        raise CliError(f"config.json has unknown fields: {', '.join(sorted(unknown))}")
    try:
        d["switches"] = switches_from_json(d.get("switches", ()))
    except (ValueError, TypeError) as err:
        raise CliError(f"config.json: switches: {err}") from None
    for k in ("eval_ns", "final_ns"):
        if k in d:
            d[k] = tuple(d[k])
    cfg = RunConfig(**d)
    cfg.agent_overrides = agent_values(overrides, "config.json (agent_overrides)")
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


def resume_changes(saved: RunConfig, argv: Sequence[str], *, prog: str = TRAIN_PROG) -> dict[str, Any]:
    """The fields a ``--resume`` command line changes: its options parsed over the saved config
    (an option that repeats the run's own value changes nothing)."""
    cmd = parse_command(argv, base=saved, prog=prog)
    if cmd.config or cmd.set:
        raise CliError("--config and --set cannot be used with --resume (the run keeps its config)")
    changes = {
        name: getattr(cmd.run, name)
        for name in sorted(RUN_FIELDS - {"switches"})
        if getattr(cmd.run, name) != getattr(saved, name)
    }
    if cmd.no_switch:
        changes["switches"] = ()
    elif cmd.switch:
        changes["switches"] = tuple(cmd.switch)
    return changes


def apply_resume(cfg: RunConfig, changes: Mapping[str, Any]) -> RunConfig:
    """On --resume only a few fields may change (``RESUMABLE``); the rest belongs to the run.
    The agent's config (its schedule included) stays as resolved when the run began."""
    fixed = sorted(set(changes) - RESUMABLE)
    if fixed:
        raise CliError(
            f"cannot change {', '.join('--' + f.replace('_', '-') for f in fixed)} on --resume; "
            f"only --steps, --switch, --device, --eval-every and --checkpoint-every"
        )
    return resolve(dataclasses.replace(cfg, **changes), build_agent=False)


def describe(cfg: RunConfig) -> str:
    sw = ", ".join(f"{s.label('=')} at step {s.step}" for s in cfg.switches or ()) or "no switch"
    return (
        f"track {cfg.track}, preset {cfg.preset}, {cfg.source} source, {cfg.steps} steps, "
        f"{sw}, after switch: {cfg.after_switch}, seed {cfg.seed}"
    )
