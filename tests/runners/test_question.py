"""The paper's question with an interval (``runners.studies.question``): the delta seed by seed
is paired within each seed, its interval is the t-interval over seeds, the outcome follows the
pre-registered rules (docs/preregistration.md), and the report and figure say so."""

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from runners.studies import question, stats


@dataclass
class FakeRun:
    arm: str
    seed: str
    d: dict[tuple[str, str], float]
    stream: dict = field(default_factory=dict)

    def at(self, family: str, memory: str = "own") -> float:
        return self.d.get((family, memory), math.nan)


def arms_of(d_b: list[float], d_c: list[float], d_a: float = 1.0, d_o: float = 0.8):
    """Seeds 0.. with B's and C's peer D (pooled); own = peer + 0.01, wrong = peer + 0.05 (the
    floor's and the oracle's the same for every memory)."""

    def run(arm: str, s: int, d: float) -> FakeRun:
        own, wrong = (0.0, 0.0) if arm in ("A", "oracle") else (0.01, 0.05)
        vals = {}
        for fam in ("pooled", "interp", "extrap"):
            vals |= {(fam, "same"): d, (fam, "own"): d + own, (fam, "wrong"): d + wrong}
        return FakeRun(arm, str(s), vals)

    seeds = range(len(d_b))
    return {"A": [run("A", s, d_a) for s in seeds], "B": [run("B", s, d_b[s]) for s in seeds],
            "C": [run("C", s, d_c[s]) for s in seeds], "oracle": [run("oracle", s, d_o) for s in seeds]}


def test_the_delta_is_paired_per_seed_with_a_t_interval_over_seeds() -> None:
    d_b = [0.90, 0.92, 0.88, 0.91, 0.95]
    d_c = [0.88, 0.90, 0.87, 0.89, 0.93]
    q = question.analyse(arms_of(d_b, d_c))
    per = [(b - c) / b for b, c in zip(d_b, d_c, strict=True)]
    p = q["primary"]
    assert list(p["per_seed"].values()) == pytest.approx(per, abs=1e-15)
    half = sps.t.ppf(0.975, 4) * np.std(per, ddof=1) / np.sqrt(5)
    assert (p["low"], p["high"]) == pytest.approx((np.mean(per) - half, np.mean(per) + half), abs=1e-12)
    assert p["boot_low"] >= min(per) and p["boot_high"] <= max(per)
    assert p["outcome"] == "C better" and not p["holds_paper"] and not p["more_seeds"]
    own = [((b + 0.01) - (c + 0.01)) / (b + 0.01) for b, c in zip(d_b, d_c, strict=True)]
    assert list(q["secondary"]["own pooled"]["per_seed"].values()) == pytest.approx(own, abs=1e-15)
    # the floor 1.0, the oracle 0.8: the margin 20%, B's share (1 - D_B) / 0.2, carried 0.05 / 0.2
    assert q["margin"]["mean"] == pytest.approx(0.2, abs=1e-12)
    assert q["tracks"]["B"]["share"]["per_seed"]["0"] == pytest.approx(0.5, abs=1e-12)
    assert q["tracks"]["C"]["carried"]["mean"] == pytest.approx(0.25, abs=1e-12)


@pytest.mark.parametrize("low, high, expected", [
    (0.001, 0.03, "C better"), (-0.03, -0.001, "B better"), (-0.0474, 0.0474, "equivalent"),
    (-0.01, 0.05, "inconclusive"), (0.0, 0.01, "equivalent"), (-0.06, 0.0, "inconclusive"),
    (math.nan, 0.01, "?"),
])
def test_the_outcome_follows_the_preregistered_rules(low: float, high: float, expected: str) -> None:
    assert stats.answer(low, high) == expected


def test_a_wide_interval_asks_for_more_seeds_and_one_seed_has_none() -> None:
    wide = question.analyse(arms_of([0.9, 0.9, 0.9], [0.8, 0.9, 0.95]))["primary"]
    assert wide["half_width"] > question.MAX_HALF_WIDTH and wide["more_seeds"]
    assert wide["outcome"] == "inconclusive" and wide["holds_paper"]
    one = question.analyse(arms_of([0.9], [0.85]))["primary"]
    assert math.isnan(one["low"]) and one["outcome"] == "?"
    assert question.analyse({k: v for k, v in arms_of([0.9], [0.8]).items() if k != "B"}) is None


def test_the_report_leads_with_the_answer_and_draws_the_seeds(tmp_path: Path) -> None:
    q = question.analyse(arms_of([0.90, 0.92, 0.88], [0.89, 0.93, 0.86]))
    text = "\n".join(question.lines(q, "figures/delta_per_seed.png"))
    p = q["primary"]
    assert text.startswith("## The paper's question")
    assert f"Outcome: **{p['outcome']}**" in text and "figures/delta_per_seed.png" in text
    assert all(f"| {s} |" in text for s in ("0", "1", "2"))
    path = question.figure({"peer": p, "one seed": question.interval({"0": 0.01})}, tmp_path / "f.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # (one seed: no interval to draw)


def windows(*means: float) -> list[dict]:
    """The summary's windows since the switch (0-25, 25-50, 50-100, 100-200, 200-500)."""
    edges = [0, 25, 50, 100, 200, 500]
    return [{"from": a, "to": b, "mean": m, "valid_steps": 1.0}
            for a, b, m in zip(edges[:-1], edges[1:], means, strict=True)]


def test_the_stream_after_the_switch_reads_the_floors_jump_and_who_stays_below() -> None:
    arms = arms_of([0.9, 0.9], [0.85, 0.85])
    before = {"A": 0.60, "B": 0.60, "C": 0.60, "oracle": 0.5}
    after = {"A": (0.70, 0.70, 0.70, 0.70, 0.70), "B": (0.75, 0.72, 0.69, 0.69, 0.71),
             "C": (0.75, 0.70, 0.65, 0.66, 0.66), "oracle": (0.55,) * 5}
    for arm, runs in arms.items():
        for r in runs:
            r.stream = {"end_of_base": before[arm], "since_switch": windows(*after[arm])}
    sw = question.after_switch(arms)
    row = sw["per_seed"]["0"]
    assert row["jump"] == pytest.approx(0.70 / 0.60 - 1, abs=1e-12) and sw["jump_every_seed"]
    assert row["tracks"]["C"]["below"] and not row["tracks"]["B"]["below"]  # B above at 200-500
    late_c = (0.66 * 100 + 0.66 * 300) / 400  # the windows from step 100 on, by their steps
    assert row["tracks"]["C"]["below_floor"] == pytest.approx(1 - late_c / 0.70, abs=1e-12)
    assert row["tracks"]["C"]["share"] == pytest.approx((0.70 - late_c) / (0.70 - 0.55), abs=1e-12)
    assert sw["below_every_seed"] == {"B": False, "C": True}
    text = "\n".join(question.switch_lines(sw))
    assert "B not in every seed, C in every seed" in text and "| 0 | +16.7% |" in text
    assert question.after_switch({k: v for k, v in arms.items() if k != "A"}) is None
