"""Evaluations of an online run: the ``EvalRecord`` of one evaluation, ``CurveEvaluator`` (what
every protocol's evaluator shares) and the paper protocol's ``Evaluator``.

An evaluation is ``agent.adaptation_curve`` on the run's evaluation splits (on a copy of the
memory, weights untouched): D_shift^n for each n of ``eval_ns``, D_base, sigma_embed. The
recorder writes one row per evaluation into ``run.zarr/eval``; ``EvalRecord.rows`` reads those
rows back (the one reader of that group: resume, summary, plots and reports go through it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agent import EvalData, EvalResult, Learner, adaptation_curve


@dataclass
class EvalRecord:
    """One evaluation: D_shift^n for each n of ``ns``, D_base, sigma_embed, excluded samples."""

    step: int
    ns: list[int]
    d_shift: list[float]
    d_shift_per_h: list[list[float]]
    d_base: float
    d_base_per_h: list[float]
    sigma_embed: float
    excluded: int
    horizons: list[int]

    def d(self, n: int) -> float:
        """D_shift^n (NaN when n was not evaluated)."""
        return self.d_shift[self.ns.index(n)] if n in self.ns else math.nan

    @classmethod
    def from_results(cls, step: int, results: Sequence[EvalResult], horizons: list[int]) -> EvalRecord:
        first = results[0]  # the smallest n (0 by default): D_base with the training memory
        return cls(
            step=step,
            ns=[int(r.n) for r in results],
            d_shift=[float(r.d_shift) for r in results],
            d_shift_per_h=[_floats(r.d_shift_per_h) for r in results],
            d_base=float(first.d_base),
            d_base_per_h=_floats(first.d_base_per_h),
            sigma_embed=float(first.sigma_embed),
            excluded=int(first.excluded),
            horizons=horizons,
        )

    @classmethod
    def rows(cls, ev: Mapping[str, np.ndarray]) -> list[EvalRecord]:
        """The records of ``Recorder.read_eval()``'s arrays, in order."""
        if not ev:
            return []
        ns = [int(n) for n in ev["ns"]]
        horizons = [int(h) for h in ev["horizons"]]
        return [
            cls(
                step=int(ev["step"][i]),
                ns=ns,
                d_shift=[float(x) for x in ev["d_shift"][i]],
                d_shift_per_h=np.asarray(ev["d_shift_per_h"][i], np.float64).tolist(),
                d_base=float(ev["d_base"][i]),
                d_base_per_h=np.asarray(ev["d_base_per_h"][i], np.float64).tolist(),
                sigma_embed=float(ev["sigma_embed"][i]),
                excluded=int(ev["excluded"][i]),
                horizons=horizons,
            )
            for i in range(len(ev["step"]))
        ]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


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


class Evaluator(CurveEvaluator):
    """The paper protocol's evaluations of one learner on fixed splits (``agent.EvalData``)."""

    reads_memory = True  # ``adaptation_curve`` adds the shift transitions to the live buffer

    def __init__(self, data: EvalData, ns: Sequence[int], horizons: Sequence[int]) -> None:
        super().__init__(ns, horizons)
        self.data = data

    def results(self, learner: Learner, ns: tuple[int, ...]) -> list[EvalResult]:
        """``agent.adaptation_curve`` for ``ns``."""
        return list(adaptation_curve(learner, self.data, ns=ns))
