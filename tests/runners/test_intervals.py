"""Paired intervals of a run's held-out numbers (runners.online.intervals)."""

from __future__ import annotations

import numpy as np
import pytest

from agent.evaluation import Curve
from runners.online.intervals import paired_intervals

N, K, NS = 24, 3, (0, 5)


def curves(level: dict[str, float], seed: int, memories: tuple[str, ...] = ("own",),
           noise: float = 0.2) -> list[Curve]:  # fmt: skip
    """Curves of 2 interp and 3 extrap worlds whose samples' ratios are ``level[memory]`` plus
    the same per-sample noise for every head (``seed``: that noise), a sample uncounted in each
    world."""
    out = []
    for w, fam in enumerate(("interp", "interp", "extrap", "extrap", "extrap")):
        base = np.random.default_rng([seed, w]).normal(0, noise, (N, K)) + 0.1 * w
        ok = np.ones((N, K), bool)
        ok[w, 1] = False
        for m in memories:
            c = Curve(list(NS), world=f"{fam}-{w}", family=fam, memory=m)
            for n in NS:
                ratio = base + (level["own"] if n == 0 else level[m])
                c.samples[n] = (np.where(ok, ratio, 0.0), ok)
                c.d.append(float(np.mean([ratio[ok[:, k], k].mean() for k in range(K)])))
            out.append(c)
    return out


def heads(seed: int = 0) -> dict[str, list[Curve]]:
    return {"A": curves({"own": 1.0}, seed), "oracle": curves({"own": 0.8}, seed),
            "C": curves({"own": 1.0, "same": 0.9, "wrong": 0.97}, seed, ("own", "same", "wrong"))}


def test_the_point_is_the_reports_number_and_the_interval_holds_it() -> None:
    out = paired_intervals(heads(), 5, seed=0, replicates=400)
    fam_d = {h: {f: np.mean([c.d[0] for c in cs if c.family == f and c.memory == "own"])
                 for f in ("interp", "extrap")} for h, cs in heads().items()}  # fmt: skip
    a, o = fam_d["A"], fam_d["oracle"]
    margin = out["margin"]
    assert margin["interp"]["value"] == pytest.approx((a["interp"] - o["interp"]) / a["interp"])
    pooled_a, pooled_o = np.mean(list(a.values())), np.mean(list(o.values()))
    assert margin["pooled"]["value"] == pytest.approx((pooled_a - pooled_o) / pooled_a)
    for ci in (margin["pooled"], out["heads"]["C"]["share"]["same"]["pooled"]):
        assert ci["low"] < ci["value"] < ci["high"]
    c = out["heads"]["C"]
    assert set(out["heads"]) == {"C"}  # the floor and the ceiling read no memory
    assert c["share"]["same"]["pooled"]["value"] == pytest.approx(0.5, abs=0.02)
    assert c["carried"]["pooled"]["value"] == pytest.approx(0.35, abs=0.02)
    assert c["share_own"]["own"]["pooled"]["value"] == pytest.approx(0.0, abs=1e-9)


def test_paired_differences_are_free_of_the_samples_noise() -> None:
    """A head that predicts as the floor does on every sample (its empty memory) differs from
    it by exactly 0 in every replicate; noise of the samples' own (the same for every head)
    widens each D's spread but not a difference between heads."""
    out = paired_intervals(heads(), 5, seed=1, replicates=400)
    d0 = out["heads"]["C"]["d0_vs_floor"]["pooled"]
    assert d0["value"] == d0["low"] == d0["high"] == pytest.approx(0.0, abs=1e-12)
    share = out["heads"]["C"]["share"]["same"]["pooled"]  # noise the same for every head:
    assert share["high"] - share["low"] == pytest.approx(0.0, abs=1e-9)  # 0.5 in every replicate
    unpaired = {**heads(), "C": heads(seed=7)["C"]}  # C's noise its own: no longer cancels
    share = paired_intervals(unpaired, 5, seed=1, replicates=400)["heads"]["C"]["share"]["same"]
    assert share["pooled"]["high"] - share["pooled"]["low"] > 0.2


def test_intervals_are_deterministic_and_need_both_bounds() -> None:
    assert paired_intervals(heads(), 5, seed=3, replicates=200) == paired_intervals(
        heads(), 5, seed=3, replicates=200)
    assert paired_intervals({"C": heads()["C"], "A": heads()["A"]}, 5, seed=0) is None
