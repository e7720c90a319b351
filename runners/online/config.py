"""The run's configuration: ``RunConfig``, one nested dataclass per concern, and its resolution.

- ``protocol``: the world the streams live in, a tagged union: ``Worlds`` (the default: each
  stream in its own training world, a held-out world after the switch) or ``Paper`` (one base
  world and a gravity switch, as the paper);
- ``agent``: the learner, ``agent.AgentConfig`` (its defaults come from ``--preset``);
- ``schedule``: steps, switches, evaluations, checkpoints;
- ``output``: where the run folder goes and what it records;
- ``preset`` and ``device``.

The command line is generated from these fields (``runners.online.command``); every field is an
option under its own name (``--steps``, ``--lr``, ``--base-gravity``). Derived values are filled
in once by ``resolve`` and the resolved config is saved next to the run as ``config.json``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import tyro

from agent.config import AgentConfig, bf16_unsupported
from runners.cli import CliError
from runners.online.switch import Switch, check_physics, physics_label

if TYPE_CHECKING:  # env is imported on first use: it pulls in gymnasium
    from env import PhysicsParams

Source = Literal["stream", "dataset"]
Preset = Literal["cpu", "gpu", "tiny", "paper"]
Device = Literal["auto", "cpu", "cuda"]
AfterSwitch = Literal["memory", "continual"]
ProtocolName = Literal["worlds", "paper"]

#: The paper protocol's default switch, and its evaluation's shift world without a switch.
DEFAULT_SHIFT_GRAVITY = 0.5
#: The worlds protocol's default switch: a held-out world between the training worlds (family
#: "interp": gravity pointing along a diagonal, which no training world does).
DEFAULT_WORLD_SWITCH = (("gravity", 0.3), ("gravity_direction", 45.0))

# Runner presets on top of the agent's: name -> (agent preset, agent overrides). "cpu" is the
# default run's learner: the tiny networks with 64 streams, a lower LR and a stronger variance
# hinge, measured to beat "no change" within minutes on a 2-core CPU without collapsing
# (the tiny preset as is collapses in the stream: sigma_embed ~0.02, see docs/train_online.md).
# (The "study" preset, a map latent and a convolutional predictor, was retired: docs/archive.md,
# "The study preset (retired)".)
_CPU: dict[str, Any] = {"batch_size": 64, "lr": 1e-3, "lambda_reg": 0.2, "buffer_capacity": 64}
RUN_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "cpu": ("tiny", _CPU),
    "gpu": ("tiny", {**_CPU, "batch_size": 512, "stream_cache": False}),
    "tiny": ("tiny", {}),
    "paper": ("paper", {}),
}
# "gpu" is the cpu learner fed 8x the windows a step (512 streams, 64 worlds at once) for 6,000
# steps, evaluated every 1,000: on one H100 with --capture, 1.5 minutes with its bounds beside,
# and the oracle 15% below the floor (seeds 0-2) where the cpu preset's is 11% (docs/results.md,
# "A world model that uses what it is told"). On a 2-core CPU a step takes 4.6x the cpu
# preset's. No stream cache: --capture needs it off.
#: The preset's schedule where it is not ``Schedule``'s defaults.
PRESET_SCHEDULE: dict[str, dict[str, int]] = {
    "gpu": {"steps": 6_000, "eval_every": 1_000},
}
# The worlds protocol's learner on top of the preset (docs/train_online.md): the last two frames
# in (velocity visible, acceleration, and so the world, not), one prediction per horizon at
# horizons short enough to learn in minutes; one memory per world shared by the 8 streams that
# live in it (the paper's one buffer, generalised: docs/definitions.md#group-memory), read
# without the sample's own episode, written at every step, emptied at a new world, its entries
# three frames long (a pair shows a velocity, which the context already holds; three show its
# change, where the world's gravity is), and a varied amount of it in training (so it works
# from its first entry); frames scaled to 0..1 (the paper feeds raw 0..255); a fast EMA target
# (tau 0.98 -> 0.99, the paper's 0.996 -> 0.9999), which keeps the target encoder within a step
# of the online one, so that D's "no change" (the online z_t) is the target's own and D measures
# predicted motion (docs/results.md, "The online-target gap inflates 'no change'").
WORLDS_AGENT: dict[str, Any] = {
    "tau_base": 0.98,
    "tau_end": 0.99,
    "context_frames": 2,
    "per_horizon": True,
    "horizons": (2, 4, 8),
    "memory_scope": "group",
    "group_size": 8,
    "memory_read": "peer",
    "entry_frames": 3,
    "memory_write": "every",
    "vary_memory": True,
    "input_scale": 1.0 / 255.0,
}

#: The worlds protocol's learner where a preset needs its own: the tiny preset's 8 streams form 4
#: worlds of 2 (8 of 8 would be one world); the cpu preset's predictor is two residual blocks of
#: 128 with the track's modulation in each (``predictor_blocks``): the floor's held-out D 18%
#: lower, the oracle's margin 6% -> 11%, over seeds 0-2 (docs/results.md, "A world model that
#: uses what it is told"); and it settles halfway through base training, then fits two
#: minibatches of the reservoir a step (``settle``, docs/results.md "Settle, then fit"). The gpu
#: preset runs the captured step, which has no reservoir.
WORLDS_PRESET: dict[str, dict[str, Any]] = {
    "tiny": {"group_size": 2},
    "cpu": {"predictor_blocks": 2, "hidden_dim": 128, "settle": 0.5, "fit_updates": 2},
    "gpu": {"predictor_blocks": 2, "hidden_dim": 128},
}


# -- the concerns ------------------------------------------------------------------------------
@dataclass
class Worlds:
    """The worlds protocol: the streams in worlds drawn from --train-family (in groups that share
    a world for a residency of episodes, with a group memory), redrawn at a residency's end; at
    the switch every stream moves to the held-out world."""

    kind: ClassVar[str] = "worlds"
    train_family: Literal["train"] = "train"
    """The name of the family each stream's worlds are drawn from before the switch (its worlds: --train-gravity, --train-arcs, --train-restitution, --train-friction)."""
    train_gravity: tuple[float, float] = (0.1, 0.5)
    """Training worlds: gravity range LOW HIGH (px/frame^2), drawn uniformly."""
    train_arcs: tuple[float, ...] = (-30.0, 30.0, 60.0, 120.0, 150.0, 210.0, 240.0, 300.0)
    """Training worlds: gravity directions, arcs as START END pairs in degrees (0 right, 90 down; END > START, may pass 360)."""
    train_restitution: tuple[float, float] = (1.0, 1.0)
    """Training worlds: restitution range LOW HIGH (1: elastic walls)."""
    train_friction: tuple[float, float] = (0.0, 0.0)
    """Training worlds: friction range LOW HIGH (velocity lost per frame, below 1)."""
    interp_gravity: tuple[float, float] = (0.15, 0.45)
    """Held-out worlds between the training ones (interp): gravity range."""
    interp_arcs: tuple[float, ...] = (30.0, 60.0, 120.0, 150.0, 210.0, 240.0, 300.0, 330.0)
    """interp: direction arcs (START END pairs, degrees)."""
    interp_restitution: tuple[float, float] = (1.0, 1.0)
    """interp: restitution range."""
    interp_friction: tuple[float, float] = (0.0, 0.0)
    """interp: friction range."""
    extrap_gravity: tuple[float, float] = (0.6, 0.8)
    """Held-out worlds beyond the training ones (extrap): gravity range."""
    extrap_arcs: tuple[float, ...] = (-30.0, 30.0, 60.0, 120.0, 150.0, 210.0, 240.0, 300.0)
    """extrap: direction arcs (START END pairs, degrees)."""
    extrap_restitution: tuple[float, float] = (1.0, 1.0)
    """extrap: restitution range."""
    extrap_friction: tuple[float, float] = (0.0, 0.0)
    """extrap: friction range."""
    episode_steps: tuple[int, int] = (100, 200)
    """Each episode lasts a number of steps drawn uniformly from this range."""
    residency: tuple[int, int] = (1, 1)
    """A world lasts this many episodes (drawn uniformly) of its streams; with --memory-scope group the --group-size streams of a group share it (env.WorldSchedule)."""
    eval_worlds: int = 3
    """Worlds per family (training, interp, extrap) in the evaluation."""
    eval_world_seqs: int = 48
    """Test sequences per evaluation world."""


@dataclass
class Paper:
    """The paper protocol: one base world for every stream, then the switches."""

    kind: ClassVar[str] = "paper"
    base_gravity: float = 0.0
    """Gravity of the base world (px/frame^2) before any switch."""
    source: Source = "stream"
    """stream: the live vector env; dataset: i.i.d. sequences of a make_dataset store (--data)."""
    data: Annotated[str | None, tyro.conf.arg(metavar="PATH.zarr")] = None
    """Store written by runners.make_dataset: the dataset source's train splits and the evaluation splits."""
    episode_length: int | None = 400
    """Stream episode length in steps (None: endless)."""
    stagger: bool = True
    """Start the parallel streams at staggered phases of their episodes."""
    eval_shift_train: int = 512
    """Shift-world train sequences (memory pushes) for evaluation."""
    eval_base_test: int = 128
    """Base-world test sequences for D_base."""


PROTOCOLS: dict[str, type[Worlds] | type[Paper]] = {"worlds": Worlds, "paper": Paper}


@dataclass
class Schedule:
    """When things happen: steps, switches, evaluations, checkpoints."""

    steps: int = 4500
    """Online steps (one learner update each); calibrated so the default run tells the whole story, its floor and ceiling included (beside it), in about 2 minutes on a 2-core CPU (--preset gpu: 6,000)."""
    switches: tyro.conf.Suppress[tuple[Switch, ...] | None] = None
    """Physics switches (set by --switch); None: one at 2/3 of the run (worlds: gravity 0.3 towards 45 degrees, a held-out world; paper: gravity 0.5)."""
    after_switch: AfterSwitch = "memory"
    """memory: weights frozen from the first switch on (detector and buffer stay live); continual: keep learning."""
    eval_every: int = 250
    """Steps between evaluations (there is also one at every switch, before it applies, and at the end)."""
    eval_ns: tuple[int, ...] = (0, 10, 50)
    """Memory sizes n of D_shift^n at the periodic evaluations."""
    final_ns: tuple[int, ...] | None = None
    """Memory sizes n of the adaptation curve at the end (None: worlds 0 1 5 10 25 50, paper 0 10 25 50 100 256)."""
    headline_n: int = 50
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


@dataclass
class Output:
    """Where the run folder goes and what it keeps."""

    out: Annotated[str, tyro.conf.arg(metavar="DIR")] = "runs"
    """Parent folder of the run folders."""
    name: Annotated[str | None, tyro.conf.arg(metavar="NAME")] = None
    """Run folder name (None: <date>-<time>-<track>-s<seed>); an existing folder is never reused."""
    record_frames: Annotated[int, tyro.conf.arg(metavar="N")] = 0
    """Keep every N-th frame batch (the newest frame of every stream) and its ground truth in run.zarr (0: none)."""



@dataclass
class RunConfig:
    """One online run (``resolve`` fills in what is derived)."""

    protocol: Annotated[Worlds | Paper, tyro.conf.OmitArgPrefixes] = field(default_factory=Worlds)
    agent: Annotated[AgentConfig, tyro.conf.OmitArgPrefixes] = field(
        default_factory=lambda: preset_agent("cpu", "C", Worlds())
    )
    schedule: Annotated[Schedule, tyro.conf.OmitArgPrefixes] = field(default_factory=Schedule)
    output: Annotated[Output, tyro.conf.OmitArgPrefixes] = field(default_factory=Output)
    preset: Preset = "cpu"
    """Learner size: cpu (tiny networks, 64 streams, learns in minutes), gpu (cpu at 512 streams, 6,000 steps: 1.5 minutes on one GPU with --capture), tiny (seconds, tests), paper (Tables 4-5)."""
    device: Device = "auto"
    """auto = cuda when available, else cpu."""
    capture: bool = False
    """Each learner's update replayed from CUDA graphs (agent.capture; on a CPU the same step runs eagerly); needs --no-stream-cache."""
    bounds: bool = True
    """Worlds protocol: also train the floor (track A) and the ceiling (the oracle) on the same stream, in the run folder's floor/ and ceiling/, and report the chosen track between them (--no-bounds: the chosen track alone)."""
    workers: int = 0
    """Runs trained at once: the chosen track in this process, its bounds (--bounds) each in a process of its own beside it (jobs of the launcher: runners.online.beside); 0: all three where this process may use two CPU cores or more, else one after another; 1: one after another. The numbers do not depend on it."""

    # -- derived ---------------------------------------------------------------------------
    @property
    def worlds_protocol(self) -> bool:
        """Whether the run is under the worlds protocol (else the paper's)."""
        return isinstance(self.protocol, Worlds)

    @property
    def first_switch(self) -> int | None:
        return self.schedule.switches[0].step if self.schedule.switches else None

    def phase_label(self, step: int) -> str:
        """What the streams live in during ``step`` (for plots): a physics label, or the
        training worlds before the worlds protocol's first switch."""
        if isinstance(self.protocol, Worlds) and (
            self.first_switch is None or step < self.first_switch
        ):
            return f"{self.protocol.train_family} worlds"
        return physics_label(self.physics_at(step))

    @property
    def base_physics(self) -> PhysicsParams:
        """The physics of the base world (before any switch)."""
        from env.physics import PhysicsParams

        p = self.protocol
        return PhysicsParams(gravity=p.base_gravity) if isinstance(p, Paper) else PhysicsParams()

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
        return self.base_physics.replace(gravity=DEFAULT_SHIFT_GRAVITY)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: nested like the dataclasses, the protocol tagged by its ``kind``."""
        d = dataclasses.asdict(self)
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


def flat(data: Mapping[str, Any]) -> dict[str, Any]:
    """A config.json (nested, or flat as older ones) as one dict by field name, the protocol's
    name under ``protocol``: for reports that read many runs' configs."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "protocol" and isinstance(value, Mapping):
            out["protocol"] = value.get("kind", "worlds")
            out.update(flat({k: v for k, v in value.items() if k != "kind"}))
        elif isinstance(value, Mapping) and key not in ("physics", "agent_overrides"):
            out.update(flat(value))
        elif key != "agent_overrides":
            out[key] = value
    return out


#: On a GPU the evaluations encode this many times more frames at once than the preset's
#: ``eval_batch_size`` (a CPU's): each chunk is a few hundred kernel launches, which a GPU runs
#: in the same time for far more frames. The numbers differ only by rounding.
GPU_EVAL_SCALE = 16


def preset_agent(preset: str, track: str, protocol: Worlds | Paper, source: str = "stream",
                 precision: str = "fp32", device: str = "cpu") -> AgentConfig:
    """The learner's defaults: the preset, the worlds protocol's settings, the track's lr and
    kappa, the device's precision and evaluation chunk (``GPU_EVAL_SCALE``); ``total_steps``
    None (``resolve`` sets the schedule's horizon)."""
    agent_preset, preset_over = RUN_PRESETS[preset]
    values = {**preset_over}
    if isinstance(protocol, Worlds):
        values.update(WORLDS_AGENT, **WORLDS_PRESET.get(preset, {}))
    if source == "stream":  # the paper's newest pair would be the samples' own targets
        values["push_pair"] = "input"
    agent = AgentConfig.from_preset(agent_preset, track=track, total_steps=None,
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
    for name, value in [(n, getattr(s, n)) for n in positive] + _protocol_counts(cfg.protocol):
        if value < 1:
            raise CliError(f"{name} must be at least 1, got {value}")
    if cfg.workers < 0:
        raise CliError(f"workers must be >= 0, got {cfg.workers}")
    if out.record_frames < 0:
        raise CliError(f"record_frames must be >= 0, got {out.record_frames}")
    if cfg.capture and cfg.agent.stream_cache:
        raise CliError("--capture: the step cannot run the stream latent cache (Python "
                       "dictionaries by stream time); add --no-stream-cache")
    if cfg.capture and cfg.agent.settle is not None:
        raise CliError("--capture: the captured step has no reservoir to fit (settle, then fit); "
                       "add --settle None")
    if cfg.capture and cfg.agent.encoder_lr_scale != 1.0:
        raise CliError("--capture: the captured step has one rate; add --encoder-lr-scale 1")
    if cfg.capture and cfg.agent.encoder_batch is not None:
        raise CliError("--capture: the encoder's batch split is not measured with the captured "
                       "step; add --encoder-batch None")
    if s.best_min_sigma is None:
        s.best_min_sigma = 0.2 if cfg.worlds_protocol else 0.0
    if not s.best_min_sigma >= 0.0:
        raise CliError(f"best_min_sigma must be >= 0, got {s.best_min_sigma}")
    if s.final_ns is None:
        s.final_ns = (0, 1, 5, 10, 25, 50) if cfg.worlds_protocol else (0, 10, 25, 50, 100, 256)
    if any(n < 0 for n in s.eval_ns + s.final_ns):
        raise CliError("eval_ns and final_ns must be non-negative memory sizes")
    s.eval_ns = tuple(sorted(set(s.eval_ns) | {s.headline_n}))
    if s.switches is None:
        physics = DEFAULT_WORLD_SWITCH if cfg.worlds_protocol else (("gravity", DEFAULT_SHIFT_GRAVITY),)
        s.switches = (Switch(s.steps * 2 // 3, physics),) if s.steps >= 3 else ()
    s.switches = tuple(sorted(s.switches))
    for sw in s.switches:
        if not 1 <= sw.step < s.steps:
            raise CliError(
                f"switch step {sw.step} is outside the run: it must be between 1 and "
                f"steps - 1 = {s.steps - 1} (raise --steps or move the switch)"
            )
    if len({sw.step for sw in s.switches}) != len(s.switches):
        raise CliError("two switches at the same step")
    if isinstance(cfg.protocol, Paper):
        _check_paper(cfg.protocol, s.switches)
    if out.name is not None and (not out.name or "/" in out.name or out.name in (".", "..")):
        raise CliError(f"--name must be a plain folder name, got {out.name!r}")
    if cfg.agent.total_steps is None:
        cfg.agent = cfg.agent.replace(total_steps=schedule_horizon(cfg))
    if cfg.agent.precision == "bf16":
        why = bf16_unsupported(device_name(cfg.device))
        if why:
            raise CliError(f"--precision bf16: {why}; use --precision fp32")
    streams = not (isinstance(cfg.protocol, Paper) and cfg.protocol.source == "dataset")
    if cfg.agent.push_pair != "input" and streams:
        raise CliError("push_pair=newest leaks the future in stream mode (the newest pair is the "
                       "sample's own targets); the stream source pushes the input's own pair")
    return cfg


#: The worlds protocol's families, in order: the training one, then the held-out ones.
FAMILY_NAMES = ("train", "interp", "extrap")


def world_families(p: Worlds) -> dict[str, Any]:
    """The protocol's world families (``env.WorldFamily``) by name, from its options; a bad or
    empty range, or two families that share a world, is one ``CliError`` line."""
    import env

    out = {}
    for name in FAMILY_NAMES:
        arcs = getattr(p, f"{name}_arcs")
        if len(arcs) % 2 or not arcs:
            raise CliError(f"--{name}-arcs must be START END pairs of degrees, got {list(arcs)}")
        try:
            out[name] = env.WorldFamily(
                name, getattr(p, f"{name}_gravity"),
                tuple(zip(arcs[::2], arcs[1::2], strict=True)),
                getattr(p, f"{name}_restitution"), getattr(p, f"{name}_friction"),
            )  # fmt: skip
        except ValueError as err:
            raise CliError(f"the {name} worlds (--{name}-*): {err}") from None
    try:
        env.check_disjoint(list(out.values()))
    except ValueError as err:
        raise CliError(str(err)) from None
    return out


def _protocol_counts(p: Worlds | Paper) -> list[tuple[str, int]]:
    if isinstance(p, Worlds):
        world_families(p)  # every family valid, no two sharing a world
        lo, hi = p.episode_steps
        if not 21 <= lo <= hi:
            raise CliError(f"episode_steps must be LOW HIGH with 21 <= LOW <= HIGH, got {lo} {hi}")
        r_lo, r_hi = p.residency
        if not 1 <= r_lo <= r_hi:
            raise CliError(f"residency must be LOW HIGH with 1 <= LOW <= HIGH, got {r_lo} {r_hi}")
        if p.eval_world_seqs < 2:
            raise CliError(f"eval_world_seqs must be at least 2, got {p.eval_world_seqs}")
        return [("eval_worlds", p.eval_worlds)]
    return [("eval_shift_train", p.eval_shift_train), ("eval_base_test", p.eval_base_test)]


def _check_paper(p: Paper, switches: tuple[Switch, ...]) -> None:
    if p.episode_length is not None and p.episode_length < 21:
        raise CliError(f"episode_length must be at least 21 frames (one training window) or "
                       f"None, got {p.episode_length}")
    try:
        check_physics({"gravity": p.base_gravity})
    except ValueError as err:
        raise CliError(f"base_gravity: {err}") from None
    if p.source == "dataset":
        if not p.data:
            raise CliError("--source dataset needs --data PATH.zarr (written by runners.make_dataset)")
        for sw in switches:
            if set(sw.params) != {"gravity"}:
                raise CliError(
                    f"--source dataset: the switch at step {sw.step} changes "
                    f"{', '.join(n for n in sw.params if n != 'gravity')}; the store only holds its "
                    f"two gravities (use the stream source)"
                )


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
    where = (f"training worlds: {cfg.protocol.train_family}" if isinstance(cfg.protocol, Worlds)
             else f"{cfg.protocol.source} source")
    return (
        f"{cfg.protocol.kind} protocol, track {cfg.agent.track}, preset {cfg.preset}, "
        f"{s.steps} steps, {where}, {sw}, after switch: {s.after_switch}, seed {cfg.agent.seed}"
    )
