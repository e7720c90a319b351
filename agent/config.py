"""The learner's configuration: one frozen dataclass, defaults = the paper's Tables 4-5.

``AgentConfig.of_size("paper", track="C")`` is the paper's Track C; ``of_size("tiny")`` shrinks
every size so the whole pipeline runs in seconds on a CPU. Invalid values raise ``ValueError``
naming the field, at construction.

Calls the paper leaves open (the tracks' own in ``agent.tracks``) are documented in
docs/agent.md, "Calls we made": among them ``input_scale`` 1.0 (the encoder sees raw 0..255
pixel values; with [0, 1] inputs the paper's objective collapses at once) and ``total_steps``
10,000 (the paper's 600 s budget was ~10,569 steps). Schedules run on steps, never on the clock.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from agent.tracks import HeadName, reads_memory
from agent.tracks import Letter as Track
from agent.tracks import track as track_named

# The choices of the config's text fields, each typed where it is declared (tyro's choices).
Precision = Literal["fp32", "bf16"]
PushPair = Literal["newest", "input"]
MemoryWrite = Literal["boundary", "every"]
MemoryScope = Literal["global", "group"]
MemoryRead = Literal["peer", "all"]
Regularised = Literal["predictions", "latents"]
PredError = Literal["mse", "relative"]
HeadStart = Literal["copy", "fresh"]
TRACKS: tuple[str, ...] = get_args(Track)
SIZES = ("paper", "tiny")
# The oracle's input: the true physics of a sample's world, (gravity_x, gravity_y, restitution,
# friction) as ``env.PHYSICS_FEATURES`` (a test keeps the two in step; agent never imports env).
PHYSICS_DIM = 4


def bf16_unsupported(device: Any = "cpu") -> str | None:
    """Why bf16 kernels cannot run on ``device``, or None where they can: torch's own check (a
    CPU as oneDNN reports it: AVX-512 BW/VL/DQ, AVX-512 BF16 or AMX; a CUDA device's bf16
    support), never a CPU model name. An AVX2-only CPU has none: fp32 there."""
    import torch  # local: the config module stays importable without touching torch

    dev = torch.device(device)
    if dev.type == "cuda":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return None
        return "this CUDA device has no bf16 support"
    if dev.type == "cpu":
        if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return None
        return "this CPU has no bf16 kernels (torch's oneDNN finds neither AVX-512 nor AMX)"
    return f"no bf16 kernels on a {dev.type} device"


def preferred_precision(device: Any = "cpu") -> str:
    """The fast precision for training on ``device``: "bf16" where bf16 runs natively
    (``bf16_unsupported`` is None), else "fp32" (the runners' default; ``AgentConfig.precision``
    stays "fp32": docs/agent.md, "Default precision")."""
    return "fp32" if bf16_unsupported(device) else "bf16"


#: The version of what a run writes (config.json, checkpoints): a file of another version is
#: refused in one line naming it (``check_version``), never read through shims. Version 2 began
#: with the removal of every earlier version's reader (``git show 0ae5fd5f94:docs/archive.md``,
#: "Removed options").
VERSION = 2


def check_version(found: Any, what: str) -> None:
    """``ValueError`` naming ``what``'s version when it is not this code's ``VERSION`` (a file
    without one was written before version 2)."""
    if found != VERSION:
        written = f"version {found}" if found is not None else "a version before 2"
        raise ValueError(f"{what} was written by {written} of this project, this is version "
                         f"{VERSION}: use it with the code of its version")


# The tiny size: every size shrunk, the same structure (a few seconds on a CPU).
TINY: dict[str, Any] = dict(
    latent_dim=16, hidden_dim=64, batch_size=8, total_steps=200, buffer_capacity=16,
    detector_warmup=3, exp_dim=16, exp_layers=1, exp_heads=2, exp_ff_dim=32, lora_rank=2,
    hyper_dim=2, encoder_channels=(4, 8, 8, 8), eval_batch_size=64,
)  # fmt: skip


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_POSITIVE = (1, "a positive integer")
# Integer fields: (the least value, the rule a bad value breaks); those in ``_OPTIONAL`` may be
# None.
_INTS: dict[str, tuple[int, str]] = {
    **dict.fromkeys(("fit_updates", "fit_batch", "fit_worlds", "reservoir_size", "latent_dim",
                     "hidden_dim", "buffer_capacity", "exp_dim", "exp_layers", "exp_heads",
                     "exp_ff_dim", "lora_rank", "hyper_dim", "eval_batch_size", "context_frames",
                     "group_size"), _POSITIVE),  # fmt: skip
    "entry_frames": (2, "an integer >= 2"),
    "predictor_blocks": (0, "an integer >= 0"),
    "batch_size": (2, "an integer >= 2 (the variance hinge needs two samples)"),
    "detector_warmup": (0, "an integer >= 0"),
    "total_steps": (1, "a positive integer (or None: a runner sets it)"),
    "freeze_buffer_at": (0, "None or an integer step >= 0"),
    "freeze_ema_at": (0, "None or an integer step >= 0"),
}
# Number fields: (check, the rule a bad value breaks); a bad value of one in ``_OPTIONAL`` is
# "None or a number" of the rule.
_NUMBERS: dict[str, tuple[Callable[[float], bool], str]] = {
    "lr": (lambda v: v > 0, "> 0"),
    "encoder_lr_scale": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "weight_decay": (lambda v: v >= 0, ">= 0"),
    "warmup_frac": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "tau_base": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "tau_end": (lambda v: v <= 1, "in [tau_base, 1]"),
    "gamma": (lambda v: v >= 0, ">= 0"),
    "lambda_reg": (lambda v: v >= 0, ">= 0"),
    "recon_weight": (lambda v: v >= 0, ">= 0"),
    "kappa": (lambda v: v > 0, "> 0"),
    "detector_momentum": (lambda v: 0 < v < 1, "in (0, 1)"),
    "input_scale": (lambda v: v > 0, "> 0"),
    "norm_eps": (lambda v: v > 0, "> 0"),
    "settle": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "fit_lr": (lambda v: v > 0, "> 0"),
}
_OPTIONAL = ("total_steps", "freeze_buffer_at", "freeze_ema_at", "settle", "fit_lr")


@dataclass(frozen=True)
class AgentConfig:
    """Every hyperparameter of the learner (this class's defaults: the paper's, track C; a run's
    come from its preset, and ``train_online --help`` shows the cpu preset's)."""

    track: Track = "C"  # A none, B residual injection, C LoRA, D FiLM, E hypernetwork
    seed: int = 0  # parameter init (torch); sources take their own seeds
    latent_dim: int = 64  # encoder output / predictor input and output
    hidden_dim: int = 1024  # predictor hidden width
    batch_size: int = 64  # samples per update
    horizons: tuple[int, ...] = (5, 10, 20)  # prediction horizons k (frames ahead)
    lr: float = 3e-3  # AdamW peak learning rate (per-track default via of_size)
    # the encoder's rate as a fraction of lr (1: the paper's one rate; TD-MPC2 slows its encoder
    # to 0.3); not with the captured step or stacked seeds
    encoder_lr_scale: float = 1.0
    # streams a step whose context latents give the encoder its gradient, every
    # (batch_size / encoder_batch)-th (None: all); the others are encoded without it, so the
    # predictor's batch is larger than the encoder's; not with the captured step or stacked seeds
    encoder_batch: int | None = None
    weight_decay: float = 0.01  # AdamW weight decay
    warmup_frac: float = 0.05  # linear LR warmup as a fraction of total_steps, then cosine
    total_steps: int | None = 10_000  # the LR and tau schedules' steps (None: a runner sets it)
    tau_base: float = 0.996  # EMA target decay at step 0 (cosine schedule start)
    tau_end: float = 0.9999  # EMA target decay at total_steps
    gamma: float = 0.75  # variance hinge threshold
    lambda_reg: float = 0.05  # weight of the variance hinge
    # weight of a pixel reconstruction of each context frame from its online latent (a small MLP
    # decoder trained with the encoder; 0: none): a self-supervised pull toward where things are
    recon_weight: float = 0.0
    # what the variance hinge holds apart: the "predictions" (the paper) or the online
    # encoder's "latents" of the context frames (eb_jepa, VICReg)
    regularise: Regularised = "predictions"
    # the prediction error: "mse" the mean over horizons of the squared error (the paper);
    # "relative" each horizon's divided by its batch's mean squared "no change" distance
    # ||zbar_k - z_t||^2, so that the short horizons weigh as they do in D
    pred_error: PredError = "mse"
    buffer_capacity: int = 256  # experience buffer entries (FIFO)
    kappa: float = 1.5  # boundary fires when s > mu + kappa * sigma
    detector_momentum: float = 0.99  # EMA momentum of the surprisal statistics
    detector_warmup: int = 10  # updates before the detector may fire (listing: steps < 10)
    exp_dim: int = 64  # experience encoder width d (= e_i, e_agg size)
    exp_layers: int = 2  # experience encoder transformer layers
    exp_heads: int = 2  # experience encoder attention heads
    exp_ff_dim: int = 128  # experience encoder feed-forward width
    lora_rank: int = 4  # Track C LoRA rank r
    hyper_dim: int = 4  # Track E: size of the code that mixes the full-rank delta bases
    encoder_channels: tuple[int, ...] = (16, 32, 64, 64)  # the four strided convolutions
    input_scale: float = 1.0  # encoder input = uint8 frame * input_scale (1.0: raw 0..255)
    precision: Precision = "fp32"  # "fp32" or "bf16" (torch.autocast; weights stay fp32)
    norm_eps: float = 1e-3  # D metric: samples with ||zbar - z|| below this are excluded
    eval_batch_size: int = 256  # frames-per-chunk bound of evaluation (memory)
    freeze_buffer_at: int | None = None  # no buffer writes from this step on
    freeze_ema_at: int | None = None  # EMA target fixed from this step on
    # Beyond the paper (docs/agent.md, "Beyond the paper"); the defaults are the paper's.
    context_frames: int = 1  # predictor input: the latents of the last C frames (1: the paper)
    per_horizon: bool = False  # one predicted latent per horizon (False: the paper's single one)
    push_pair: PushPair = "newest"  # memory pair: "newest" frames (paper) or "input" (the input's own)
    # "global" one FIFO of batch means (paper), "group" one FIFO per group of ``group_size``
    # streams that share a world (agent/memory/buffer.py; group_size 1: each stream its own)
    memory_scope: MemoryScope = "global"
    group_size: int = 1  # memory_scope "group": the streams that share a world and its memory
    # memory_scope "group": a sample reads its group's entries but those of its own episode
    # ("peer"), or all of them ("all")
    memory_read: MemoryRead = "peer"
    # frames per memory entry, the newest the input: 2 a transition pair (z_{t-1}, z_t), the
    # paper's; 3 adds the frame before, so that an entry shows a change of velocity, which is
    # where a world's gravity shows (group memories, the input's own entries)
    entry_frames: int = 2
    vary_memory: bool = False  # training: each sample sees only its newest k entries, k ~ U{0..n}
    memory_write: MemoryWrite = "boundary"  # push on a detector "boundary" (paper) or at "every" valid step
    oracle: bool = False  # feed the true physics (Batch.physics) in place of e_agg: the ceiling
    # A world model that uses what it is told (docs/agent.md, "Beyond the paper: a predictor
    # with room to use the world"). 0: the listing's one hidden layer; N:
    # N residual blocks of hidden_dim, the track's modulation acting in every block
    # (agent.networks, agent.modulators.blocks)
    predictor_blocks: int = 0
    # Speed: a stream frame's EMA-target latent is computed once, when it arrives, and reused at
    # its later horizons; the previous input's latent is the memory pair's older frame
    # (agent.sources; stream batches only). False: every latent recomputed at every step.
    stream_cache: bool = True
    # Settle, then fit (docs/agent.md, "Settle, then fit"; agent.reservoir, agent.step.fit_update):
    # after this fraction of total_steps the encoder and its EMA target are fixed, each step keeps
    # its windows' latents in a reservoir and fits the predictor, modulator and memory pathway on
    # minibatches drawn from all of it (None: the encoder learns to the end; group memories only)
    settle: float | None = None
    fit_updates: int = 1  # settled: updates a step, each on a minibatch of the reservoir
    # settled: the fit's peak rate, decaying to 0 at total_steps by a cosine from the settle
    # (None: the run's schedule, lr_at, goes on)
    fit_lr: float | None = None
    fit_batch: int = 256  # settled: windows a minibatch
    fit_worlds: int = 16  # settled: worlds a minibatch mixes, fit_batch / fit_worlds windows each
    reservoir_size: int = 32768  # settled: windows kept (a uniform sample since the settle)
    # One latent, every head (agent.heads): from the settle on, these predictors fit beside the
    # track's own on the same minibatches of the same reservoir, each conditioned its way: a
    # track's letter, or "oracle" (the true physics in place of memory; the first track that
    # reads memory's modulation, ``tracks.ceiling_track``); needs settle
    heads: tuple[HeadName, ...] = ()
    # where a head starts at the settle: a "copy" of the track's predictor with its own
    # conditioning at zero (every head predicts the same there), or "fresh" (its own init)
    head_start: HeadStart = "copy"

    # ----------------------------------------------------------------------------------
    def __post_init__(self) -> None:
        # JSON turns tuples into lists: accept any sequence, store a tuple.
        for name in ("horizons", "encoder_channels", "heads"):
            value = getattr(self, name)
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"{name}: expected a sequence, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        self._validate()

    def _validate(self) -> None:
        """Every field checked; a bad one raises ``ValueError`` naming it, in one line."""
        for name, choices in self._choices().items():
            if getattr(self, name) not in choices:
                what = "unknown track, expected" if name == "track" else "expected"
                self._bad(name, f"{what} one of {', '.join(choices)}")
        for name in ("per_horizon", "vary_memory", "oracle", "stream_cache"):
            if not isinstance(getattr(self, name), bool):
                self._bad(name, "must be true or false")
        if not _is_int(self.seed):
            self._bad("seed", "must be an integer")
        for name, (least, rule) in _INTS.items():
            v = getattr(self, name)
            if (v is not None or name not in _OPTIONAL) and (not _is_int(v) or v < least):
                self._bad(name, f"must be {rule}")
        for name, (ok, rule) in _NUMBERS.items():
            v = getattr(self, name)
            number = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
            if name in _OPTIONAL:
                if v is not None and not (number and ok(v)):
                    self._bad(name, f"must be None or a number {rule}")
            elif not number:
                self._bad(name, "must be a finite number")
            elif not ok(float(v)):
                self._bad(name, f"must be {rule}")
        if not self.tau_base <= self.tau_end <= 1:
            self._bad("tau_end", "must be in [tau_base, 1]")
        h, ch = self.horizons, self.encoder_channels
        if not h or not all(_is_int(k) and k >= 1 for k in h) or list(h) != sorted(set(h)):
            self._bad("horizons", "must be strictly increasing positive integers")
        if h[-1] < 2:
            self._bad("horizons", "the largest horizon must be >= 2 (the newest pair needs 2 frames)")
        if len(ch) != 4 or not all(_is_int(c) and c >= 1 for c in ch):
            self._bad("encoder_channels", "must be four positive integers")
        self._validate_together()

    @staticmethod
    @functools.cache
    def _choices() -> dict[str, tuple[str, ...]]:
        """The fields typed as a ``Literal`` and their choices."""
        hints = typing.get_type_hints(AgentConfig)
        return {n: get_args(h) for n, h in hints.items() if typing.get_origin(h) is Literal}

    def _validate_together(self) -> None:
        """The fields that constrain each other (each valid alone)."""
        group = self.memory_scope == "group"
        if self.oracle and not reads_memory(self.track):
            self._bad("oracle", f"track {self.track} has no memory pathway to feed the physics to")
        if group and self.push_pair != "input":
            self._bad("memory_scope", "group memory keeps the streams' own pairs: push_pair 'input'")
        if self.entry_frames > 2 and not group:
            self._bad("entry_frames", "longer entries are for group memories")
        if group and self.batch_size % self.group_size:
            self._bad("group_size", f"must divide batch_size={self.batch_size}")
        if group and self.buffer_capacity < self.group_size:
            self._bad("group_size", f"larger than buffer_capacity={self.buffer_capacity} (a step "
                      "writes up to group_size entries into a world's memory)")  # fmt: skip
        if self.settle is not None and not group:
            self._bad("settle", "the reservoir keeps windows of worlds: memory_scope 'group'")
        self._validate_heads()
        if self.settle is not None and self.fit_batch % self.fit_worlds:
            self._bad("fit_batch", f"must be a multiple of fit_worlds={self.fit_worlds}")
        if self.encoder_batch is not None and (
            not _is_int(self.encoder_batch) or self.encoder_batch < 1
            or self.batch_size % self.encoder_batch
        ):  # fmt: skip
            self._bad("encoder_batch", f"must be None or a positive divisor of batch_size={self.batch_size}")
        if self.exp_dim % self.exp_heads:
            self._bad("exp_heads", f"must divide exp_dim={self.exp_dim}")
        width = min(self.latent_dim, self.hidden_dim)
        if self.lora_rank > width:
            self._bad("lora_rank", f"larger than the layer width min(latent_dim, hidden_dim)={width}")
        if self.hyper_dim > self.exp_dim:
            self._bad("hyper_dim", f"larger than exp_dim={self.exp_dim}")

    def _validate_heads(self) -> None:
        """``heads``: known names, each once, not the track's own, with a reservoir to fit."""
        names = get_args(HeadName)
        if unknown := [h for h in self.heads if h not in names]:
            self._bad("heads", f"unknown head {unknown[0]!r}, expected of {', '.join(names)}")
        if len(set(self.heads)) != len(self.heads):
            self._bad("heads", "each head once")
        if self.head_name in self.heads:
            self._bad("heads", f"{self.head_name!r} is this learner's own predictor")
        if self.heads and self.settle is None:
            self._bad("heads", "heads fit on the settled reservoir: set settle")

    def _bad(self, name: str, why: str) -> None:
        raise ValueError(f"{name}: {why} (got {getattr(self, name)!r})")

    # ----------------------------------------------------------------------------------
    @property
    def settle_at(self) -> int | None:
        """The step from which the learner is settled (``settle`` of ``total_steps``), or None."""
        if self.settle is None or self.total_steps is None:
            return None
        return int(round(self.settle * self.total_steps))

    @property
    def head_name(self) -> str:
        """This learner's own predictor as a head's name: its track, or "oracle"."""
        return "oracle" if self.oracle else self.track

    @property
    def encoder_stride(self) -> int:
        """Every how many streams one gives the encoder its gradient (``encoder_batch``)."""
        return 1 if self.encoder_batch is None else self.batch_size // self.encoder_batch

    @property
    def num_groups(self) -> int:
        """W, the worlds' memories of ``memory_scope="group"``: batch_size / group_size."""
        return self.batch_size // self.group_size

    @property
    def n_horizons(self) -> int:
        """K, the number of prediction horizons."""
        return len(self.horizons)

    @property
    def predictor_widths(self) -> tuple[int, int]:
        """The widths of the predictor's input to fc1 and output of fc2: the C context latents and
        the latents of one call."""
        return self.context_frames * self.latent_dim, self.out_heads * self.latent_dim

    @property
    def out_heads(self) -> int:
        """Latents one predictor call gives: K per horizon, 1 the paper's single one."""
        return self.n_horizons if self.per_horizon else 1

    @property
    def past_frames(self) -> int:
        """P, the frames a sample reads at or before its input frame: the C context frames, and
        the frames of the input's own memory entry (E = ``entry_frames``; 1 in the paper)."""
        return max(self.context_frames, self.entry_frames if self.push_pair == "input" else 1)

    @property
    def input_position(self) -> int:
        """Position of the sample's input frame in its window (0 = the oldest frame): P - 1."""
        return self.past_frames - 1

    @property
    def window(self) -> int:
        """Frames a sample spans, oldest to newest: P - 1 + max(horizons) + 1 (21 in the paper)."""
        return self.input_position + self.horizons[-1] + 1

    @property
    def frame_offsets(self) -> tuple[int, ...]:
        """Positions in the sample's window (0 = its oldest frame) of a Batch's frames.

        The P past frames (oldest first; the last is the input frame), the K targets at the
        horizons after the input (the newest last), then, with ``push_pair == "newest"``, the
        frame just before the newest (the paper's pair). The paper: (0, 5, 10, 20, 19).
        """
        i = self.input_position
        past = tuple(range(self.past_frames))
        targets = tuple(i + h for h in self.horizons)
        newest = (i + self.horizons[-1] - 1,) if self.push_pair == "newest" else ()
        return past + targets + newest

    @property
    def pair_offsets(self) -> tuple[int, int]:
        """Window positions of the memory pair (z_prev, z_new): the newest two frames (paper),
        or the input frame's predecessor and the input frame (no frame after the input)."""
        if self.push_pair == "newest":
            h = self.input_position + self.horizons[-1]
            return (h - 1, h)
        return (self.input_position - 1, self.input_position)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Public field names (what ``--grid`` may name)."""
        return tuple(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_"))

    @classmethod
    def of_size(cls, size: str = "paper", track: str = "C", **overrides: Any) -> AgentConfig:
        """A size ("paper": Tables 4-5, or "tiny": every size shrunk) with the track's defaults
        (lr, kappa), then overrides."""
        if size not in SIZES:
            raise ValueError(f"size: unknown size {size!r}, expected one of {', '.join(SIZES)}")
        defaults = track_named(track).defaults
        _check_names(overrides)
        return cls(**{**(TINY if size == "tiny" else {}), **defaults, "track": track, **overrides})

    def replace(self, **changes: Any) -> AgentConfig:
        """A copy with some fields changed (validated again)."""
        _check_names(changes)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of the public fields (tuples become lists)."""
        values = {name: getattr(self, name) for name in self.field_names()}
        return {name: list(v) if isinstance(v, tuple) else v for name, v in values.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AgentConfig:
        """Inverse of ``to_dict`` (unknown keys raise ValueError naming them)."""
        _check_names(data)
        return cls(**data)

    def to_json(self) -> str:
        """The resolved config as indented JSON (saved next to a run)."""
        return json.dumps(self.to_dict(), indent=2)


def _check_names(values: dict[str, Any]) -> None:
    known = set(AgentConfig.field_names())
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown config field (known: {', '.join(sorted(known))})")
