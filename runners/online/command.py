"""train_online's command line: tyro over ``TrainCommand``, parsed once, then ``run_config``.

``--protocol``, ``--preset``, ``--track``, ``--source`` and ``--device`` choose the defaults of
the other options, so the parse only collects what is given (every protocol's options are
options, each protocol's in a group of its own) and ``run_config`` builds the chosen defaults,
then sets a file's values on them (``--config FILE``, a run's ``config.json`` on ``--resume``
or ``--from``; each checked against its field's type), then the command line's.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, get_args

import typeguard
import tyro

from agent.config import AgentConfig, check_version, preferred_precision
from runners.cli import CliError, parse
from runners.online.config import (
    Output,
    ProtocolName,
    RunConfig,
    Schedule,
    device_name,
    flat,
    preset_agent,
    resolve,
)
from runners.online.presets import PRESETS
from runners.online.protocols import PROTOCOLS, Paper, Worlds
from runners.online.switch import Switch, SwitchArg

TRAIN_PROG = "python -m runners.train_online"
ALL_ITEMS = typeguard.CollectionCheckStrategy.ALL_ITEMS
#: What may change on --resume (the rest belongs to the run and is read from its config.json).
RESUMABLE = ("steps", "switches", "device", "eval_every", "checkpoint_every", "bounds", "workers")


@dataclass
class TrainCommand:
    """Online EPM-JEPA training with a mid-stream physics switch (defaults: the worlds protocol,
    track C: the streams live in groups of 8 that share a training world and one memory for 2-6
    episodes, then a new world is drawn; at 2/3 of the run every stream moves to a held-out
    world and the weights freeze; beside it the floor (track A) and the ceiling (the oracle)
    train on the same stream; --protocol paper: the paper's gravity 0 -> 0.5). The options
    override --config FILE's values; the defaults shown are the worlds protocol's, the cpu
    preset's and track C's (--protocol, --preset, --track, --source and --device choose
    others)."""

    run: Annotated[RunConfig, tyro.conf.arg(name="")] = field(default_factory=RunConfig)
    protocol: ProtocolName = "worlds"
    """worlds: train across worlds drawn from --train-family, then switch every stream to a held-out world; paper: the paper's one base world and its gravity switch. Each has its own options below."""
    worlds: Annotated[Worlds, tyro.conf.OmitArgPrefixes] = field(default_factory=Worlds)
    """The worlds protocol's options (--protocol worlds)."""
    paper: Annotated[Paper, tyro.conf.OmitArgPrefixes] = field(default_factory=Paper)
    """The paper protocol's options (--protocol paper)."""
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


def with_values(cfg: RunConfig, values: Mapping[str, Any], where: str | None) -> RunConfig:
    """``cfg`` with ``values`` by field name set in its parts (``where``: the file they come
    from, None: the command line)."""
    at = f" (in {where})" if where else ""
    agent: dict[str, Any] = {}
    own = {f.name for f in dataclasses.fields(cfg.protocol)}
    for name, value in values.items():
        if name == "switches":
            try:
                cfg.schedule.switches = None if value is None else tuple(
                    Switch.from_json(v) for v in value)
            except (ValueError, TypeError) as err:
                raise CliError(f"switches: {err}{at}") from None
            continue
        if name == "protocol":
            continue
        part = FIELDS[name][0]
        if part == "protocol" and name not in own:
            option = "--" + name.replace("_", "-")
            raise CliError(f"{option} belongs to --protocol {_protocol_of(name)}{at}")
        if part == "agent":
            agent[name] = value
        else:
            setattr(getattr(cfg, part) if part else cfg, name, value)
    try:
        cfg.agent = cfg.agent.replace(**agent)
    except ValueError as err:
        raise CliError(f"{err}{at}") from None
    return cfg


# -- parsing ---------------------------------------------------------------------------------
def given_options(argv: Sequence[str]) -> list[str]:
    """The field names of the options ``argv`` gives, in order (``--no-stagger``: stagger), read
    after a parse has accepted it (so every ``--`` token is an option, never abbreviated)."""
    names = [t[2:].split("=")[0].replace("-", "_") for t in argv if t.startswith("--")]
    return list(dict.fromkeys(n[3:] if n.startswith("no_") and n[3:] in FIELDS else n
                              for n in names))


def run_config(line: Mapping[str, Any], values: Mapping[str, Any], where: str | None) -> RunConfig:
    """The config of the command line's ``line`` over a file's ``values`` (both by field name):
    the protocol, preset, track, source and device each the command line's, else the file's, else
    its default, choose the defaults (``preset_agent``, the preset's schedule); then the file's
    values and the command line's are set on them, in that order."""

    def pick(name: str, default: str) -> Any:
        return line.get(name, values.get(name, default))

    cls = PROTOCOLS[pick("protocol", "worlds")]  # (--source where the protocol has none: refused)
    protocol = cls(**({"source": pick("source", "stream")} if "source" in _hints(cls) else {}))
    preset, device = pick("preset", "cpu"), pick("device", "auto")
    name = device_name(device)
    agent = preset_agent(preset, pick("track", "C"), protocol, preferred_precision(name), name)
    cfg = RunConfig(protocol=protocol, preset=preset, device=device, agent=agent,
                    schedule=Schedule(**PRESETS[preset].schedule))
    return with_values(with_values(cfg, values, where), line, None)


def parse_command(
    argv: Sequence[str],
    prog: str = TRAIN_PROG,
    data: Mapping[str, Any] | None = None,
    where: str = "config.json",
) -> TrainCommand:
    """The command of ``argv`` over ``data`` (a config as ``config.json`` holds it, or
    ``--config FILE``'s): tyro over ``TrainCommand``, then ``run_config`` of the options given,
    the switches put in the config. ``--help`` prints and exits 0; a bad option is one
    ``CliError`` line."""
    cmd = parse(TrainCommand, argv, prog, config=(tyro.conf.AvoidSubcommands,))
    saved = data is not None  # a run's own config.json, which keeps its protocol
    if cmd.config:
        if data is not None:
            raise CliError(f"--config cannot be used with {where}")
        data, where = load_json(cmd.config), f"--config {cmd.config}"
    values = {} if data is None else file_values(data, where, saved=saved)
    parsed = flat({**dataclasses.asdict(cmd.run), "protocol": cmd.protocol,
                   "worlds": dataclasses.asdict(cmd.worlds), "paper": dataclasses.asdict(cmd.paper)})
    line = {n: parsed[n] for n in given_options(argv) if n in parsed}  # the options given
    if saved and line.get("protocol", values.get("protocol")) != values.get("protocol"):
        raise CliError("cannot change --protocol on --resume")
    cmd.run = run_config(line, values, where)
    cmd.protocol = cmd.run.protocol.kind  # type: ignore[assignment]
    if cmd.no_switch or cmd.switch:
        cmd.run.schedule.switches = tuple(cmd.switch)
    return cmd


def _protocol_of(name: str) -> str | None:
    """The protocol whose option ``name`` is (None: none's)."""
    return next((k for k, cls in PROTOCOLS.items() if name in _hints(cls)), None)


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
    if "config" in given_options(argv):
        raise CliError("--config cannot be used with --resume (the run keeps its config)")
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
