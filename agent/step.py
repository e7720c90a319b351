"""The training step's forward, written once: ``forward_step(...) -> StepOutput``.

``forward_step(nets, x, w, world, memory, *, gamma, lambda_reg, grad, spec)`` is a pure
function of the networks, the batch tensors, a read-only view of the memory and a few config
scalars: no optimiser, no state written, no host read, no data-dependent Python branch. Both
learners call it:

- ``Learner.update`` directly (batch dims (B, ...)), then AdamW, EMA and the memory writes;
- ``MultiLearner.update`` under ``torch.func.functional_call`` (each run's parameters) and
  ``torch.func.vmap`` (all runs at once; every tensor here then has a hidden leading run dim).

``step_metrics`` turns a ``StepOutput`` plus the detector / buffer state after the memory writes
into ``StepMetrics`` for both (fields of shape () or (R,)). ``modulated_prediction``,
``aggregate`` and ``encode`` are the step's pieces, shared with ``Learner.predict`` /
``aggregate`` / ``encode`` (evaluation and analyses).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch

from agent.build import Networks
from agent.config import AgentConfig
from agent.memory import Aggregate, BoundaryDetector, ExperienceBuffer
from agent.metrics import StepMetrics, normalised_error, per_horizon
from agent.modulators import Modulated
from agent.networks import Encoder
from agent.objective import compute_loss

if TYPE_CHECKING:
    from agent.multirun import StackedBuffer


@dataclass(frozen=True)
class StepSpec:
    """What the step needs to know that is not a tensor (static under vmap / compile).

    ``channels_last``: run the encoder's convolutions in channels_last (the single learner; the
    fast CPU layout) or as the listing's plain ``conv(x)`` (under vmap, which cannot express the
    channels_last copy in torch 2.13). Same values either way.
    """

    n_horizons: int
    exp_dim: int
    norm_eps: float
    bf16: bool  # forward under bf16 autocast (``cfg.precision == "bf16"``)
    device_type: str  # "cpu" / "cuda": the autocast device
    channels_last: bool = True
    past: int = 1  # P: frames at or before the input in a batch (``cfg.past_frames``)
    context: int = 1  # C: latents the predictor reads (``cfg.context_frames``)
    push_pair: str = "newest"  # ``cfg.push_pair``
    input_scale: float = 1.0  # uint8 frames -> encoder input (``cfg.input_scale``)
    # The step may read a tensor on the host where that costs nothing (the single learner on a
    # CPU; never under vmap, never on a GPU, where each read is a sync): it then encodes only
    # the memory slots a sample attends to (per-sample memory), and the paper's newest pair only
    # on the steps that push it. Same values either way.
    host_reads: bool = False
    # With host reads, the paper's memory (one batch-mean newest pair pushed to one global
    # memory on a boundary): the pair is encoded by the learner after the detector, only when it
    # fires (``newest_pair``), not by ``forward_step`` at every step.
    lazy_pair: bool = False

    @classmethod
    def from_config(
        cls,
        cfg: AgentConfig,
        device: torch.device | str,
        *,
        channels_last: bool = True,
        host_reads: bool | None = None,
    ) -> StepSpec:
        """``host_reads`` None: on for a CPU device (where a host read is free)."""
        device_type = torch.device(device).type
        if host_reads is None:
            host_reads = device_type == "cpu"
        return cls(
            n_horizons=cfg.n_horizons,
            exp_dim=cfg.exp_dim,
            norm_eps=cfg.norm_eps,
            bf16=cfg.precision == "bf16",
            device_type=device_type,
            channels_last=channels_last,
            past=cfg.past_frames,
            context=cfg.context_frames,
            push_pair=cfg.push_pair,
            input_scale=cfg.input_scale,
            host_reads=host_reads,
            lazy_pair=host_reads
            and cfg.push_pair == "newest"
            and cfg.memory_scope == "global"
            and cfg.memory_write == "boundary",
        )

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


class MemoryView(NamedTuple):
    """What the forward reads of the experience buffer (nothing is written through it).

    One memory for every sample (the paper's global FIFO): pairs (cap, 2, D); or one per sample
    (``memory_scope="per_stream"``: sample b is stream b): pairs (B, cap, 2, D). ``mask`` is
    (cap,) or (B, cap) - (B, cap) also over shared pairs when each sample sees a different part
    (``visible``)."""

    pairs: torch.Tensor  # (cap, 2, D) or (B, cap, 2, D) float32
    mask: torch.Tensor  # (cap,) or (B, cap) bool, True for the slots a sample attends to

    @classmethod
    def of(cls, buffer: ExperienceBuffer | StackedBuffer) -> MemoryView:
        """The buffer's pairs and filled-slot mask (stacked buffer: (R, cap, 2, D), (R, cap))."""
        return cls(buffer.pairs, buffer.mask())

    @classmethod
    def visible(cls, buffer: ExperienceBuffer, u: torch.Tensor) -> MemoryView:
        """Each sample sees only the newest k entries of its memory, k = floor(u * (size + 1))
        for u (B,) uniform in [0, 1): so k is uniform over 0..size, empty memory included
        (``cfg.vary_memory``, training only). mask (B, cap)."""
        k = (u * (buffer.size + 1).float()).long().clamp(max=buffer.size)  # (B,)
        age = buffer.age()  # (cap,) or (B, cap)
        return cls(buffer.pairs, age < k.unsqueeze(-1))


class StepOutput(NamedTuple):
    """One step's forward: loss, what the memory update needs, and the forward's metrics.

    Shapes are one run's (under vmap every field gains a leading (R,)).
    """

    loss_total: torch.Tensor  # 0-dim float32, differentiable when grad=True
    loss_pred: torch.Tensor  # 0-dim float32, detached
    loss_reg: torch.Tensor  # 0-dim float32, detached
    surprisal: torch.Tensor  # 0-dim float32: valid-mean of mean_k ||zbar_k - P_base(z)||
    n_valid: torch.Tensor  # 0-dim float32: valid samples in the batch
    valid_frac: torch.Tensor  # 0-dim float32: n_valid / B
    delta_abs: torch.Tensor  # 0-dim float32: valid-mean |modulation scale| (NaN: none)
    attn_entropy: torch.Tensor  # 0-dim float32: valid-mean attention entropy (NaN: no memory)
    norm_error: torch.Tensor  # 0-dim float32: D of the modulated prediction on the batch
    pair: torch.Tensor  # (2, D) float32: valid-mean memory pair (z_prev, z_new), global buffer
    world: torch.Tensor  # 0-dim int64: the valid samples' majority world (ties: 0)
    pairs: torch.Tensor  # (B, 2, D) float32: each sample's memory pair (per-stream memory)
    sample_surprisal: torch.Tensor  # (B,) float32: each sample's surprisal (per-stream detector)


# ---------------------------------------------------------------------------- the step's pieces
def encode(encoder: Encoder, x: torch.Tensor, spec: StepSpec) -> torch.Tensor:
    """(N, 1, 64, 64) frames (uint8, or the float encoder input) -> (N, latent) with
    ``Encoder.encode`` in the spec's layout. ``encoder``: the online ``Encoder`` or the EMA
    copy ``nets.target.target``."""
    return encoder.encode(spec.frames(x), channels_last=spec.channels_last)


def target_latents(nets: Networks, x: torch.Tensor, spec: StepSpec) -> torch.Tensor:
    """The EMA-target latents (B, K, D) of the batch's K target columns (x (B, F, 1, 64, 64)).
    Call without gradient, under the spec's autocast."""
    p, k = spec.past, spec.n_horizons
    return encode(nets.target.target, x[:, p : p + k].flatten(0, 1), spec).view(x.shape[0], k, -1)


def valid_mean(pairs: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The valid samples' mean pair (2, D) float32 of pairs (B, 2, D) (0/1 weights w (B,))."""
    return (pairs.float() * w.view(-1, 1, 1)).sum(0) / w.sum().clamp(min=1.0)


def newest_pair(nets: Networks, x: torch.Tensor, spec: StepSpec) -> torch.Tensor:
    """The paper's memory pair of each sample, (z_prev, z_newest) (B, 2, D), by the online
    encoder from the batch's last two columns (the frame before the newest, then the newest
    target). Call without gradient, under the spec's autocast."""
    b, first = x.shape[0], spec.past + spec.n_horizons - 1  # columns (newest, before it)
    return encode(nets.encoder, x[:, first:].flatten(0, 1), spec).view(b, 2, -1).flip(1)


def memory_codes(nets: Networks, memory: MemoryView, spec: StepSpec) -> torch.Tensor | None:
    """e_i (.., cap, exp_dim) of the memory's pairs, by the experience encoder, in fp32; None for
    tracks without a memory pathway (and with the oracle). A shared memory is encoded once (its
    e_i serve every sample); a per-sample memory (B, cap, 2, D) as B * cap pairs (with host
    reads: only the visible ones). Needs nothing of the batch but its memory view, so the
    learner can run it beside the online encoder."""
    if not nets.modulator.uses_memory or nets.aggregator is None or nets.oracle is not None:
        return None
    # The memory pathway runs in fp32 even under bf16 autocast: its matmuls are tiny
    # (cap x 64), so bf16 only adds casts (measured ~2 ms slower per step on CPU).
    with torch.autocast(spec.device_type, enabled=False):
        pairs = memory.pairs
        if spec.host_reads and pairs.dim() == 4:
            return _encode_visible(nets, pairs, memory.mask)
        return nets.experience(pairs.flatten(0, -3)).view(*pairs.shape[:-2], -1)  # (.., cap, d)


def aggregate(
    nets: Networks,
    z: torch.Tensor,
    memory: MemoryView,
    spec: StepSpec,
    codes: torch.Tensor | None = None,
) -> Aggregate | None:
    """e_agg and attention for each z (B, latent) from ``memory`` (its e_i ``codes`` when
    already computed, else ``memory_codes``); None for tracks without a memory pathway (and
    with the oracle)."""
    if not nets.modulator.uses_memory or nets.aggregator is None:
        return None
    if codes is None:
        codes = memory_codes(nets, memory, spec)
    with torch.autocast(spec.device_type, enabled=False):
        return nets.aggregator(z.float(), codes, memory.mask)


def _encode_visible(nets: Networks, pairs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """e (B, cap, d) of a per-sample memory (B, cap, 2, D), the experience encoder run only on
    the slots ``mask`` (B, cap) shows (zeros elsewhere, which the aggregator never reads). The
    same e_i on those slots as encoding all of them (each pair is encoded on its own), at the
    cost of the visible slots only: with a memory filling over each episode and ``vary_memory``
    showing each sample its newest k, about a quarter of them."""
    idx = mask.flatten().nonzero().squeeze(1)  # (M,): a host read of M
    e_visible = nets.experience(pairs.flatten(0, 1).index_select(0, idx))  # (M, d)
    e = e_visible.new_zeros(mask.numel(), e_visible.shape[-1])
    return e.index_copy(0, idx, e_visible).view(*mask.shape, -1)


def modulated_prediction(
    nets: Networks,
    z: torch.Tensor,
    memory: MemoryView,
    spec: StepSpec,
    physics: torch.Tensor | None = None,
    codes: torch.Tensor | None = None,
) -> tuple[Modulated, Aggregate | None]:
    """The modulated prediction for the context latents z (B, C, latent) - or (B, latent) when
    C = 1 - given ``memory``: (Modulated(pred, scales (B, n) | None), Aggregate(e_agg (B,
    exp_dim), attn (B, cap)) | None). pred is (B, latent), or (B, K, latent) per horizon. The
    aggregator's query is the input frame's latent (the newest of the context). With the oracle
    the context is ``nets.oracle(physics)`` (physics (B, PHYSICS_DIM), required) and memory is
    not read."""
    if nets.oracle is not None:
        if physics is None:
            raise ValueError("oracle: the batch carries no physics (a source that knows its worlds)")
        with torch.autocast(spec.device_type, enabled=False):
            e_agg = nets.oracle(physics.float())
        return nets.modulator(nets.predictor, z.flatten(1), e_agg), None
    query = z[:, -1] if z.dim() == 3 else z
    agg = aggregate(nets, query, memory, spec, codes)
    e_agg = agg.e_agg if agg is not None else z.new_zeros(z.shape[0], spec.exp_dim)
    return nets.modulator(nets.predictor, z.flatten(1), e_agg), agg


# ---------------------------------------------------------------------------- the step
def forward_step(
    nets: Networks,
    x: torch.Tensor,
    w: torch.Tensor,
    world: torch.Tensor,
    memory: MemoryView,
    *,
    gamma: float | torch.Tensor,
    lambda_reg: float | torch.Tensor,
    grad: bool,
    spec: StepSpec,
    physics: torch.Tensor | None = None,
    targets: torch.Tensor | Callable[[], torch.Tensor] | None = None,
    prev: torch.Tensor | None = None,
    codes: torch.Tensor | Callable[[], torch.Tensor | None] | None = None,
) -> StepOutput:
    """Sections 1 (forward) and 2 (loss) of a training step, and the reductions the memory
    update and the metrics need. Pure: reads ``nets`` and ``memory``, writes nothing.

    x (B, F, 1, 64, 64) uint8 frames (or the float32 encoder input) at the window positions
    ``cfg.frame_offsets``:
    0..P-1 the past frames (P-1 the input frame), P..P+K-1 the targets (the newest last), and,
    with the paper's pair, P+K the frame before the newest (the pair is (x[:, P+K],
    x[:, P+K-1])); in the paper (P = 1) index 0 the input, 1..K the targets, K+1 the pair's;
    w (B,) 0/1 float32 validity weights; world (B,) int64; memory: MemoryView (cap, 2, D) /
    (cap,); gamma, lambda_reg: floats (or 0-dim tensors, per-run values under vmap); grad:
    whether the loss is differentiable (False when the weights are frozen); physics (B,
    PHYSICS_DIM) the samples' true worlds (the oracle's input; None without the oracle).
    targets (B, K, D) / prev (B, D): the EMA-target latents and the input's predecessor's online
    latent when the caller already holds them (``agent.latents``, stream mode); None: encoded here;
    ``targets`` may also be a callable returning them (work running beside this forward), called
    where the loss first needs them. codes: the memory's e_i (``memory_codes``) when the caller
    computed them, or a callable returning them, called where the aggregator needs them.
    With ``spec.lazy_pair`` the paper's pair is not encoded here (``pair`` / ``pairs`` are zeros):
    the learner encodes it (``newest_pair``) on the steps that push it.
    """
    p, c = spec.past, spec.context
    b = x.shape[0]
    n_valid = w.sum()

    # 1. Forward. Each frame is encoded once: the C context frames with gradients, the K
    #    targets (EMA encoder) without, and the memory pair's frames that are not context
    #    frames (online encoder, no gradient).
    with spec.autocast():
        with torch.no_grad():
            if targets is None:
                targets = target_latents(nets, x, spec)  # (B, K, D), the EMA encoder
            if spec.push_pair == "newest":  # the paper: frames (P+K, P+K-1) = (prev, newest)
                if spec.lazy_pair:
                    pair = None  # zeros, once the latent width is known (below)
                else:
                    pair = newest_pair(nets, x, spec)
            elif c == 1 and prev is None:  # the input's predecessor (the input is the context)
                prev = encode(nets.encoder, x[:, p - 2], spec)
        with torch.set_grad_enabled(grad):
            if c == 1:
                z = encode(nets.encoder, x[:, p - 1], spec)  # (B, D)
            else:
                z = encode(nets.encoder, x[:, p - c : p].flatten(0, 1), spec).view(b, c, -1)
            if callable(codes):  # computed beside the online encoder (``Learner``): join
                codes = codes()
            mod, agg = modulated_prediction(nets, z, memory, spec, physics, codes)
        if spec.push_pair == "input":  # (z_{input-1}, z_input): no frame after the input
            if c == 1:
                pair = torch.stack([prev.to(z.dtype), z.detach()], 1)  # type: ignore[union-attr]
            else:
                pair = z[:, -2:].detach()
        # The BASE predictor (no modulation) for the surprisal: no circular coupling with memory.
        with torch.no_grad():
            base = nets.predictor(z.detach().flatten(1)) if nets.modulator.uses_memory else mod.pred
        z = z[:, -1] if c > 1 else z  # the input frame's latent ("no change" in D)
    if callable(targets):  # computed beside the forward (``Learner``, one CPU thread): join
        targets = targets()
    if pair is None:
        pair = targets.new_zeros(b, 2, targets.shape[-1])
    pred, targets, base = mod.pred.float(), targets.float(), base.detach().float()

    # 2. Loss (invalid samples weigh 0).
    loss = compute_loss(pred, targets, gamma, lambda_reg, w)  # type: ignore[arg-type]

    # Reductions for the memory update and the metrics (valid-sample means).
    with torch.no_grad():
        err = torch.linalg.vector_norm(targets - per_horizon(base), dim=-1).mean(1)  # (B,)
        denom = n_valid.clamp(min=1.0)
        surprisal = (err * w).sum() / denom
        pairs = pair.float()  # (B, 2, D)
        pair_mean = valid_mean(pairs, w)  # (2, D)
        majority = ((world.float() * w).sum() * 2 > n_valid).long()
        nan = torch.full((), math.nan, device=x.device)
        if mod.scales is not None:
            delta_abs = (mod.scales.detach().float().abs().mean(1) * w).sum() / denom
        else:
            delta_abs = nan
        if agg is not None:
            at = agg.attn.detach().float()
            attn_entropy = (-torch.special.xlogy(at, at).sum(1) * w).sum() / denom
        else:
            attn_entropy = nan
        norm_err = normalised_error(pred.detach(), z.detach(), targets, spec.norm_eps, w > 0)[0]
    return StepOutput(
        loss_total=loss.total,
        loss_pred=loss.pred.detach(),
        loss_reg=loss.reg.detach(),
        surprisal=surprisal,
        n_valid=n_valid,
        valid_frac=n_valid / b,
        delta_abs=delta_abs,
        attn_entropy=attn_entropy,
        norm_error=norm_err.float(),
        pair=pair_mean,
        world=majority,
        pairs=pairs,
        sample_surprisal=err,
    )


def step_metrics(
    out: StepOutput,
    fired: torch.Tensor,
    detector: BoundaryDetector,
    buffer: ExperienceBuffer | StackedBuffer,
    lr: torch.Tensor,
    tau: torch.Tensor,
) -> StepMetrics:
    """The step's ``StepMetrics`` from its forward and the memory state after this step's
    update (detector threshold, buffer size and world share). Every field has the shape of
    ``out.surprisal``: () for one learner, (R,) for stacked runs; lr, tau float32 of that shape.
    Per-stream memory: threshold and buffer size are means over the streams, boundary the share
    of streams whose detector fired.
    """

    def scalar(t: torch.Tensor) -> torch.Tensor:
        t = t.float()
        return t.mean() if t.dim() > out.surprisal.dim() else t

    return StepMetrics(
        loss_total=out.loss_total.detach(),
        loss_pred=out.loss_pred,
        loss_reg=out.loss_reg,
        surprisal=out.surprisal,
        threshold=scalar(detector.threshold),
        boundary=scalar(fired),
        buffer_size=scalar(buffer.size),
        shift_share=buffer.shift_share(),
        lr=lr,
        tau=tau,
        delta_abs=out.delta_abs,
        attn_entropy=out.attn_entropy,
        valid_frac=out.valid_frac,
        norm_error=out.norm_error,
    )
