"""The held-out worlds' predictions drawn as frames: the motion in pixels, and strips to look at.

After the held-out curves (``agent.evaluation.world_curves``, the latents of memory size n
kept), a pixel decoder (``probes.decoder``) is fit on frames of freshly drawn worlds of the
training family, with the training digits (the stream's; ``fit_frames``, drawn from the
evaluation seed), through the learner's EMA target encoder (a probe: it shapes nothing), and
the kept latents are decoded (docs/definitions.md#the-pixel-decoder). Fit on the evaluation
worlds' own 8,784 frames instead, it learned their digits and placed held-out ones a third
further off. For each held-out family, per horizon and then their mean (last), the mean
distance in pixels of the decoded digits from where the simulator puts them at the future
frame:

- ``decoded_true``: the true future frame's latent, decoded: what the decoder and the latent
  can place at all, the floor under every other number;
- ``no_change``: the input frame's latent, decoded: a prediction of no motion;
- each memory source's predictions (``own``; with memory ``same``, the peer memory, and
  ``wrong``, another world's).

``strips``: the first ``STRIP_SEQS`` sequences of the world of each held-out family whose gravity
is strongest (where the floor, blind to it, should miss most), their input and true future
frames and the decoded ones (uint8), for ``runners.online.strips``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import env
from agent import Learner
from agent.evaluation import Curve
from probes.decoder import (
    DecoderConfig,
    DecoderFit,
    PixelDecoder,
    decode,
    digit_positions,
    position_error,
)
from runners.online.world_sets import WorldSets

#: Sequences of each held-out family in the strips.
STRIP_SEQS = 3
#: The decoder's fit data: WORLDS_PER_1000_STEPS worlds of the training family for every 1,000
#: steps of its fit (each frame drawn about 8 times), at most FIT_WORLDS, FIT_SEQS sequences of
#: FIT_LEN frames each (65,536 frames at 4,000 steps; at 4,000 steps a quarter as many frames
#: placed the digits 0.2 px further off).
FIT_WORLDS, WORLDS_PER_1000_STEPS, FIT_SEQS, FIT_LEN = 64, 16, 128, 8


def fit_frames(families: dict[str, env.WorldFamily], seed: int, worlds: int) -> torch.Tensor:
    """(worlds * FIT_SEQS * FIT_LEN, 1, 64, 64) uint8: the decoder's fit frames, drawn from
    ``seed`` apart from every evaluation world, of ``worlds`` worlds of the first (the training)
    family with the training digits (the stream's). Draws from no global generator."""
    family = families[next(iter(families))]
    rng = np.random.default_rng([seed, 0xDEC0])
    return torch.from_numpy(np.concatenate([
        env.generate_sequences(FIT_SEQS, seed=[seed, 0xDEC0, i], split="train", seq_len=FIT_LEN,
                               **physics.as_dict())["frames"].reshape(-1, 1, 64, 64)
        for i, physics in enumerate(family.sample(rng, worlds))]))  # fmt: skip


class DecoderThread:
    """A decoder fit in ``steps`` on ``fit_frames`` (WORLDS_PER_1000_STEPS worlds a 1,000 steps,
    at most FIT_WORLDS) through the learner's EMA target, in a thread beside whatever the
    caller does meanwhile: the decoder's init and batches drawn here
    (``probes.decoder.DecoderFit``), the frames drawn and encoded and the steps taken there
    (the EMA target only read, and no global generator touched). ``result`` waits for (the
    decoder, what was fit: frames, parameters, hidden width, steps, batch); ``stop`` ends the
    fit at its next step.

    The decoder is the same whatever runs beside it, and whenever it runs once the target
    encoder is final: a run starts it when its weights freeze (``WorldsEvaluator.
    weights_final``), so on a CPU (one intra-op thread a process) it takes the core that the
    bounds, done before the main run, leave idle."""

    def __init__(self, learner: Learner, families: dict[str, env.WorldFamily], seed: int,
                 steps: int) -> None:  # fmt: skip
        cfg = DecoderConfig(steps=steps, seed=seed)
        worlds = min(FIT_WORLDS, -(-steps * WORLDS_PER_1000_STEPS // 1000))
        m = worlds * FIT_SEQS * FIT_LEN
        fit = DecoderFit(learner.cfg.latent_dim, m, cfg)
        self._target = [t.detach().clone() for t in _target_state(learner)]
        self.info = {"frames": m, "hidden": cfg.hidden, "steps": cfg.steps, "batch": cfg.batch,
                     "parameters": sum(p.numel() for p in fit.decoder.parameters())}  # fmt: skip
        self._stop = threading.Event()
        self._out: list[PixelDecoder | BaseException | None] = []
        self._thread = threading.Thread(target=self._run, name="pixel-decoder", daemon=True,
                                        args=(fit, learner, families, seed, worlds))  # fmt: skip
        self._thread.start()

    def _run(self, fit: DecoderFit, learner: Learner, families: dict[str, env.WorldFamily],
             seed: int, worlds: int) -> None:  # fmt: skip
        try:
            frames = fit_frames(families, seed, worlds)
            step = learner.cfg.eval_batch_size
            z = torch.cat([learner.encode(frames[i:i + step], target=True)
                           for i in range(0, frames.shape[0], step)])  # fmt: skip
            self._out.append(fit.run(z, frames, self._stop))
        except BaseException as err:  # noqa: BLE001 (handed to ``result``)
            self._out.append(err)

    def made_for(self, learner: Learner) -> bool:
        """Whether ``learner``'s EMA target is still the one the fit's latents came from."""
        now = _target_state(learner)
        return len(now) == len(self._target) and all(
            a.shape == b.shape and torch.equal(a, b) for a, b in zip(now, self._target, strict=True))

    def result(self) -> tuple[PixelDecoder, dict[str, Any]]:
        """The fit decoder and what was fit, once the thread is done (its error raised here)."""
        self._thread.join()
        (dec,) = self._out
        if isinstance(dec, BaseException):
            raise dec
        if dec is None:
            raise RuntimeError("the pixel decoder's fit was stopped")
        return dec, self.info

    def stop(self) -> None:
        """End the fit at its next step and wait for the thread."""
        self._stop.set()
        self._thread.join()


def _target_state(learner: Learner) -> list[torch.Tensor]:
    return list(learner.nets.target.target.state_dict().values())


def pixel_report(learner: Learner, sets: WorldSets, curves: Sequence[Curve], n: int, i: int,
                 fitted: tuple[PixelDecoder, dict[str, Any]]
                 ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:  # fmt: skip
    """(the report, the strips) of the curves' latents kept at memory size ``n`` (the module
    doc); ``i`` the input frame's index in the held-out sequences; ``fitted``: the decoder and
    what was fit (``DecoderThread.result``)."""
    dec, info = fitted
    hs = list(learner.cfg.horizons)
    worlds = {w.name: w for w in sets.held_out}
    strongest = sorted(sets.held_out, key=lambda w: float(np.hypot(*w.physics[:2])))
    shown = {w.family: w.name for w in strongest}  # each family's strongest gravity
    errors: dict[str, dict[str, list[torch.Tensor]]] = {}
    strips: dict[str, np.ndarray] = {"horizons": np.asarray(hs)}
    seen: set[str] = set()
    for c in curves:
        if c.kept is None:
            continue
        w, fam, show = worlds[c.world], c.family, shown[c.family] == c.world
        future = np.asarray(w.positions)[:, [i + h for h in hs]]  # (N, K, digits, 2)
        sprites = torch.from_numpy(np.asarray(w.scenes.sprites)).repeat_interleave(len(hs), 0)
        kept = {c.memory: c.kept["pred"]}
        if c.world not in seen:  # the world's true and input latents, once
            seen.add(c.world)
            kept |= {"decoded_true": c.kept["target"],
                     "no_change": c.kept["input"].unsqueeze(1).expand(-1, len(hs), -1)}
            if show:
                frames = np.asarray(w.frames)[:STRIP_SEQS]
                strips[f"{fam}/input"] = frames[:, i, 0]
                strips[f"{fam}/true"] = frames[:, [i + h for h in hs], 0]
        for name, latents in kept.items():
            frames = decode(dec, latents).cpu()  # (N, K, 1, 64, 64)
            err = position_error(digit_positions(frames.flatten(0, 1), sprites),
                                 future.reshape(-1, *future.shape[2:]))  # fmt: skip
            errors.setdefault(fam, {}).setdefault(name, []).append(err.view(-1, len(hs)))
            if show:
                strips[f"{fam}/{name}"] = frames[:STRIP_SEQS, :, 0].numpy()
    families = {fam: {name: [*torch.cat(e).mean(0).tolist(), float(torch.cat(e).mean())]
                      for name, e in by.items()} for fam, by in errors.items()}  # fmt: skip
    return {"n": n, "horizons": hs, "decoder": info, "families": families}, strips
