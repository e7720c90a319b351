"""The adapter from ``OnlineLoop`` (and its learner) to the visualizer's ``TrackDriver``.

One ``LoopDriver`` wraps one ``OnlineLoop``: ``step()`` is ``loop.step()`` (switches, recording,
evaluation and checkpoints included), nothing else advances the learner. What the view needs
beyond the step metrics is read from public attributes, at redraw time only:

- the newest frames: ``loop.feed.frames`` (the StreamSource's window ring) at ``head - 1``;
- the buffer's world tags: ``learner.buffer.ordered()`` (one host sync); a per-stream memory
  (the worlds protocol): the first stream's own FIFO;
- the attention of the current query: recomputed with ``learner.aggregate`` on the predictor
  input of the last step (the learner does not keep its last ``Aggregate``), at most
  ``ATTN_HZ`` times per second and for the first ``ATTN_STREAMS`` streams (per-stream memory:
  the first stream's query over its own memory);
- each shown stream's world (worlds protocol): ``loop.feed.stream_physics()``;
- does memory carry the world (worlds protocol, a track that reads a group memory): D of the
  last step's batch with peer memory against D with the memory of another world (each group
  reading the next group that lives in a different world), at most ``WRONG_HZ`` times per
  second, smoothed over the readings (``WRONG_SMOOTH``); none while the streams are held in
  one world;
- what the track predicts, drawn as frames (``live.predictions``): a pixel decoder fit online
  beside the learner (after every few steps, on its EMA target's latents of the step's batch),
  and the learner's prediction of the shown streams on the last step's batch decoded, at most
  ``PRED_HZ`` times per second (off: ``predictions=False``);
- interactive physics changes: ``loop.enter`` (paper: ``vec_env.set_physics`` and
  ``source.set_shifted``; worlds: ``ScheduledStreams.enter``, which holds every stream in the world
  and ends its episode), the loop's own switches covering only the scripted schedule.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from agent import StepMetrics, tracks
from agent.learner import Learner
from agent.memory.read import MemoryView
from agent.objective import HEAD_METRICS, columns, head_columns, head_metric_name, normalised_error
from agent.sources import Batch
from agent.step import (
    aggregate,
    context_latents,
    input_latent,
    memory_codes,
    modulated_prediction,
    target_latents,
    world_key,
)
from runners.live.model import NORM_ERROR, Predictions
from runners.live.predictions import LivePredictions
from runners.online.loop import OnlineLoop

ATTN_HZ = 4.0
WRONG_HZ = 2.0
WRONG_SMOOTH = 0.8  # each reading's weight in the shown value is 1 - WRONG_SMOOTH
PRED_HZ = 3.0
ATTN_STREAMS = 16
SHOWN_STREAMS = 4


class LoopDriver:
    """One track's ``OnlineLoop`` seen through the ``model.TrackDriver`` interface: the loop's
    learner, or (``HeadDriver``) one of its heads."""

    def __init__(self, loop: OnlineLoop, records: bool = True, predictions: bool = True,
                 learner: Learner | None = None) -> None:  # fmt: skip
        self.loop = loop
        self.records = records  # R records frames in this track's run (one is enough)
        self.learner = loop.learner if learner is None else learner
        self.cfg = loop.cfg
        agent = self.learner.cfg
        self.name = agent.head_name
        self.capacity = int(self.learner.buffer.capacity)
        # What its e_agg generates, charted by the view (``agent.tracks``; the oracle reads none).
        self.generates = "" if agent.oracle else tracks.track(agent.track).generates
        # A memory per group: the view shows the first stream's group's, which it shares with the
        # other streams of its group.
        self.per_group = agent.memory_scope == "group"
        self.buffer_title = "group 1's memory" if self.per_group else "buffer"
        self.starts = 0  # it predicts from the first step (a head: from the settle)
        self._pending: list[StepMetrics] = []
        self._pending_heads: list[dict] = []  # each step's ``learner.head_metrics``
        self._drained: dict[str, list[tuple[np.ndarray, dict[str, np.ndarray]]]] = {}
        self._first = self.step_count  # step of the first pending record
        self._attn: np.ndarray | None = None
        self._attn_t = -1.0
        self._batch: Batch | None = None  # the last step's
        self._wrong: tuple[float, float] | None = None
        self._wrong_t = -1.0
        self.reads_worlds = (loop.feed.stream_physics() is not None and self.per_group
                             and not agent.oracle and self.learner.nets.modulator.uses_memory)
        # The shown streams: the first of each group memory's group where streams share one (so
        # the tiles show different worlds), else the first ones.
        n = int(agent.batch_size)
        step = agent.group_size if self.per_group else 1
        if n < step * SHOWN_STREAMS:  # fewer worlds than tiles: the first streams
            step = 1
        self.shown = np.arange(0, n, step)[:SHOWN_STREAMS]
        self._live = None  # the decoder fit beside the learner (``live.predictions``)
        if predictions and learner is None:
            self._live = LivePredictions(self.learner, self.shown, int(agent.seed))
        self._pred: Predictions | None = None
        self._pred_t = -1.0
        self._pred_step = -1  # the step whose batch ``_pred`` shows

    # ----------------------------------------------------------------- state
    @property
    def step_count(self) -> int:
        return int(self.loop.step_count)

    @property
    def frozen(self) -> bool:
        return bool(self.learner.weights_frozen)

    # ----------------------------------------------------------------- stepping
    def step(self) -> None:
        batch = self.loop.prepare()  # ``loop.step()``, keeping the batch for ``wrong_world``
        result = self.loop.complete(batch, self.learner.update(batch))
        self._batch = batch
        if self._live is not None:
            self._live.learn(batch)
        self._pending.append(result.metrics)
        self._pending_heads.append(self.learner.head_metrics)

    def drain(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The metrics of the steps since the last drain: one host sync for the block."""
        return self.drain_for(self.name)

    def drain_for(self, name: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The metrics since ``name``'s last drain of this loop's learner (its own name) or of
        one of its heads (a ``HeadDriver``'s): the step's block with the head's own
        ``HEAD_METRICS`` in place of the learner's (the memory's, shared, are the same)."""
        n = len(self._pending)
        if n:
            block = columns(self._pending)
            steps = np.arange(self._first, self._first + n, dtype=np.int64)
            heads = head_columns(self._pending_heads, list(self.learner.heads))
            self._pending.clear()
            self._pending_heads.clear()
            self._first += n
            for who in (self.name, *self.learner.heads):
                own = dict(block) if who == self.name else {
                    **block, **{m: heads[head_metric_name(who, m)] for m in HEAD_METRICS}}
                self._drained.setdefault(who, []).append((steps, own))
        parts = self._drained.pop(name, [])
        if not parts:
            return np.zeros(0, np.int64), {}
        steps = np.concatenate([p[0] for p in parts])
        block = {k: np.concatenate([p[1][k] for p in parts]) for k in parts[0][1]}
        if NORM_ERROR in block:  # a window whose stream reset has no error: NaN, not 0
            block[NORM_ERROR] = block[NORM_ERROR].astype(np.float64)
        return steps, block

    # ----------------------------------------------------------------- what is shown
    def frames(self) -> np.ndarray:
        """(S, 64, 64) uint8: the newest frame of the ``SHOWN_STREAMS`` shown streams."""
        src = self.loop.feed
        if not hasattr(src, "frames") or not hasattr(src, "head"):  # dataset source
            return np.zeros((SHOWN_STREAMS, 64, 64), np.uint8)
        newest = (src.head - 1) % src.window
        return np.asarray(src.frames[self.shown, newest, 0])

    def buffer_worlds(self) -> np.ndarray:
        buf = self.learner.buffer
        if self.per_group:  # the first stream's world's FIFO, oldest first (host sync)
            idx = _oldest_first(int(buf.size[0]), int(buf.ptr[0]), buf.capacity, buf.device)
            return buf.shifted[0, idx].cpu().numpy().astype(np.int8)
        _, world, _ = buf.ordered()  # host sync
        return world.cpu().numpy().astype(np.int8)

    def attention(self) -> np.ndarray | None:
        """(n,) mean attention of the current queries over the filled entries, oldest first."""
        if not self.learner.nets.modulator.uses_memory:
            return None
        now = time.perf_counter()
        if self._attn is not None and now - self._attn_t < 1.0 / ATTN_HZ:
            return self._attn
        self._attn_t = now
        self._attn = self._compute_attention()
        return self._attn

    @torch.no_grad()
    def _compute_attention(self) -> np.ndarray | None:
        """Per group: the first stream's query over its world's memory, all of it; else the mean
        over the first ``ATTN_STREAMS`` streams' queries."""
        src, learner = self.loop.feed, self.learner
        buf = learner.buffer
        n = int(buf.size[0] if self.per_group else buf.size)
        if n == 0 or not hasattr(src, "frames"):
            return None
        inp = (src.head + learner.cfg.input_position) % src.window  # the last step's input
        x = src.frames[: 1 if self.per_group else ATTN_STREAMS, inp]
        z = learner.encode(torch.from_numpy(np.ascontiguousarray(x)))  # its own scaling, precision
        if self.per_group:
            memory = MemoryView(buf.pairs[:1], buf.mask()[:1])
            agg = aggregate(learner.nets, z, memory, learner.spec)
        else:
            agg = learner.aggregate(z, buf)
        if agg is None:
            return None
        attn = agg.attn[0].float() if self.per_group else agg.attn.float().mean(0)  # (cap,) slots
        ptr = int(buf.ptr[0] if self.per_group else buf.ptr)
        return attn[_oldest_first(n, ptr, buf.capacity, attn.device)].cpu().numpy()

    def wrong_world(self) -> tuple[float, float] | None:
        """(peer D, wrong-world D) on the last step's batch, smoothed over the readings; None
        for a track that reads no group memory, before the first step and while the streams
        are held in one world (no other world's memory to read)."""
        if not self.reads_worlds or self.last_batch() is None:
            return None
        if self.held:
            self._wrong = None
            return None
        now = time.perf_counter()
        if self._wrong is not None and now - self._wrong_t < 1.0 / WRONG_HZ:
            return self._wrong
        self._wrong_t = now
        reading = peer_and_wrong_error(self.learner, self.last_batch())
        if reading is None or self._wrong is None:
            self._wrong = reading
        else:
            a = WRONG_SMOOTH
            self._wrong = (a * self._wrong[0] + (1 - a) * reading[0],
                           a * self._wrong[1] + (1 - a) * reading[1])
        return self._wrong

    def predictions(self) -> Predictions | None:
        """The shown streams' true future and the learner's prediction of it, decoded, on the
        last step's batch (``live.predictions``), made again at most ``PRED_HZ`` times per
        second and only after a new step; None before the first step and with the predictions
        off."""
        if self.live is None or self.last_batch() is None:
            return None
        now = time.perf_counter()
        fresh = self._pred is not None and now - self._pred_t < 1.0 / PRED_HZ
        if fresh or self._pred_step == self.step_count:
            return self._pred
        self._pred_t, self._pred_step = now, self.step_count
        self._pred = self.live.show(self.last_batch(), self.learner)
        return self._pred

    @property
    def live(self) -> LivePredictions | None:
        """The pixel decoder fit beside the loop's learner (``live.predictions``), or None."""
        return self._live

    def last_batch(self) -> Batch | None:
        """The last step's batch (None before the first)."""
        return self._batch

    # ----------------------------------------------------------------- control
    def physics(self) -> tuple[float, float]:
        p = self.loop.physics
        return float(p.gravity), float(p.gravity_direction)

    def set_physics(self, gravity: float, direction: float) -> None:
        """Interactive switch, effective from the next step (the loop's own ``enter``; worlds
        protocol: every stream held in that world, each starting a new episode there)."""
        self.loop.enter(self.loop.physics.replace(gravity=gravity, gravity_direction=direction))

    @property
    def held(self) -> bool:
        """The streams are held in one world (the feed's ``held``; paper protocol: never)."""
        return bool(self.loop.feed.held)

    def release(self) -> None:
        """Worlds protocol: give the streams back to the training worlds, each from a new
        episode in a freshly drawn world. ``loop.enter`` of the base physics releases the
        schedule (``ScheduledStreams.enter(physics, 0)``), which alone would keep every stream in
        the held world until its episode ends; so every episode ends at the next step (one about
        to reset: after its first frame) and the schedule draws each stream's next world."""
        loop = self.loop
        if not loop.feed.held:
            return
        loop.enter(loop.cfg.base_physics)
        vec_env = loop.vec_env
        pending = np.asarray(loop.feed.done, bool)  # their next episode starts at the next step
        vec_env.set_episode_limits(np.where(pending, 1, vec_env.elapsed_steps + 1))

    def stream_physics(self) -> np.ndarray | None:
        """(S, 2): gravity and direction of each shown stream's world (worlds protocol; None
        under the paper's, where every stream has ``physics()``)."""
        every = self.loop.feed.stream_physics()
        if every is None:
            return None
        worlds = [every[i] for i in self.shown]
        return np.asarray([[p.gravity, p.gravity_direction] for p in worlds], np.float64)

    def set_frozen(self, frozen: bool) -> None:
        (self.learner.freeze_weights if frozen else self.learner.unfreeze_weights)()

    def set_recording(self, on: bool) -> bool:
        """Keep every frame batch in this run's zarr while on (the loop's recorder)."""
        if self.loop.vec_env is None or not self.records:
            return False
        self.cfg.output.record_frames = int(on)
        return on

    def checkpoint(self) -> None:
        self.loop.checkpoint()

    def close(self) -> None:
        self.loop.close()


class HeadDriver(LoopDriver):
    """A head of a trainer's loop (``agent.heads``: one latent, every head) through the
    ``model.TrackDriver`` interface. The trainer's driver steps the loop and controls it (the
    world, the freeze, recording, checkpoints: every head follows its learner); a head shows its
    own stream error and modulation (``drain_for``), its attention on the shared memory, its
    wrong-world reading and its predictions, decoded by the trainer's decoder (one latent, one
    decoder)."""

    def __init__(self, trainer: LoopDriver, head: str) -> None:
        super().__init__(trainer.loop, records=False, predictions=False,
                         learner=trainer.learner.heads[head])  # fmt: skip
        self.trainer = trainer
        self.starts = int(trainer.learner.settle_at)

    def step(self) -> None:
        pass  # the trainer's driver steps the loop

    def last_batch(self) -> Batch | None:
        return self.trainer.last_batch()

    def drain(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return self.trainer.drain_for(self.name)

    @property
    def live(self) -> LivePredictions | None:
        return self.trainer.live

    # the loop is the trainer's to change
    def set_physics(self, gravity: float, direction: float) -> None:
        pass

    def release(self) -> None:
        pass

    def set_frozen(self, frozen: bool) -> None:
        pass

    def set_recording(self, on: bool) -> bool:
        return False

    def checkpoint(self) -> None:
        pass

    def close(self) -> None:
        pass


def drivers_of(loop: OnlineLoop, records: bool, predictions: bool) -> list[LoopDriver]:
    """The drivers of one loop: its learner's, then one for each of its heads."""
    trainer = LoopDriver(loop, records=records, predictions=predictions)
    return [trainer, *(HeadDriver(trainer, h) for h in loop.learner.heads)]


def _oldest_first(n: int, ptr: int, capacity: int, device: torch.device) -> torch.Tensor:
    """Slot indices of a FIFO's ``n`` filled entries, oldest first (``ptr``: the next slot)."""
    start = ptr if n == capacity else 0
    return (torch.arange(n, device=device) + start) % capacity


def other_world_groups(worlds: torch.Tensor) -> torch.Tensor:
    """(W,) for each group the next group (cyclically) whose world differs from its own, -1
    where every group lives in its world. ``worlds`` (W,): each group's world id."""
    w = worlds.shape[0]
    if w < 2:
        return torch.full_like(worlds, -1, dtype=torch.long)
    offsets = torch.arange(1, w, device=worlds.device)  # nearest first
    cand = (torch.arange(w, device=worlds.device).unsqueeze(1) + offsets) % w  # (W, W-1)
    differs = worlds[cand] != worlds.unsqueeze(1)
    first = cand.gather(1, differs.long().argmax(1, keepdim=True)).squeeze(1)
    return torch.where(differs.any(1), first, -1)


@torch.no_grad()
def peer_and_wrong_error(learner: Learner, batch: Batch) -> tuple[float, float] | None:
    """D of ``batch`` predicted with peer memory (each stream its world's, without its own
    episode's entries: what training reads) and with another world's memory (its group's
    ``other_world_groups``), on the samples that are valid, have another world and read a
    non-empty memory both ways; None where none has. The held-out report's "wrong-world memory"
    (docs/definitions.md#does-memory-carry-the-world), live on the training stream."""
    nets, spec = learner.nets, learner.spec
    batch = batch.to(learner.device)
    groups = learner.groups  # (B,) contiguous: group g is streams g*G .. g*G + G - 1
    size = int(groups.shape[0]) // (int(groups.max()) + 1)
    other = other_world_groups(world_key(batch)[::size])[groups]  # (B,)
    peer = learner.memory_view(training=False, batch=batch)
    wrong_group = other.clamp(min=0)
    wrong = MemoryView(peer.pairs, learner.buffer.mask()[wrong_group], wrong_group)
    ok = batch.valid.bool() & (other >= 0) & peer.mask.any(1) & wrong.mask.any(1)
    if not bool(ok.any()):
        return None
    with learner.autocast():
        z = context_latents(nets, batch.frames, spec)
        targets = target_latents(nets, batch.frames, spec).float()
        codes = memory_codes(nets, peer, spec)  # both views read the same entries' e_i
        out = []
        for view in (peer, wrong):
            mod, _ = modulated_prediction(nets, z, view, spec, batch.physics, codes)
            d, _, _ = normalised_error(mod.pred.float(), input_latent(z).float(), targets,
                                       valid=ok)
            out.append(float(d))
    return out[0], out[1]
