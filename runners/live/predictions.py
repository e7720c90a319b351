"""What a track predicts, drawn as frames in the live view: a pixel decoder fit beside it.

A JEPA predicts latents, which cannot be looked at; ``probes.decoder``'s ``PixelDecoder`` maps
a latent of the learner's EMA target encoder back to the frame it stands for
(docs/definitions.md#the-pixel-decoder). The held-out report fits one at the end of a run; the
live view fits one *online*, beside each loop's learner (on its EMA target; the learner's heads
share that latent, so its decoder decodes theirs too), and decodes each track's prediction of
the last step's batch with it. Two parts:

- ``learn(batch)``, after every ``LEARN_EVERY``-th learner step: the target frames (the frames
  at the horizons) of a few of the batch's streams (``PUSH`` frames, the next streams in turn)
  are encoded by the EMA target, without gradient, and pushed with their ink at half the side
  (each 2 x 2 block's mean of frame / 255, what the decoder's logits stand for) into a ring of
  the newest ``RING`` pairs (the target drifts as the learner learns: old pairs age out); then
  the decoder takes ``FIT_STEPS`` AdamW steps (its own optimiser, constant rate) on the
  per-pixel binary cross-entropy of ``BATCH`` pairs drawn from the ring with its own generator.
  Counted in steps, not redraws: the decoder learns as much whatever the redraw rate
  (``--draw-every``, a slow machine's lowered fps), and a redraw stays cheap;
- ``show(batch)``, at a redraw (at most ``drivers.PRED_HZ`` times per second): the learner's
  prediction for the shown streams (``drivers.LoopDriver.shown``) on the batch, as its step
  reads memory outside training (each stream its world's memory, without its own episode
  under the peer read; the oracle: the stream's true physics), decoded at every horizon,
  beside the batch's true frames there.

A probe: the decoder's gradient never reaches the learner (its latents are data, computed
without gradient) and nothing of the learner is written, so a track steps exactly as it would
without the view's predictions; the global random generators are left as they were (the
decoder's init and draws use generators of its own), so the stream and the learner's draws are
those of a run without it too (tests/runners/test_live_predictions.py checks both).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F  # noqa: N812

from agent.learner import Learner
from agent.memory.read import MemoryView
from agent.objective import per_horizon
from agent.sources import Batch
from agent.step import context_latents, memory_codes, modulated_prediction
from probes.decoder import PixelDecoder, decode
from runners.live.model import Predictions

#: Pairs (latent, ink) the ring keeps, the newest.
RING = 2048
#: The decoder's hidden width (``probes.decoder``'s default is 256: half of it fits in about
#: half the time on a CPU).
HIDDEN = 128
#: The decoder learns after every LEARN_EVERY-th learner step: PUSH target frames of the batch
#: (a few streams', at every horizon) into the ring, then FIT_STEPS AdamW steps of BATCH pairs
#: at a constant rate LR. Measured on the cpu preset's latents: 200 such steps bring the
#: decoder's loss on frames it has not seen to within 10% of a 1,000-step fit of 128 at width
#: 256 (the held-out report's before it standardised its latents; a rate of 3e-3 needs about
#: twice the steps); a learn costs about a seventh of a learner step, so a fortieth of the
#: track's time.
LEARN_EVERY = 6
PUSH = 24
FIT_STEPS = 1
BATCH = 64
LR = 1e-2


class LivePredictions:
    """A pixel decoder fit online on one learner's EMA target latents (``learn``); ``show``
    decodes the learner's prediction of a batch (the module doc)."""

    def __init__(self, learner: Learner, shown: np.ndarray, seed: int = 0, ring: int = RING,
                 every: int = LEARN_EVERY, fit_steps: int = FIT_STEPS, batch: int = BATCH,
                 lr: float = LR, push: int = PUSH, hidden: int = HIDDEN) -> None:  # fmt: skip
        self.learner = learner
        self.rows = torch.as_tensor(np.asarray(shown), dtype=torch.long)
        self.every, self.fit_steps, self.batch, self.push_max = every, fit_steps, batch, push
        self.steps = 0  # learner steps seen (``learn`` calls)
        dim, device = learner.cfg.latent_dim, learner.device
        with torch.random.fork_rng(devices=[]):  # its own init: the global generator untouched
            torch.manual_seed(seed)
            self.decoder = PixelDecoder(dim, hidden).to(device)
        self.generator = torch.Generator().manual_seed(seed)  # the ring's draws
        self.optimizer = torch.optim.AdamW(self.decoder.parameters(), lr=lr, weight_decay=0.0)
        self.latents = torch.zeros(ring, dim, device=device)
        self.ink = torch.zeros(ring, 1, 32, 32, device=device)
        self.size = self.ptr = 0
        self.next_stream = 0  # the first stream ``observe`` pushes next
        self.loss = float("nan")

    def push(self, latents: torch.Tensor, ink: torch.Tensor) -> None:
        """Pairs (N, D) and (N, 1, 32, 32) into the ring, the oldest overwritten."""
        n = min(latents.shape[0], self.latents.shape[0])
        slots = (self.ptr + torch.arange(n)) % self.latents.shape[0]
        self.latents[slots.to(self.latents.device)] = latents[-n:].detach().float()
        self.ink[slots.to(self.ink.device)] = ink[-n:].detach().float()
        self.ptr = int((self.ptr + n) % self.latents.shape[0])
        self.size = min(self.size + n, self.latents.shape[0])

    def fit(self, steps: int) -> float:
        """``steps`` AdamW steps on batches drawn (with replacement) from the ring; the last
        step's loss (NaN: an empty ring)."""
        if self.size == 0 or steps < 1:
            return self.loss
        with torch.enable_grad():
            for _ in range(steps):
                idx = torch.randint(0, self.size, (self.batch,), generator=self.generator)
                idx = idx.to(self.latents.device)
                loss = F.binary_cross_entropy_with_logits(self.decoder(self.latents[idx]),
                                                          self.ink[idx])  # fmt: skip
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
        self.loss = float(loss.detach())
        return self.loss

    @torch.no_grad()
    def ring_loss(self) -> float:
        """The decoder's binary cross-entropy on every pair of the ring (NaN: empty)."""
        if self.size == 0:
            return float("nan")
        logits = self.decoder(self.latents[: self.size])
        return float(F.binary_cross_entropy_with_logits(logits, self.ink[: self.size]))

    @torch.no_grad()
    def observe(self, batch: Batch) -> None:
        """The target frames (at every horizon: about ``push`` frames) of the batch's next few
        streams, in turn so that every world of the batch is seen, through the EMA target into
        the ring."""
        spec = self.learner.spec
        b = batch.frames.shape[0]
        n = min(b, max(1, self.push_max // spec.n_horizons))
        rows = (self.next_stream + torch.arange(n)) % b
        self.next_stream = int((self.next_stream + n) % b)
        frames = batch.frames[rows.to(batch.frames.device), spec.past:spec.past + spec.n_horizons]
        frames = frames.flatten(0, 1)
        ink = F.avg_pool2d(frames.to(self.latents.device, torch.float32) / 255.0, 2)
        self.push(self.learner.encode(frames, target=True), ink)

    def learn(self, batch: Batch) -> bool:
        """After a learner step on ``batch``: every ``every``-th (the first included), push its
        frames (``observe``) and ``fit``; whether it did."""
        self.steps += 1
        if (self.steps - 1) % self.every:
            return False
        self.observe(batch)
        self.fit(self.fit_steps)
        return True

    def show(self, batch: Batch, learner: Learner | None = None) -> Predictions:
        """The shown streams' true frames at each horizon of ``batch`` and the learner's (or
        ``learner``'s: a head of it, on its latent) prediction of them, decoded."""
        spec = self.learner.spec
        true = batch.frames[self.rows, spec.past:spec.past + spec.n_horizons, 0]
        decoded = decode(self.decoder, self.predict(batch, learner))[:, :, 0]  # (S, K, 64, 64)
        return Predictions(step=int(self.learner.step),
                           horizons=tuple(int(h) for h in self.learner.cfg.horizons),
                           true=true.cpu().numpy(), decoded=decoded.cpu().numpy(),
                           loss=self.loss, pairs=self.size)  # fmt: skip

    @torch.no_grad()
    def predict(self, batch: Batch, learner: Learner | None = None) -> torch.Tensor:
        """(S, K, D): the learner's (or ``learner``'s) predicted latents for the shown streams of
        ``batch``, read as ``drivers.peer_and_wrong_error`` reads them (memory as outside
        training, the oracle its true physics); one latent for every horizon where the
        predictor has one head."""
        learner = self.learner if learner is None else learner
        nets, spec = learner.nets, learner.spec
        batch = batch.to(learner.device)
        rows = self.rows.to(learner.device)
        view = shown_view(learner.memory_view(training=False, batch=batch), rows)
        physics = batch.physics[rows] if batch.physics is not None else None
        with learner.autocast():
            z = context_latents(nets, batch.frames[rows], spec)
            codes = memory_codes(nets, view, spec)
            mod, _ = modulated_prediction(nets, z, view, spec, physics, codes)
        return per_horizon(mod.pred.float()).expand(-1, spec.n_horizons, -1)


def shown_view(view: MemoryView, rows: torch.Tensor) -> MemoryView:
    """What the batch's ``rows`` read of ``view``: a group memory's rows read only their groups'
    memories (so that only those are encoded); one memory for every sample stays as it is."""
    if view.group is not None:
        return MemoryView(view.pairs[view.group[rows]], view.mask[rows],
                          torch.arange(rows.shape[0], device=rows.device))  # fmt: skip
    return MemoryView(view.pairs, view.mask[rows] if view.mask.dim() == 2 else view.mask)
