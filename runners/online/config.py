"""The run's configuration: a typed ``RunConfig`` (holding the nested ``AgentConfig``), its
validation and derived values (``resolve``).

``RunConfig``'s fields, with a one-line docstring each, are what ``runners.online.command``
generates the command line of ``train_online`` from (tyro). Derived values are computed once
(``resolve``) and the resolved config is saved next to the run as ``config.json``.

Every mistake a user can make here raises ``CliError`` with one line naming the field.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

import tyro

from agent.config import TRACKS, AgentConfig, Track, preferred_precision
from runners.cli import CliError

if TYPE_CHECKING:  # env is imported on first use: it pulls in gymnasium
    from env import PhysicsParams

from runners.online.parsing import agent_values
from runners.online.switch import Switch, check_physics, switches_from_json

# Calibrated on a 2-core CPU so the default run tells the whole story in about 75 s
# (measured: docs/train_online.md, "The default run, measured").
DEFAULT_STEPS = 4500
DEFAULT_SWITCH = (3000, 0.5)  # = (2/3 of the steps, 0.5): the default when --switch is not given
DEFAULT_SHIFT_GRAVITY = 0.5
DEFAULT_EVAL_EVERY = 250
DEFAULT_CHECKPOINT_EVERY = 500
# The worlds protocol's default switch: a held-out world between the training worlds (family
# "interp": gravity pointing along a diagonal, which no training world does).
DEFAULT_WORLD_SWITCH = (("gravity", 0.3), ("gravity_direction", 45.0))
PAPER_FINAL_NS = (0, 10, 25, 50, 100, 256)
WORLDS_FINAL_NS = (0, 1, 5, 10, 25, 50)  # = agent.adaptation.WORLD_NS
#: The worlds protocol's collapse guard of best.pt: a learner whose predictions have collapsed
#: (sigma_embed below it, as early in every run) reads deceptively well and is no candidate.
WORLDS_BEST_MIN_SIGMA = 0.2

AfterSwitch = Literal["memory", "continual"]
Source = Literal["stream", "dataset"]
Preset = Literal["cpu", "tiny", "paper"]
Device = Literal["auto", "cpu", "cuda"]
Precision = Literal["auto", "fp32", "bf16"]
Protocol = Literal["worlds", "paper"]
AFTER_SWITCH: tuple[str, ...] = get_args(AfterSwitch)
SOURCES: tuple[str, ...] = get_args(Source)
PRESETS: tuple[str, ...] = get_args(Preset)
DEVICES: tuple[str, ...] = get_args(Device)
PRECISIONS: tuple[str, ...] = get_args(Precision)
PROTOCOLS: tuple[str, ...] = get_args(Protocol)
# Runner presets on top of the agent's: name -> (agent preset, agent overrides). "cpu" is the
# default run's learner: the tiny networks with 64 streams, a lower LR and a stronger variance
# hinge, measured to beat "no change" within minutes on a 2-core CPU without collapsing
# (the tiny preset as is collapses in the stream: sigma_embed ~0.02, see docs/train_online.md).
RUN_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "cpu": ("tiny", {"batch_size": 64, "lr": 1e-3, "lambda_reg": 0.2, "buffer_capacity": 64}),
    "tiny": ("tiny", {}),
    "paper": ("paper", {}),
}

# The worlds protocol's learner on top of the preset (docs/train_online.md): the last two frames
# in (velocity visible, acceleration, and so the world, not), one prediction per horizon at
# horizons short enough to learn in minutes, each stream's own memory of its every transition,
# emptied at every new world, and a varied amount of it in training (so it works from its first
# entry); frames scaled to 0..1 (the paper feeds raw 0..255).
WORLDS_AGENT: dict[str, Any] = {
    "context_frames": 2,
    "per_horizon": True,
    "horizons": (2, 4, 8),
    "memory_scope": "per_stream",
    "memory_write": "every",
    "vary_memory": True,
    "input_scale": 1.0 / 255.0,
}

# RunConfig fields that are also AgentConfig fields: the run's value is passed down.
SHARED_WITH_AGENT = ("track", "seed", "precision")


# -- the run's configuration -----------------------------------------------------------------
@dataclass
class RunConfig:
    """One online run. ``agent`` is the learner's resolved ``AgentConfig`` (set by ``resolve``)."""

    protocol: Protocol = "worlds"
    """worlds: train across worlds drawn from --train-family (each stream its own, redrawn every episode), then switch every stream to a held-out world; paper: the paper's one base world and its gravity switch."""
    track: Track = "C"
    """Modulator: A none, B residual, C LoRA, D FiLM, E hypernetwork."""
    seed: int = 0
    """Seeds the agent, the streams and the generated evaluation splits."""
    steps: int = DEFAULT_STEPS
    """Online steps (one learner update each)."""
    switches: tyro.conf.Suppress[tuple[Switch, ...] | None] = None
    """Physics switches (set by --switch); None: one switch at 2/3 of the run (worlds: to gravity 0.3 towards 45 degrees, a held-out world; paper: to gravity 0.5)."""
    after_switch: AfterSwitch = "memory"
    """memory: weights frozen from the first switch on (detector and buffer stay live); continual: keep learning."""
    base_gravity: float = 0.0
    """Paper protocol: gravity of the base world (px/frame^2) before any switch."""
    train_family: Literal["train"] = "train"
    """Worlds protocol: the family (env.FAMILIES) each stream's episodes are drawn from before the switch."""
    episode_steps: tuple[int, int] = (100, 400)
    """Worlds protocol: each episode (one world) lasts a number of steps drawn uniformly from this range."""
    eval_worlds: int = 3
    """Worlds protocol: worlds per family (training, interp, extrap) in the evaluation."""
    eval_world_seqs: int = 48
    """Worlds protocol: test sequences per evaluation world."""
    source: Source = "stream"
    """stream: the live vector env; dataset: i.i.d. sequences of a make_dataset store (--data)."""
    data: Annotated[str | None, tyro.conf.arg(metavar="PATH.zarr")] = None
    """Store written by runners.make_dataset: the dataset source's train splits and the evaluation splits."""
    preset: Preset = "cpu"
    """Learner size: cpu (tiny networks, 64 streams, learns in minutes), tiny (seconds, tests), paper (Tables 4-5)."""
    device: Device = "auto"
    """auto = cuda when available, else cpu."""
    precision: Precision = "auto"
    """auto: bf16 autocast where the device runs it natively (a CPU with AVX-512 BF16 or AMX, a CUDA GPU with bf16), else fp32 (saved resolved in config.json); fp32 is exact (same seed, same numbers)."""
    eval_every: int = DEFAULT_EVAL_EVERY
    """Steps between evaluations (there is also one at every switch, before it applies, and at the end)."""
    eval_ns: tuple[int, ...] = (0, 10, 50)
    """Memory sizes n of D_shift^n at the periodic evaluations."""
    final_ns: tuple[int, ...] | None = None
    """Memory sizes n of the adaptation curve at the end of the run (None: worlds 0 1 5 10 25 50, paper 0 10 25 50 100 256)."""
    headline_n: int = 50
    """The n of the headline D_shift^n (best.pt keeps its lowest value)."""
    best_min_sigma: float | None = None
    """Collapse guard of best.pt: an evaluation whose sigma_embed is below this is no candidate (None: worlds 0.2, as runners.reproduce's --min-sigma; paper 0, the plain lowest)."""
    eval_shift_train: int = 512
    """Paper protocol: shift-world train sequences (memory pushes) for evaluation."""
    eval_shift_test: int = 128
    """Shift-world test sequences for D_shift."""
    eval_base_test: int = 128
    """Paper protocol: base-world test sequences for D_base."""
    eval_seed_offset: int = 10_000
    """Generated evaluation splits use seed + this offset."""
    episode_length: int | None = 400
    """Paper protocol: stream episode length in steps (None: endless)."""
    stagger: bool = True
    """Paper protocol: start the parallel streams at staggered phases of their episodes."""
    record_frames: Annotated[int, tyro.conf.arg(metavar="N")] = 0
    """Keep every N-th frame batch (the newest frame of every stream) and its ground truth in run.zarr (0: none)."""
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    """Steps between checkpoints/latest.pt writes."""
    log_every: int = 100
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
    def worlds(self) -> bool:
        return self.protocol == "worlds"

    def phase_label(self, step: int) -> str:
        """What the streams live in during ``step`` (for plots): a physics label, or the
        training worlds before the worlds protocol's first switch."""
        from runners.online.switch import physics_label

        if self.worlds and (self.first_switch is None or step < self.first_switch):
            return f"{self.train_family} worlds"
        return physics_label(self.physics_at(step))

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
        d["final_ns"] = list(self.final_ns) if self.final_ns is not None else None
        d["episode_steps"] = list(self.episode_steps)
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


# -- resolution ------------------------------------------------------------------------------
def resolve(cfg: RunConfig, *, build_agent: bool = True) -> RunConfig:
    """Validate the run fields, derive the agent's config; ``CliError`` naming the field."""
    if cfg.track not in TRACKS:
        raise CliError(f"track must be one of {', '.join(TRACKS)}, got {cfg.track!r}")
    for name, allowed in (
        ("protocol", PROTOCOLS),
        ("after_switch", AFTER_SWITCH),
        ("source", SOURCES),
        ("preset", PRESETS),
        ("device", DEVICES),
        ("precision", PRECISIONS),
    ):
        if getattr(cfg, name) not in allowed:
            raise CliError(f"{name} must be one of {', '.join(allowed)}, got {getattr(cfg, name)!r}")
    if cfg.precision == "auto":
        cfg.precision = auto_precision(cfg.device)
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
    if cfg.best_min_sigma is None:
        cfg.best_min_sigma = WORLDS_BEST_MIN_SIGMA if cfg.worlds else 0.0
    if not cfg.best_min_sigma >= 0.0:
        raise CliError(f"best_min_sigma must be >= 0, got {cfg.best_min_sigma}")
    if cfg.final_ns is None:
        cfg.final_ns = WORLDS_FINAL_NS if cfg.worlds else PAPER_FINAL_NS
    cfg.final_ns = tuple(cfg.final_ns)
    if any(n < 0 for n in cfg.eval_ns + cfg.final_ns):
        raise CliError("eval_ns and final_ns must be non-negative memory sizes")
    if cfg.worlds:
        _check_worlds(cfg)
    if cfg.headline_n not in cfg.eval_ns:
        cfg.eval_ns = tuple(sorted(set(cfg.eval_ns) | {cfg.headline_n}))
    try:
        check_physics({"gravity": cfg.base_gravity})
    except ValueError as err:
        raise CliError(f"base_gravity: {err}") from None
    if cfg.switches is None:
        steps = cfg.steps * 2 // 3
        physics = DEFAULT_WORLD_SWITCH if cfg.worlds else (("gravity", DEFAULT_SHIFT_GRAVITY),)
        cfg.switches = (Switch(steps, physics),) if cfg.steps >= 3 else ()
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


def auto_precision(device: str) -> str:
    """``--precision auto``: ``agent.preferred_precision`` of the device the run will use (bf16
    where it is native; measured faster and D unchanged within seed noise, docs/throughput.md)."""
    import torch  # local: config stays light to import

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return preferred_precision(device)


def precision_note(cfg: RunConfig) -> str:
    """One line on the run's arithmetic, for the start of a run."""
    if cfg.precision == "bf16":
        return "precision bf16 (autocast; --precision fp32 for exact fp32 arithmetic)"
    return "precision fp32 (exact: same seed, same numbers)"


def _check_worlds(cfg: RunConfig) -> None:
    """The worlds protocol's own constraints (``CliError`` naming the field)."""
    if cfg.source != "stream":
        raise CliError("--protocol worlds needs the stream source (the store holds two worlds; "
                       "use --protocol paper with --source dataset)")
    if cfg.base_gravity != 0.0:
        raise CliError("base_gravity belongs to the paper protocol: the worlds protocol draws "
                       "each stream's world from --train-family (use --protocol paper)")
    lo, hi = cfg.episode_steps
    if not 21 <= lo <= hi:
        raise CliError(f"episode_steps must be (low, high) with 21 <= low <= high, got {lo} {hi}")
    for name in ("eval_worlds", "eval_world_seqs"):
        if getattr(cfg, name) < (2 if name == "eval_world_seqs" else 1):
            raise CliError(f"{name} must be at least {2 if name == 'eval_world_seqs' else 1}, "
                           f"got {getattr(cfg, name)}")


def schedule_horizon(cfg: RunConfig) -> int:
    """Steps of the LR / EMA-tau schedule: in memory mode the weights stop at the first switch."""
    if cfg.after_switch == "memory" and cfg.first_switch is not None:
        return cfg.first_switch
    return cfg.steps


def make_agent_config(cfg: RunConfig) -> Any:
    over = dict(cfg.agent_overrides)
    for k in SHARED_WITH_AGENT:
        if k in over:
            raise CliError(f"{k} is a run option: use --{k} (or --set {k}=...), not an agent override")
    # Overrides are typed when they are set; text from an older config.json is typed here.
    over.update(agent_values({k: v for k, v in over.items() if isinstance(v, (str, list))},
                             "agent_overrides"))
    agent_preset, preset_over = RUN_PRESETS[cfg.preset]
    typed = {**preset_over, **(WORLDS_AGENT if cfg.worlds else {}), **over}
    typed.setdefault("total_steps", schedule_horizon(cfg))
    typed["seed"] = cfg.seed
    typed["precision"] = cfg.precision
    if cfg.source == "stream":  # the paper's newest pair would be the samples' own targets
        if typed.get("push_pair", "input") != "input":
            raise CliError(
                "push_pair=newest leaks the future in stream mode (the newest pair is the "
                "sample's own targets); the stream source pushes the input's own pair"
            )
        typed["push_pair"] = "input"
    try:
        return AgentConfig.from_preset(agent_preset, track=cfg.track, **typed)
    except (ValueError, TypeError) as err:
        raise CliError(f"invalid agent config: {err}") from None



def describe(cfg: RunConfig) -> str:
    sw = ", ".join(f"{s.label('=')} at step {s.step}" for s in cfg.switches or ()) or "no switch"
    return (
        f"{cfg.protocol} protocol, track {cfg.track}, preset {cfg.preset}, {cfg.source} source, "
        f"{cfg.steps} steps, "
        f"{'training worlds: ' + cfg.train_family + ', ' if cfg.worlds else ''}"
        f"{sw}, after switch: {cfg.after_switch}, seed {cfg.seed}"
    )
