"""train_online's command line: tyro over ``TrainCommand``, parsed once, then ``run_config``.

``--protocol``, ``--preset``, ``--track``, ``--source`` and ``--device`` choose the defaults of
the other options, so the parse only collects what is given (every protocol's options are
options, each protocol's in a group of its own) and ``run_config`` builds the chosen defaults,
then sets a file's values on them (``--config FILE``, a run's ``config.json`` on ``--resume``
or ``--from``; read by ``runners.online.config.file_values``), then the command line's.

tyro reads views of the config's dataclasses (``options_view``), never the config itself, which
stays plain data: each field an option with its docstring as help, but for the fields a preset
fixes (``SET_ONLY``), which ``--set NAME=VALUE`` sets (``set_values``: JSON, type-checked as a
file's) and ``--help`` only names, so that it lists about 55 options.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import tyro
from tyro import _docstrings as tyro_docstrings  # field docstrings: private, pinned

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

#: The fields ``--help`` leaves out, each set by ``--set NAME=VALUE`` (or in ``--config FILE``):
#: the values a preset fixes and a run rarely changes (the networks' sizes, the optimiser's, the
#: detector's and the fit's constants, the objective's variants, evaluation internals, the
#: held-out families' ranges). docs/train_online.md ("Options") lists them with the rest.
SET_ONLY = frozenset({
    # the learner
    "latent_dim", "exp_dim", "exp_layers", "exp_heads", "exp_ff_dim", "lora_rank", "hyper_dim",
    "encoder_channels", "input_scale", "weight_decay", "warmup_frac", "total_steps", "tau_base",
    "tau_end", "gamma", "regularise", "pred_error", "detector_momentum", "detector_warmup",
    "norm_eps", "eval_batch_size", "per_horizon", "push_pair", "entry_frames", "vary_memory",
    "memory_write", "encoder_lr_scale", "encoder_batch", "fit_lr", "fit_batch", "fit_worlds",
    "reservoir_size", "head_start",
    # the schedule
    "headline_n", "best_min_sigma", "eval_shift_test", "eval_seed_offset", "log_every",
    "rolling_window",
    # the protocols
    "train_restitution", "train_friction", "interp_gravity", "interp_arcs", "interp_restitution",
    "interp_friction", "extrap_gravity", "extrap_arcs", "extrap_restitution", "extrap_friction",
    "episode_length", "stagger", "eval_shift_train", "eval_base_test",
})
#: The options' metavars, where one is not the type's.
METAVARS = {"out": "DIR", "name": "NAME", "record_frames": "N", "data": "PATH.zarr"}

#: Each protocol's default switch, as --help names it ("worlds g -> 0.75, direction -> 90; ...").
DEFAULT_SWITCHES = "; ".join(f"{name} {Switch(0, protocol.switch).label()}"
                             for name, protocol in PROTOCOLS.items())


def options_view(cls: type, defaults: Any, parts: Mapping[str, type] | None = None) -> type:
    """The command line's view of the config dataclass ``cls``: a dataclass of its fields for
    tyro, each with its type, its value in ``defaults`` and its docstring as help, the
    ``SET_ONLY`` ones left out, and the nested ``parts`` (by field name: their views) in place of
    theirs. The config itself stays plain data: tyro reads only these views."""
    types, parts = hints(cls), parts or {}
    fields: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(cls):
        if f.name in parts:
            fields.append((f.name, Annotated[parts[f.name], tyro.conf.OmitArgPrefixes],
                           field(default_factory=parts[f.name])))
        elif f.name not in SET_ONLY and f.name not in ("switches", "protocol"):
            doc = tyro_docstrings.get_field_docstring(cls, f.name, ()) or ""
            arg = tyro.conf.arg(help=doc, metavar=METAVARS.get(f.name))
            fields.append((f.name, Annotated[types[f.name], arg],
                           field(default=getattr(defaults, f.name))))
    view = dataclasses.make_dataclass(f"{cls.__name__}Options", fields)
    view.__doc__ = cls.__doc__
    return view


_DEFAULTS = RunConfig()
RunOptions = options_view(RunConfig, _DEFAULTS, {
    part: options_view(type(getattr(_DEFAULTS, part)), getattr(_DEFAULTS, part))
    for part in ("agent", "schedule", "output")})
WorldsOptions, PaperOptions = (options_view(cls, cls()) for cls in (Worlds, Paper))
SET_HELP = ("Any field of the config by its name, repeatable (--set exp_dim=32 --set "
            "tau_end=0.999); the value as a --config file writes it (JSON: 32, 0.5, true, null, "
            "[0, 7]; a bare word is text). The fields --help leaves out are set only so: "
            + ", ".join(sorted(SET_ONLY)) + ".")


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

    options: Annotated[RunOptions, tyro.conf.arg(name="")] = field(  # type: ignore[valid-type]
        default_factory=RunOptions)
    protocol: ProtocolName = "worlds"
    """worlds: train across worlds drawn from --train-family, then switch every stream to a held-out world; paper: the paper's one base world and its gravity switch. Each has its own options below."""
    worlds: Annotated[WorldsOptions, tyro.conf.OmitArgPrefixes] = field(  # type: ignore[valid-type]
        default_factory=WorldsOptions)
    """The worlds protocol's options (--protocol worlds)."""
    paper: Annotated[PaperOptions, tyro.conf.OmitArgPrefixes] = field(  # type: ignore[valid-type]
        default_factory=PaperOptions)
    """The paper protocol's options (--protocol paper)."""
    switch: Annotated[
        tuple[SwitchArg, ...],
        tyro.conf.UseAppendAction,
        tyro.conf.arg(help_behavior_hint=f"(default at 2/3 of the steps: {DEFAULT_SWITCHES})"),
    ] = ()
    """Switch the physics before STEP; repeatable. STEP:GRAVITY (3000:0.5) or STEP:NAME=VALUE,... with names gravity, direction (degrees, 90 = down), restitution, friction."""
    no_switch: Annotated[bool, tyro.conf.FlagCreatePairsOff] = False
    """No switch at all: base-world training only."""
    sets: Annotated[tuple[str, ...], tyro.conf.UseAppendAction,
                    tyro.conf.arg(name="set", metavar="NAME=VALUE", help=SET_HELP)] = ()
    config: Annotated[str | None, tyro.conf.arg(metavar="FILE")] = None
    """JSON of the config's fields, nested as config.json or flat; a run's config.json works as is (derived values included)."""
    resume: Annotated[str | None, tyro.conf.arg(metavar="RUN_DIR")] = None
    """Continue a stopped run (only --steps, --switch, --device, --eval-every and --checkpoint-every may change)."""
    dry_run: Annotated[bool, tyro.conf.FlagCreatePairsOff] = False
    """Print the resolved config (every field, as the run's config.json would hold it: what a preset, --config, the options and --set make of it) and exit; nothing is written."""
    stack_seeds: tuple[int, ...] = ()
    """Train these seeds too, stacked with --seed as one model in this process (agent.stacked; each seed its own world stream and run folder, NAME-s<SEED> for every seed with --name); the worlds protocol with --no-bounds and --no-stream-cache. For a GPU: on a CPU it is slower than one run after another."""
    run: tyro.conf.Suppress[RunConfig] = field(default_factory=RunConfig)
    """The run's config, built by ``parse_command`` from all of the above."""


def option_type(name: str) -> Any:
    """The type of ``train_online``'s option ``--NAME`` by field name (None: there is none)."""
    if name in FIELDS:
        return FIELDS[name][1]
    return None if name in ("run", "options") else hints(TrainCommand).get(name)


def option_name(name: str) -> str:
    """How the command line sets field ``name``: ``--steps``, or ``--set stagger``."""
    return f"--set {name}" if name in SET_ONLY else "--" + name.replace("_", "-")


# -- parsing ---------------------------------------------------------------------------------
def given_options(argv: Sequence[str]) -> list[str]:
    """The field names of the options ``argv`` gives, in order (``--no-bounds``: bounds), read
    after a parse has accepted it (so every ``--`` token is an option, never abbreviated)."""
    names = [t[2:].split("=")[0].replace("-", "_") for t in argv if t.startswith("--")]
    return list(dict.fromkeys(n[3:] if n.startswith("no_") and n[3:] in FIELDS else n
                              for n in names))


def set_values(items: Sequence[str]) -> dict[str, Any]:
    """``--set NAME=VALUE`` items by field name, each value read as JSON (a bare word as text)
    and checked against its field's type as a file's are (``file_values``)."""
    values: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not eq or not name:
            raise CliError(f"--set expects NAME=VALUE, got {item!r}")
        if name not in FIELDS or name in ("protocol", "switches"):
            what = {"protocol": "--protocol", "switches": "--switch"}.get(name)
            raise CliError(f"--set: {'use ' + what if what else f'unknown field {name!r}'}")
        try:
            values[name] = json.loads(text)
        except json.JSONDecodeError:
            values[name] = text
    return file_values(values, "--set", by_field=True)


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
    parsed = flat({**dataclasses.asdict(cmd.options), "protocol": cmd.protocol,
                   "worlds": dataclasses.asdict(cmd.worlds), "paper": dataclasses.asdict(cmd.paper)})
    line = {n: parsed[n] for n in given_options(argv) if n in parsed}  # the options given
    line.update(set_values(cmd.sets))
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
        raise CliError(f"cannot change {', '.join(map(option_name, fixed))} on "
                       f"--resume; only {', '.join(options[:-1])} and {options[-1]}")
    return cfg
