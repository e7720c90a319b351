"""train_online's command line: tyro over ``RunConfig``, and the other ways a config arrives
(``--config FILE``, a run's ``config.json``, ``--resume``, a sweep's grid point).

Everything becomes command-line tokens that one tyro parser reads, so a value is typed and
checked the same way wherever it comes from; later tokens win:

    --config FILE's values,  then the command line

Five options choose the defaults of the others, so they are read first (``Defaults``):
``--protocol`` (which of ``Worlds`` / ``Paper`` the tagged union holds), ``--preset``,
``--track`` (its lr and kappa), ``--source`` (the memory pair) and ``--device`` (the precision).
``--help`` shows the defaults they give.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_args

import tyro

from agent.config import REMOVED, Track, preferred_precision, without_removed
from runners.cli import CliError, parse
from runners.online.config import (
    PRESET_SCHEDULE,
    PROTOCOLS,
    Device,
    Paper,
    Preset,
    ProtocolName,
    RunConfig,
    Schedule,
    Source,
    device_name,
    flat,
    preset_agent,
    resolve,
)
from runners.online.switch import Switch, SwitchArg

TRAIN_PROG = "python -m runners.train_online"
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
def _fields(cls: type) -> Iterator[tuple[str, Any]]:
    """(name, type) of every option ``cls`` generates, nested dataclasses flattened."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        inner = get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint
        members = [a for a in get_args(inner) if dataclasses.is_dataclass(a)] or [inner]
        if all(dataclasses.is_dataclass(m) for m in members):
            for m in members:
                yield from _fields(m)
        elif f.name not in ("run", "switches"):
            yield f.name, inner


FIELDS: dict[str, Any] = dict(_fields(TrainCommand))


def _kind(hint: Any) -> tuple[str, bool]:
    """("seq" | "bool" | "other", may be None) of an option's type."""
    args = get_args(hint)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if optional else hint
    if typing.get_origin(base) is tuple:
        return "seq", optional
    return ("bool" if base is bool else "other"), optional


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def value_tokens(name: str, value: Any, where: str) -> list[str]:
    """The tokens that set option ``name`` to ``value`` (JSON, or the text of a grid point); the
    ``switches`` of a config are ``--switch`` options (``[]`` / none: ``--no-switch``)."""
    if name in ("switches", "switch"):
        if value is None or value == "":
            return ["--no-switch"] if value == "" else []
        if isinstance(value, str):
            value = [] if value.strip().lower() == "none" else value.replace(";", " ").split()
        try:
            items = [str(Switch.from_json(v)) for v in value]
        except (ValueError, TypeError) as err:
            raise CliError(f"switches: {err} (in {where})") from None
        return [t for s in items for t in ("--switch", s)] or ["--no-switch"]
    name = name.replace("-", "_")
    if name not in FIELDS:
        raise CliError(f"unknown field {name!r} in {where}")
    kind, optional = _kind(FIELDS[name])
    text = value.strip().lower() if isinstance(value, str) else None
    if optional and (value is None or text in ("none", "null")):
        return [_option(name), "None"]
    if kind == "bool":
        flag = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
        on = flag.get(text, value) if text is not None else value
        if not isinstance(on, bool):
            raise CliError(f"{name}: expected true or false, got {value!r} (in {where})")
        return [_option(name) if on else _option("no_" + name)]
    if kind == "seq":
        items = value.replace(",", " ").split() if isinstance(value, str) else list(value)
        return [_option(name), *(repr(v) if isinstance(v, float) else str(v) for v in items)]
    return [_option(name), repr(value) if isinstance(value, float) else str(value)]


def dict_tokens(data: Mapping[str, Any], where: str) -> list[str]:
    """The tokens of a JSON config: nested as ``config.json`` (``{"protocol": {"kind": ...},
    "agent": {...}, ...}``) or flat, field names as keys (older config.json files too)."""
    out: list[str] = []
    for key, value in data.items():
        if key == "agent_overrides" and "agent" in data:
            continue  # an older config.json: the resolved agent holds them
        if key == "protocol" and isinstance(value, Mapping):
            value = dict(value)
            out += value_tokens("protocol", value.pop("kind", "worlds"), where)
            out += dict_tokens(value, where)
        elif isinstance(value, Mapping) and key != "physics":
            out += dict_tokens(value, where)
        elif key == "precision" and value == "auto":  # an older config: the device's own
            continue
        elif key == "memory_scope" and value == "world":  # the group memory's older name
            out += value_tokens(key, "group", where)
        elif key in REMOVED:  # an older config: an option since removed, unused (or one line)
            try:
                without_removed({key: value})
            except ValueError as err:
                raise CliError(f"{err} (in {where})") from None
        else:
            out += value_tokens(key, value, where)
    return out


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


# -- parsing ---------------------------------------------------------------------------------
def tokens_of(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--config FILE``'s values in front."""
    first = _defaults(argv)
    head = dict_tokens(load_json(first.config), f"--config {first.config}") if first.config else []
    return over(head, argv)


def over(head: list[str], argv: Sequence[str]) -> list[str]:
    """``argv`` over ``head``: later options win, and switches on ``argv`` replace ``head``'s."""
    if not any(a in ("--switch", "--no-switch") or a.startswith("--switch=") for a in argv):
        return [*head, *argv]
    out, skip = [], False
    for t in head:
        if not skip and t in ("--switch", "--no-switch"):
            skip = t == "--switch"
            continue
        if not skip:
            out.append(t)
        skip = False
    return [*out, *argv]


def _defaults(tokens: Sequence[str]) -> Defaults:
    return parse(Defaults, tokens, TRAIN_PROG, unknown=True, config=(), add_help=False)[0]


def default_config(tokens: Sequence[str]) -> RunConfig:
    """The config the other options apply to: chosen by the ``Defaults`` among ``tokens``."""
    d = _defaults(tokens)
    protocol = PROTOCOLS[d.protocol]()
    if isinstance(protocol, Paper):  # (under worlds, --source is refused by the parser)
        protocol.source = d.source
    device = device_name(d.device)
    agent = preset_agent(d.preset, d.track, protocol, protocol.source if isinstance(
        protocol, Paper) else "stream", preferred_precision(device), device)
    schedule = Schedule(**PRESET_SCHEDULE.get(d.preset, {}))
    return RunConfig(protocol=protocol, preset=d.preset, device=d.device, agent=agent,
                     schedule=schedule)


def parse_tokens(tokens: Sequence[str], prog: str = TRAIN_PROG) -> TrainCommand:
    """The command of ``tokens`` (expanded already): tyro over ``TrainCommand``, its switches
    put in the config. ``--help`` prints and exits 0; a bad option is one ``CliError`` line."""
    default = TrainCommand(run=default_config(tokens))
    default.protocol = default.run.protocol.kind  # type: ignore[assignment]
    try:
        cmd = parse(TrainCommand, tokens, prog, default=default,
                    config=(tyro.conf.AvoidSubcommands,))
    except CliError as err:
        raise CliError(_other_protocol(str(err), default.protocol)) from None
    if cmd.no_switch or cmd.switch:
        cmd.run.schedule.switches = tuple(cmd.switch)
    return cmd


def _other_protocol(message: str, protocol: str) -> str:
    """An unknown option that belongs to the other protocol says so."""
    other = "paper" if protocol == "worlds" else "worlds"
    names = {f.name for f in dataclasses.fields(PROTOCOLS[other])}
    for token in message.replace(",", " ").split():
        if token.startswith("--") and token[2:].replace("-", "_") in names:
            return f"{token} belongs to --protocol {other}"
    return message


def parse_command(argv: Sequence[str], prog: str = TRAIN_PROG) -> TrainCommand:
    return parse_tokens(tokens_of(argv), prog)


def build_config(argv: Sequence[str] = ()) -> RunConfig:
    """--config FILE, then the options; then ``resolve`` (no file is written)."""
    return resolve(parse_command(argv).run)


def saved_tokens(data: Mapping[str, Any], where: str = "config.json") -> list[str]:
    """A run's ``config.json`` as tokens (one written before the worlds protocol: paper)."""
    return [*([] if "protocol" in data else ["--protocol", "paper"]), *dict_tokens(data, where)]


def config_from_dict(data: Mapping[str, Any], where: str = "config.json") -> RunConfig:
    """A saved ``config.json`` (any version) as a resolved config."""
    return resolve(parse_tokens(saved_tokens(data, where)).run)


# -- --resume --------------------------------------------------------------------------------
def resume_config(saved: Mapping[str, Any], argv: Sequence[str], prog: str = TRAIN_PROG) -> RunConfig:
    """The saved config with a ``--resume`` command line's changes, which may only touch
    ``RESUMABLE``; the agent (its schedule included) stays as resolved when the run began."""
    tokens = over(saved_tokens(saved), argv)
    if _defaults(tokens).protocol != flat(saved).get("protocol", "paper"):
        raise CliError("cannot change --protocol on --resume")
    cmd = parse_tokens(tokens, prog)
    if cmd.config:
        raise CliError("--config cannot be used with --resume (the run keeps its config)")
    cfg = resolve(cmd.run)
    before, after = flat(config_from_dict(saved).to_dict()), flat(cfg.to_dict())
    fixed = sorted(k for k in after if after[k] != before.get(k) and k not in RESUMABLE)
    if fixed:
        raise CliError(
            f"cannot change {', '.join(_option(f) for f in fixed)} on --resume; "
            "only --steps, --switch, --device, --eval-every, --checkpoint-every, --bounds and "
            "--workers"
        )
    return cfg

