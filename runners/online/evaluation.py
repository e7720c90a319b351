"""Evaluations of an online run, both protocols': the ``EvalRecord`` of one evaluation,
``CurveEvaluator`` (what every protocol's evaluator shares), the paper protocol's ``Evaluator``
and the worlds protocol's ``WorldsEvaluator``.

An evaluation is ``agent.adaptation_curve`` on the run's evaluation splits (paper; on a copy of
the memory, weights untouched): D_shift^n for each n of ``eval_ns``, D_base, sigma_embed (and
sigma_z, sigma_target: the spread of the same samples' input latents, online and EMA target);
on the worlds protocol (``agent.evaluation.world_curves``) D_shift^n is the switch world's
own-memory D^n and D_base^n the training worlds'. The recorder writes one row per evaluation into
``run.zarr/eval``; ``EvalRecord.rows`` reads those rows back (the one reader of that group:
resume, summary, plots and reports go through it). Beside them, for the worlds protocol's
report: ``gravity_probe_report`` (gravity and the world read from the aggregated memory) and
``world_probe_report`` (the world probe, ``probes.world``, of a learner, fit on freshly drawn
training-family worlds and scored on the held-out ones: ``runners.evaluate --world-probe``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import env
from agent import EvalData, EvalResult, Learner, adaptation_curve, tracks
from agent.evaluation import (
    Curve,
    Encoded,
    WorldSet,
    encode_worlds,
    family_means,
    input_index,
    reference_check,
    results,
    sequence_length,
    world_curves,
)
from agent.step import encodes_memory
from probes.digits import ProbeSet, probe_report
from probes.gravity import gravity_probe
from probes.perfect_physics import perfect_physics
from probes.world import ProbeConfig, ProbeWorld, world_probe
from runners.online.intervals import paired_intervals
from runners.online.pixels import DecoderProcess, pixel_report
from runners.online.world_sets import WorldSets, world_set


@dataclass
class EvalRecord:
    """One evaluation: D_shift^n for each n of ``ns``, D_base, sigma_embed (the predictions'
    spread), sigma_z and sigma_target (the spread of the input frames' online and EMA target
    latents; NaN in a run recorded before they were), excluded samples."""

    step: int
    ns: list[int]
    d_shift: list[float]
    d_shift_per_h: list[list[float]]
    d_base: float
    d_base_per_h: list[float]
    sigma_embed: float
    sigma_z: float
    sigma_target: float
    excluded: int
    horizons: list[int]

    def d(self, n: int) -> float:
        """D_shift^n (NaN when n was not evaluated)."""
        return self.d_shift[self.ns.index(n)] if n in self.ns else math.nan

    @classmethod
    def from_results(cls, step: int, results: Sequence[EvalResult], horizons: list[int]) -> EvalRecord:
        first = results[0]  # the smallest n (0 by default): D_base with the training memory
        return cls(step=step, ns=[int(r.n) for r in results],
                   d_shift=[float(r.d_shift) for r in results],
                   d_shift_per_h=[_floats(r.d_shift_per_h) for r in results],
                   d_base=float(first.d_base), d_base_per_h=_floats(first.d_base_per_h),
                   sigma_embed=float(first.sigma_embed), sigma_z=float(first.sigma_z),
                   sigma_target=float(first.sigma_target), excluded=int(first.excluded),
                   horizons=horizons)

    @classmethod
    def rows(cls, ev: Mapping[str, np.ndarray]) -> list[EvalRecord]:
        """The records of ``Recorder.read_eval()``'s arrays, in order."""
        if not ev:
            return []
        ns, horizons = [int(n) for n in ev["ns"]], [int(h) for h in ev["horizons"]]
        floats = ("d_shift", "d_shift_per_h", "d_base", "d_base_per_h", "sigma_embed", "sigma_z",
                  "sigma_target")  # a row's numbers, lists for an array (float64 of float32)
        return [cls(step=int(ev["step"][i]), ns=ns, horizons=horizons,
                    excluded=int(ev["excluded"][i]),
                    **{k: np.asarray(ev[k][i], np.float64).tolist() for k in floats})
                for i in range(len(ev["step"]))]

    def as_recorded(self) -> EvalRecord:
        """The record as run.zarr holds it, its numbers float32 (what ``rows`` reads back): the
        loop keeps this, so a resumed run's summary, which reads the earlier evaluations back
        from the store, holds the numbers of the same run done in one go."""

        def f32(v: Any) -> Any:  # every float, in lists too; ints as they are
            if isinstance(v, list):
                return [f32(x) for x in v]
            return float(np.float32(v)) if isinstance(v, float) else v

        fields = dataclasses.fields(self)
        return dataclasses.replace(self, **{f.name: f32(getattr(self, f.name)) for f in fields})


def _floats(x: Any) -> list[float]:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().tolist()
    if isinstance(x, dict):
        return [float(v) for v in x.values()]
    return [float(v) for v in np.asarray(x).ravel()]


class CurveEvaluator:
    """What every evaluator of a run shares: the periodic memory sizes ``ns`` and ``horizons``,
    ``curve`` (D^n for some n, by default the periodic ones) and the periodic ``EvalRecord``.
    A protocol's evaluator says how its ``results`` are computed, and ``reads_memory``: whether
    they read the learner's live memory (else they change only with the weights)."""

    reads_memory = False

    def __init__(self, ns: Sequence[int], horizons: Sequence[int]) -> None:
        self.ns = tuple(sorted(set(int(n) for n in ns)))
        self.horizons = [int(h) for h in horizons]

    def results(self, learner: Learner, ns: tuple[int, ...]) -> list[EvalResult]:
        raise NotImplementedError

    def curve(self, learner: Learner, ns: Sequence[int] | None = None) -> list[EvalResult]:
        """D^n for ``ns`` (default: the periodic ``eval_ns``)."""
        return self.results(learner, tuple(sorted(set(ns))) if ns is not None else self.ns)

    def __call__(self, learner: Learner) -> EvalRecord:
        """The periodic evaluation at the learner's current step."""
        return EvalRecord.from_results(learner.step, self.curve(learner), self.horizons)

    def report(self, learner: Learner, ns: Sequence[int], strips: Path | None = None
               ) -> dict[str, Any] | None:  # fmt: skip
        """The protocol's report beyond the curve (a run's and ``runners.evaluate``'s
        ``held_out``), ``strips`` the decoded predictions' file where it draws them. None here."""
        return None

    def weights_final(self, learner: Learner) -> None:
        """Told that the learner's weights will not change again (they froze): work on them
        may start early. Nothing here."""

    def close(self) -> None:
        """Stop what ``weights_final`` started. Nothing here."""


class Evaluator(CurveEvaluator):
    """The paper protocol's evaluations of one learner on fixed splits (``agent.EvalData``)."""

    reads_memory = True  # ``adaptation_curve`` adds the shift transitions to the live buffer

    def __init__(self, data: EvalData, ns: Sequence[int], horizons: Sequence[int]) -> None:
        super().__init__(ns, horizons)
        self.data = data

    def results(self, learner: Learner, ns: tuple[int, ...]) -> list[EvalResult]:
        """``agent.adaptation_curve`` for ``ns``."""
        return list(adaptation_curve(learner, self.data, ns=ns))


class WorldsEvaluator(CurveEvaluator):
    """The worlds protocol's evaluations of one learner.

    D_shift^n: the switch world's test sequences, each predicted through a memory of its own n
    transitions before the input; D_base^n: the same on the training-family worlds (their mean).
    """

    def __init__(self, sets: WorldSets, ns: Sequence[int], horizons: Sequence[int],
                 decoder_steps: int = 0) -> None:  # fmt: skip
        super().__init__(ns, horizons)
        self.sets, self.decoder_steps = sets, decoder_steps
        self.decoder: DecoderProcess | None = None  # started when the weights are final

    def weights_final(self, learner: Learner) -> None:
        """Start the held-out report's pixel decoder on the final target encoder, so that it
        fits beside the rest of the run (``runners.online.pixels.DecoderProcess``)."""
        if self.decoder_steps and self.decoder is None:
            self.decoder = self._decoder(learner)

    def close(self) -> None:
        if self.decoder is not None:
            self.decoder.stop()
            self.decoder = None

    def _decoder(self, learner: Learner) -> DecoderProcess:
        return DecoderProcess(learner, self.sets.families, self.sets.seed, self.decoder_steps)

    def results(self, learner: Learner, ns: tuple[int, ...]) -> list[EvalResult]:
        (shift,) = world_curves(learner, [self.sets.shift], ns, ("own",))
        return results(shift, world_curves(learner, self.sets.base, ns, ("own",)))

    def report(self, learner: Learner, ns: Sequence[int], strips: Path | None = None) -> dict[str, Any]:
        """The held-out worlds' D^n for every memory source (``own``, ``same``, ``wrong``; only
        ``own`` for a learner without memory: track A, the oracle), per world and per family;
        ``gravity_probe``: gravity and the world's identity read from e_agg with n = max(ns)
        peer transitions, within each family (``gravity_probe_report``; None without memory);
        and ``probes``: held-out R^2 and px of probes (linear, and an MLP) of the digits' state from the latents
        (``probes.digits``), fit on the training-family worlds' sequences; ``reference``:
        D against the EMA target's own "no change" beside the paper's, and the online-target
        gap (``agent.evaluation.reference_check``); and ``perfect_physics``: D of the env's
        exact simulator in this learner's latent, world-blind and of another world
        (``probes.perfect_physics``: the physics ceiling); ``pixels``: the predictions at
        n = max(ns) decoded, the digits' position errors in pixels (``runners.online.pixels``;
        its strips written to ``strips``, an .npz, when given; None with ``decoder_steps`` 0)."""
        cfg = learner.cfg
        memories = memories_of(cfg)
        decoded = self.decoder_steps > 0
        if self.decoder is not None and not self.decoder.made_for(learner):
            self.close()  # (weights changed after all: a checkpoint loaded into the learner)
        # the decoder fits in its own process meanwhile (started when the weights froze, or now)
        decoder = self.decoder or (self._decoder(learner) if decoded else None)
        # one latent: the held-out frames encoded once for the learner and every head
        every = [learner, *learner.heads.values()]
        encoded = encode_worlds(learner, self.sets.held_out, max(ns),
                                full=any(encodes_memory(x.nets) for x in every))  # fmt: skip
        try:
            curves = world_curves(learner, self.sets.held_out, tuple(ns), memories, peers(cfg),
                                  keep=max(ns) if decoded else None, samples=(0, max(ns)),
                                  encoded=encoded)  # fmt: skip
            out = {
                **self._curves_report(ns, memories, curves),
                "probes": probes(learner, self.sets),
                "pixels": None,
                "reference": reference_check(learner, self.sets.held_out),
                "perfect_physics": perfect_physics(  # seen_mean's worlds: the training family
                    learner, self.sets.held_out, max(ns),
                    family=next(iter(self.sets.families.values())), seed=self.sets.seed),
                "gravity_probe": None if memories == ("own",) else gravity_probe_report(
                    learner, n=max(ns), seed=self.sets.seed, families=self.sets.families),
            }  # fmt: skip
            fitted = decoder.result() if decoder is not None else None
            i, shown = input_index(cfg, max(ns)), {}
            if fitted is not None:
                out["pixels"], shown = pixel_report(learner, self.sets, curves, max(ns), i, fitted)
            if learner.heads:  # every head on the same latent: the same windows, the decoder
                out["heads"], scored = {}, {cfg.head_name: curves}
                for name, head in learner.heads.items():
                    out["heads"][name], head_shown, scored[name] = self.head_report(
                        head, ns, fitted, out["perfect_physics"], encoded)
                    shown |= {f"heads/{name}/{k}": v for k, v in head_shown.items()}
                out["intervals"] = paired_intervals(scored, max(ns), self.sets.seed)
            if fitted is not None and strips is not None:
                np.savez_compressed(strips, **shown)
        finally:
            if decoder is not None and decoder is not self.decoder:
                decoder.stop()
        return out

    def head_report(self, head: Learner, ns: Sequence[int],
                    fitted: tuple[Any, dict[str, Any]] | None,
                    perfect: dict[str, Any] | None, encoded: list[Encoded] | None = None
                    ) -> tuple[dict[str, Any], dict[str, np.ndarray], list[Curve]]:  # fmt: skip
        """A head's held-out report (``agent.heads``; ``report``'s D^n per memory source, world
        and family, and its decoded predictions by the trainer's decoder ``fitted``), its
        strips and its curves (their samples at 0 and max(ns), for ``paired_intervals``);
        ``perfect``: the trainer's perfect physics, the same in the shared latent; ``encoded``:
        the held-out worlds as the trainer encoded them (``agent.evaluation.encode_worlds``)."""
        cfg = head.cfg
        memories = memories_of(cfg)
        curves = world_curves(head, self.sets.held_out, tuple(ns), memories, peers(cfg),
                              keep=max(ns) if fitted is not None else None,
                              samples=(0, max(ns)), encoded=encoded)  # fmt: skip
        out = {**self._curves_report(ns, memories, curves), "track": cfg.track,
               "oracle": cfg.oracle, "perfect_physics": perfect, "pixels": None}  # fmt: skip
        shown: dict[str, np.ndarray] = {}
        if fitted is not None:
            out["pixels"], shown = pixel_report(head, self.sets, curves, max(ns),
                                                input_index(cfg, max(ns)), fitted,
                                                truth=False)  # fmt: skip
        return out, shown, curves

    def _curves_report(self, ns: Sequence[int], memories: tuple[str, ...],
                       curves: list[Any]) -> dict[str, Any]:  # fmt: skip
        """D^n of held-out curves, per family and per world."""
        return {
            "ns": [int(n) for n in ns], "horizons": self.horizons, "memories": list(memories),
            "families": family_means(curves),
            "worlds": [
                {"world": c.world, "family": c.family, "memory": c.memory,
                 "physics": [float(x) for x in w.physics], "d": c.d, "d_per_h": c.d_per_h}
                for c in curves
                for w in self.sets.held_out if w.name == c.world
            ],
        }  # fmt: skip


def memories_of(cfg: Any) -> tuple[str, ...]:
    """The memory sources a learner's held-out report scores: all three for a learner that reads
    memory, ``own`` alone (its one D) for track A and the oracle."""
    return ("own", "same", "wrong") if tracks.reads_memory(cfg.track) and not cfg.oracle else ("own",)


def gravity_probe_report(learner: Learner, *, n: int, seed: int,
                         families: dict[str, env.WorldFamily] | None = None, worlds: int = 8,
                         seqs: int = 16) -> dict[str, Any]:  # fmt: skip
    """``probes.gravity.gravity_probe`` of a learner with memory on ``worlds`` worlds of each of
    ``families`` (default ``env.FAMILIES``; the training one first, then the held-out ones),
    ``seqs`` sequences each (the test digits; at least two halves of ``peers`` + 1), all drawn
    from ``seed`` apart from the evaluation's own worlds; memories of n peer transitions.
    ``e_agg`` and ``entries`` (the same entries' ``probes.gravity.entry_statistics``): {family:
    its readout (direction_deg, direction_cos, strength_r2, identified, chance, worlds)}, with
    ``held_out`` the mean of each number over the held-out families."""
    cfg, p = learner.cfg, peers(learner.cfg)
    families = dict(families or env.FAMILIES)
    seqs = max(seqs, 2 * (p + 1))
    length = sequence_length(cfg, n)
    rng = np.random.default_rng([seed, 0x6EA7])
    drawn = {fam: [world_set(f"{fam}-probe-{i}", phys, seqs, length, [seed, 0x6EA7, k, i], fam)
                   for i, phys in enumerate(families[fam].sample(rng, worlds))]
             for k, fam in enumerate(families)}  # fmt: skip
    out = gravity_probe(learner, drawn, n=n, peers=p)
    held = list(families)[1:]
    for scores in out.values():
        if held:
            scores["held_out"] = {k: float(np.mean([scores[f][k] for f in held]))
                                  for k in scores[held[0]]}  # fmt: skip
    return {"n": n, "peers": p, "worlds": worlds, "sequences": seqs, **out}


def peers(cfg: Any) -> int:
    """The sequences a held-out sample's same-world memory comes from: the other streams of
    its group memory (``group_size - 1``), or one."""
    return max(1, cfg.group_size - 1) if cfg.memory_scope == "group" else 1


def probes(learner: Learner, sets: WorldSets, seqs: int = 24) -> dict[str, dict[str, float]]:
    """{latent: {target: R^2}} of ``probes.digits.probe_report``: fit on the training-family
    worlds' test sequences, scored on the first ``seqs`` of each held-out world's (16 worlds of
    24 by default: within 0.01 of all 96's R^2 at seed 0, at a quarter of the cost)."""

    def probe_sets(worlds: list[WorldSet], k: int | None = None) -> list[ProbeSet]:
        return [ProbeSet(np.asarray(w.frames[:k]), np.asarray(w.positions[:k])) for w in worlds]

    return probe_report(learner.encode, probe_sets(sets.base), probe_sets(sets.held_out, seqs),
                        learner.cfg.context_frames)


def world_probe_report(learner: Learner, held_out: Sequence[WorldSet], *, worlds: int = 400,
                       seqs: int = 96, seed: int = 0, cfg: ProbeConfig | None = None,
                       family: env.WorldFamily | None = None) -> dict[str, Any]:  # fmt: skip
    """``probes.world.world_probe`` on the learner's EMA-target latents: fit on ``worlds``
    worlds drawn from the training ``family`` (default ``env.FAMILIES["train"]``; ``seqs``
    sequences of the MNIST training digits each, generated from ``seed``), scored on
    ``held_out`` (the test digits); ``cfg``: the predictors (None: ``ProbeConfig()``), its
    windows starting at ``cfg.start``. Returns its result with the fitting set's size."""
    c, hs = learner.cfg.context_frames, learner.cfg.horizons
    cfg = cfg or ProbeConfig()
    length = cfg.start + c + hs[-1]
    drawn = (family or env.FAMILIES["train"]).sample(np.random.default_rng(seed), worlds)
    fit = []
    for k, physics in enumerate(drawn):  # the training digits: the held-out sets have the test's
        s = env.generate_sequences(seqs, seed=[seed, k], split="train", seq_len=length,
                                   **physics.as_dict())
        fit.append(ProbeWorld(s["frames"], env.physics_features(physics), "train"))
    test = [ProbeWorld(np.asarray(w.frames), np.asarray(w.physics), w.family) for w in held_out]
    out = world_probe(functools.partial(learner.encode, target=True), fit, test, c, hs, cfg)
    return {"fit": {"worlds": worlds, "sequences": worlds * seqs, "seed": seed,
                    "predictor": f"{cfg.blocks} blocks x {cfg.hidden}, the world in each (adaLN-Zero), "
                                 f"{cfg.steps} AdamW steps",
                    "start": cfg.start},
            "horizons": list(hs), "families": out}
