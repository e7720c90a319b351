"""The run's configuration: ``RunConfig``, one nested dataclass per concern, and its resolution.

- ``protocol``: the world the streams live in, a tagged union: ``Worlds`` (the default: each
  stream in its own training world, a held-out world after the switch) or ``Paper`` (one base
  world and a gravity switch, as the paper);
- ``agent``: the learner, ``agent.AgentConfig`` (its defaults come from ``--preset``);
- ``schedule``: steps, switches, evaluations, checkpoints;
- ``output``: where the run folder goes and what it records;
- ``preset`` and ``device``.

The config is plain data: the command line is generated from these fields by
``runners.online.command`` (a field is an option under its own name, ``--steps``, ``--lr``,
``--base-gravity``, or, for those ``--help`` leaves out, ``--set NAME=VALUE``). By that name a
config is also read (``flat``: a config.json as one dict; ``FIELDS``: each name's part and type;
``file_values``: a file's values, type-checked; ``with_values``: values set in their parts).
Derived values are filled in once by ``resolve``; the resolved config is saved next to the run
as ``config.json``.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

import typeguard

from agent.config import VERSION, AgentConfig, bf16_unsupported, check_version
from runners.cli import CliError
from runners.online.protocols import PROTOCOLS, Paper, Protocol, Worlds
from runners.online.switch import Switch, physics_label

if TYPE_CHECKING:  # env is imported on first use: it pulls in gymnasium
    from env import PhysicsParams

Preset = Literal["cpu", "gpu", "tiny", "paper"]
Device = Literal["auto", "cpu", "cuda"]
AfterSwitch = Literal["memory", "continual"]
ProtocolName = Literal["worlds", "paper"]
ALL_ITEMS = typeguard.CollectionCheckStrategy.ALL_ITEMS

#: The memory size every headline number is read at (D^50: the paper's D_shift^50), by a run,
#: its summary and the studies.
HEADLINE_N = 50


@dataclass
class Schedule:
    """When things happen: steps, switches, evaluations, checkpoints."""

    steps: int = 4500
    """Online steps (one learner update each); calibrated so the default run tells the whole story, its floor and ceiling included (heads on its latent), in about 5 minutes on a 2-core CPU (4 min 52 s on an AVX2-only one; --preset gpu: 6,000)."""
    switches: tuple[Switch, ...] | None = None
    """Physics switches (set by --switch); None: one at 2/3 of the run (worlds: gravity 0.75 straight down, a held-out extrap world; paper: gravity 0.5)."""
    after_switch: AfterSwitch = "memory"
    """memory: weights frozen from the first switch on (detector and buffer stay live); continual: keep learning."""
    eval_every: int = 250
    """Steps between evaluations (there is also one at every switch, before it applies, and at the end)."""
    eval_ns: tuple[int, ...] = (0, 10, 50)
    """Memory sizes n of D_shift^n at the periodic evaluations."""
    final_ns: tuple[int, ...] | None = None
    """Memory sizes n of the adaptation curve at the end (None: worlds 0 1 5 10 25 50, paper 0 10 25 50 100 256)."""
    headline_n: int = HEADLINE_N
    """The n of the headline D_shift^n (best.pt keeps its lowest value)."""
    best_min_sigma: float | None = None
    """Collapse guard of best.pt: an evaluation whose sigma_embed is below this is no candidate (None: worlds 0.2, paper 0, the plain lowest)."""
    eval_shift_test: int = 128
    """Shift-world test sequences for D_shift."""
    eval_seed_offset: int = 10_000
    """Generated evaluation splits use seed + this offset."""
    checkpoint_every: int = 500
    """Steps between checkpoints/latest.pt writes."""
    log_every: int = 100
    """Steps per metrics block (one host sync, one zarr append, one progress-bar update)."""
    rolling_window: int = 100
    """Steps in the rolling stream error."""
    decoder_steps: int = 1000
    """Worlds protocol: AdamW steps of the pixel decoder that the held-out report fits to draw the predictions (probes.decoder; from the freeze on, in a process of its own on idle cores). 1000: about 10 s of one CPU core a learner, the decoded true future about 4 px from the truth; 4000: within 3 px on average, about 35 s a learner (the default run a fifth to a third slower); 0: none."""


@dataclass
class Output:
    """Where the run folder goes and what it keeps."""

    out: str = "runs"
    """Parent folder of the run folders."""
    name: str | None = None
    """Run folder name (None: <date>-<time>-<track>-s<seed>); an existing folder is never reused."""
    record_frames: int = 0
    """Keep every N-th frame batch (the newest frame of every stream) and its ground truth in run.zarr (0: none)."""



@dataclass
class RunConfig:
    """One online run (``resolve`` fills in what is derived)."""

    protocol: Protocol = field(default_factory=Worlds)
    """The protocol and its options (on the command line: --protocol, then its own options)."""
    agent: AgentConfig = field(
        default_factory=lambda: preset_agent("cpu", "C", Worlds())
    )
    schedule: Schedule = field(default_factory=Schedule)
    output: Output = field(default_factory=Output)
    preset: Preset = "cpu"
    """Learner size: cpu (tiny networks, 64 streams, learns in minutes), gpu (cpu at 512 streams, 6,000 steps: 1.5 minutes on one GPU with --capture), tiny (the smallest networks and 8 streams: for tests and smoke runs with a few --steps; minutes at the default steps), paper (Tables 4-5)."""
    device: Device = "auto"
    """auto = cuda when available, else cpu."""
    capture: bool = False
    """Each learner's update replayed from CUDA graphs (agent.capture; on a CPU the same step runs eagerly); needs --no-stream-cache."""
    bounds: bool = True
    """Worlds protocol: also fit the floor (track A) and the ceiling (the oracle) as heads on the run's settled latent (--heads A oracle; a run without --settle has none), and report the chosen track between them (--no-bounds: the chosen track alone)."""

    # -- derived ---------------------------------------------------------------------------
    @property
    def first_switch(self) -> int | None:
        return self.schedule.switches[0].step if self.schedule.switches else None

    def phase_label(self, step: int) -> str:
        """What the streams live in during ``step`` (for plots): the protocol's word for its
        streams' worlds (``where``) where they live in many, else a physics label."""
        held = self.first_switch is not None and step >= self.first_switch
        return self.protocol.phase_label(physics_label(self.physics_at(step)), held)

    @property
    def base_physics(self) -> PhysicsParams:
        """The physics of the base world (before any switch)."""
        return self.protocol.base_physics()

    def physics_at(self, step: int) -> PhysicsParams:
        """The world's physics during step ``step``: the base physics updated by every switch at
        or before ``step`` (a switch applies before its step)."""
        p = self.base_physics
        for sw in self.schedule.switches or ():
            if sw.step <= step:
                p = p.replace(**sw.params)
        return p

    @property
    def shift_physics(self) -> PhysicsParams:
        """Physics of the evaluation's shift world: after the first switch, else gravity 0.5."""
        if self.first_switch is not None:
            return self.physics_at(self.first_switch)
        return self.base_physics.replace(**dict(Paper.switch))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: nested like the dataclasses, the protocol tagged by its ``kind``, the
        project's ``VERSION`` first."""
        d = {"version": VERSION, **dataclasses.asdict(self)}
        d["protocol"] = {"kind": self.protocol.kind, **d["protocol"]}
        d["schedule"]["switches"] = (
            None if self.schedule.switches is None
            else [sw.to_json() for sw in self.schedule.switches]
        )
        return d

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(path)


# -- the config by field name (the command line's view, and a file's) -------------------------
def flat(data: Mapping[str, Any]) -> dict[str, Any]:
    """A config.json (nested, or flat as a hand-written one may be) as one dict by field name,
    the protocol's name under ``protocol``: for reports that read many runs' configs."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "protocol" and isinstance(value, Mapping):
            out["protocol"] = value.get("kind", "worlds")
            out.update(flat({k: v for k, v in value.items() if k != "kind"}))
        elif isinstance(value, Mapping):
            out.update(flat(value))
        else:
            out[key] = value
    return out


def hints(cls: type) -> dict[str, Any]:
    """The type of each field of ``cls`` (any ``Annotated`` marker taken off)."""
    types = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for f in dataclasses.fields(cls):
        hint = types[f.name]
        while typing.get_origin(hint) is Annotated:
            hint = get_args(hint)[0]
        out[f.name] = hint
    return out


def _fields() -> dict[str, tuple[str, Any]]:
    """Every option of a run, by field name: (the part of ``RunConfig`` holding it, its type)."""
    parts = [("protocol", cls) for cls in PROTOCOLS.values()]
    out: dict[str, tuple[str, Any]] = {}
    for part, cls in [*parts, ("schedule", Schedule), ("output", Output), ("agent", AgentConfig)]:
        out.update((n, (part, h)) for n, h in hints(cls).items())
    top = hints(RunConfig)
    out.update((n, ("", top[n])) for n in ("preset", "device", "capture", "bounds"))
    del out["switches"]  # --switch, its own syntax
    return out


#: ``train_online``'s fields by name: (the part of ``RunConfig`` holding it, its type).
FIELDS: dict[str, tuple[str, Any]] = _fields()


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


def file_values(data: Mapping[str, Any], where: str, saved: bool = False,
                by_field: bool = False) -> dict[str, Any]:
    """A config (nested as ``config.json``, or flat by field name) as one dict by field name,
    each value checked against its field's type (a mismatch named as its option, ``by_field``:
    as its field). A ``saved`` run's config, and any file that says its version, must be of
    this version (``agent.config.check_version``)."""
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
            label = name if by_field else "--" + name.replace("_", "-")
            raise CliError(f"{label} expects {text}, got {value!r} (in {where})") from None
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
            owner = next(k for k, cls in PROTOCOLS.items() if name in hints(cls))
            raise CliError(f"{option} belongs to --protocol {owner}{at}")
        if part == "agent":
            agent[name] = value
        else:
            setattr(getattr(cfg, part) if part else cfg, name, value)
    try:
        cfg.agent = cfg.agent.replace(**agent)
    except ValueError as err:
        raise CliError(f"{err}{at}") from None
    return cfg


#: On a GPU the evaluations encode this many times more frames at once than the preset's
#: ``eval_batch_size`` (a CPU's): each chunk is a few hundred kernel launches, which a GPU runs
#: in the same time for far more frames. The numbers differ only by rounding.
GPU_EVAL_SCALE = 16


def preset_agent(preset: str, track: str, protocol: Protocol, precision: str = "fp32",
                 device: str = "cpu") -> AgentConfig:
    """The learner's defaults: the preset's (``runners.online.presets``) under the protocol,
    the track's lr and kappa, the device's precision and evaluation chunk
    (``GPU_EVAL_SCALE``); ``total_steps`` None (``resolve`` sets the schedule's horizon)."""
    from runners.online.presets import PRESETS

    p = PRESETS[preset]
    values = {**p.agent, **protocol.learner, **p.protocols.get(protocol.kind, {})}
    if protocol.source == "stream":  # the paper's newest pair would be the samples' own targets
        values["push_pair"] = "input"
    agent = AgentConfig.of_size(p.size, track=track, total_steps=None,
                                    precision=precision, **values)
    if device == "cuda":
        agent = agent.replace(eval_batch_size=GPU_EVAL_SCALE * agent.eval_batch_size)
    return agent


# -- resolution ------------------------------------------------------------------------------
def device_name(device: str) -> str:
    """The device a run's ``--device`` names: "auto" is "cuda" where a GPU is, else "cpu"."""
    if device != "auto":
        return device
    import torch  # local: reading a config does not need torch until here

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve(cfg: RunConfig) -> RunConfig:
    """Check what the field types cannot, fill in the derived values; ``CliError`` naming the
    option. Resolving a resolved config changes nothing."""
    s, out = cfg.schedule, cfg.output
    positive = ("steps", "eval_every", "checkpoint_every", "log_every", "rolling_window",
                "headline_n", "eval_shift_test")
    for name, value in [(n, getattr(s, n)) for n in positive]:
        if value < 1:
            raise CliError(f"{name} must be at least 1, got {value}")
    if s.decoder_steps < 0:
        raise CliError(f"decoder_steps must be >= 0, got {s.decoder_steps}")
    if out.record_frames < 0:
        raise CliError(f"record_frames must be >= 0, got {out.record_frames}")
    if cfg.capture and cfg.agent.stream_cache:
        raise CliError("--capture: the step cannot run the stream latent cache (Python "
                       "dictionaries by stream time); add --no-stream-cache")
    if cfg.capture and cfg.agent.settle is not None:
        raise CliError("--capture: the captured step has no reservoir to fit (settle, then fit); "
                       "add --settle None")
    if cfg.capture and cfg.agent.encoder_lr_scale != 1.0:
        raise CliError("--capture: the captured step has one rate; add --set encoder_lr_scale=1")
    if cfg.capture and cfg.agent.encoder_batch is not None:
        raise CliError("--capture: the encoder's batch split is not measured with the captured "
                       "step; add --set encoder_batch=null")
    if s.best_min_sigma is None:
        s.best_min_sigma = cfg.protocol.best_min_sigma
    if not s.best_min_sigma >= 0.0:
        raise CliError(f"best_min_sigma must be >= 0, got {s.best_min_sigma}")
    if s.final_ns is None:
        s.final_ns = cfg.protocol.final_ns
    if any(n < 0 for n in s.eval_ns + s.final_ns):
        raise CliError("eval_ns and final_ns must be non-negative memory sizes")
    s.eval_ns = tuple(sorted(set(s.eval_ns) | {s.headline_n}))
    if s.switches is None:
        s.switches = (Switch(s.steps * 2 // 3, cfg.protocol.switch),) if s.steps >= 3 else ()
    s.switches = tuple(sorted(s.switches))
    for sw in s.switches:
        if not 1 <= sw.step < s.steps:
            raise CliError(
                f"switch step {sw.step} is outside the run: it must be between 1 and "
                f"steps - 1 = {s.steps - 1} (raise --steps or move the switch)"
            )
    if len({sw.step for sw in s.switches}) != len(s.switches):
        raise CliError("two switches at the same step")
    cfg.protocol.check(s.switches)
    if out.name is not None and (not out.name or "/" in out.name or out.name in (".", "..")):
        raise CliError(f"--name must be a plain folder name, got {out.name!r}")
    if cfg.agent.total_steps is None:
        cfg.agent = cfg.agent.replace(total_steps=schedule_horizon(cfg))
    if cfg.bounds and cfg.agent.settle is not None:
        # the protocol's floor and ceiling as heads on the run's one settled latent (agent.heads)
        own, heads = cfg.agent.head_name, cfg.agent.heads
        bounds = tuple(h for h in cfg.protocol.bound_heads if h != own and h not in heads)
        cfg.agent = cfg.agent.replace(heads=bounds + heads)
    if cfg.agent.precision == "bf16":
        why = bf16_unsupported(device_name(cfg.device))
        if why:
            raise CliError(f"--precision bf16: {why}; use --precision fp32")
    if cfg.agent.push_pair != "input" and cfg.protocol.source == "stream":
        raise CliError("push_pair=newest leaks the future in stream mode (the newest pair is the "
                       "sample's own targets); the stream source pushes the input's own pair")
    return cfg


def check_stacked(cfg: RunConfig) -> None:
    """What a run stacked with other seeds (``--stack-seeds``, ``agent.stacked``) must be, beyond
    ``resolve``'s rules: of a protocol whose seeds stack, without the stream cache."""
    if not cfg.protocol.stacks:
        raise CliError(f"--stack-seeds: stacked seeds run the "
                       f"{' or '.join(k for k, p in PROTOCOLS.items() if p.stacks)} protocol")
    if cfg.agent.stream_cache:
        raise CliError("--stack-seeds: stacked seeds encode every frame afresh: add "
                       "--no-stream-cache")  # fmt: skip


def schedule_horizon(cfg: RunConfig) -> int:
    """Steps of the LR / EMA-tau schedule: in memory mode the weights stop at the first switch."""
    if cfg.schedule.after_switch == "memory" and cfg.first_switch is not None:
        return cfg.first_switch
    return cfg.schedule.steps


def precision_note(cfg: RunConfig) -> str:
    """One line on the run's arithmetic, for the start of a run."""
    if cfg.agent.precision == "bf16":
        return "precision bf16 (autocast; --precision fp32 for exact fp32 arithmetic)"
    return "precision fp32 (exact: same seed, same numbers)"


def describe(cfg: RunConfig) -> str:
    s = cfg.schedule
    sw = ", ".join(f"{x.label('=')} at step {x.step}" for x in s.switches or ()) or "no switch"
    return (
        f"{cfg.protocol.kind} protocol, track {cfg.agent.track}, preset {cfg.preset}, "
        f"{s.steps} steps, {cfg.protocol.where()}, {sw}, after switch: {s.after_switch}, "
        f"seed {cfg.agent.seed}"
    )
