"""Perfect physics in a learner's latent (the physics ceiling): what D a predictor would score that
rolled the world's exact simulator forward, in this learner's own latent space
(docs/definitions.md#perfect-physics-the-physics-ceiling).

For each test sequence of a held-out world, the env's simulator is branched from the sequence's
exact state at the input frame i (``WorldSet.scenes`` re-run to i), rolled h frames under a
branch's physics, rendered, encoded by the learner's EMA target and scored with the project's D
against the true future's EMA latent (the "no change" being the online latent of frame i):

- ``exact``: the world's own physics: the true future, D = 0 up to the encoder's rounding (a
  check of the construction);
- ``blind``: world-blind physics (no gravity, elastic walls, no friction: the paper's base
  world), track A's yardstick;
- ``other``: the exact physics of the next world of the same family: knowing the wrong world;
- ``seen``: world-blind physics from the state two frames show: each digit at its rendered
  (whole-pixel) position in frame i, moving at the difference of its rendered positions in
  frames i - 1 and i (the world-blind ceiling of a predictor of two context frames);
- ``told``: the world's own physics from ``seen``'s start (the oracle's yardstick);
- ``seen_mean`` and ``told_mean``, the *hedged* yardsticks: the mean latent of ``samples`` draws
  of the state two frames leave open (each coordinate of the position at frames i and i - 1 moved
  uniformly within its pixel, [-0.5, 0.5)), each rolled under a world drawn from the training
  family (``seen_mean``) or the world's own physics (``told_mean``); both share their draws, so
  they differ by the world alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

import env
from agent.evaluation import WorldSet, input_index
from agent.learner import Learner
from agent.objective import NormErrorSums, norm_error, norm_error_sums, total
from env.core import pixel_positions

BRANCHES = ("exact", "blind", "other", "seen", "told", "seen_mean", "told_mean")
#: The hedged branches: the mean latent over draws of what two frames leave open.
HEDGED = ("seen_mean", "told_mean")
#: The default branches of ``perfect_physics`` (``exact`` is a check; ``seen_mean`` needs the
#: training family).
DEFAULT_BRANCHES = ("blind", "other", "seen", "told", "seen_mean", "told_mean")
WORLD_BLIND = env.PhysicsParams()  # no gravity, elastic walls, no friction


def branch_physics(branch: str, world: WorldSet, worlds: Sequence[WorldSet]) -> Any:
    """The physics a branch of ``world`` rolls under (``BRANCHES``); None for ``other`` when
    ``world`` is the only one of its family in ``worlds``."""
    if branch in ("exact", "told", "told_mean"):
        return world.scenes.physics.get(0)
    if branch in ("blind", "seen", "seen_mean"):  # seen_mean: worlds of the family, per draw
        return WORLD_BLIND
    if branch != "other":
        raise ValueError(f"unknown branch {branch!r}, expected one of {BRANCHES}")
    family = [w for w in worlds if w.family == world.family]
    if len(family) < 2:
        return None
    at = next(k for k, w in enumerate(family) if w is world)  # by identity: WorldSets hold arrays
    return family[(at + 1) % len(family)].scenes.physics.get(0)


def as_seen(scenes: env.SceneBatch, before: env.SceneBatch) -> env.SceneBatch:
    """``scenes`` with each digit at its rendered position and the velocity the rendered
    positions of ``before`` (the frame before) and ``scenes`` show."""
    seen = scenes.copy()
    now = pixel_positions(scenes.positions, scenes.limit).astype(np.float64)
    then = pixel_positions(before.positions, before.limit)
    seen.positions[:] = now
    seen.velocities[:] = now - then
    return seen


def within_pixels(seen: env.SceneBatch, rng: np.random.Generator) -> env.SceneBatch:
    """A draw of a state that two frames show as ``seen`` (``as_seen``): each coordinate of the
    position at frames i and i - 1 moved by u ~ U[-0.5, 0.5) (position u_i, velocity u_i -
    u_(i-1)), the position kept within [0, limit]."""
    out = seen.copy()
    now, then = rng.uniform(-0.5, 0.5, (2, *seen.positions.shape))
    out.positions[:] = np.clip(seen.positions + now, 0, seen.limit)
    out.velocities[:] = seen.velocities + now - then
    return out


def scenes_at(world: WorldSet, i: int) -> env.SceneBatch:
    """The exact state of ``world``'s sequences at frame i, checked against its frames."""
    if world.scenes is None:
        raise ValueError(f"world {world.name!r} has no simulator state (WorldSet.scenes)")
    scenes = world.scenes.copy()
    frame = scenes.rollout([i])[:, 0] if i > 0 else scenes.render()
    if not np.array_equal(frame, np.asarray(world.frames[:, i])):
        raise ValueError(f"world {world.name!r}: its scenes do not reproduce its frame {i}")
    return scenes


@torch.no_grad()
def _latents(learner: Learner, frames: np.ndarray, target: bool) -> torch.Tensor:
    """EMA-target (or online) latents (N, K, D) of frames (N, K, 1, H, W), in chunks."""
    n, k = frames.shape[:2]
    per = max(1, learner.cfg.eval_batch_size // k)
    out = [learner.encode(torch.from_numpy(np.ascontiguousarray(frames[s : s + per])).flatten(0, 1),
                          target=target).view(-1, k, learner.cfg.latent_dim).cpu()
           for s in range(0, n, per)]  # fmt: skip
    return torch.cat(out)


@torch.no_grad()
def hedged(learner: Learner, seen: env.SceneBatch, hs: list[int], physics: Any,
           family: env.WorldFamily | None, samples: int, seed: Sequence[int]) -> torch.Tensor:
    """The mean EMA-target latent (N, K, D) of ``samples`` draws of the state ``seen`` leaves
    open (``within_pixels``), each rolled under ``physics``, or, with a ``family``, under a
    world of it drawn per sequence and draw. The sub-pixel draws depend on ``seed`` alone
    (the same for every physics); the worlds' on ``seed`` and the family."""
    pixels, worlds = np.random.default_rng([*seed, 0]), np.random.default_rng([*seed, 1])
    summed = None
    for _ in range(samples):
        scenes = within_pixels(seen, pixels)
        n = scenes.num_scenes
        scenes.physics.assign(np.arange(n), family.sample(worlds, n) if family else [physics] * n)
        z = _latents(learner, scenes.rollout(hs), target=True)
        summed = z if summed is None else summed + z
    assert summed is not None
    return summed / samples


@torch.no_grad()
def world_sums(learner: Learner, world: WorldSet, worlds: Sequence[WorldSet], i: int,
               branches: Sequence[str], family: env.WorldFamily | None = None,
               samples: int = 8, seed: Sequence[int] = (0,)) -> dict[str, NormErrorSums]:  # fmt: skip
    """D's sums per branch for one world's sequences at input frame i (``seed``: the hedged
    branches' draws; ``seen_mean`` only with the training ``family``)."""
    hs = list(learner.cfg.horizons)
    frames = np.asarray(world.frames)
    z = _latents(learner, frames[:, [i]], target=False)[:, 0]
    targets = _latents(learner, frames[:, [i + h for h in hs]], target=True)
    start = scenes_at(world, i)
    out = {}
    for branch in branches:
        physics = branch_physics(branch, world, worlds)
        from_frames = branch in ("seen", "told", *HEDGED)
        no_family = branch == "seen_mean" and family is None
        if physics is None or (from_frames and i == 0) or no_family:
            continue  # no other world, no frame before the first, no family to draw worlds from
        scenes = as_seen(start, scenes_at(world, i - 1)) if from_frames else start.copy()
        if branch in HEDGED:
            pred = hedged(learner, scenes, hs, physics,
                          family if branch == "seen_mean" else None, samples, seed)
        else:
            scenes.physics.assign(np.arange(scenes.num_scenes), [physics] * scenes.num_scenes)
            pred = _latents(learner, scenes.rollout(hs), target=True)
        out[branch] = norm_error_sums(pred, z, targets, learner.cfg.norm_eps)
    return out


def perfect_physics(learner: Learner, worlds: Sequence[WorldSet], n_max: int,
                    branches: Sequence[str] = DEFAULT_BRANCHES,
                    family: env.WorldFamily | None = None, samples: int = 8, seed: int = 0
                    ) -> dict[str, Any]:  # fmt: skip
    """D of perfect physics in ``learner``'s latent on ``worlds`` (the module doc), at the input
    frame of the held-out evaluation with memories of up to ``n_max`` entries: ``{"horizons",
    "input_frame", "families": {family: {branch: [D per horizon..., their mean]}}}`` with a
    ``"pooled"`` family (the families' mean, as the bounds pool them). The hedged branches mean
    ``samples`` draws (seeded by ``seed`` and the world's place in ``worlds``); ``seen_mean``
    draws its worlds from ``family`` (the training family), and is left out without one."""
    i = input_index(learner.cfg, n_max)
    sums: dict[tuple[str, str], list[NormErrorSums]] = {}
    for k, world in enumerate(worlds):
        for branch, s in world_sums(learner, world, worlds, i, branches, family, samples,
                                    (seed, k)).items():
            sums.setdefault((world.family, branch), []).append(s)
    fams: dict[str, dict[str, list[float]]] = {}
    for (fam, branch), parts in sums.items():
        d, d_h = norm_error(total(parts))
        fams.setdefault(fam, {})[branch] = [*d_h.tolist(), float(d)]
    if fams:
        common = set.intersection(*(set(v) for v in fams.values()))
        fams["pooled"] = {b: np.mean([fams[f][b] for f in fams], axis=0).tolist()
                          for b in branches if b in common}  # fmt: skip
    return {"horizons": list(learner.cfg.horizons), "input_frame": i, "families": fams}
