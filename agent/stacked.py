"""StackedLearner: S seeds of one learner configuration trained as one (``agent.seeds``).

Each seed keeps what makes it that seed's run: its initial weights (``build_networks`` of its
config), its world memories and detector statistics, its optimizer state, its generator of
memory draws, and its stream, whose batch it is given each step. What is shared is the work:
the S seeds' networks are one ``SeedStack`` (every parameter with a leading seed dimension),
their forward runs once under ``torch.func.vmap``, their S losses are summed for one backward
(the seeds share no parameter, so each gets its own gradient), and one fused AdamW and one EMA
update act on the stacked tensors (both elementwise: each seed's own update).

The layout is seed-major throughout: the stacked batch is (S * B, ...), seed s's streams at
rows s * B .. (s + 1) * B - 1; the world memories and detectors are the S seeds' W groups each,
seed s's at s * W .. (s + 1) * W - 1, so the group memory's and detector's own code, which keeps
groups apart, keeps the seeds apart too. Each step returns one ``StepMetrics`` per seed.

The stacked step is the plain step (``agent.step.jepa_step``) of each seed to
rounding (``tests/agent/test_stacked.py``). It covers the worlds protocol's memory
(``memory_scope="group"``) and the plain path: no stream latent cache, no work beside the
encoder, no capture yet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import torch

from agent.build import build_networks
from agent.capture import CapturedStep
from agent.config import AgentConfig, bf16_unsupported
from agent.ema import lerp_towards
from agent.memory import BoundaryDetector, GroupBuffer
from agent.metrics import StepMetrics, normalised_error
from agent.schedules import knobs_at
from agent.seeds import SeedStack
from agent.sources import Batch
from agent.spec import StepSpec
from agent.step import (
    Knobs,
    MemoryView,
    Model,
    as_metric,
    base_error,
    boundary,
    context_latents,
    earlier_latents,
    episode_key,
    input_latent,
    memory_codes,
    modulated_prediction,
    newest_pair,
    push,
    target_latents,
    world_key,
)


class SeedForward(NamedTuple):
    """One seed's forward, as ``SeedStack.map`` returns it (tensors only, a leading seed
    dimension added): the loss, the surprisal and memory entry of each sample, the metrics'
    per-seed parts."""

    loss_total: torch.Tensor
    loss_pred: torch.Tensor
    loss_reg: torch.Tensor
    err: torch.Tensor  # (B,) the base predictor's surprisal
    entry: torch.Tensor  # (B, E, D) float32, each sample's memory entry
    delta_abs: torch.Tensor  # () NaN without modulation scales
    attn_entropy: torch.Tensor  # () NaN without attention
    norm_error: torch.Tensor  # ()


def seed_forward(
    nets: Any,
    frames: torch.Tensor,
    valid: torch.Tensor,
    pairs: torch.Tensor,
    mask: torch.Tensor,
    group: torch.Tensor,
    physics: torch.Tensor | None,
    spec: StepSpec,
    learn: bool,
) -> SeedForward:
    """One seed's part of the step that reads its networks (``agent.step.jepa_step``'s steps 1-3
    and its metrics' forward parts): frames (B, F, 1, 64, 64), valid (B,), its group memories
    pairs (W, cap, E, D) with each sample's mask (B, cap) and group (B,) in 0..W-1."""
    memory = MemoryView(pairs, mask, group)
    w = valid.float()
    with torch.no_grad(), spec.autocast():
        targets = target_latents(nets, frames, spec)
    with torch.set_grad_enabled(learn):
        codes = memory_codes(nets, memory, spec)
    with spec.autocast(), torch.set_grad_enabled(learn):
        z = context_latents(nets, frames, spec)
        mod, agg = modulated_prediction(nets, z, memory, spec, physics, codes)
    pred, targets = mod.pred.float(), targets.float()
    loss = spec.objective(pred, targets, w, z)
    with torch.no_grad():
        err = base_error(nets, z, mod, targets, spec)
        entry = _entry(nets, frames, z, spec)
        denom = w.sum().clamp(min=1.0)
        nan = torch.full((), math.nan, device=w.device)
        delta_abs = attn_entropy = nan
        if mod.scales is not None:
            delta_abs = (mod.scales.detach().float().abs().mean(1) * w).sum() / denom
        if agg is not None:
            at = agg.attn.detach().float()
            attn_entropy = (-torch.special.xlogy(at, at).sum(1) * w).sum() / denom
        d = normalised_error(pred.detach(), input_latent(z).detach(), targets, spec.norm_eps,
                             w > 0)[0]  # fmt: skip
    return SeedForward(loss.total, loss.pred, loss.reg, err, entry, delta_abs, attn_entropy,
                       d.float())  # fmt: skip


def _entry(nets: Any, frames: torch.Tensor, z: torch.Tensor, spec: StepSpec) -> torch.Tensor:
    """Each sample's memory entry (B, E, D) float32 (``agent.step.memory_pairs`` without the
    stream cache): the paper's newest pair, or the input's own E latents."""
    if spec.push_pair == "newest":
        with spec.autocast():
            return newest_pair(nets, frames, spec).float()
    ctx = (z if z.dim() == 3 else z.unsqueeze(1)).detach()
    if ctx.shape[1] >= spec.entry:
        return ctx[:, -spec.entry :].float()
    with spec.autocast():
        before = earlier_latents(nets, frames, spec, spec.entry - ctx.shape[1])
    return torch.cat([before.to(ctx.dtype), ctx], 1).float()


class StackedLearner:
    """S learners of one configuration (``cfgs``: equal but for ``seed``) as one stacked
    learner; ``update(batches)`` takes each seed's batch and returns each seed's metrics.
    ``captured``: the stacked step replayed from CUDA graphs on a GPU (``agent.capture``; on a
    CPU the same path runs eagerly)."""

    def __init__(
        self, cfgs: Sequence[AgentConfig], device: torch.device | str = "cpu",
        captured: bool = False,
    ) -> None:  # fmt: skip
        if not cfgs:
            raise ValueError("a stacked learner needs at least one seed")
        base = cfgs[0]
        if any(replace(c, seed=base.seed) != base for c in cfgs[1:]):
            raise ValueError("stacked seeds must share their configuration but for the seed")
        if base.memory_scope != "group":
            raise ValueError("stacked seeds need memory_scope='group' (the worlds protocol's)")
        if base.stream_cache:
            raise ValueError("stacked seeds encode every frame afresh: set stream_cache=false")
        if base.total_steps is None:
            raise ValueError("total_steps: None is for a runner to fill in")
        if base.predictor_blocks:
            raise ValueError("stacked seeds run the listing's predictor: predictor_blocks=0")
        if base.settle is not None:
            raise ValueError("stacked seeds have no reservoir: settle=None")
        if base.encoder_lr_scale != 1.0:
            raise ValueError("stacked seeds have one rate: encoder_lr_scale=1")
        if base.encoder_batch is not None:
            raise ValueError("stacked seeds: every stream gives the encoder its gradient "
                             "(encoder_batch=None)")
        self.cfgs, self.cfg, self.seeds = list(cfgs), base, len(cfgs)
        self.device = torch.device(device)
        why = bf16_unsupported(self.device) if base.precision == "bf16" else None
        if why:
            raise ValueError(f"precision: bf16 cannot run here: {why} (use fp32)")
        self.spec = StepSpec.from_config(base, self.device)
        self.stack = SeedStack([build_networks(c).to(self.device) for c in cfgs])
        trainable = [p for n, p in self.stack.params.items()
                     if p.requires_grad and not n.startswith("target.")]  # fmt: skip
        self.optimizer = torch.optim.AdamW(trainable, lr=base.lr, weight_decay=base.weight_decay,
                                           fused=True)  # fmt: skip
        prefix = "target.target."  # the EMA copy's parameter names, the encoder's after it
        self._ema = [(p, self.stack.params["encoder." + n[len(prefix) :]])
                     for n, p in self.stack.params.items() if n.startswith(prefix)]  # fmt: skip
        w = base.num_groups
        self.detector = BoundaryDetector(base.kappa, base.detector_momentum, base.detector_warmup,
                                         self.device, streams=self.seeds * w)  # fmt: skip
        self.buffer = GroupBuffer(self.seeds * w, base.buffer_capacity, base.latent_dim,
                                  self.device, frames=base.entry_frames)  # fmt: skip
        b = base.batch_size
        self.groups = torch.arange(self.seeds * b, device=self.device) // base.group_size
        self.local_groups = self.groups[:b]  # each seed's samples' groups, 0..W-1
        self.memory_rngs = []
        for c in cfgs:
            g = torch.Generator(self.device)
            g.manual_seed(c.seed)
            self.memory_rngs.append(g)
        self.step = 0
        self._frozen = False
        self.latents = None  # no stream latent cache (what a captured step needs too)
        self.captured: CapturedStep | None = None  # the stacked step as CUDA graphs
        if captured:
            self.captured = CapturedStep(self)

    # ---------------------------------------------------------------- controls
    @property
    def weights_frozen(self) -> bool:
        return self._frozen

    def freeze_weights(self) -> None:
        """Stop weight and EMA updates of every seed (memory mode)."""
        self._frozen = True

    def unfreeze_weights(self) -> None:
        self._frozen = False

    def knobs(self) -> Knobs:
        """This step's schedule values and flags (every seed's: one schedule)."""
        return knobs_at(self.cfg, self.step, self._frozen)

    def memory_draws(self, training: bool) -> torch.Tensor | None:
        """This step's draws of how much memory each sample sees (``cfg.vary_memory``, while
        training), (S * B,): each seed's B from its own generator; None otherwise."""
        if not (training and self.cfg.vary_memory):
            return None
        return torch.cat([torch.rand(self.cfg.batch_size, generator=g, device=self.device)
                          for g in self.memory_rngs])  # fmt: skip

    def memory_view(
        self, training: bool, batch: Batch, u: torch.Tensor | None = None
    ) -> MemoryView:
        """Each sample's view of its world memory (``Learner.memory_view``; ``u``: this step's
        ``memory_draws``, drawn when None)."""
        if u is None:
            u = self.memory_draws(training)
        episode = episode_key(batch) if self.cfg.memory_read == "peer" else None
        return MemoryView.of_group(self.buffer, self.groups, episode, u)

    # ---------------------------------------------------------------- the step
    def update(self, batches: Sequence[Batch]) -> list[StepMetrics]:
        """One step of every seed, seed s on ``batches[s]``; each seed's ``StepMetrics``.
        Replayed from CUDA graphs when ``captured`` (``agent.capture``)."""
        if len(batches) != self.seeds:
            raise ValueError(f"expected {self.seeds} batches (one a seed), got {len(batches)}")
        batch = stack_batches([b.to(self.device) for b in batches])
        knobs = self.knobs()
        if self.captured is not None:
            columns = self.captured.update(batch, knobs)
        else:
            columns = self.step_on(batch.to(self.device), knobs)
        self.step += 1
        return [StepMetrics(*(c[i] for c in columns)) for i in range(self.seeds)]

    def step_on(
        self, batch: Batch, knobs: Knobs, u: torch.Tensor | None = None
    ) -> StepMetrics:
        """The stacked step on a stacked batch on the device; its metrics as columns (each
        field (S,), seed s's at s)."""
        memory = self.memory_view(knobs.learn, batch, u)
        local = self.local_groups.repeat(self.seeds)
        fwd = self.stack.map(
            seed_forward, batch.frames, batch.valid, memory.pairs, memory.mask, local,
            batch.physics, self.spec, knobs.learn,
        )  # fmt: skip
        w = batch.valid.float()
        err = fwd.err.flatten(0, 1)
        m = Model(None, self.optimizer, self.detector, self.buffer, self.spec)  # type: ignore[arg-type]
        with torch.no_grad():
            fired, write = boundary(m, err, batch.valid, w, self.groups)
        if knobs.learn:
            for group in self.optimizer.param_groups:
                group["lr"] = knobs.lr
            self.optimizer.zero_grad(set_to_none=True)
            fwd.loss_total.sum().backward()
            self.optimizer.step()
            if knobs.ema:
                tgt, src = zip(*self._ema, strict=True)
                lerp_towards(list(tgt), list(src), knobs.tau)
        with torch.no_grad():
            self.buffer.enter(self.groups, world_key(batch))
            if knobs.write:
                push(m, fwd.entry.flatten(0, 1), batch, w, write, knobs.step, self.groups)
            return self._metrics(knobs, fwd, err, w, fired)

    def _metrics(
        self, knobs: Knobs, fwd: SeedForward, err: torch.Tensor, w: torch.Tensor,
        fired: torch.Tensor,
    ) -> StepMetrics:  # fmt: skip
        """Each seed's ``StepMetrics`` as columns (``agent.step.step_metrics`` over each seed's
        own samples and world memories)."""
        s = self.seeds
        ws = w.view(s, -1)
        n_valid = ws.sum(1)
        size = self.buffer.size.view(s, -1)
        shifted = (self.buffer.shifted.eq(1) & self.buffer.mask()).view(s, -1).sum(1)
        return StepMetrics(
            loss_total=fwd.loss_total.detach(),
            loss_pred=fwd.loss_pred.detach(),
            loss_reg=fwd.loss_reg.detach(),
            surprisal=(err.view(s, -1) * ws).sum(1) / n_valid.clamp(min=1.0),
            threshold=self.detector.threshold.float().view(s, -1).mean(1),
            boundary=fired.float().view(s, -1).mean(1),
            buffer_size=size.float().mean(1),
            shift_share=shifted.float() / size.sum(1).clamp(min=1).float(),
            lr=as_metric(knobs.lr, self.device).expand(s),
            tau=as_metric(knobs.tau, self.device).expand(s),
            delta_abs=fwd.delta_abs,
            attn_entropy=fwd.attn_entropy,
            valid_frac=n_valid / ws.shape[1],
            norm_error=fwd.norm_error,
        )

    # ---------------------------------------------------------------- state
    def state_dicts(self) -> list[dict[str, Any]]:
        """Each seed's ``Learner.state_dict()``: its weights, optimizer state, detector and
        world memories, step and generator, as its lone learner writes them (a lone learner of
        its config loads it; the memory's spare row, where non-writing streams scatter and
        nothing reads, is the stack's)."""
        nets = self.stack.state_dicts()
        opt = self.optimizer.state_dict()
        det, buf = self.detector.state_dict(), self.buffer.state_dict()
        w, cap = self.cfg.num_groups, self.cfg.buffer_capacity
        out = []
        for s in range(self.seeds):
            groups, slots = slice(s * w, (s + 1) * w), slice(s * w * cap, (s + 1) * w * cap)
            memory = {}
            for name, t in buf.items():
                if t.shape[0] == self.seeds * w:
                    memory[name] = t[groups].clone()
                else:  # flat slots, then the spare row
                    memory[name] = torch.cat([t[slots], t[-1:]]).clone()
            out.append({
                "step": self.step,
                "manual_freeze": self._frozen,
                "nets": nets[s],
                "optimizer": {
                    "state": {i: {k: (v if k == "step" else v[s]).clone() for k, v in st.items()}
                              for i, st in opt["state"].items()},
                    "param_groups": opt["param_groups"],
                },
                "detector": {k: v[groups].clone() for k, v in det.items()},
                "buffer": memory,
                "memory_rng": self.memory_rngs[s].get_state(),
                "latents": None,
            })  # fmt: skip
        return out

    def load_state_dicts(self, states: Sequence[dict[str, Any]]) -> None:
        """Load S lone learners' state dicts (``state_dicts``' layout; all at one step), in
        place for the weights (the optimizer keeps them); a captured step captures afresh."""
        if len(states) != self.seeds:
            raise ValueError(f"expected {self.seeds} state dicts, got {len(states)}")
        steps = {int(st["step"]) for st in states}
        if len(steps) != 1:
            raise ValueError(f"stacked seeds resume at one step, got steps {sorted(steps)}")
        self.stack.load_state_dicts([st["nets"] for st in states])  # in place: AdamW's params
        first = states[0]["optimizer"]
        self.optimizer.load_state_dict({
            "state": {i: {k: v.clone() if k == "step" else torch.stack(
                [st["optimizer"]["state"][i][k] for st in states]) for k, v in part.items()}
                for i, part in first["state"].items()},
            "param_groups": first["param_groups"],
        })  # fmt: skip
        self.detector.load_state_dict(
            {k: torch.cat([st["detector"][k] for st in states]) for k in states[0]["detector"]}
        )
        w, cap = self.cfg.num_groups, self.cfg.buffer_capacity
        memory = {}
        for name in GroupBuffer._STATE:
            parts = [st["buffer"][name] for st in states]
            if parts[0].shape[0] == w:
                memory[name] = torch.cat(parts)
            else:  # the seeds' slots, then one spare row
                memory[name] = torch.cat([p[: w * cap] for p in parts] + [parts[0][-1:]])
        self.buffer.load_state_dict(memory)
        for g, st in zip(self.memory_rngs, states, strict=True):
            g.set_state(st["memory_rng"].cpu())
        self.step = steps.pop()
        self._frozen = bool(states[0]["manual_freeze"])
        if self.captured is not None:  # the graphs read the tensors just replaced
            self.captured.reset()


def stack_batches(batches: Sequence[Batch]) -> Batch:
    """The seeds' batches as one, seed-major (each field concatenated; None where any is)."""

    def cat(name: str) -> torch.Tensor | None:
        parts = [getattr(b, name) for b in batches]
        return None if any(p is None for p in parts) else torch.cat(parts)

    return Batch(frames=cat("frames"), valid=cat("valid"), shifted=cat("shifted"),
                 physics=cat("physics"), clock=None, episode=cat("episode"),
                 world_key=cat("world_key"))  # fmt: skip
