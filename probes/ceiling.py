"""The probes' ceiling: what the digit probes (``probes.digits``) read from the digits' positions
themselves, in place of a latent (docs/definitions.md#probes).

The predictor's input is C context frames; a latent that says where each digit is in each frame
to some precision says how it moves only as well as those positions allow. This module feeds the
probes, instead of the C context latents, the C frames' positions:

- ``exact``: the simulator's positions (float, px);
- ``rendered``: as the frames draw them (``env.core``: each sprite at its rounded corner), which
  is all any reader of the pixels can know;
- ``rendered`` + Gaussian noise of ``sigma`` px on every coordinate of every frame: a reader
  that holds each frame's positions to about that precision;

with each digit's identity kept across the frames (``sorted=False``) or lost (each frame's
coordinates sorted, as the position target is). The probes and their fitting are the run's own
(``probe_features``, ``fit_probes``, ``fit_mlp``); ``--checkpoint`` scores a run's context
latents on the same sequences beside. ``python -m probes.ceiling --help``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np
import torch

import env
from agent import CheckpointError, Learner, load_checkpoint, read_checkpoint_config
from env.core import pixel_positions
from probes.digits import (
    TARGETS,
    ProbeSet,
    fit_mlp,
    fit_probes,
    probe_features,
    probe_report,
    scores,
)


@dataclasses.dataclass(frozen=True)
class Reader:
    """What the probes are given in place of each frame's latent."""

    rendered: bool = True  # the positions the frame draws (rounded), else the simulator's
    sigma: float = 0.0  # Gaussian noise (px) on every coordinate of every frame
    sorted: bool = False  # each frame's x and y coordinates sorted: which digit is which lost

    def read(self, positions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """positions (N, L, digits, 2) -> features (N, L, 2 digits)."""
        p = np.asarray(positions, np.float64)
        if self.rendered:
            p = pixel_positions(p, 64 - 28).astype(np.float64)
        if self.sigma:
            p = p + rng.normal(0.0, self.sigma, p.shape)
        if self.sorted:
            p = np.sort(p, axis=2)
        return p.reshape(*p.shape[:2], -1)

    def __str__(self) -> str:
        what = "rendered" if self.rendered else "exact"
        return what + (f" + {self.sigma:g} px" if self.sigma else "") + (", sorted" if self.sorted else "")


def sequences(family: str, worlds: int, seqs: int, seq_len: int, seed: Sequence[int]) -> list[ProbeSet]:
    """``seqs`` test-digit sequences (frames and the digits' positions (seqs, seq_len, digits,
    2)) of each of ``worlds`` worlds drawn from ``family`` (``env.FAMILIES``), from ``seed``."""
    drawn = env.FAMILIES[family].sample(np.random.default_rng(list(seed)), worlds)
    out = []
    for k, ph in enumerate(drawn):
        s = env.generate_sequences(seqs, seed=[*seed, k], split="test", seq_len=seq_len, **ph.as_dict())
        out.append(ProbeSet(s["frames"], s["positions"]))
    return out


def ceiling(reader: Reader, fit: Sequence[ProbeSet], test: Sequence[ProbeSet], context: int,
            seed: int = 0) -> dict[str, dict[str, float]]:  # fmt: skip
    """{"context": linear probes' scores, "context_mlp": the MLP's} of ``probes.digits.scores``
    (R^2, and px / px per frame) from the ``context`` frames' positions as ``reader`` gives them:
    fit on ``fit``'s sequences, scored on ``test``'s."""
    rng = np.random.default_rng(seed)

    def sets(seqs: Sequence[ProbeSet]) -> list[ProbeSet]:
        return [ProbeSet(reader.read(s.positions, rng), s.positions) for s in seqs]

    def identity(x: torch.Tensor, _target: bool) -> torch.Tensor:  # the "latents": the features
        return x.float()

    x_fit, y_fit = probe_features(identity, sets(fit), context)
    x_test, y_test = probe_features(identity, sets(test), context)
    ridge = fit_probes(x_fit["context"], {t: y_fit[t] for t in TARGETS})
    mlp = fit_mlp(x_fit["context"], np.concatenate([y_fit[t] for t in TARGETS], 1), seed=seed)
    split = np.cumsum([y_fit[t].shape[1] for t in TARGETS])[:-1]
    pred = dict(zip(TARGETS, np.split(mlp.predict(x_test["context"]), split, axis=1), strict=True))
    return {"context": scores(y_test, {t: ridge[t].predict(x_test["context"]) for t in TARGETS}),
            "context_mlp": scores(y_test, pred)}  # fmt: skip


@dataclasses.dataclass
class Options:
    """The probes read from the digits' positions in the context frames instead of a latent:
    the velocity (each digit's move over the last frame) a reader of the frames could give the
    predictor, by the runs' own probes (docs/definitions.md#probes). About 4 s a row."""

    contexts: tuple[int, ...] = (2, 4)  # context lengths C (frames)
    sigmas: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0)  # noise on the rendered positions, px
    fit_worlds: int = 40  # training-family worlds the probes are fit on
    test_worlds: int = 6  # held-out worlds of each of interp and extrap they are scored on
    seqs: int = 24  # sequences a world
    seed: int = 7  # the worlds and sequences drawn
    # a run's checkpoint (e.g. runs/NAME/checkpoints/latest.pt): its C context latents read by
    # the same probes on the same sequences, the last row
    checkpoint: str | None = None


def load(path: str) -> Learner:
    """The learner a checkpoint holds (on the CPU); a missing or damaged file exits with one line."""
    try:
        learner = Learner(read_checkpoint_config(path), device="cpu")
        load_checkpoint(path, learner=learner, map_location="cpu")
    except (OSError, CheckpointError) as err:
        raise SystemExit(f"python -m probes.ceiling: error: --checkpoint: {err}") from None
    return learner


def main(opts: Options) -> None:
    """Print a row of scores per reader and context length (and the run's latents)."""
    learner = None if opts.checkpoint is None else load(opts.checkpoint)
    length = 60
    fit = sequences("train", opts.fit_worlds, opts.seqs, length, [opts.seed, 0])
    test = [p for k, fam in enumerate(("interp", "extrap"), 1)
            for p in sequences(fam, opts.test_worlds, opts.seqs, length, [opts.seed, k])]  # fmt: skip
    readers = [Reader(rendered=False)] + [Reader(sigma=s) for s in opts.sigmas]
    readers += [Reader(sigma=s, sorted=True) for s in opts.sigmas]
    print("| C | the probes read | position, MLP: R^2 / px | velocity, linear: R^2 / px/frame "
          "| velocity, MLP: R^2 / px/frame |\n|---|---|---|---|---|")
    t0 = time.perf_counter()
    for c in opts.contexts:
        for r in readers:
            row(c, str(r), ceiling(r, fit, test, c))
    if learner is not None:
        c = learner.cfg.context_frames
        row(c, "the run's latents", probe_report(learner.encode, fit, test, c))
    print(f"({time.perf_counter() - t0:.0f} s)")


def row(context: int, what: str, s: dict[str, dict[str, float]]) -> None:
    """One table row of a reader's ``context`` (linear) and ``context_mlp`` scores."""
    lin, nl = s["context"], s["context_mlp"]
    print(f"| {context} | {what} | {nl['position']:.3f} / {nl['position_px']:.2f} | "
          f"{lin['velocity']:.3f} / {lin['velocity_px']:.2f} | "
          f"{nl['velocity']:.3f} / {nl['velocity_px']:.2f} |", flush=True)


if __name__ == "__main__":
    import tyro

    main(tyro.cli(Options, prog="python -m probes.ceiling"))
