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

import contextlib
import multiprocessing as mp
import os
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

import env
from agent import AgentConfig, Learner
from agent.evaluation import Curve
from probes.decoder import (
    DecoderConfig,
    PixelDecoder,
    decode,
    digit_positions,
    fit_decoder,
    position_error,
)
from probes.digits import one_thread
from runners.online.world_sets import WorldSets

#: How long the report waits for the decoder's process before it ends it and fits the decoder
#: itself (seconds; in the default run on two cores the bounds wait 10-40 s).
PATIENCE_S = 300.0
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


class DecoderProcess:
    """A decoder fit in ``steps`` on ``fit_frames`` (WORLDS_PER_1000_STEPS worlds a 1,000 steps,
    at most FIT_WORLDS) through the learner's EMA target, beside whatever the caller does
    meanwhile, on the cores that work leaves idle: in a process of its own (``multiprocessing``,
    spawned) of Linux's idle scheduling class (``background``) and one torch thread, given the
    config, a copy of the EMA target and the learner's device (``fit``). ``result`` waits for it
    up to ``patience`` seconds, then ends it and fits here (a machine kept busy by other work holds
    the report back no longer), and returns (the decoder, what was fit: frames, parameters,
    hidden width, steps, batch); ``stop`` ends the process.

    A process, not a thread: a thread of the idle class that is starved while it holds the GIL
    stalls every thread of its process. When a worlds run trained its floor and ceiling in
    processes of their own, decoders fit at the normal priority took CPU from the main run (5%
    slower); idle, they fit on the core the run leaves free (the default run uses about 1.2 of
    two cores). The decoder is the same wherever it is fit once the target encoder is final: a
    run starts it when its weights freeze (``WorldsEvaluator.weights_final``)."""

    def __init__(self, learner: Learner, families: dict[str, env.WorldFamily], seed: int,
                 steps: int, patience: float = PATIENCE_S) -> None:  # fmt: skip
        self._target = [t.detach().clone() for t in _target_state(learner)]
        self._args = (learner.cfg, {k: v.detach().cpu() for k, v in
                                    learner.nets.target.target.state_dict().items()},
                      families, seed, steps, str(learner.device))  # fmt: skip
        self.patience, self._got, self._stopped = patience, None, False
        worlds = min(FIT_WORLDS, -(-steps * WORLDS_PER_1000_STEPS // 1000))
        cfg = DecoderConfig(steps=steps, seed=seed)
        self.info = {"frames": worlds * FIT_SEQS * FIT_LEN, "hidden": cfg.hidden,
                     "steps": cfg.steps, "batch": cfg.batch,
                     "parameters": sum(p.numel() for p in _shell(learner.cfg.latent_dim,
                                                                 cfg.hidden).parameters())}  # fmt: skip
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_child, args=(child, *self._args), daemon=True,
                                 name="pixel-decoder")  # fmt: skip
        self._proc.start()
        child.close()

    def made_for(self, learner: Learner) -> bool:
        """Whether ``learner``'s EMA target is still the one the fit's latents came from."""
        now = _target_state(learner)
        return len(now) == len(self._target) and all(
            a.shape == b.shape and torch.equal(a, b) for a, b in zip(now, self._target, strict=True))

    def result(self) -> tuple[PixelDecoder, dict[str, Any]]:
        """The fit decoder and what was fit: the process's, or after ``patience`` s this
        thread's (the process's error raised here)."""
        if self._got is None:
            if self._stopped:
                raise RuntimeError("the pixel decoder's fit was stopped")
            got = None
            try:
                if self._conn.poll(self.patience):
                    got = self._conn.recv()
            except EOFError:
                got = ("error", "its process ended without a result")
            self.stop()
            if got is None:
                with torch.random.fork_rng(devices=[]):  # (a learner's init drawn, then undone)
                    got = ("decoder", fit(*self._args).state_dict())
            self._got = got
        kind, what = self._got
        if kind == "error":
            raise RuntimeError(f"the pixel decoder's fit failed: {what}")
        dec = _shell(self._args[0].latent_dim, self.info["hidden"])
        dec.load_state_dict({k: torch.as_tensor(v) for k, v in what.items()}, assign=True)
        return dec.eval().requires_grad_(False), self.info

    def stop(self) -> None:
        """End the process (if it still runs) and wait for it."""
        self._stopped = True
        if self._proc.is_alive():
            self._proc.terminate()
        self._proc.join()
        self._conn.close()


def fit(cfg: AgentConfig, target: dict[str, torch.Tensor], families: dict[str, env.WorldFamily],
        seed: int, steps: int, device: str = "cpu") -> PixelDecoder:  # fmt: skip
    """The decoder of ``DecoderProcess``, fit here: a learner of ``cfg`` on ``device`` with the
    EMA target ``target`` encodes ``fit_frames``; on one torch thread, so that it is the same
    decoder, bit for bit, in its own process and here (a process of any thread count)."""
    with one_thread():
        learner = Learner(cfg, device=device)
        learner.nets.target.target.load_state_dict(target)
        worlds = min(FIT_WORLDS, -(-steps * WORLDS_PER_1000_STEPS // 1000))
        frames = fit_frames(families, seed, worlds)
        step = cfg.eval_batch_size
        z = torch.cat([learner.encode(frames[i:i + step], target=True)
                       for i in range(0, frames.shape[0], step)])  # fmt: skip
        return fit_decoder(z, frames, DecoderConfig(steps=steps, seed=seed))


def _shell(latent_dim: int, hidden: int) -> PixelDecoder:
    """A decoder without values (on the meta device: no generator drawn), to load one into."""
    with torch.device("meta"):
        return PixelDecoder(latent_dim, hidden)


def _child(conn: Connection, *args: Any) -> None:
    """The decoder's process: ``fit`` in the idle class on one torch thread, sent back as arrays
    (a tensor would be sent as a handle to this process's memory, gone once it ends)."""
    background()
    torch.set_num_threads(1)
    try:
        out = ("decoder", {k: v.cpu().numpy() for k, v in fit(*args).state_dict().items()})
    except Exception as err:  # noqa: BLE001 (sent to ``result``)
        out = ("error", f"{type(err).__name__}: {err}")
    with contextlib.suppress(BrokenPipeError, OSError):  # (the parent gone: nothing to tell)
        conn.send(out)
    conn.close()


def background() -> None:
    """The calling process to run only where a core would otherwise idle: Linux's SCHED_IDLE
    (elsewhere, or where refused, as it was; the decoder is the same)."""
    if hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def _target_state(learner: Learner) -> list[torch.Tensor]:
    return list(learner.nets.target.target.state_dict().values())


def pixel_report(learner: Learner, sets: WorldSets, curves: Sequence[Curve], n: int, i: int,
                 fitted: tuple[PixelDecoder, dict[str, Any]], seqs: int = 24,
                 truth: bool = True) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(the report, the strips) of the curves' latents kept at memory size ``n`` (the module
    doc), on the first ``seqs`` sequences of each world (16 worlds of 24 by default: placing
    the digits of all 96 took a third of the report's time); ``i`` the input frame's index
    in the held-out sequences; ``fitted``: the decoder and what was fit
    (``DecoderProcess.result``); ``truth``: the decoded true future and "no change" too (a
    head on the latent of a learner that has them: the same, left out)."""
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
        future = np.asarray(w.positions)[:seqs, [i + h for h in hs]]  # (N, K, digits, 2)
        sprites = torch.from_numpy(np.asarray(w.scenes.sprites)[:seqs])
        sprites = sprites.repeat_interleave(len(hs), 0)
        kept = {c.memory: c.kept["pred"][:seqs]}
        if c.world not in seen:  # the world's true and input latents, once
            seen.add(c.world)
            kept |= {"decoded_true": c.kept["target"][:seqs],
                     "no_change": c.kept["input"][:seqs].unsqueeze(1).expand(-1, len(hs), -1)
                     } if truth else {}  # fmt: skip
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
