"""The command line of an online run, generated from ``RunConfig`` (tyro), and the other ways
a config arrives: ``--config FILE``, ``--set FIELD=VALUE``, a run's ``config.json`` and
``--resume``.

Resolution order (later wins): the defaults -> ``--config FILE`` (JSON; a run's own
``config.json`` works as is) -> the named command-line options -> ``--set FIELD=VALUE`` (any
``RunConfig`` or ``AgentConfig`` field). Values from ``--config`` and ``--set`` are typed by the
same parser as the options (tyro, from the field annotations). tyro's multi-line error box is
reduced to one line (``CliError``, exit 2).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tyro

from agent.config import AgentConfig
from runners.cli import CliError, parse
from runners.online.config import (
    RESUMABLE,
    RUN_FIELDS,
    RunConfig,
    make_agent_config,
    resolve,
)
from runners.online.parsing import (
    agent_field_names,
    agent_fields,
    agent_values,
    field_hints,
    json_tokens,
    text_tokens,
    typed,
    typed_agent,
)
from runners.online.switch import Switch, SwitchArg, switches_from_json


# -- the command line ------------------------------------------------------------------------
@dataclass
class TrainCommand:
    """Online EPM-JEPA training with a mid-stream physics switch (defaults: the worlds protocol,
    track C: each stream in its own training world, redrawn every episode; at 2/3 of the run
    every stream moves to a held-out world and the weights freeze; --protocol paper: the paper's
    gravity 0 -> 0.5). Order of resolution (later wins): defaults, --config, the options, --set."""

    run: Annotated[RunConfig, tyro.conf.arg(name="")] = field(default_factory=RunConfig)
    switch: Annotated[
        tuple[SwitchArg, ...],
        tyro.conf.UseAppendAction,
        tyro.conf.arg(
            help_behavior_hint="(default at 2/3 of the steps: worlds gravity=0.3,direction=45; "
            "paper gravity -> 0.5)"
        ),
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
    return parse(TrainCommand, argv, prog, default=default, config=())


# tyro prints a boxed, multi-line error and exits 2; the runners print one line instead.
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
    hints = field_hints(RunConfig)
    run_items = {k: text_tokens(v, hints[k]) for k, v in pairs if k in RUN_FIELDS and k != "switches"}
    out = typed(RunConfig, cfg, run_items, where) if run_items else dataclasses.replace(cfg)
    for k, v in pairs:
        if k == "switches":
            out.switches = _switches_layer(v, where)
    agent_hints = field_hints(agent_fields())
    agent_items = {k: text_tokens(v, agent_hints[k]) for k, v in pairs if k not in RUN_FIELDS}
    out.agent_overrides = {**cfg.agent_overrides, **typed_agent(agent_items, where)}
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
    hints = field_hints(RunConfig)
    run_items = {k: json_tokens(v, hints[k]) for k, v in run_values.items() if k != "switches"}
    out = typed(RunConfig, cfg, run_items, where) if run_items else dataclasses.replace(cfg)
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


# -- a run's config.json, --resume -----------------------------------------------------------
def config_from_dict(data: dict[str, Any]) -> RunConfig:
    """Rebuild the resolved config saved as ``config.json`` (for --resume and evaluate); reads the
    older formats too (switches as ``[step, gravity]`` pairs, overrides as text)."""
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
    d.setdefault("protocol", "paper")  # written before the worlds protocol existed
    for k in ("eval_ns", "final_ns", "episode_steps"):
        if d.get(k) is not None:
            d[k] = tuple(d[k])
    cfg = RunConfig(**d)
    cfg.agent_overrides = agent_values(overrides, "config.json (agent_overrides)")
    try:
        cfg.agent = AgentConfig.from_dict(agent_dict) if agent_dict else make_agent_config(cfg)
    except (ValueError, TypeError, KeyError) as err:
        raise CliError(f"config.json holds an invalid agent config: {err}") from None
    return cfg


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


