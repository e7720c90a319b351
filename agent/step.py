"""One JEPA update, written once and plainly: ``jepa_step(model, batch, memory, knobs, latents)``,
with its settings fixed for a run (``StepSpec``) and its schedule values a step (``knobs_at``).

encode -> predict (modulated by the memory) -> loss -> boundary -> backward + AdamW -> EMA ->
memory write, in that order, in one function (``Learner.update`` calls it; docs/agent.md shows
it). The pieces it calls (``encode``, ``modulated_prediction``, ...) are shared with evaluation.

``latents``: the stream latent cache (``cfg.stream_cache``, ``agent.sources``), from which
a stream batch's EMA targets and its memory entry's older latents are read where it holds them;
None: every latent computed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch

from agent.build import Networks
from agent.config import AgentConfig
from agent.memory import Aggregate, BoundaryDetector, ExperienceBuffer, GroupBuffer
from agent.memory.read import MemoryView
from agent.modulators import Modulated
from agent.networks import Encoder
from agent.objective import Loss, Objective, StepMetrics, normalised_error, per_horizon
from agent.reservoir import Draw, Reservoir
from agent.sources import Batch, LatentCache


@dataclass(frozen=True)
class StepSpec:
    """The step's settings that are not tensors (from ``AgentConfig``, fixed for a run)."""

    n_horizons: int  # K
    exp_dim: int
    norm_eps: float
    bf16: bool  # forward under bf16 autocast (``cfg.precision == "bf16"``)
    device_type: str  # "cpu" / "cuda": the autocast device
    past: int = 1  # P: frames at or before the input in a batch (``cfg.past_frames``)
    context: int = 1  # C: latents the predictor reads (``cfg.context_frames``)
    push_pair: str = "newest"  # ``cfg.push_pair``
    input_scale: float = 1.0  # uint8 frames -> encoder input (``cfg.input_scale``)
    objective: Objective = Objective()  # the loss (gamma, lambda_reg, regularise, ...)
    write_every: bool = False  # write the memory at every valid step (``cfg.memory_write``)
    group_memory: bool = False  # one memory and detector per world (``cfg.memory_scope``)
    entry: int = 2  # E, latents a memory entry holds (``cfg.entry_frames``)
    encoder_stride: int = 1  # every s-th stream's context gives the encoder its gradient
    recon: float = 0.0  # the context frames' pixel reconstruction's weight (``cfg.recon_weight``)

    @classmethod
    def from_config(cls, cfg: AgentConfig, device: torch.device | str) -> StepSpec:
        objective = Objective(gamma=cfg.gamma, lambda_reg=cfg.lambda_reg,
                              on_latents=cfg.regularise == "latents",
                              relative=cfg.pred_error == "relative")  # fmt: skip
        return cls(
            n_horizons=cfg.n_horizons, exp_dim=cfg.exp_dim, norm_eps=cfg.norm_eps,
            bf16=cfg.precision == "bf16", device_type=torch.device(device).type,
            past=cfg.past_frames, context=cfg.context_frames, push_pair=cfg.push_pair,
            input_scale=cfg.input_scale, objective=objective,
            write_every=cfg.memory_write == "every", group_memory=cfg.memory_scope == "group",
            entry=cfg.entry_frames, encoder_stride=cfg.encoder_stride, recon=cfg.recon_weight,
        )  # fmt: skip

    def frames(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder input from frames: uint8 -> float32 times ``input_scale`` (converted where a
        slice is used, so frames a step does not encode are never converted); float as is."""
        if x.dtype != torch.uint8:
            return x
        x = x.to(torch.float32)
        return x if self.input_scale == 1.0 else x.mul_(self.input_scale)

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast when ``bf16``, else nothing (fp32 stays exact)."""
        if self.bf16:
            return torch.autocast(self.device_type, dtype=torch.bfloat16)
        return contextlib.nullcontext()


@dataclass
class Model:
    """What one update reads and writes: the networks, their optimiser and the memory."""

    nets: Networks
    optimizer: torch.optim.Optimizer
    detector: BoundaryDetector
    buffer: ExperienceBuffer | GroupBuffer
    spec: StepSpec


class Knobs(NamedTuple):
    """This step's schedule values and flags (``Learner.update`` sets them)."""

    # Numbers, or 0-dim tensors on the device (``agent.capture``: a captured step reads them
    # there; lr and tau float64, step int64): the same bits either way.
    step: int | torch.Tensor  # updates done before this one (the memory entries' time stamp)
    lr: float | torch.Tensor
    tau: float | torch.Tensor  # EMA rate
    learn: bool  # weights and optimiser update (False: frozen weights, memory mode)
    ema: bool  # the EMA target follows the encoder (``freeze_ema_at``)
    write: bool  # the memory is written (``freeze_buffer_at``)


# ---------------------------------------------------------------------------- the schedules
# LR linear warmup then cosine decay, EMA tau cosine ramp: pure functions of the step, so a
# resumed run needs only the step to continue; past ``total_steps`` the LR stays at 0 and tau at
# ``tau_end``.
def lr_at(step: int, base_lr: float, total_steps: int, warmup_frac: float) -> float:
    """LR for update number ``step`` (0-based): linear warmup to base_lr over ``warmup_frac`` of
    the steps, then cosine to 0."""
    w = int(round(warmup_frac * total_steps))
    if step < w:
        return base_lr * (step + 1) / w
    progress = min(1.0, (step - w) / max(1, total_steps - w))
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def tau_at(step: int, tau_base: float, tau_end: float, total_steps: int) -> float:
    """EMA decay for update ``step``: cosine from tau_base (step 0) to tau_end (total_steps)."""
    progress = min(1.0, step / total_steps)
    return tau_end - (tau_end - tau_base) * 0.5 * (1.0 + math.cos(math.pi * progress))


def fit_lr_at(cfg: AgentConfig, step: int) -> float:
    """The fit's rate at update ``step``: ``cfg.fit_lr`` at the settle (``cfg.settle_at``), cosine
    to 0 at ``total_steps``; the run's own ``lr_at`` where ``fit_lr`` is None."""
    at = cfg.settle_at
    if cfg.fit_lr is None or at is None:
        return lr_at(step, cfg.lr, cfg.total_steps, cfg.warmup_frac)
    progress = min(1.0, max(0.0, (step - at) / max(1, cfg.total_steps - at)))
    return cfg.fit_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def knobs_at(cfg: AgentConfig, step: int, frozen: bool) -> Knobs:
    """Step ``step``'s schedule values and flags (``frozen``: the weights are held, memory
    mode): lr, tau, and whether the weights, the EMA target and the memory change."""
    def reached(at: int | None) -> bool:
        return at is not None and step >= at

    return Knobs(
        step=step,
        lr=lr_at(step, cfg.lr, cfg.total_steps, cfg.warmup_frac),
        tau=tau_at(step, cfg.tau_base, cfg.tau_end, cfg.total_steps),
        learn=not frozen,
        ema=not reached(cfg.freeze_ema_at),
        write=not reached(cfg.freeze_buffer_at),
    )


# ---------------------------------------------------------------------------- the step
def jepa_step(
    m: Model, batch: Batch, memory: MemoryView, knobs: Knobs,
    latents: LatentCache | None = None, keep: Reservoir | None = None,
    watch: Callable[[Forward, MemoryView, Batch], None] | None = None,
) -> StepMetrics:  # fmt: skip
    """One training step on ``batch`` (frames (B, F, 1, 64, 64) uint8 at ``cfg.frame_offsets``:
    P past frames, the last the input, then the K targets; valid, world (B,)). Returns the
    step's metrics as 0-dim device tensors (no host read). ``keep``: the reservoir that the
    batch's valid windows enter (settle, then fit: ``agent.reservoir``). ``watch``: called with
    the forward, the memory read and the batch before anything is written (the heads beside a
    settled learner score the same windows on the same memory: ``head_metrics``)."""
    nets, spec, w = m.nets, m.spec, batch.valid.float()  # w (B,) 0/1
    # 1-2. Forward and loss.
    f = forward(nets, batch.frames, w, memory, spec, knobs.learn, batch.physics, latents,
                batch.clock)  # fmt: skip
    if watch is not None:
        with torch.no_grad():
            watch(f, memory, batch)

    # 3. Boundary: the detector on the BASE predictor's surprisal (no modulation, so no
    #    circular coupling with the memory); the memory pair, while the weights are this step's.
    with torch.no_grad():
        fired, write = boundary(m, f.err, batch.valid, w, memory.group)  # (), (W,) or (B,) bool
        entry = partial(memory_pairs, nets, spec, batch.frames, f.z, latents, batch.clock)
        pairs = entry() if knobs.write else None  # (B, E, D)

    # 4. Backward and AdamW; 5. EMA target update.
    if knobs.learn:
        adamw_step(m.optimizer, f.loss.total, knobs.lr)
        if knobs.ema:
            nets.target.update(nets.encoder, knobs.tau)

    # 6. Memory write (after the backward, which reads the buffer). Per world: a world's memory
    #    is emptied when its group's world changes.
    with torch.no_grad():
        if spec.group_memory:
            m.buffer.enter(memory.group, world_key(batch))
        if pairs is not None:
            push(m, pairs, batch, w, write, knobs.step, memory.group)
        if keep is not None:
            entries = pairs if pairs is not None else entry()
            keep.add(f.z.detach(), entries, f.targets, batch.physics, world_key(batch),
                     episode_key(batch), batch.valid)  # fmt: skip
        if latents is not None and batch.clock is not None and spec.push_pair == "input":
            latents.keep_input(batch.clock, input_latent(f.z).float())  # the next entries' older
        return step_metrics(m, knobs, f.loss, f.err, w, fired, f.parts).seed(0)


class Forward(NamedTuple):
    """The step's forward (``forward``): its loss, what the rest of the step reads of it, and
    the metrics' forward parts (``forward_metrics``)."""

    loss: Loss  # each part ()
    err: torch.Tensor  # (B,) the base predictor's surprisal (``base_error``)
    z: torch.Tensor  # (B, C, D), or (B, D) when C = 1: the context latents
    targets: torch.Tensor  # (B, K, D) float32: the EMA target's latents
    parts: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # () each


def forward(
    nets: Networks, frames: torch.Tensor, w: torch.Tensor, memory: MemoryView, spec: StepSpec,
    learn: bool, physics: torch.Tensor | None = None, latents: LatentCache | None = None,
    clock: int | None = None,
) -> Forward:  # fmt: skip
    """``jepa_step``'s forward on frames (B, F, 1, 64, 64) with 0/1 weights w (B,) (a stacked
    step's, of one seed): the EMA targets, the context latents and the modulated prediction
    (with gradients when ``learn``), the loss (prediction error at every horizon + variance
    hinge, invalid samples weighing 0) and the surprisal."""
    with torch.no_grad(), spec.autocast():  # the EMA target's latents (B, K, D)
        if latents is None or clock is None:
            targets = target_latents(nets, frames, spec)
        else:  # a stream batch's: the latent cache's, encoding only the frames it does not hold
            latents.begin(clock)
            targets = latents.targets(clock, frames, partial(encode, nets.target.target, spec=spec))
    with spec.autocast(), torch.set_grad_enabled(learn):
        z = context_latents(nets, frames, spec)
        mod, agg = modulated_prediction(nets, z, memory, spec, physics)
    pred, targets = mod.pred.float(), targets.float()  # (B, [K,] D), (B, K, D)
    loss = spec.objective(pred, targets, w, z)
    if learn and nets.recon is not None:
        loss = loss._replace(total=loss.total + spec.recon * recon_loss(nets, frames, z, spec))
    with torch.no_grad():
        err = base_error(nets, z, mod, targets, spec)  # (B,) mean_k ||zbar_k - P_base(z)||
        parts = forward_metrics(pred, targets, z, mod, agg, w, spec)
    return Forward(loss, err, z, targets, parts)


def adamw_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, lr: float | torch.Tensor) -> None:
    """Backward of ``loss`` and an AdamW step at ``lr`` (a group's ``lr_scale`` scales it: the
    encoder's, ``encoder_lr_scale``)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_scale"] if "lr_scale" in group else lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def fit_update(m: Model, draw: Draw, lr: float | torch.Tensor) -> torch.Tensor:
    """A settled step's fit (docs/agent.md, "Settle, then fit"): one AdamW update of the
    predictor, modulator and memory pathway on the reservoir's ``draw`` at ``lr``, the loss the
    prediction error alone (the step's: MSE over horizons and dimensions, each horizon's
    relative with ``pred_error="relative"``; the fixed encoder gets no gradient). Returns it
    detached, as the step's ``pred`` loss."""
    with m.spec.autocast():
        mod, _ = modulated_prediction(m.nets, draw.ctx, draw.memory, m.spec, draw.physics)
    loss = m.spec.objective.prediction(mod.pred.float(), draw.target, draw.ctx)
    adamw_step(m.optimizer, loss, lr)  # the encoder's group (no gradient here) is skipped
    return loss.detach()


def head_metrics(nets: Networks, f: Forward, memory: MemoryView, batch: Batch,
                 spec: StepSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``forward_metrics`` of ``nets``' modulated prediction on the windows and the memory of a
    step's forward ``f`` (its mean |modulation scale|, attention entropy and D on the stream,
    0-dim): a head's beside its trainer's, paired. Call without gradient."""
    with spec.autocast():
        mod, agg = modulated_prediction(nets, f.z, memory, spec, batch.physics)
    return forward_metrics(mod.pred.float(), f.targets, f.z, mod, agg, batch.valid.float(), spec)


# ---------------------------------------------------------------------------- its pieces
def recon_loss(nets: Networks, frames: torch.Tensor, z: torch.Tensor, spec: StepSpec) -> torch.Tensor:
    """The per-pixel binary cross-entropy of ``nets.recon``'s decoding of the context latents z
    (B, [C,] D) against their frames' ink at half the side (each 2 x 2 block's mean of frame /
    255; float frames are the encoder's input, ``input_scale`` times the frame)."""
    c = z.shape[1] if z.dim() == 3 else 1
    x = frames[:, spec.past - c : spec.past].flatten(0, 1)  # (B C, 1, 64, 64)
    x = x.float() / (255.0 if x.dtype == torch.uint8 else 255.0 * spec.input_scale)
    ink = torch.nn.functional.avg_pool2d(x, 2).flatten(1)  # (B C, 1024)
    logits = nets.recon(z.reshape(-1, z.shape[-1]).float())
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, ink)


def encode(encoder: Encoder, x: torch.Tensor, spec: StepSpec) -> torch.Tensor:
    """(N, 1, 64, 64) frames (uint8, or the float encoder input) -> (N, latent). ``encoder``:
    the online ``Encoder`` or the EMA copy ``nets.target.target``."""
    return encoder(spec.frames(x))


def context_latents(nets: Networks, x: torch.Tensor, spec: StepSpec) -> torch.Tensor:
    """The online latents of the C context frames (the last the input): (B, C, D), or (B, D)
    when C = 1. Under the caller's grad mode and autocast. With ``spec.encoder_stride`` s > 1
    and gradients on, only every s-th row's latents carry the encoder's gradient (rows 0, s,
    2s, ...: a few streams of every group); the others are encoded without it (the same
    values)."""
    s = spec.encoder_stride
    if s == 1 or not torch.is_grad_enabled():
        return _context(nets, x, spec)
    rows = torch.arange(x.shape[0], device=x.device)
    rest = rows[rows % s != 0]
    with_grad = _context(nets, x[::s], spec)
    with torch.no_grad():
        without = _context(nets, x[rest], spec)
    order = torch.argsort(torch.cat([rows[::s], rest]))  # back to the batch's order
    return torch.cat([with_grad, without.to(with_grad.dtype)])[order]


def _context(nets: Networks, x: torch.Tensor, spec: StepSpec) -> torch.Tensor:
    p, c = spec.past, spec.context
    if c == 1:
        return encode(nets.encoder, x[:, p - 1], spec)
    return _columns(nets.encoder, x, p - c, p, spec)


def _columns(encoder: Encoder, x: torch.Tensor, start: int, stop: int, spec: StepSpec) -> torch.Tensor:
    """(B, stop - start, D): the latents of the batch's columns start..stop - 1 by ``encoder``."""
    return encode(encoder, x[:, start:stop].flatten(0, 1), spec).view(x.shape[0], stop - start, -1)


def input_latent(z: torch.Tensor) -> torch.Tensor:
    """The input frame's latent (B, D) of the context latents: "no change" in D."""
    return z[:, -1] if z.dim() == 3 else z


def target_latents(nets: Networks, x: torch.Tensor, spec: StepSpec) -> torch.Tensor:
    """The EMA-target latents (B, K, D) of the batch's K target columns (x (B, F, 1, 64, 64)).
    Call without gradient, under the spec's autocast."""
    return _columns(nets.target.target, x, spec.past, spec.past + spec.n_horizons, spec)


def encodes_memory(nets: Networks) -> bool:
    """Whether the step encodes the memory's entries: a track with a memory pathway, without the
    oracle (which feeds the true physics in its place)."""
    return nets.modulator.uses_memory and nets.aggregator is not None and nets.oracle is None


def memory_codes(nets: Networks, memory: MemoryView, spec: StepSpec) -> torch.Tensor | None:
    """e_i (.., cap, exp_dim) of the memory's pairs, by the experience encoder, in fp32; None for
    tracks without a memory pathway (and with the oracle). Each memory is encoded once (its e_i
    serve every sample that reads it)."""
    if not encodes_memory(nets):
        return None
    # The memory pathway runs in fp32 even under bf16 autocast: its matmuls are tiny
    # (cap x 64), so bf16 only adds casts (measured ~2 ms slower per step on CPU).
    with torch.autocast(spec.device_type, enabled=False):
        pairs = memory.pairs
        return nets.experience(pairs.flatten(0, -3)).view(*pairs.shape[:-2], -1)


def aggregate(
    nets: Networks, z: torch.Tensor, memory: MemoryView, spec: StepSpec,
    codes: torch.Tensor | None = None,
) -> Aggregate | None:  # fmt: skip
    """e_agg and attention for each z (B, latent) from ``memory`` and its e_i ``codes``
    (``memory_codes``, computed here when None); None for tracks without a memory pathway (and
    with the oracle)."""
    if not nets.modulator.uses_memory or nets.aggregator is None:
        return None
    if codes is None:
        codes = memory_codes(nets, memory, spec)
    with torch.autocast(spec.device_type, enabled=False):
        return nets.aggregator(z.float(), codes, memory.mask, memory.group)


def modulated_prediction(
    nets: Networks, z: torch.Tensor, memory: MemoryView, spec: StepSpec,
    physics: torch.Tensor | None = None, codes: torch.Tensor | None = None,
) -> tuple[Modulated, Aggregate | None]:  # fmt: skip
    """The modulated prediction for the context latents z (B, C, latent) - or (B, latent) when
    C = 1 - given ``memory`` (and its e_i ``codes``, computed here when None): (Modulated(pred,
    scales (B, n) | None), Aggregate(e_agg (B, exp_dim), attn (B, cap)) | None). pred is (B,
    latent), or (B, K, latent) per horizon. The aggregator's query is the input frame's
    latent. With the oracle the context is ``nets.oracle(physics)`` (physics (B, PHYSICS_DIM),
    required) and memory is not read."""
    agg = None
    if nets.oracle is not None:
        if physics is None:
            raise ValueError("oracle: the batch carries no physics (a source that knows its worlds)")
        with torch.autocast(spec.device_type, enabled=False):
            e_agg = nets.oracle(physics.float())
    else:
        agg = aggregate(nets, input_latent(z), memory, spec, codes)
        e_agg = agg.e_agg if agg is not None else z.new_zeros(z.shape[0], spec.exp_dim)
    return nets.modulator(nets.predictor, z.flatten(1), e_agg), agg


def base_error(
    nets: Networks, z: torch.Tensor, mod: Modulated, targets: torch.Tensor, spec: StepSpec
) -> torch.Tensor:
    """Each sample's surprisal (B,): the BASE predictor's (no modulation) error
    mean_k ||zbar_k - P_base(z)|| over the K horizons (docs/definitions.md#surprisal)."""
    with spec.autocast():
        base = nets.predictor(z.detach().flatten(1)) if nets.modulator.uses_memory else mod.pred
    return torch.linalg.vector_norm(targets - per_horizon(base.detach().float()), dim=-1).mean(1)


def boundary(
    m: Model, err: torch.Tensor, valid: torch.Tensor, w: torch.Tensor,
    group: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(fired, write): the detector's boundary on the surprisal, and whether the memory is written
    (on a boundary, or at every valid step with ``memory_write="every"``). Global memory: one
    detector on the valid samples' mean surprisal, () bools; per world: one detector per group
    on its valid samples' mean surprisal, fired (W,), and every valid sample of a group that
    fired writes, write (B,)."""
    if m.spec.group_memory:
        n = m.buffer.groups
        total = torch.zeros(n, device=err.device).index_add_(0, group, err.float() * w)
        count = torch.zeros(n, device=err.device).index_add_(0, group, w)
        fired = m.detector.update(total / count.clamp(min=1.0), count > 0)
        return fired, (valid if m.spec.write_every else valid & fired[group])
    valid = w.sum() > 0
    err = (err * w).sum() / w.sum().clamp(min=1.0)
    fired = m.detector.update(err, valid)
    return fired, (valid if m.spec.write_every else fired)


def memory_pairs(
    nets: Networks, spec: StepSpec, frames: torch.Tensor, z: torch.Tensor,
    latents: LatentCache | None = None, clock: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """Each sample's memory entry (B, E, D) float32: the paper's pair (z_{newest-1}, z_newest) by
    the online encoder, or with ``push_pair="input"`` the input's own, the latents of the E
    frames ending at the input (z_{input-E+1}, ..., z_input): the context's, and before them
    earlier frames' (the stream latent cache's at ``clock`` where it holds them, else encoded).
    Call without gradient."""
    if spec.push_pair == "newest":  # the batch's last two columns: the newest target, before it
        first = spec.past + spec.n_horizons - 1
        with spec.autocast():
            return _columns(nets.encoder, frames, first, first + 2, spec).flip(1).float()
    ctx = (z if z.dim() == 3 else z.unsqueeze(1)).detach()  # (B, C, D)
    if ctx.shape[1] >= spec.entry:
        return ctx[:, -spec.entry :].float()
    k = spec.entry - ctx.shape[1]
    before = None
    if latents is not None and clock is not None:
        before = latents.earlier(clock, spec.context, k)
    if before is None:  # (B, E - C, D), online encoder: the k frames before the context
        with spec.autocast():
            before = _columns(nets.encoder, frames, spec.past - spec.context - k,
                              spec.past - spec.context, spec)  # fmt: skip
    return torch.cat([before.to(ctx.dtype), ctx], 1).float()


def world_key(batch: Batch) -> torch.Tensor:
    """(B,) the id of each sample's world: ``batch.world_key``, or without one its 0/1 tag."""
    return batch.shifted if batch.world_key is None else batch.world_key


def episode_key(batch: Batch) -> torch.Tensor:
    """(B,) each sample's episode key; a batch without them (i.i.d.) has one episode a sample."""
    if batch.episode is not None:
        return batch.episode
    return torch.arange(batch.valid.shape[0], device=batch.valid.device)


def push(
    m: Model, pairs: torch.Tensor, batch: Batch, w: torch.Tensor, write: torch.Tensor,
    step: int | torch.Tensor, group: torch.Tensor | None = None,
) -> None:  # fmt: skip
    """Write the memory where ``write``: per world each writing stream's pair into its group's
    memory, tagged with its episode; global memory the valid samples' mean pair, with their
    majority world (ties: 0)."""
    if m.spec.group_memory:
        m.buffer.push(pairs, group, episode_key(batch), batch.shifted, step, write)
        return
    majority = ((batch.shifted.float() * w).sum() * 2 > w.sum()).long()
    mean = (pairs.float() * w.view(-1, 1, 1)).sum(0) / w.sum().clamp(min=1.0)  # (2, D)
    m.buffer.push(mean, majority, step, write)


def step_metrics(
    m: Model, knobs: Knobs, loss: Loss, err: torch.Tensor, w: torch.Tensor, fired: torch.Tensor,
    parts: tuple[torch.Tensor, torch.Tensor, torch.Tensor], seeds: int = 1,
) -> StepMetrics:  # fmt: skip
    """The step's ``StepMetrics`` of each of ``seeds`` seeds as columns (each field (seeds,),
    seed s's at s: ``StepMetrics.seed``; the samples, memories and detectors seed-major), from its
    ``loss``, its ``forward_metrics`` ``parts`` and the memory after this step's write:
    valid-sample means. Group memory: threshold and buffer size are means over the worlds,
    boundary the share of worlds whose detector fired."""
    ws = w.view(seeds, -1)
    n_valid = ws.sum(1)
    size = m.buffer.size.view(seeds, -1)
    delta_abs, attn_entropy, norm_error = parts
    return StepMetrics(
        loss_total=loss.total.detach().view(seeds),
        loss_pred=loss.pred.detach().view(seeds),
        loss_reg=loss.reg.detach().view(seeds),
        surprisal=(err.view(seeds, -1) * ws).sum(1) / n_valid.clamp(min=1.0),
        threshold=m.detector.threshold.float().view(seeds, -1).mean(1),
        boundary=fired.float().view(seeds, -1).mean(1),
        buffer_size=size.float().mean(1),
        shift_share=m.buffer.shift_share(seeds),
        lr=as_metric(knobs.lr, w.device).expand(seeds),
        tau=as_metric(knobs.tau, w.device).expand(seeds),
        delta_abs=delta_abs.view(seeds),
        attn_entropy=attn_entropy.view(seeds),
        valid_frac=n_valid / ws.shape[1],
        norm_error=norm_error.view(seeds),
    )


def forward_metrics(
    pred: torch.Tensor, targets: torch.Tensor, z: torch.Tensor, mod: Modulated,
    agg: Aggregate | None, w: torch.Tensor, spec: StepSpec,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """The metrics that read the forward (the modulated prediction ``pred`` (B, [K,] D) and
    ``targets`` (B, K, D) float32, the context latents z), 0-dim float32 means over the valid
    samples (w): the mean |modulation scale| (NaN without scales), the attention's entropy (NaN
    without attention) and the normalised error of the modulated prediction."""
    denom = w.sum().clamp(min=1.0)
    delta_abs = attn_entropy = torch.full((), math.nan, device=w.device)
    if mod.scales is not None:
        delta_abs = (mod.scales.detach().float().abs().mean(1) * w).sum() / denom
    if agg is not None:
        at = agg.attn.detach().float()
        attn_entropy = (-torch.special.xlogy(at, at).sum(1) * w).sum() / denom
    d = normalised_error(pred.detach(), input_latent(z).detach(), targets, spec.norm_eps, w > 0)
    return delta_abs, attn_entropy, d[0].float()


def as_metric(value: float | torch.Tensor, device: torch.device) -> torch.Tensor:
    """A knob as a 0-dim float32 metric on ``device`` (a tensor knob: a copy, no host read)."""
    if isinstance(value, torch.Tensor):
        return value.to(torch.float32, copy=True)
    return torch.full((), value, device=device)
