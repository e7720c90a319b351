"""Several runs trained at once in one process: ``MultiLearner.update(batches) -> StepMetrics``.

R runs of the same track and shapes (different seeds and a few scalar hyperparameters) are
stacked along a leading run dimension and stepped together. The step is the single learner's
(``agent.step``): ``forward_step`` under ``torch.func.functional_call`` + ``torch.func.vmap``
and ``step_metrics``; what this module adds is only what stacking needs:

- stacked state: parameters (R, ...) from ``torch.func.stack_module_state``, a parameter-free
  (meta-device) template for ``functional_call`` (so every kernel sees all R runs at once:
  convolutions become grouped convolutions, linears batched matmuls; the gradient of the sum
  of the R losses is each run's own gradient), ``StackedDetector``, ``StackedBuffer``;
- AdamW: the same fused kernel ``torch.optim.AdamW(fused=True)`` calls
  (``torch._fused_adamw_``), on the stacked tensors;
- EMA target: the single learner's ``torch._foreach_lerp_`` on the stacked tensors;
- lr / tau schedule tables on the device; optional CUDA graphs.

Everything stays on the device (no host sync per step). ``unstack(i)`` returns run i as an
ordinary ``Learner`` (checkpointable with ``agent.checkpoint``), ``from_learners`` stacks
existing ones. Optional: ``compile=True`` (``torch.compile`` of the vmapped forward) and
``cuda_graph=True`` (the whole step captured in a CUDA graph and replayed; CUDA only).
See docs/multirun.md.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from agent.build import Networks
from agent.config import AgentConfig
from agent.controls import FreezeControls
from agent.learner import Learner, frames_to_float
from agent.memory import BoundaryDetector, ExperienceBuffer
from agent.metrics import StepMetrics
from agent.schedules import lr_at, tau_at
from agent.sources import Batch
from agent.step import MemoryView, StepOutput, StepSpec, forward_step, step_metrics

# Config fields that may differ between stacked runs (everything else must be equal).
VARYING_FIELDS = (
    "seed",
    "lr",
    "weight_decay",
    "warmup_frac",
    "total_steps",
    "tau_base",
    "tau_end",
    "gamma",
    "lambda_reg",
    "kappa",
    "detector_momentum",
    "detector_warmup",
)

# torch.optim.AdamW defaults (the single learner uses them).
_BETAS = (0.9, 0.999)
_EPS = 1e-8


def check_stackable(configs: Sequence[AgentConfig]) -> None:
    """Raise ValueError unless the configs differ only in ``VARYING_FIELDS``."""
    if not configs:
        raise ValueError("configs: need at least one run")
    first = configs[0].to_dict()
    plain_values = (
        ("memory_scope", "global"), ("vary_memory", False), ("oracle", False),
        ("memory_write", "boundary"),
    )  # fmt: skip
    for name, plain in plain_values:
        if first[name] != plain:
            raise ValueError(
                f"{name}: stacked runs support only {name}={plain!r} (got {first[name]!r}); "
                f"train such runs one at a time with Learner"
            )
    for i, cfg in enumerate(configs[1:], start=1):
        for name, value in cfg.to_dict().items():
            if name not in VARYING_FIELDS and value != first[name]:
                raise ValueError(
                    f"{name}: run {i} has {value!r}, run 0 has {first[name]!r}; stacked runs "
                    f"may differ only in {', '.join(VARYING_FIELDS)}"
                )


def stack_batches(batches: Sequence[Batch]) -> Batch:
    """R per-run batches -> one Batch with frames (R, B, K+2, 1, 64, 64), valid/world (R, B)."""
    return Batch(
        torch.stack([b.frames for b in batches]),
        torch.stack([b.valid for b in batches]),
        torch.stack([b.world for b in batches]),
    )


# ------------------------------------------------------------------------------ memory
class StackedDetector(BoundaryDetector):
    """R boundary detectors as one: statistics (R,) float64, kappa / momentum / warmup (R,).

    ``update`` is ``BoundaryDetector.update`` itself (elementwise, so it runs unchanged on (R,)
    tensors); ``update_`` wraps it and writes the new statistics into the same storage (what a
    CUDA graph replay needs).
    """

    def __init__(self, detectors: Sequence[BoundaryDetector], device: torch.device) -> None:
        f64 = {"device": device, "dtype": torch.float64}
        self.device = device
        self.kappa = torch.tensor([d.kappa for d in detectors], **f64)  # type: ignore[assignment]
        momentum = torch.tensor([d.momentum for d in detectors], **f64)
        self.momentum = momentum  # type: ignore[assignment]
        self.warmup = torch.tensor(  # type: ignore[assignment]
            [d.warmup for d in detectors], device=device, dtype=torch.long
        )
        for name in ("mu", "var", "count", "threshold"):
            setattr(self, name, torch.stack([getattr(d, name).to(device) for d in detectors]))

    def update_(self, s: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """``update`` (s, active (R,)) -> fired (R,) bool, statistics updated in place."""
        old = (self.mu, self.var, self.count, self.threshold)
        fired = self.update(s, active)
        for name, dst in zip(("mu", "var", "count", "threshold"), old, strict=True):
            dst.copy_(getattr(self, name))
            setattr(self, name, dst)
        return fired

    def state_for(self, i: int) -> dict[str, torch.Tensor]:
        """Run i's ``BoundaryDetector.state_dict()``."""
        return {n: getattr(self, n)[i].clone() for n in ("mu", "var", "count", "threshold")}


class StackedBuffer:
    """R experience buffers as one: ``pairs`` (R, cap, 2, D) float32, ``world``/``steps``
    (R, cap) int64, ``ptr``/``size`` (R,) int64. Same FIFO semantics as ``ExperienceBuffer``;
    every write is a masked in-place update (no host read, fixed storage)."""

    def __init__(self, buffers: Sequence[ExperienceBuffer], device: torch.device) -> None:
        self.capacity = buffers[0].capacity
        self.latent_dim = buffers[0].latent_dim
        self.device = device
        for name in ("pairs", "world", "steps", "ptr", "size"):
            setattr(self, name, torch.stack([getattr(b, name).to(device) for b in buffers]))
        self._slots = torch.arange(self.capacity, device=device)

    def mask(self) -> torch.Tensor:
        """(R, cap) bool, True for filled slots."""
        return self._slots < self.size.unsqueeze(1)

    def shift_share(self) -> torch.Tensor:
        """(R,) float: share of each run's filled entries tagged world 1 (0 when empty)."""
        n = (self.world.eq(1) & self.mask()).sum(1)
        return n.float() / self.size.clamp(min=1).float()

    @torch.no_grad()
    def push_(
        self, pair: torch.Tensor, world: torch.Tensor, step: torch.Tensor, write: torch.Tensor
    ) -> None:
        """pair (R, 2, D), world (R,) int64, step 0-dim int64, write (R,) bool."""
        sel = (self._slots == self.ptr.unsqueeze(1)) & write.unsqueeze(1)  # (R, cap)
        self.pairs.copy_(
            torch.where(sel[:, :, None, None], pair.to(self.pairs.dtype).unsqueeze(1), self.pairs)
        )
        self.world.copy_(torch.where(sel, world.unsqueeze(1), self.world))
        self.steps.copy_(torch.where(sel, step, self.steps))
        inc = write.long()
        self.ptr.copy_((self.ptr + inc) % self.capacity)
        self.size.copy_(torch.clamp(self.size + inc, max=self.capacity))

    def state_for(self, i: int) -> dict[str, torch.Tensor]:
        """Run i's ``ExperienceBuffer.state_dict()``."""
        return {n: getattr(self, n)[i].clone() for n in ("pairs", "world", "steps", "ptr", "size")}


# ------------------------------------------------------------------------------ one run's step
class _StepCall(nn.Module):
    """``forward_step`` as a module call, for ``torch.func.functional_call`` (which swaps the
    parameters of a module): holds the template networks (on the meta device: no storage;
    every parameter is supplied by ``functional_call`` as ``nets.<name>``) and the spec."""

    def __init__(self, nets: Networks, spec: StepSpec) -> None:
        super().__init__()
        self.nets = nets
        self.spec = spec

    def forward(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        world: torch.Tensor,
        memory: MemoryView,
        gamma: float | torch.Tensor,
        lambda_reg: float | torch.Tensor,
        grad: bool,
    ) -> StepOutput:
        return forward_step(
            self.nets, x, w, world, memory,
            gamma=gamma, lambda_reg=lambda_reg, grad=grad, spec=self.spec,
        )  # fmt: skip


# ------------------------------------------------------------------------------ the multi-learner
class MultiLearner(FreezeControls):
    """R runs of one track trained in lockstep, every tensor with a leading run dimension.

    ``configs``: R AgentConfigs, equal except in ``VARYING_FIELDS`` (seed, lr, weight_decay,
    warmup_frac, total_steps, tau_base, tau_end, gamma, lambda_reg, kappa, detector_momentum,
    detector_warmup). Run i starts from exactly the state of ``Learner(configs[i])``.

    ``update(batch) -> StepMetrics`` with every field (R,): ``batch.frames`` (R, B, K+2, 1, 64,
    64) uint8, ``valid``/``world`` (R, B) (``stack_batches`` builds it from R Batches).
    ``compile``: False, True or a ``torch.compile`` mode string, applied to the vmapped forward.
    ``cuda_graph``: capture the whole step (forward, backward, AdamW, EMA, memory) in a CUDA
    graph per freeze state and replay it (CUDA only; batches are copied into static inputs).
    """

    def __init__(
        self,
        configs: Sequence[AgentConfig],
        device: torch.device | str = "cpu",
        *,
        compile: bool | str = False,
        cuda_graph: bool = False,
    ) -> None:
        check_stackable(configs)
        self._setup([Learner(c, device) for c in configs], compile, cuda_graph)

    @classmethod
    def from_learners(
        cls,
        learners: Sequence[Learner],
        device: torch.device | str | None = None,
        *,
        compile: bool | str = False,
        cuda_graph: bool = False,
    ) -> MultiLearner:
        """Stack existing learners (same step and freeze flag) with their full state (weights,
        EMA target, AdamW moments and step, detector, buffer). The learners are not modified."""
        if not learners:
            raise ValueError("learners: need at least one")
        check_stackable([ln.cfg for ln in learners])
        steps = {ln.step for ln in learners}
        frozen = {ln._manual_freeze for ln in learners}
        if len(steps) > 1 or len(frozen) > 1:
            raise ValueError("learners: all must be at the same step with the same freeze flag")
        if device is not None and torch.device(device) != learners[0].device:
            moved = []
            for ln in learners:
                copy_ = Learner(ln.cfg, device)
                copy_.load_state_dict(ln.state_dict())
                moved.append(copy_)
            learners = moved
        self = cls.__new__(cls)
        self._setup(list(learners), compile, cuda_graph)
        return self

    # ---------------------------------------------------------------- assembly
    def _setup(self, learners: list[Learner], compile: bool | str, cuda_graph: bool) -> None:
        first = learners[0]
        self.configs = [ln.cfg for ln in learners]
        self.cfg = first.cfg  # shared fields (track, shapes, precision, freeze steps)
        self.device = first.device
        self.n_runs = len(learners)
        self.step = first.step
        self._manual_freeze = first._manual_freeze
        dev = self.device

        # Networks: stacked parameters (R, ...), a storage-free template for functional_call.
        params, buffers = torch.func.stack_module_state([ln.nets for ln in learners])
        if buffers:
            raise ValueError(f"networks with buffers are not supported: {sorted(buffers)}")
        named = dict(first.nets.named_parameters())
        trainable = {id(p) for p in first.nets.trainable()}
        self.param_names = list(named)
        # The single learner's layouts (channels_last conv weights): per-run copies are made in
        # them, because its fused AdamW reads param and moments as flat memory of one layout.
        self._strides = {n: p.stride() for n, p in named.items()}
        self.trainable_names = [n for n in named if id(named[n]) in trainable]
        self.target_names = [n for n in named if n.startswith("target.")]
        self.params: dict[str, torch.Tensor] = {}
        for name in self.param_names:
            t = params[name].detach().clone(memory_format=torch.contiguous_format)
            self.params[name] = t.requires_grad_(name in self.trainable_names)
        template = copy.deepcopy(first.nets).to("meta")
        # vmap cannot run Encoder's channels_last copy: the plain layout (same values).
        self._fwd = _StepCall(template, StepSpec.from_config(self.cfg, dev, channels_last=False, host_reads=False))

        # Per-run scalars used inside the vmapped forward (floats when equal: bit-exact math).
        self._gamma = self._per_run("gamma")
        self._lambda = self._per_run("lambda_reg")

        # AdamW: stacked moments and one shared step counter (every run steps in lockstep).
        self._exp_avg = [torch.zeros_like(self.params[n]) for n in self.trainable_names]
        self._exp_avg_sq = [torch.zeros_like(self.params[n]) for n in self.trainable_names]
        self._adam_step = torch.zeros((), dtype=torch.float32, device=dev)
        if first.optimizer.state:
            for j, name in enumerate(self.trainable_names):
                for i, ln in enumerate(learners):
                    p = dict(ln.nets.named_parameters())[name]
                    st = ln.optimizer.state[p]
                    self._exp_avg[j][i].copy_(st["exp_avg"])
                    self._exp_avg_sq[j][i].copy_(st["exp_avg_sq"])
                    self._adam_step.copy_(st["step"])
        self._adam_groups = _groups(
            self.configs, lambda c: (c.lr, c.warmup_frac, c.total_steps, c.weight_decay)
        )
        self._ema_groups = _groups(self.configs, lambda c: (c.tau_base, c.tau_end, c.total_steps))

        # Schedules as device tables (R, T+1) for the per-step metrics and CUDA graphs.
        t_max = max(c.total_steps for c in self.configs)
        self._t_max = t_max
        lr_tab = [
            [lr_at(s, c.lr, c.total_steps, c.warmup_frac) for s in range(t_max + 1)]
            for c in self.configs
        ]
        tau_tab = [
            [tau_at(s, c.tau_base, c.tau_end, c.total_steps) for s in range(t_max + 1)]
            for c in self.configs
        ]
        self._lr_table = torch.tensor(lr_tab, dtype=torch.float64, device=dev)  # (R, T+1)
        self._tau_table = torch.tensor(tau_tab, dtype=torch.float64, device=dev)  # (R, T+1)

        self.detector = StackedDetector([ln.detector for ln in learners], dev)
        self.buffer = StackedBuffer([ln.buffer for ln in learners], dev)

        # Optional speed switches.
        self._vmapped = torch.func.vmap(
            self._call_run, in_dims=(0, 0, 0, 0, 0, self._gamma[1], self._lambda[1], None)
        )
        if compile:
            mode = compile if isinstance(compile, str) else None
            self._vmapped = torch.compile(self._vmapped, mode=mode, dynamic=False)
        if cuda_graph and dev.type != "cuda":
            raise ValueError("cuda_graph: needs a CUDA device")
        self.cuda_graph = cuda_graph
        self._graphs: dict[tuple[bool, bool, bool], Any] = {}
        self._static: dict[str, torch.Tensor] = {}
        self._step_dev = torch.full((), self.step, dtype=torch.long, device=dev)

    def _per_run(self, name: str) -> tuple[float | torch.Tensor, int | None]:
        """(value, vmap in_dim): a Python float when all runs agree, else an (R,) tensor."""
        values = [float(getattr(c, name)) for c in self.configs]
        if len(set(values)) == 1:
            return values[0], None
        return torch.tensor(values, dtype=torch.float32, device=self.device), 0

    def _call_run(
        self,
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        w: torch.Tensor,
        world: torch.Tensor,
        memory: MemoryView,
        gamma: float | torch.Tensor,
        lambda_reg: float | torch.Tensor,
        grad: bool,
    ) -> StepOutput:
        """One run's ``forward_step`` with its parameters ``params`` (vmapped over runs)."""
        full = {"nets." + n: p for n, p in params.items()}
        args = (x, w, world, memory, gamma, lambda_reg, grad)
        return torch.func.functional_call(self._fwd, full, args)

    # ---------------------------------------------------------------- the step
    def update(self, batch: Batch | Sequence[Batch]) -> StepMetrics:
        """One training step of every run. ``batch``: a stacked Batch (frames (R, B, K+2, 1, 64,
        64) uint8, valid/world (R, B)) or R Batches. Returns StepMetrics of (R,) tensors on the
        device; no host sync."""
        if not isinstance(batch, Batch):
            batch = stack_batches(batch)
        if batch.frames.shape[0] != self.n_runs:
            raise ValueError(
                f"batch: leading dimension {batch.frames.shape[0]} != {self.n_runs} runs"
            )
        key = (
            self.weights_frozen,
            self._frozen_at(self.cfg.freeze_ema_at),
            self._frozen_at(self.cfg.freeze_buffer_at),
        )
        if self.cuda_graph:
            out = self._graph_step(batch, key)
        else:
            lrs, taus = self._schedules()
            out = self._step(
                batch.frames.to(self.device),
                batch.valid.to(self.device),
                batch.world.to(self.device),
                lrs,
                taus,
                torch.full((), self.step, dtype=torch.long, device=self.device),
                self._table_column(),
                key,
            )
        self.step += 1
        return out

    def _schedules(self) -> tuple[list[float], list[float]]:
        """Per-Adam-group lr and per-EMA-group tau of this step (Python floats)."""
        lrs = [
            lr_at(self.step, c.lr, c.total_steps, c.warmup_frac)
            for c in (self.configs[g[0]] for g in self._adam_groups)
        ]
        taus = [
            tau_at(self.step, c.tau_base, c.tau_end, c.total_steps)
            for c in (self.configs[g[0]] for g in self._ema_groups)
        ]
        return lrs, taus

    def _table_column(self) -> torch.Tensor:
        return torch.full((), min(self.step, self._t_max), dtype=torch.long, device=self.device)

    def _step(
        self,
        frames: torch.Tensor,
        valid: torch.Tensor,
        world: torch.Tensor,
        lrs: Sequence[float | torch.Tensor],
        taus: Sequence[float | torch.Tensor],
        step: torch.Tensor,
        column: torch.Tensor,
        key: tuple[bool, bool, bool],
    ) -> StepMetrics:
        """The step on device tensors only (what a CUDA graph captures): ``Learner.update``'s
        sections with a run dimension. Returns StepMetrics of (R,) tensors."""
        frozen, ema_frozen, buffer_frozen = key
        r = self.n_runs
        x = frames_to_float(frames, self.cfg.input_scale)  # (R, B, K+2, 1, 64, 64)

        # 1.-2. Forward and loss of every run (agent.step.forward_step, vmapped over runs).
        out: StepOutput = self._vmapped(
            self.params,
            x,
            valid.float(),  # (R, B)
            world,
            MemoryView.of(self.buffer),  # (R, cap, 2, D), (R, cap)
            self._gamma[0],
            self._lambda[0],
            not frozen,
        )  # every field (R, ...)

        # 3. Backward (d sum_r loss_r / d theta_r = run r's own gradient) and AdamW.
        if not frozen:
            trainable = [self.params[n] for n in self.trainable_names]
            # The fused kernel reads every tensor as flat memory: grads must share the params'
            # (contiguous) layout, which autograd.grad does not promise (vmap'd bmm backward).
            grads = [g.contiguous() for g in torch.autograd.grad(out.loss_total.sum(), trainable)]
            self._adam_step.add_(1)
            for group, lr in zip(self._adam_groups, lrs, strict=True):
                self._adamw(group, trainable, grads, lr)

        # 4. EMA target update.
        if not frozen and not ema_frozen:
            for group, tau in zip(self._ema_groups, taus, strict=True):
                self._ema(group, tau)

        # 5. Memory: detector on the (R,) surprisals, buffer push of the batch-mean pair.
        with torch.no_grad():
            fired = self.detector.update_(out.surprisal, out.n_valid > 0)
            if not buffer_frozen:
                self.buffer.push_(out.pair, out.world, step, fired)
            return step_metrics(
                out,
                fired,
                self.detector,
                self.buffer,
                lr=self._lr_table.index_select(1, column.view(1)).view(r).float(),
                tau=self._tau_table.index_select(1, column.view(1)).view(r).float(),
            )

    @torch.no_grad()
    def _adamw(
        self,
        group: list[int],
        trainable: list[torch.Tensor],
        grads: list[torch.Tensor],
        lr: float | torch.Tensor,
    ) -> None:
        """torch.optim.AdamW(fused=True)'s kernel on the runs of ``group`` (whole stacked tensors
        when the group is every run, else per-run views)."""
        wd = self.configs[group[0]].weight_decay
        if len(group) == self.n_runs:
            ps, gs, ms, vs = trainable, grads, self._exp_avg, self._exp_avg_sq
        else:
            ps = [t[i] for t in trainable for i in group]
            gs = [t[i] for t in grads for i in group]
            ms = [t[i] for t in self._exp_avg for i in group]
            vs = [t[i] for t in self._exp_avg_sq for i in group]
        torch._fused_adamw_(
            ps, gs, ms, vs, [], [self._adam_step] * len(ps),
            amsgrad=False, lr=lr, beta1=_BETAS[0], beta2=_BETAS[1], weight_decay=wd, eps=_EPS,
            maximize=False,
        )  # fmt: skip

    @torch.no_grad()
    def _ema(self, group: list[int], tau: float | torch.Tensor) -> None:
        """EMATarget.update on the runs of ``group``: target <- lerp(target, encoder, 1 - tau)."""
        tgt = [self.params[n] for n in self.target_names]
        src = [
            self.params["encoder." + n[len("target.target.") :]].detach() for n in self.target_names
        ]
        if len(group) != self.n_runs:
            tgt = [t[i] for t in tgt for i in group]
            src = [s[i] for s in src for i in group]
        if isinstance(tau, torch.Tensor):
            torch._foreach_lerp_(tgt, src, [1.0 - tau] * len(tgt))  # type: ignore[arg-type]
        else:
            torch._foreach_lerp_(tgt, src, 1.0 - tau)

    # ---------------------------------------------------------------- CUDA graphs
    def _graph_step(self, batch: Batch, key: tuple[bool, bool, bool]) -> StepMetrics:
        """Copy the batch into static inputs, replay (capturing first) the graph of ``key``."""
        st = self._static
        if not st:
            st["frames"] = batch.frames.to(self.device).clone()
            st["valid"] = batch.valid.to(self.device).clone()
            st["world"] = batch.world.to(self.device).clone()
        st["frames"].copy_(batch.frames, non_blocking=True)
        st["valid"].copy_(batch.valid, non_blocking=True)
        st["world"].copy_(batch.world, non_blocking=True)
        if key not in self._graphs:
            self._graphs[key] = self._capture(key)
        graph, out = self._graphs[key]
        graph.replay()
        return StepMetrics(*(t.clone() for t in out))

    def _device_schedules(self) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """lr / tau per group as 0-dim device tensors read from the tables at the device step."""
        col = self._step_dev.clamp(max=self._t_max).view(1)
        lrs = [self._lr_table[g[0]].index_select(0, col).view(()) for g in self._adam_groups]
        taus = [self._tau_table[g[0]].index_select(0, col).view(()) for g in self._ema_groups]
        return lrs, taus, col.view(())

    def _capture(self, key: tuple[bool, bool, bool]) -> tuple[Any, StepMetrics]:
        """Capture the step of ``key`` (state is snapshotted around the warmup and restored)."""
        state = self._state_tensors()
        saved = [t.detach().clone() for t in state]
        st = self._static

        def body() -> StepMetrics:
            lrs, taus, col = self._device_schedules()
            out = self._step(st["frames"], st["valid"], st["world"], lrs, taus,
                             self._step_dev, col, key)  # fmt: skip
            self._step_dev.add_(1)
            return out

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                body()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = body()
        with torch.no_grad():
            for t, s in zip(state, saved, strict=True):
                t.copy_(s)
        return graph, out

    def _state_tensors(self) -> list[torch.Tensor]:
        """Every tensor the step mutates (for snapshot / restore around a capture)."""
        det = self.detector
        buf = self.buffer
        return [
            *self.params.values(),
            *self._exp_avg,
            *self._exp_avg_sq,
            self._adam_step,
            det.mu, det.var, det.count, det.threshold,
            buf.pairs, buf.world, buf.steps, buf.ptr, buf.size,
            self._step_dev,
        ]  # fmt: skip

    # ---------------------------------------------------------------- per-run views
    def unstack(self, i: int) -> Learner:
        """Run i as an independent ``Learner`` (copies; save it with ``save_checkpoint``)."""
        cfg = self.configs[i]
        learner = Learner(cfg, self.device)
        learner.load_state_dict(self.state_dict_for(i))
        return learner

    def state_dict_for(self, i: int) -> dict[str, Any]:
        """Run i's ``Learner.state_dict()`` (loadable by ``Learner.load_state_dict`` and, via
        ``unstack(i)``, by ``agent.checkpoint``)."""
        if not 0 <= i < self.n_runs:
            raise IndexError(f"run {i} out of range for {self.n_runs} runs")
        cfg = self.configs[i]
        nets = {n: self._in_layout(n, self.params[n][i].detach()) for n in self.param_names}
        state: dict[int, dict[str, torch.Tensor]] = {}
        if float(self._adam_step) > 0:  # host read: fine outside update()
            for j, name in enumerate(self.trainable_names):
                state[j] = {
                    "step": self._adam_step.clone(),
                    "exp_avg": self._in_layout(name, self._exp_avg[j][i]),
                    "exp_avg_sq": self._in_layout(name, self._exp_avg_sq[j][i]),
                }
        last = max(self.step - 1, 0)
        lr = lr_at(last, cfg.lr, cfg.total_steps, cfg.warmup_frac) if self.step else cfg.lr
        group = _adamw_group(cfg, lr, len(self.trainable_names))
        return {
            "step": self.step,
            "manual_freeze": self._manual_freeze,
            "nets": nets,
            "optimizer": {"state": state, "param_groups": [group]},
            "detector": self.detector.state_for(i),
            "buffer": self.buffer.state_for(i),
        }

    def _in_layout(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """A copy of one run's slice of ``name`` in the single learner's strides."""
        out = torch.empty_strided(t.shape, self._strides[name], dtype=t.dtype, device=t.device)
        return out.copy_(t)


def _groups(configs: Sequence[AgentConfig], key: Callable[[AgentConfig], tuple]) -> list[list[int]]:
    """Run indices grouped by ``key`` (first-seen order)."""
    out: dict[tuple, list[int]] = {}
    for i, cfg in enumerate(configs):
        out.setdefault(key(cfg), []).append(i)
    return list(out.values())


def _adamw_group(cfg: AgentConfig, lr: float, n_params: int) -> dict[str, Any]:
    """The param group ``agent.build.build_optimizer``'s AdamW would save (this torch's keys)."""
    probe = torch.optim.AdamW(
        [torch.zeros(1)], lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True
    )
    group = probe.state_dict()["param_groups"][0]
    group.update(lr=lr, params=list(range(n_params)))
    return group
