"""The held-out worlds' predictions drawn as frames: the motion in pixels, and strips to look at.

After the held-out curves (``agent.evaluation.world_curves``, the latents of memory size n
kept), a pixel decoder (``probes.decoder``) is fit on the training-family evaluation worlds'
frames through the learner's EMA target encoder (a probe: it shapes nothing), and the kept
latents are decoded (docs/definitions.md#the-pixel-decoder). For each held-out family, per
horizon and then their mean (last), the mean distance in pixels of the decoded digits from
where the simulator puts them at the future frame:

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

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from agent import Learner
from agent.evaluation import Curve, WorldSet
from probes.decoder import (
    DecoderConfig,
    PixelDecoder,
    decode,
    digit_positions,
    fit_decoder,
    position_error,
)
from runners.online.world_sets import WorldSets

#: Sequences of each held-out family in the strips.
STRIP_SEQS = 3


def fit(learner: Learner, worlds: Sequence[WorldSet], seed: int,
        steps: int) -> tuple[PixelDecoder, dict[str, Any]]:  # fmt: skip
    """A decoder fit in ``steps`` on every frame of ``worlds`` through the learner's EMA target,
    and what was fit (frames, parameters, hidden width, steps, batch)."""
    frames = torch.from_numpy(np.concatenate([np.asarray(w.frames).reshape(-1, 1, 64, 64)
                                              for w in worlds]))  # fmt: skip
    step = learner.cfg.eval_batch_size
    with torch.no_grad():
        z = torch.cat([learner.encode(frames[i:i + step], target=True).float()
                       for i in range(0, frames.shape[0], step)])  # fmt: skip
    cfg = DecoderConfig(steps=steps, seed=seed)
    dec = fit_decoder(z, frames, cfg)
    return dec, {"frames": int(frames.shape[0]), "parameters": sum(p.numel() for p in dec.parameters()),
                 "hidden": cfg.hidden, "steps": cfg.steps, "batch": cfg.batch}  # fmt: skip


def pixel_report(learner: Learner, sets: WorldSets, curves: Sequence[Curve], n: int, i: int,
                 steps: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:  # fmt: skip
    """(the report, the strips) of the curves' latents kept at memory size ``n`` (the module
    doc); ``i`` the input frame's index in the held-out sequences; the decoder fit in
    ``steps``."""
    dec, info = fit(learner, sets.base, sets.seed, steps)
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
