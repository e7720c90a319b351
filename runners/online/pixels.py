"""The held-out worlds' predictions drawn as frames: the motion in pixels, and strips to look at.

After the held-out curves (``agent.evaluation.world_curves``, the latents of memory size n
kept), a pixel decoder (``probes.decoder``) is fit on frames of freshly drawn worlds of the
training family, with the training digits (the stream's; ``fit_worlds``, drawn from the
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

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
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


def fit_worlds(families: dict[str, env.WorldFamily], seed: int,
               worlds: int) -> Iterator[torch.Tensor]:  # fmt: skip
    """The decoder's fit frames a world at a time, each (FIT_SEQS * FIT_LEN, 1, 64, 64) uint8:
    ``worlds`` worlds of the first (the training) family with the training digits (the
    stream's), drawn from ``seed`` apart from every evaluation world. Draws from no global
    generator."""
    family = next(iter(families.values()))
    rng = np.random.default_rng([seed, 0xDEC0])
    for i, physics in enumerate(family.sample(rng, worlds)):
        yield torch.from_numpy(env.generate_sequences(
            FIT_SEQS, seed=[seed, 0xDEC0, i], split="train", seq_len=FIT_LEN,
            **physics.as_dict())["frames"].reshape(-1, 1, 64, 64))  # fmt: skip


class DecoderThread:
    """A decoder fit in ``steps`` on ``fit_worlds`` (WORLDS_PER_1000_STEPS worlds a 1,000 steps,
    at most FIT_WORLDS) through the learner's EMA target, in a thread beside whatever the
    caller does meanwhile, on cores the caller's work leaves idle: the decoder's init and
    batches drawn here (``probes.decoder.DecoderFit``); the frames drawn and encoded and the
    steps taken, a small piece at a time, by a thread that runs only where a core would
    otherwise idle (``background``; the EMA target only read, and no global generator touched).
    ``result`` takes over what is left in the caller's thread, so a machine busy with other work
    cannot hold the decoder back, and returns (the decoder, what was fit: frames, parameters,
    hidden width, steps, batch); ``stop`` ends the fit at its next piece.

    The decoder is the same bit for bit whichever thread took which piece, and whenever it runs
    once the target encoder is final: a run starts it when its weights freeze (``WorldsEvaluator.
    weights_final``). A worlds run trains three learners in three processes on two cores
    (``runners.online.beside``): at their normal priority the bounds' decoders took the cores
    from the main run and made it 8% slower; idle, they fit once the bounds are done, beside
    the main run's last steps, on the core it leaves free."""

    def __init__(self, learner: Learner, families: dict[str, env.WorldFamily], seed: int,
                 steps: int) -> None:  # fmt: skip
        cfg = DecoderConfig(steps=steps, seed=seed)
        worlds = min(FIT_WORLDS, -(-steps * WORLDS_PER_1000_STEPS // 1000))
        m = worlds * FIT_SEQS * FIT_LEN
        self._fit = DecoderFit(learner.cfg.latent_dim, m, cfg)
        self._target = [t.detach().clone() for t in _target_state(learner)]
        self.info = {"frames": m, "hidden": cfg.hidden, "steps": cfg.steps, "batch": cfg.batch,
                     "parameters": sum(p.numel() for p in self._fit.decoder.parameters())}  # fmt: skip
        self._work = self._pieces(learner, families, seed, worlds)
        self._handed, self._stop = threading.Event(), threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="pixel-decoder", daemon=True)
        self._thread.start()

    def _pieces(self, learner: Learner, families: dict[str, env.WorldFamily], seed: int,
                worlds: int) -> Iterator[None]:  # fmt: skip
        """The whole fit, yielding between pieces of a few milliseconds each."""
        frames = []
        for world in fit_worlds(families, seed, worlds):
            frames.append(world)
            yield
        x, z, chunk = torch.cat(frames), [], learner.cfg.eval_batch_size
        for i in range(0, x.shape[0], chunk):
            z.append(learner.encode(x[i:i + chunk], target=True))
            yield
        yield from self._fit.steps(torch.cat(z), x)

    def _run(self) -> None:
        try:
            background()
            for _ in self._work:
                if self._handed.is_set() or self._stop.is_set():
                    return
        except BaseException as err:  # noqa: BLE001 (handed to ``result``)
            self._error = err

    def made_for(self, learner: Learner) -> bool:
        """Whether ``learner``'s EMA target is still the one the fit's latents came from."""
        now = _target_state(learner)
        return len(now) == len(self._target) and all(
            a.shape == b.shape and torch.equal(a, b) for a, b in zip(now, self._target, strict=True))

    def result(self) -> tuple[PixelDecoder, dict[str, Any]]:
        """The fit decoder and what was fit: the thread stopped at its next piece, and what it
        left done here (its error raised here)."""
        self._handed.set()
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._stop.is_set():
            raise RuntimeError("the pixel decoder's fit was stopped")
        for _ in self._work:
            pass
        return self._fit.decoder, self.info

    def stop(self) -> None:
        """End the fit at its next piece and wait for the thread."""
        self._stop.set()
        self._thread.join()


def background() -> None:
    """The calling thread to run only where a core would otherwise idle: Linux's SCHED_IDLE
    (elsewhere, as it was)."""
    if hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):  # (a hint: the decoder is the same without it)
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


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
