"""train_online's command line: tyro over ``RunConfig``, on top of a config read from a file
(``--config FILE``, a run's ``config.json`` on ``--resume``, the run a view starts ``--from``).

Five options choose the defaults of the others, so they are read first (``Defaults``):
``--protocol`` (which of ``Worlds`` / ``Paper`` the tagged union holds), ``--preset``,
``--track`` (its lr and kappa), ``--source`` (the memory pair) and ``--device`` (the precision).
The config they give, with a file's values set into its dataclasses (each checked against its
field's type), is the default tyro parses the command line over: the options win, wherever they
stand, and ``--help`` shows the defaults they give.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_args

import typeguard
import tyro

from agent.config import AgentConfig, Track, check_version, preferred_precision
from runners.cli import CliError, parse
from runners.online.config import (
    Device,
    Output,
    Preset,
    ProtocolName,
    RunConfig,
    Schedule,
    device_name,
    flat,
    preset_agent,
    resolve,
)
from runners.online.presets import PRESETS
from runners.online.protocols import PROTOCOLS, Source
from runners.online.switch import Switch, SwitchArg

TRAIN_PROG = "python -m runners.train_online"
ALL_ITEMS = typeguard.CollectionCheckStrategy.ALL_ITEMS
#: What may change on --resume (the rest belongs to the run and is read from its config.json).
RESUMABLE = ("steps", "switches", "device", "eval_every", "checkpoint_every", "bounds", "workers")


@dataclass
class Defaults:
    """The options read before the others: they choose the others' defaults."""

    protocol: ProtocolName = "worlds"
    preset: Preset = "cpu"
    track: Track = "C"
    source: Source = "stream"
    device: Device = "auto"
    config: str | None = None


CHOSEN = ("protocol", "preset", "track", "source", "device")


@dataclass
class TrainCommand:
    """Online EPM-JEPA training with a mid-stream physics switch (defaults: the worlds protocol,
    track C: the streams live in groups of 8 that share a training world and one memory for 2-6
    episodes, then a new world is drawn; at 2/3 of the run every stream moves to a held-out
    world and the weights freeze; beside it the floor (track A) and the ceiling (the oracle)
    train on the same stream; --protocol paper: the paper's gravity 0 -> 0.5). The options
    override --config FILE's values."""

    run: Annotated[RunConfig, tyro.conf.arg(name="")]
    protocol: ProtocolName = "worlds"
    """worlds: train across worlds drawn from --train-family, then switch every stream to a held-out world; paper: the paper's one base world and its gravity switch. Each has its own options below."""
    switch: Annotated[
        tuple[SwitchArg, ...],
        tyro.conf.UseAppendAction,
        tyro.conf.arg(help_behavior_hint="(default at 2/3 of the steps: worlds "
                      "gravity=0.3,direction=45; paper gravity -> 0.5)"),
    ] = ()
    """Switch the physics before STEP; repeatable. STEP:GRAVITY (3000:0.5) or STEP:NAME=VALUE,... with names gravity, direction (degrees, 90 = down), restitution, friction."""
    no_switch: Annotated[bool, tyro.conf.FlagCreatePairsOff] = False
    """No switch at all: base-world training only."""
    config: Annotated[str | None, tyro.conf.arg(metavar="FILE")] = None
    """JSON of the config's fields, nested as config.json or flat; a run's config.json works as is (derived values included)."""
    resume: Annotated[str | None, tyro.conf.arg(metavar="RUN_DIR")] = None
    """Continue a stopped run (only --steps, --switch, --device, --eval-every, --checkpoint-every may change)."""
    stack_seeds: tuple[int, ...] = ()
    """Train these seeds too, stacked with --seed as one model in this process (agent.stacked; each seed its own world stream and run folder, NAME-s<SEED> for every seed with --name); the worlds protocol with --no-bounds and --no-stream-cache. For a GPU: on a CPU it is slower than one run after another."""


# -- the fields, by option name ---------------------------------------------------------------
def _hints(cls: type) -> dict[str, Any]:
    """The type of each field of ``cls``, tyro's markers (``Annotated``) taken off."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        while typing.get_origin(hint) is Annotated:
            hint = get_args(hint)[0]
        out[f.name] = hint
    return out


def _fields() -> dict[str, tuple[str, Any]]:
    """Every option of a run, by field name: (the part of ``RunConfig`` holding it, its type)."""
    parts = [("protocol", cls) for cls in PROTOCOLS.values()]
    out: dict[str, tuple[str, Any]] = {}
    for part, cls in [*parts, ("schedule", Schedule), ("output", Output), ("agent", AgentConfig)]:
        out.update((n, (part, h)) for n, h in _hints(cls).items())
    top = _hints(RunConfig)
    out.update((n, ("", top[n])) for n in ("preset", "device", "capture", "bounds", "workers"))
    del out["switches"]  # --switch, its own syntax
    return out


#: ``train_online``'s fields by name: (the part of ``RunConfig`` holding it, its type).
FIELDS: dict[str, tuple[str, Any]] = _fields()


def option_type(name: str) -> Any:
    """The type of ``train_online``'s option ``--NAME`` by field name (None: there is none)."""
    if name in FIELDS:
        return FIELDS[name][1]
    return None if name == "run" else _hints(TrainCommand).get(name)


# -- a config read from a file ---------------------------------------------------------------
def load_json(path: str, what: str = "--config") -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as err:
        raise CliError(f"cannot read {what} {path}: {err.strerror or err}") from None
    except json.JSONDecodeError as err:
        raise CliError(f"{what} {path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise CliError(f"{what} {path}: expected a JSON object of fields")
    return data


def file_values(data: Mapping[str, Any], where: str, saved: bool = False) -> dict[str, Any]:
    """A config (nested as ``config.json``, or flat by field name) as one dict by field name,
    each value checked against its field's type. A ``saved`` run's config, and any file that
    says its version, must be of this version (``agent.config.check_version``)."""
    values = flat(data)
    version = values.pop("version", None)
    if saved or version is not None:
        try:
            check_version(version, where)
        except ValueError as err:
            raise CliError(str(err)) from None
    for name, value in values.items():
        if name == "switches":
            continue
        if name not in FIELDS and name != "protocol":
            raise CliError(f"unknown field {name!r} in {where}")
        hint = ProtocolName if name == "protocol" else FIELDS[name][1]
        values[name] = value = _tuples(value)
        try:
            typeguard.check_type(value, hint, collection_check_strategy=ALL_ITEMS)
        except typeguard.TypeCheckError:
            text = str(hint).replace("typing.", "") if get_args(hint) else hint.__name__
            raise CliError(f"--{name.replace('_', '-')} expects {text}, got {value!r} (in "
                           f"{where})") from None
    return values


def _tuples(value: Any) -> Any:
    """JSON's lists as the config's tuples."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def with_values(cfg: RunConfig, values: Mapping[str, Any], where: str) -> RunConfig:
    """``cfg`` with ``values`` (``file_values``) set in its parts; the options that chose it
    (``CHOSEN``) are its own already."""
    agent: dict[str, Any] = {}
    own = {f.name for f in dataclasses.fields(cfg.protocol)}
    for name, value in values.items():
        if name == "switches":
            try:
                cfg.schedule.switches = None if value is None else tuple(
                    Switch.from_json(v) for v in value)
            except (ValueError, TypeError) as err:
                raise CliError(f"switches: {err} (in {where})") from None
            continue
        if name in CHOSEN:
            continue
        part = FIELDS[name][0]
        if part == "protocol" and name not in own:
            raise CliError(f"{name} belongs to --protocol {_protocol_of(name)} (in {where})")
        if part == "agent":
            agent[name] = value
        else:
            setattr(getattr(cfg, part) if part else cfg, name, value)
    try:
        cfg.agent = cfg.agent.replace(**agent)
    except ValueError as err:
        raise CliError(f"{err} (in {where})") from None
    return cfg


# -- parsing ---------------------------------------------------------------------------------
def _defaults(argv: Sequence[str], values: Mapping[str, Any] | None = None) -> Defaults:
    given = Defaults(**{k: v for k, v in (values or {}).items() if k in CHOSEN})
    return parse(Defaults, argv, TRAIN_PROG, default=given, unknown=True, config=(),
                 add_help=False)[0]  # fmt: skip


def default_config(d: Defaults) -> RunConfig:
    """The config the other options apply to, chosen by the ``Defaults``."""
    cls = PROTOCOLS[d.protocol]  # (--source where the protocol has none: refused by the parser)
    protocol = cls(**({"source": d.source} if "source" in _hints(cls) else {}))
    device = device_name(d.device)
    agent = preset_agent(d.preset, d.track, protocol, preferred_precision(device), device)
    schedule = Schedule(**PRESETS[d.preset].schedule)
    return RunConfig(protocol=protocol, preset=d.preset, device=d.device, agent=agent,
                     schedule=schedule)


def parse_command(
    argv: Sequence[str],
    prog: str = TRAIN_PROG,
    data: Mapping[str, Any] | None = None,
    where: str = "config.json",
) -> TrainCommand:
    """The command of ``argv`` over ``data`` (a config as ``config.json`` holds it, or
    ``--config FILE``'s): tyro over ``TrainCommand``, its switches put in the config. ``--help``
    prints and exits 0; a bad option is one ``CliError`` line."""
    first = _defaults(argv)
    if first.config:
        if data is not None:
            raise CliError(f"--config cannot be used with {where}")
        where = f"--config {first.config}"
    values = {} if data is None and not first.config else file_values(
        load_json(first.config) if first.config else data, where, saved=data is not None)
    run = with_values(default_config(_defaults(argv, values)), values, where)
    default = TrainCommand(run=run, protocol=run.protocol.kind)  # type: ignore[arg-type]
    try:
        cmd = parse(TrainCommand, argv, prog, default=default,
                    config=(tyro.conf.AvoidSubcommands,))
    except CliError as err:
        raise CliError(_other_protocol(str(err), default.protocol)) from None
    if cmd.no_switch or cmd.switch:
        cmd.run.schedule.switches = tuple(cmd.switch)
    return cmd


def _protocol_of(name: str) -> str | None:
    """The protocol whose option ``name`` is (None: none's)."""
    return next((k for k, cls in PROTOCOLS.items() if name in _hints(cls)), None)


def _other_protocol(message: str, protocol: str) -> str:
    """An unknown option that belongs to another protocol says so."""
    for token in message.replace(",", " ").split():
        other = _protocol_of(token[2:].replace("-", "_")) if token.startswith("--") else None
        if other not in (None, protocol):
            return f"{token} belongs to --protocol {other}"
    return message


def build_config(argv: Sequence[str] = (), data: Mapping[str, Any] | None = None,
                 where: str = "config.json") -> RunConfig:
    """--config FILE (or ``data``), then the options; then ``resolve`` (no file is written)."""
    return resolve(parse_command(argv, data=data, where=where).run)


def config_from_dict(data: Mapping[str, Any], where: str = "config.json") -> RunConfig:
    """A saved ``config.json`` (of this version) as a resolved config."""
    return build_config((), data, where)


# -- --resume --------------------------------------------------------------------------------
def resume_config(saved: Mapping[str, Any], argv: Sequence[str], prog: str = TRAIN_PROG) -> RunConfig:
    """The saved config with a ``--resume`` command line's changes, which may only touch
    ``RESUMABLE``; the agent (its schedule included) stays as resolved when the run began."""
    protocol = flat(saved).get("protocol", "worlds")  # (a config without one: refused by version)
    first = _defaults(argv, {"protocol": protocol})
    if first.config:
        raise CliError("--config cannot be used with --resume (the run keeps its config)")
    if first.protocol != protocol:
        raise CliError("cannot change --protocol on --resume")
    cfg = resolve(parse_command(argv, prog, saved).run)
    before, after = flat(config_from_dict(saved).to_dict()), flat(cfg.to_dict())
    fixed = sorted(k for k in after if after[k] != before.get(k) and k not in RESUMABLE)
    if fixed:
        raise CliError(
            f"cannot change {', '.join('--' + f.replace('_', '-') for f in fixed)} on --resume; "
            "only --steps, --switch, --device, --eval-every, --checkpoint-every, --bounds and "
            "--workers"
        )
    return cfg
