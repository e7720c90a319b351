"""The paper's question with an interval (docs/preregistration.md): weights (track C) against
input (track B), the delta seed by seed, its t-interval and bootstrap over seeds, the outcome;
beside it, every memory track's share of the oracle's margin, carried and the margin itself,
each as an interval over seeds. Read by the worlds study's report (``runners.studies.worlds``).

Everything is paired within a seed: each seed's runs (or heads of its one run) are scored on
the same held-out worlds, so a seed's delta is one number and the seeds are the replicates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from agent import tracks
from runners.online.bounds import POOLED
from runners.studies import stats
from runners.style import MEMORY_LABELS, TRACK_COLORS, pct, pyplot, save_figure, table

#: The primary endpoint's memory source and family (docs/preregistration.md).
PRIMARY = ("same", POOLED)
#: The secondary deltas: (memory, family).
SECONDARY = (("own", POOLED), ("same", "interp"), ("same", "extrap"), ("own", "interp"),
             ("own", "extrap"))  # fmt: skip
#: The most half-width the primary interval may have before seeds are added (points of delta).
MAX_HALF_WIDTH = 0.025


class Run(Protocol):
    """What this module reads of a worlds run (``runners.studies.worlds.WorldsRun``)."""

    arm: str
    seed: str
    stream: dict[str, Any]

    def at(self, family: str, memory: str = "own") -> float: ...


def per_seed(arms: Mapping[str, Sequence[Run]], f: Callable[[Mapping[str, Run]], float]) -> dict[str, float]:
    """{seed: f(that seed's runs by arm)} over the seeds every arm ran, in the first arm's
    order."""
    by_seed: dict[str, dict[str, Run]] = {}
    for arm, runs in arms.items():
        for r in runs:
            by_seed.setdefault(r.seed, {})[arm] = r
    return {seed: f(rs) for seed, rs in by_seed.items() if len(rs) == len(arms)}


def interval(values: Mapping[str, float]) -> dict[str, Any]:
    """The seeds' values, their mean, sd, the 95% t-interval and the bootstrap's."""
    x = [v for v in values.values() if math.isfinite(v)]
    mean, sd = stats.mean_std(x)
    low, high = stats.t_interval(x)
    b_low, b_high = stats.bootstrap_ci(x)
    return {"per_seed": dict(values), "seeds": len(x), "mean": mean, "sd": sd, "low": low,
            "high": high, "half_width": (high - low) / 2, "boot_low": b_low, "boot_high": b_high}


def delta_of(memory: str, family: str) -> Callable[[Mapping[str, Run]], float]:
    """A seed's delta (D_B - D_C) / D_B on one memory source and family."""
    return lambda rs: stats.delta(rs[tracks.INPUT].at(family, memory), rs[tracks.WEIGHTS].at(family, memory))


def analyse(arms: Mapping[str, Sequence[Run]], oracle: str = "oracle") -> dict[str, Any] | None:
    """The primary delta with its outcome, the secondary deltas, and per memory track the peer
    share and carried, and the oracle's margin, each an ``interval`` over seeds; None without
    tracks B and C."""
    if not {tracks.INPUT, tracks.WEIGHTS} <= set(arms):
        return None
    pair = {a: arms[a] for a in (tracks.INPUT, tracks.WEIGHTS)}
    primary = interval(per_seed(pair, delta_of(*PRIMARY)))
    primary |= {"outcome": stats.answer(primary["low"], primary["high"]),
                "holds_paper": bool(primary["low"] <= stats.PAPER_DELTA <= primary["high"]),
                "paper_class": stats.outcome(primary["mean"]),
                "more_seeds": bool(primary["half_width"] > MAX_HALF_WIDTH)}
    out: dict[str, Any] = {"primary": primary, "secondary": {
        f"{m} {fam}": interval(per_seed(pair, delta_of(m, fam))) for m, fam in SECONDARY}}
    if tracks.FLOOR in arms and oracle in arms:
        fam = PRIMARY[1]
        bounds = {a: arms[a] for a in (tracks.FLOOR, oracle)}

        def margin(rs: Mapping[str, Run]) -> float:
            return stats.ratio(rs[tracks.FLOOR].at(fam) - rs[oracle].at(fam), rs[tracks.FLOOR].at(fam))

        def share(arm: str, memory: str) -> Callable[[Mapping[str, Run]], float]:
            return lambda rs: stats.ratio(rs[tracks.FLOOR].at(fam) - rs[arm].at(fam, memory),
                                     rs[tracks.FLOOR].at(fam) - rs[oracle].at(fam))  # fmt: skip

        def carried(arm: str) -> Callable[[Mapping[str, Run]], float]:
            return lambda rs: stats.ratio(rs[arm].at(fam, "wrong") - rs[arm].at(fam, "same"),
                                     rs[tracks.FLOOR].at(fam) - rs[oracle].at(fam))  # fmt: skip

        memory_arms = [a for a in sorted(arms) if a not in (tracks.FLOOR, oracle)]
        out["margin"] = interval(per_seed(bounds, margin))
        out["tracks"] = {a: {"share": interval(per_seed({**bounds, a: arms[a]}, share(a, "same"))),
                             "carried": interval(per_seed({**bounds, a: arms[a]}, carried(a)))}
                         for a in memory_arms}  # fmt: skip
    return out


#: The stream after the switch: the floor's jump is read over its first SETTLE steps, and a
#: memory track is below the floor "and staying there" in every window from SETTLE on.
SETTLE = 100
#: The floor's jump the switch must show (issue 73's target: 10%).
MIN_JUMP = 0.10


def _mean_over(windows: Sequence[Mapping[str, Any]], lo: int, hi: float) -> float:
    """The stream error's mean over the windows inside [lo, hi) steps after the switch, each
    weighted by its valid steps."""
    w = [(x["mean"], (x["to"] - x["from"]) * x.get("valid_steps", 1.0)) for x in windows
         if x["from"] >= lo and x["to"] <= hi and math.isfinite(x["mean"])]  # fmt: skip
    total = sum(b for _, b in w)
    return sum(m * b for m, b in w) / total if total > 0 else math.nan


def after_switch(arms: Mapping[str, Sequence[Run]], oracle: str = "oracle") -> dict[str, Any] | None:
    """Seed by seed, the stream after the switch (docs/definitions.md#after-the-switch): the
    floor's jump, its mean over the first ``SETTLE`` steps against the 100 steps before; per
    memory track whether it is below the floor in every window from ``SETTLE`` on, and how far
    (of the floor, and of the floor-to-oracle gap, over those windows); None without the floor
    or its stream."""
    if tracks.FLOOR not in arms:
        return None
    floor = {r.seed: r.stream for r in arms[tracks.FLOOR] if r.stream.get("since_switch")}
    if not floor:
        return None
    ceiling = {r.seed: r.stream for r in arms.get(oracle, []) if r.stream.get("since_switch")}
    seeds: dict[str, Any] = {}
    for seed, fs in floor.items():
        wins = fs["since_switch"]
        a_late = _mean_over(wins, SETTLE, math.inf)
        o_late = _mean_over(ceiling[seed]["since_switch"], SETTLE, math.inf) if seed in ceiling else math.nan
        row: dict[str, Any] = {"jump": _mean_over(wins, 0, SETTLE) / fs["end_of_base"] - 1.0, "tracks": {}}
        for arm in sorted(a for a in arms if a not in (tracks.FLOOR, oracle)):
            run = next((r for r in arms[arm] if r.seed == seed and r.stream.get("since_switch")), None)
            if run is None:
                continue
            late = [(w, f) for w, f in zip(run.stream["since_switch"], wins, strict=True) if w["from"] >= SETTLE]
            m_late = _mean_over(run.stream["since_switch"], SETTLE, math.inf)
            row["tracks"][arm] = {"below": bool(late) and all(w["mean"] < f["mean"] for w, f in late),
                                  "below_floor": 1.0 - m_late / a_late,
                                  "share": stats.ratio(a_late - m_late, a_late - o_late)}  # fmt: skip
        seeds[seed] = row
    memory_arms = sorted({a for row in seeds.values() for a in row["tracks"]})
    return {"per_seed": seeds, "jump_every_seed": all(r["jump"] >= MIN_JUMP for r in seeds.values()),
            "below_every_seed": {a: all(r["tracks"].get(a, {}).get("below", False) for r in seeds.values())
                                 for a in memory_arms}}  # fmt: skip


def switch_lines(sw: Mapping[str, Any]) -> list[str]:
    """The stream after the switch, seed by seed."""
    arms = sorted({a for r in sw["per_seed"].values() for a in r["tracks"]})
    rows = [[seed, pct(r["jump"], 1, "+"),
             *(f"{'yes' if t['below'] else 'no'}, {pct(t['below_floor'], 1, '+')}, {pct(t['share'], 0)}"
               for t in (r["tracks"].get(a, {"below": False, "below_floor": math.nan, "share": math.nan})
                         for a in arms))]
            for seed, r in sw["per_seed"].items()]  # fmt: skip
    every = ", ".join(f"{a} {'in every seed' if ok else 'not in every seed'}"
                      for a, ok in sw["below_every_seed"].items())
    return ["## The stream after the switch", "",
            f"The floor's stream error over the first {SETTLE} steps after the switch against the "
            f"100 before (the jump; at least {pct(MIN_JUMP)} in every seed: "
            f"{'yes' if sw['jump_every_seed'] else 'no'}); per memory track: below the floor in every "
            f"window from step {SETTLE} after the switch on, how far below the floor over those "
            f"steps, and the share of the floor-to-oracle gap closed there. Below the floor: {every}.",
            "", *table(["seed", "the floor's jump", *(f"track {a}: below, by, share" for a in arms)], rows), ""]


def _iv(i: Mapping[str, Any], digits: int = 1) -> str:
    """``+1.2% [-0.3, +2.7]``."""
    return (f"{pct(i['mean'], digits, '+')} [{pct(i['low'], digits, '+')}, "
            f"{pct(i['high'], digits, '+')}]")


def interval_text(i: Mapping[str, Any], digits: int = 2) -> str:
    """An ``interval`` as the reports write it: ``+1.20% [-0.30, +2.70] over 10 seeds
    (bootstrap [-0.20, +2.50])``."""
    return (f"{_iv(i, digits)} over {i['seeds']} seeds (bootstrap "
            f"[{pct(i['boot_low'], digits, '+')}, {pct(i['boot_high'], digits, '+')}])")


def lines(q: Mapping[str, Any], figure: str | None = None) -> list[str]:
    """The report's section: the answer first, then the seeds, the secondary deltas and the
    tracks' shares."""
    p = q["primary"]
    out = ["## The paper's question: weights (C) against input (B)", "",
           f"**delta = (D_B - D_C) / D_B, peer memory, held-out worlds pooled, D^50: "
           f"{_iv(p, 2)}** (95% t-interval over {p['seeds']} seeds; bootstrap "
           f"[{pct(p['boot_low'], 2, '+')}, {pct(p['boot_high'], 2, '+')}]; half-width "
           f"{100 * p['half_width']:.2f} points). Outcome: **{p['outcome']}**, "
           f"{stats.ANSWER_TEXT.get(p['outcome'], '')}. The paper's 4.74% "
           f"{'lies inside' if p['holds_paper'] else 'lies outside'} the interval; the paper's "
           f"class of the mean: {p['paper_class']} ({stats.OUTCOME_TEXT.get(p['paper_class'], '')}). "
           "Pre-registered: docs/preregistration.md.", ""]
    if p["more_seeds"]:
        out += [f"The half-width is above {100 * MAX_HALF_WIDTH:.1f} points: the pre-registration "
                "adds seeds in pairs (5 and 47, then 6 and 48, ...) up to twenty.", ""]
    if figure:
        out += [f"![delta per seed, with its interval]({figure})", ""]
    out += table(["seed", "delta, peer", "delta, own"],
                 [[s, pct(v, 2, "+"), pct(q["secondary"][f"own {POOLED}"]["per_seed"].get(s, math.nan), 2, "+")]
                  for s, v in p["per_seed"].items()])  # fmt: skip
    out += ["", "Secondary deltas (95% t-interval over seeds): " + "; ".join(
        f"{MEMORY_LABELS[k.split()[0]]}, {k.split()[1]} {_iv(v, 2)}"
        for k, v in q["secondary"].items()) + ".", ""]
    if "tracks" in q:
        out += [f"The oracle's margin (D_A - D_oracle) / D_A: {_iv(q['margin'])}. Per memory track, "
                "as t-intervals over seeds, in shares of the margin: the peer share "
                "(D_A - D_peer) / (D_A - D_oracle) and carried (D_wrong - D_peer) / (D_A - D_oracle).",
                "", *table(["track", "peer share", "carried"],
                           [[a, _iv(t["share"], 0), _iv(t["carried"], 0)] for a, t in q["tracks"].items()]),
                ""]  # fmt: skip
    return out


def figure(panels: Mapping[str, Mapping[str, Any]], path: Path) -> Path:
    """One panel an ``interval`` of delta (its title the key): the seeds' deltas as points, the
    mean and its t-interval as a band, 0 and the paper's 4.74% as lines; the panels share y."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels) ** 0.6, 3.4), sharey=True,
                             squeeze=False)  # fmt: skip
    color = TRACK_COLORS[tracks.WEIGHTS]
    lows = [100 * stats.PAPER_DELTA]
    for ax, (title, p) in zip(axes[0], panels.items(), strict=True):
        seeds = list(p["per_seed"])
        y = 100 * np.asarray([p["per_seed"][s] for s in seeds], dtype=np.float64)
        x = np.arange(len(seeds))
        if np.isfinite(p["low"]):
            ax.axhspan(100 * p["low"], 100 * p["high"], color=color, alpha=0.18,
                       label=f"95% interval of the mean ({p.get('outcome') or stats.answer(p['low'], p['high'])})")
        ax.axhline(100 * p["mean"], color=color, lw=1.5, label="mean over seeds")
        ax.axhline(0.0, color="black", lw=0.8)
        ax.axhline(100 * stats.PAPER_DELTA, color="grey", ls="--", lw=1.0, label="the paper's 4.74%")
        ax.plot(x, y, "o", color=color, label="one seed")
        ax.set_xticks(x, seeds)
        ax.set_xlabel("seed")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="lower left", ncol=2)  # the room made below the seeds
        lows += [float(np.nanmin(y)), 100 * p["low"] if np.isfinite(p["low"]) else 0.0, 0.0]
    top = max(100 * stats.PAPER_DELTA, *(100 * float(np.nanmax(list(p["per_seed"].values())))
                                         for p in panels.values()))  # fmt: skip
    axes[0][0].set_ylabel("delta = (D_B - D_C) / D_B, %")
    axes[0][0].set_ylim(min(lows) - 0.35 * (top - min(lows)), top + 0.8)
    return save_figure(fig, path)
