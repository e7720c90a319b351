"""The whole update as one CUDA graph: ``CapturedStep`` (``Learner(captured=True)``).

docs/agent.md, "The update as one CUDA graph", says what the graph holds (everything
``Learner.update`` does on the device), what enters it through tensors written before each replay
(the batch, the knobs, ``vary_memory``'s draws), which flags choose among graphs, and why every
update runs exactly once. Where capture is off (a CPU, or ``capture=False``) the same path runs
eagerly: on a CPU the plain step's numbers bit for bit (``tests/agent/test_capture.py``).
``graph=CallGraph`` puts a stand-in in a CUDA graph's place, so the whole machinery (static
inputs, warmup, graphs per flag combination, replay, copy-out, reset) runs, and is tested, on a
CPU; only the CUDA graph itself (its recording, the side stream, the capturable AdamW's kernels)
needs a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from functools import partial
from typing import Any

import torch

from agent.objective import StepMetrics
from agent.sources import Batch
from agent.step import Knobs

Key = tuple[bool, bool, bool]  # (learn, ema, write)


class CallGraph:
    """A CUDA graph's stand-in (``CapturedStep(graph=CallGraph)``): ``capture(run)`` records
    ``run`` and hands out the metrics' static tensors; each ``replay()`` calls ``run`` and writes
    its metrics into them in place, as a graph's replay overwrites the outputs it owns."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.run: Callable[[], StepMetrics] | None = None
        self.out: StepMetrics | None = None

    def capture(self, run: Callable[[], StepMetrics]) -> StepMetrics:
        self.run = run
        self.out = StepMetrics(*(torch.empty(0, device=self.device) for _ in StepMetrics._fields))
        return self.out

    def replay(self) -> None:
        assert self.run is not None and self.out is not None, "replay before capture"
        for static, value in zip(self.out, self.run(), strict=True):
            static.resize_(value.shape).copy_(value)


class CapturedStep:
    """``update(batch, knobs) -> StepMetrics`` for ``learner``, replayed from CUDA graphs on a
    GPU (``capture``), eagerly with the same tensor inputs elsewhere."""

    def __init__(
        self, learner: Any, capture: bool | None = None, warmup: int = 3,
        graph: Callable[[torch.device], CallGraph] | None = None,
    ) -> None:  # fmt: skip
        """``learner``: the ``agent.Learner`` whose update this is (its networks, optimizer,
        memory and generator); ``capture``: None for a GPU's default (on); ``graph``: what
        captures in a CUDA graph's place (``CallGraph``, on any device), None for CUDA graphs."""
        if learner.latents is not None:
            raise ValueError("a captured step cannot replay the stream latent cache (Python "
                             "dictionaries by stream time): set stream_cache=false")  # fmt: skip
        self.learner = learner
        device = learner.device
        self.capture = device.type == "cuda" if capture is None else capture
        self.graph = graph
        if self.capture and device.type != "cuda" and graph is None:
            raise ValueError(f"CUDA graphs need a CUDA device, the learner is on {device}")
        self.warmup = int(warmup)
        self.body = learner.step_on
        # The fused AdamW's tensor lr and the EMA's tensor weight: float32 on a GPU (its fused
        # kernels take no other), float64 on a CPU (computing as the plain step's floats do).
        knob = torch.float32 if device.type == "cuda" else torch.float64
        self.lr = torch.zeros((), dtype=knob, device=device)
        self.tau = torch.zeros((), dtype=knob, device=device)
        self.step = torch.zeros((), dtype=torch.long, device=device)
        self.draws: torch.Tensor | None = None  # vary_memory's draws, allocated by the first
        self.batch: Batch | None = None  # the static inputs, allocated by the first batch
        self.graphs: dict[Key, tuple[torch.cuda.CUDAGraph | CallGraph, StepMetrics]] = {}
        self.eager_steps: dict[Key, int] = {}  # eager steps of each flag combination
        self._set_optimizer()

    def _set_optimizer(self) -> None:
        for group in self.learner.optimizer.param_groups:
            group["lr"] = self.lr  # the fused AdamW's tensor learning rate
            if self.capture:
                group["capturable"] = True

    def reset(self) -> None:
        """Drop the graphs (the learner's tensors were replaced: a loaded state dict, whose
        optimizer groups are set for capture again) and warm up afresh."""
        self.graphs.clear()
        self.eager_steps.clear()
        self._set_optimizer()

    # ------------------------------------------------------------------ one update
    def update(self, batch: Batch, knobs: Knobs) -> StepMetrics:
        """One update with ``knobs`` (numbers, from ``Learner.knobs``) on ``batch``."""
        learner = self.learner
        self.lr.fill_(knobs.lr)
        self.tau.fill_(knobs.tau)
        self.step.fill_(knobs.step)
        draws = learner.memory_draws(knobs.learn)
        if draws is not None:
            self.draws = draws.clone() if self.draws is None else self.draws.copy_(draws)
        self._fill(batch.to(learner.device))
        key = (knobs.learn, knobs.ema, knobs.write)
        # The static inputs, bound now: a graph reads the tensors it recorded, every replay.
        run = partial(self.body, self.batch, Knobs(self.step, self.lr, self.tau, *key),
                      None if draws is None else self.draws)  # fmt: skip
        eager = self.eager_steps.get(key, 0)
        if not self.capture or eager < self.warmup:
            self.eager_steps[key] = eager + 1
            return self._eager(run)
        if key not in self.graphs:
            self.graphs[key] = self._capture(run)
        graph, out = self.graphs[key]
        graph.replay()
        values = torch.stack(list(out))  # copied out: the next replay overwrites ``out``
        return StepMetrics(*values.unbind())

    def _eager(self, run: Callable[[], StepMetrics]) -> StepMetrics:
        if not self.capture or self.learner.device.type != "cuda":
            return run()
        side = torch.cuda.Stream(self.learner.device)
        side.wait_stream(torch.cuda.current_stream(self.learner.device))
        with torch.cuda.stream(side):
            metrics = run()
        torch.cuda.current_stream(self.learner.device).wait_stream(side)
        return metrics

    def _capture(
        self, run: Callable[[], StepMetrics]
    ) -> tuple[torch.cuda.CUDAGraph | CallGraph, StepMetrics]:
        """Record ``run`` (nothing executes while recording); the caller replays it."""
        if self.graph is not None:
            stand_in = self.graph(self.learner.device)
            return stand_in, stand_in.capture(run)
        graph = torch.cuda.CUDAGraph()
        cache = torch.is_autocast_cache_enabled()
        torch.set_autocast_cache_enabled(False)  # autocast's cast cache cannot be replayed
        try:
            with torch.cuda.graph(graph):
                out = run()
        finally:
            torch.set_autocast_cache_enabled(cache)
        return graph, out

    def _fill(self, batch: Batch) -> None:
        """Copy ``batch``'s tensors into the static inputs (allocated, and fixed, by the first
        batch; no clock)."""
        tensors = {f.name: getattr(batch, f.name) for f in fields(Batch) if f.name != "clock"}
        if self.batch is None:
            self.batch = Batch(**{n: None if t is None else t.clone() for n, t in tensors.items()})
            return
        for name, new in tensors.items():
            static = getattr(self.batch, name)
            if (static is None) != (new is None) or (static is not None and static.shape != new.shape):
                raise ValueError("a captured step's batches must all have the first's layout")
            if static is not None:
                static.copy_(new, non_blocking=True)
