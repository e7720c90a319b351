"""train_online's command line: tyro over ``TrainCommand``, parsed once, then ``run_config``.

``--protocol``, ``--preset``, ``--track``, ``--source`` and ``--device`` choose the defaults of
the other options, so the parse only collects what is given (every protocol's options are
options, each protocol's in a group of its own) and ``run_config`` builds the chosen defaults,
then sets a file's values on them (``--config FILE``, a run's ``config.json`` on ``--resume``
or ``--from``; read by ``runners.online.config.file_values``), then the command line's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import tyro

from agent.config import preferred_precision
from runners.cli import CliError, parse
from runners.online.config import (
    FIELDS,
    ProtocolName,
    RunConfig,
    Schedule,
    device_name,
    file_values,
    flat,
    hints,
    load_json,
    preset_agent,
    resolve,
    with_values,
)
from runners.online.presets import PRESETS
from runners.online.protocols import PROTOCOLS, Paper, Worlds
from runners.online.switch import Switch, SwitchArg

TRAIN_PROG = "python -m runners.train_online"
#: What may change on --resume (the rest belongs to the run and is read from its config.json).
RESUMABLE = ("steps", "switches", "device", "eval_every", "checkpoint_every")


#: Each protocol's default switch, as --help names it ("worlds g -> 0.75, direction -> 90; ...").
DEFAULT_SWITCHES = "; ".join(f"{name} {Switch(0, protocol.switch).label()}"
                             for name, protocol in PROTOCOLS.items())

@dataclass
class TrainCommand:
    """Online EPM-JEPA training with a mid-stream physics switch (defaults: the worlds protocol,
    track C, about 5 minutes on a 2-core CPU: the streams live in groups of 8 that share a
    training world and one memory for an episode, then a new world is drawn; halfway through
    base training the encoder settles, and the floor (track A) and the ceiling (the oracle) fit
    beside track C as heads on its latent; at 2/3 of the run every stream moves to a held-out
    world and the weights freeze; --protocol paper: the paper's gravity 0 -> 0.5). The options
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
        tyro.conf.arg(help_behavior_hint=f"(default at 2/3 of the steps: {DEFAULT_SWITCHES})"),
    ] = ()
    """Switch the physics before STEP; repeatable. STEP:GRAVITY (3000:0.5) or STEP:NAME=VALUE,... with names gravity, direction (degrees, 90 = down), restitution, friction."""
    no_switch: Annotated[bool, tyro.conf.FlagCreatePairsOff] = False
    """No switch at all: base-world training only."""
    config: Annotated[str | None, tyro.conf.arg(metavar="FILE")] = None
    """JSON of the config's fields, nested as config.json or flat; a run's config.json works as is (derived values included)."""
    resume: Annotated[str | None, tyro.conf.arg(metavar="RUN_DIR")] = None
    """Continue a stopped run (only --steps, --switch, --device, --eval-every and --checkpoint-every may change)."""
    stack_seeds: tuple[int, ...] = ()
    """Train these seeds too, stacked with --seed as one model in this process (agent.stacked; each seed its own world stream and run folder, NAME-s<SEED> for every seed with --name); the worlds protocol with --no-bounds and --no-stream-cache. For a GPU: on a CPU it is slower than one run after another."""


def option_type(name: str) -> Any:
    """The type of ``train_online``'s option ``--NAME`` by field name (None: there is none)."""
    if name in FIELDS:
        return FIELDS[name][1]
    return None if name == "run" else hints(TrainCommand).get(name)


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
    protocol = cls(**({"source": pick("source", "stream")} if "source" in hints(cls) else {}))
    preset, device = pick("preset", "cpu"), pick("device", "auto")
    name = device_name(device)
    agent = preset_agent(preset, pick("track", "C"), protocol, preferred_precision(name), name)
    cfg = RunConfig(protocol=protocol, preset=preset, device=device, agent=agent,
                    schedule=Schedule(**PRESETS[preset].schedule))
    return with_values(with_values(cfg, values, where), line, None)


def parse_command(argv: Sequence[str], prog: str = TRAIN_PROG,
                  data: Mapping[str, Any] | None = None, where: str = "config.json") -> TrainCommand:
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
        options = [f"--{n.replace('_', '-')}".replace("switches", "switch") for n in RESUMABLE]
        raise CliError(f"cannot change {', '.join('--' + f.replace('_', '-') for f in fixed)} on "
                       f"--resume; only {', '.join(options[:-1])} and {options[-1]}")
    return cfg
