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
from typing import TYPE_CHECKING, Annotated, Any, Literal

import tyro

from agent.config import VERSION, AgentConfig, bf16_unsupported
from runners.cli import CliError
from runners.online.protocols import Paper, Protocol, Worlds
from runners.online.switch import Switch, physics_label

if TYPE_CHECKING:  # env is imported on first use: it pulls in gymnasium
    from env import PhysicsParams

Preset = Literal["cpu", "gpu", "tiny", "paper"]
Device = Literal["auto", "cpu", "cuda"]
AfterSwitch = Literal["memory", "continual"]
ProtocolName = Literal["worlds", "paper"]

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

    protocol: tyro.conf.Suppress[Protocol] = field(default_factory=Worlds)
    """The protocol and its options (on the command line: --protocol, then its own options)."""
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
    def first_switch(self) -> int | None:
        return self.schedule.switches[0].step if self.schedule.switches else None

    def phase_label(self, step: int) -> str:
        """What the streams live in during ``step`` (for plots): a physics label, or the
        training worlds before the worlds protocol's first switch."""
        if self.protocol.many_worlds and (self.first_switch is None or step < self.first_switch):
            return self.protocol.where()
        return physics_label(self.physics_at(step))

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
    if cfg.agent.precision == "bf16":
        why = bf16_unsupported(device_name(cfg.device))
        if why:
            raise CliError(f"--precision bf16: {why}; use --precision fp32")
    if cfg.agent.push_pair != "input" and cfg.protocol.source == "stream":
        raise CliError("push_pair=newest leaks the future in stream mode (the newest pair is the "
                       "sample's own targets); the stream source pushes the input's own pair")
    return cfg


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
