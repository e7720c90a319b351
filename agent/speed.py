"""How ``jepa_step`` gets the pieces that need nothing of the online encoder: ``Plain``, and the
speed layers around it.

``Plain`` computes each piece where the step asks for it, on the calling thread, with no host
read: the step as written. Each layer wraps another (``Layer.inner``) and changes one thing; each
is switched on its own (``Speed``) and tested against ``Plain``:

- ``VisibleSlots``: a group memory's e_i only on the slots some sample of the world sees (a host read of
  their count; a CPU's default). Same e_i; the matmuls have fewer rows, so rounding may differ.
- ``LazyPair``: the paper's memory pair (2B frames through the online encoder) only on the
  steps that write it (a host read of the detector's decision; a CPU's default). Same bits.
- ``StreamCache``: stream frames meet the EMA encoder once (``agent.latent_cache``,
  ``cfg.stream_cache``). Exact with still weights; while training a target latent is up to
  max(h) - min(h) steps old (docs/agent.md, "The stream latent cache"); a memory entry's older
  frames are earlier steps' input latents.
- ``Beside``: the EMA targets and the memory's e_i (forward and backward) on a second thread while
  this one runs the online encoder (a CPU with one torch thread and a spare core). Same bits.

The pieces come back as ``agent.step.Piece`` s (``result()``): ``Plain``'s already computed
(``Done``), ``Beside``'s as the second thread's futures.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from agent.config import AgentConfig
from agent.latent_cache import LatentCache
from agent.sources import Batch
from agent.step import (
    MemoryView,
    Model,
    Piece,
    earlier_latents,
    encode,
    memory_codes,
    target_latents,
)


class Done:
    """A piece already computed (``Plain``'s): ``result()`` gives it. A finished ``Future``
    without the lock a ``Future`` makes, at which a traced step (``torch.compile``) would break
    its graph."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


def done(value: Any) -> Done:
    """A piece that already holds ``value``."""
    return Done(value)


class Plain:
    """The plain step's pieces: each computed where the step asks for it."""

    def targets(self, m: Model, batch: Batch) -> Piece:
        """-> (B, K, D): the EMA-target latents of the batch's target frames."""
        with torch.no_grad(), m.spec.autocast():
            return done(target_latents(m.nets, batch.frames, m.spec))

    def codes(self, m: Model, memory: MemoryView, grad: bool) -> Piece:
        """-> (.., cap, exp_dim) | None: the memory's e_i (``agent.step.memory_codes``)."""
        with torch.set_grad_enabled(grad):
            return done(memory_codes(m.nets, memory, m.spec))

    def earlier(self, m: Model, batch: Batch, k: int) -> torch.Tensor:
        """(B, k, D): the online latents of the k frames before the context frames (the
        oldest of the input's memory entry)."""
        with torch.no_grad(), m.spec.autocast():
            return earlier_latents(m.nets, batch.frames, m.spec, k)

    def pair_needed(self, write: torch.Tensor) -> bool:
        """Whether to compute the memory pair: always (deciding from ``write`` is a host read)."""
        return True

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def done(self, batch: Batch, z: torch.Tensor) -> None:
        """The step is over; z (B, D) is its input latent."""


class Layer(Plain):
    """A speed layer: ``inner``'s pieces, one of them computed another way."""

    def __init__(self, inner: Plain) -> None:
        self.inner = inner

    def targets(self, m: Model, batch: Batch) -> Piece:
        return self.inner.targets(m, batch)

    def codes(self, m: Model, memory: MemoryView, grad: bool) -> Piece:
        return self.inner.codes(m, memory, grad)

    def earlier(self, m: Model, batch: Batch, k: int) -> torch.Tensor:
        return self.inner.earlier(m, batch, k)

    def pair_needed(self, write: torch.Tensor) -> bool:
        return self.inner.pair_needed(write)

    def backward(self, loss: torch.Tensor) -> None:
        self.inner.backward(loss)

    def done(self, batch: Batch, z: torch.Tensor) -> None:
        self.inner.done(batch, z)


class VisibleSlots(Layer):
    """A group memory's e_i only on the slots some sample of the world attends to (a peer read
    leaves out the entries of the sample's own episode; ``vary_memory`` shows it its newest k)."""

    def codes(self, m: Model, memory: MemoryView, grad: bool) -> Piece:
        with torch.set_grad_enabled(grad):
            return done(memory_codes(m.nets, memory, m.spec, visible_only=True))


class LazyPair(Layer):
    """The paper's memory (one batch-mean pair pushed on a boundary): its pair, 2B frames through
    the online encoder, only on the steps that push it."""

    def pair_needed(self, write: torch.Tensor) -> bool:
        return bool(write) and self.inner.pair_needed(write)


class StreamCache(Layer):
    """Each stream frame meets the EMA encoder once, and the input's latent is the next step's
    pair's older frame (``agent.latent_cache.LatentCache``). Batches without a clock (i.i.d. from a
    dataset) pass through. ``earlier`` is asked for after the targets are joined, so it
    sees this batch's ``begin`` even when the targets run on another thread."""

    def __init__(self, inner: Plain, latents: LatentCache, keep_input: bool) -> None:
        super().__init__(inner)
        self.latents = latents
        self.keep_input = keep_input  # the input's own pair (``push_pair="input"``)

    def targets(self, m: Model, batch: Batch) -> Piece:
        if batch.clock is None:
            return self.inner.targets(m, batch)
        self.latents.begin(batch.clock)
        target = m.nets.target.target
        with torch.no_grad(), m.spec.autocast():
            return done(
                self.latents.targets(batch.clock, batch.frames, lambda f: encode(target, f, m.spec))
            )

    def earlier(self, m: Model, batch: Batch, k: int) -> torch.Tensor:
        held = None
        if batch.clock is not None:
            held = self.latents.earlier(batch.clock, m.spec.context, k)
        return held if held is not None else self.inner.earlier(m, batch, k)

    def done(self, batch: Batch, z: torch.Tensor) -> None:
        if batch.clock is not None and self.keep_input:
            self.latents.keep_input(batch.clock, z.float())
        self.inner.done(batch, z)


class _Leaf:
    """The memory's e_i from the second thread, as a detached leaf: the boundary between the
    step's graph and theirs (``Beside.backward``)."""

    def __init__(self, source: Future) -> None:
        self.source = source
        self.leaf: torch.Tensor | None = None

    def result(self) -> torch.Tensor | None:
        codes = self.source.result()
        if codes is not None and self.leaf is None:
            self.leaf = codes.detach().requires_grad_(codes.requires_grad)
        return self.leaf


class Beside(Layer):
    """The EMA targets and the memory's e_i run on a second thread while this one runs the online
    encoder; the e_i's backward runs there too, started by their leaf's gradient while this
    thread goes on through the online encoder's backward. Same kernels on the same inputs,
    disjoint parameters: the same bits."""

    def __init__(self, inner: Plain) -> None:
        super().__init__(inner)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="beside")
        self.pending: _Leaf | None = None

    def targets(self, m: Model, batch: Batch) -> Piece:
        return self.pool.submit(lambda: self.inner.targets(m, batch).result())

    def codes(self, m: Model, memory: MemoryView, grad: bool) -> Piece:
        self.pending = _Leaf(self.pool.submit(lambda: self.inner.codes(m, memory, grad).result()))
        return self.pending

    def backward(self, loss: torch.Tensor) -> None:
        pending, self.pending = self.pending, None
        if pending is None or pending.leaf is None or not pending.leaf.requires_grad:
            self.inner.backward(loss)
            return
        source, jobs = pending.source.result(), []
        handle = pending.leaf.register_hook(
            lambda grad: jobs.append(self.pool.submit(source.backward, grad))
        )
        try:
            self.inner.backward(loss)
        finally:
            handle.remove()
            for job in jobs:
                job.result()


@functools.cache
def spare_core() -> bool:
    """More than one core is available to this process."""
    cores = (
        os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    )
    return len(cores) > 1


@dataclass(frozen=True)
class Speed:
    """Which speed layers a learner runs (the stream cache is ``cfg.stream_cache``: it changes
    numbers while training, so it is part of the config). ``Speed()``: the plain step."""

    visible_slots: bool = False
    lazy_pair: bool = False
    beside: bool = False
    # The whole update replayed from CUDA graphs on a GPU (``agent.capture``; eager with the
    # same tensor inputs elsewhere). Opt-in until measured on a GPU; needs stream_cache=false.
    captured: bool = False
    # The step through ``torch.compile`` (its backend fuses the step's kernels; captured, the
    # compiled code is what the graph records). Its tensor inputs are the captured step's (on
    # without a graph where ``captured`` is off); the plain pieces only (``paths`` refuses the
    # layers, whose host reads and threads a compiled graph would break at). For a GPU:
    # compiling takes tens of seconds, and on a CPU the default layers are faster.
    compiled: bool = False

    @classmethod
    def default(cls, device: torch.device | str, cores: int | None = None) -> Speed:
        """A CPU's: host reads are free there (on a GPU each is a sync); the second thread with
        one torch thread and a spare core (with more threads each op already uses the cores).
        ``cores``: the cores this learner may count on (None: all this process may use; fewer
        where other runs train at once). Read when the learner is built: set the thread count
        first (the runners do)."""
        cpu = torch.device(device).type == "cpu"
        spare = spare_core() if cores is None else cores > 1
        beside = cpu and torch.get_num_threads() == 1 and spare
        return cls(visible_slots=cpu, lazy_pair=cpu, beside=beside)

    def paths(self, cfg: AgentConfig, latents: LatentCache | None) -> Plain:
        """The layers, innermost first, around ``Plain`` (``latents``: ``cfg.stream_cache``'s
        store)."""
        paths = Plain()
        layers = self.visible_slots or self.lazy_pair or self.beside or latents is not None
        if self.compiled and layers:
            raise ValueError(
                "a compiled step runs the plain pieces: no visible_slots, lazy_pair, beside or "
                "stream latent cache (stream_cache=false)"
            )
        if self.visible_slots:
            paths = VisibleSlots(paths)
        paper_memory = cfg.memory_scope == "global" and cfg.memory_write == "boundary"
        if self.lazy_pair and cfg.push_pair == "newest" and paper_memory:
            paths = LazyPair(paths)
        if latents is not None:
            paths = StreamCache(paths, latents, keep_input=cfg.push_pair == "input")
        if self.beside:
            paths = Beside(paths)
        return paths
