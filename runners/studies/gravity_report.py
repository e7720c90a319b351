"""The gravity study's report: what the world is worth as a function of gravity's strength.

Each run is one ``train_online`` run of the worlds protocol with its bounds, its families'
gravity ranges scaled by one factor. From its ``summary.json`` it takes, pooled over the
held-out families at n = 50 (docs/definitions.md): perfect physics in the run's own latent
(world-blind; world-blind and the world's own from the state two frames show, sharp and hedged,
and what the world is worth between each pair), the floor (track A), the oracle, the chosen
track's peer / wrong-world / own memory and the gravity probe on e_agg (the held-out families'
mean direction error, strength R^2 and share of worlds identified). Per scale: the mean and
standard deviation over seeds, the oracle's margin below the floor, and
``OUT/figures/dose_response.png``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runners.cli import writing
from runners.studies import stats
from runners.studies.report import jsonable, study_header
from runners.style import pyplot

#: What a row holds, in the report's column order: key -> column header.
COLUMNS = {
    "blind": "world-blind physics",
    "seen": "world-blind physics as seen",
    "told": "the world's physics as seen",
    "worth": "told below seen",
    "seen_mean": "world-blind, hedged",
    "told_mean": "the world's own, hedged",
    "worth_mean": "hedged: told below seen",
    "floor": "floor (track A)",
    "oracle": "oracle",
    "margin": "oracle below the floor",
    "same": "peer memory",
    "wrong": "wrong-world memory",
    "own": "own memory",
    "probe_direction": "gravity probe: direction error (deg)",
    "probe_strength": "gravity probe: strength R^2",
    "probe_identified": "gravity probe: worlds identified",
}

#: The gravity probe's numbers a row takes (e_agg, the held-out families' mean): column -> key.
PROBE_KEYS = {"direction": "direction_deg", "strength": "strength_r2",
              "identified": "identified"}

#: The columns that are shares (printed as percentages).
PERCENT = ("worth", "worth_mean", "margin")


@dataclass(frozen=True)
class GravityRun:
    """One finished run's pooled held-out numbers (NaN where the run has none)."""

    scale: float
    seed: str
    values: dict[str, float]


def _get(d: Any, *keys: str) -> float:
    for k in keys:
        if not isinstance(d, Mapping) or k not in d:
            return math.nan
        d = d[k]
    return float(d) if isinstance(d, (int, float)) and d is not None else math.nan


def load_gravity_run(run_dir: str | Path, scale: float, seed: str) -> GravityRun | None:
    """The run's numbers, or None when it has no summary with bounds (not finished, or a run
    without ``--bounds``)."""
    try:
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    bounds = summary.get("bounds")
    if not isinstance(bounds, Mapping):
        return None
    floor = _get(bounds, "floor", "d", "pooled")
    oracle = _get(bounds, "ceiling", "d", "pooled")
    seen = _get(bounds, "perfect_physics", "d", "seen", "pooled")
    told = _get(bounds, "perfect_physics", "d", "told", "pooled")
    seen_mean = _get(bounds, "perfect_physics", "d", "seen_mean", "pooled")
    told_mean = _get(bounds, "perfect_physics", "d", "told_mean", "pooled")
    values = {
        "blind": _get(bounds, "perfect_physics", "d", "blind", "pooled"),
        "seen": seen,
        "told": told,
        "worth": (seen - told) / seen if seen > 0 else math.nan,
        "seen_mean": seen_mean,
        "told_mean": told_mean,
        "worth_mean": (seen_mean - told_mean) / seen_mean if seen_mean > 0 else math.nan,
        "floor": floor,
        "oracle": oracle,
        "margin": (floor - oracle) / floor if floor > 0 else math.nan,
        **{m: _get(bounds, "memories", m, "d", "pooled") for m in ("same", "wrong", "own")},
        **{f"probe_{k}": _get(summary.get("held_out"), "gravity_probe", "e_agg", "held_out", key)
           for k, key in PROBE_KEYS.items()},
    }
    return GravityRun(scale, seed, values)


def analyse(runs: Sequence[GravityRun]) -> dict[str, Any]:
    """Per scale (ascending): {key: {"mean", "std", "n", "seeds": {seed: value}}}."""
    out: dict[str, Any] = {}
    for scale in sorted({r.scale for r in runs}):
        at = [r for r in runs if r.scale == scale]
        row: dict[str, Any] = {}
        for key in COLUMNS:
            vals = [r.values[key] for r in at if math.isfinite(r.values[key])]
            mean, std = stats.mean_std(vals)
            row[key] = {"mean": mean, "std": std, "n": len(vals),
                        "seeds": {r.seed: r.values[key] for r in at}}
        out[f"{scale:g}"] = row
    return out


def _cell(block: Mapping[str, Any], pct: bool) -> str:
    mean, std, n = block["mean"], block["std"], block["n"]
    if not n:
        return "-"
    fmt = (lambda x: f"{100 * x:.1f}%") if pct else (lambda x: f"{x:.3f}")
    return fmt(mean) + (f" +- {fmt(std)}" if n > 1 else "")


def table_lines(result: Mapping[str, Any], families: Mapping[str, Mapping[str, tuple[float, float]]]
                ) -> list[str]:
    """The markdown table: one row per scale, the families' gravity ranges beside it."""
    head = ["gravity x", "train / interp / extrap gravity", *COLUMNS.values(), "seeds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for scale, row in result.items():
        ranges = " / ".join(f"{lo:g}-{hi:g}" for lo, hi in families[scale].values())
        cells = [_cell(row[k], pct=k in PERCENT) for k in COLUMNS]
        lines.append(f"| {scale} | {ranges} | " + " | ".join(cells)
                     + f" | {row['floor']['n']} |")
    return lines


def fig_dose_response(result: Mapping[str, Any], path: Path) -> Path:
    """Left: D^50 of perfect physics (world-blind from the exact state, and the world's own from
    the state two frames show), the floor, peer memory and the oracle against the gravity scale;
    right: what the world is worth to perfect physics of two frames (told below seen), the
    oracle's margin below the floor and peer memory's below wrong-world memory (seed means, bars
    one standard deviation)."""
    plt = pyplot()
    xs = np.array([float(s) for s in result])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 5))

    def line(ax: Any, key: str, label: str, style: str, color: str, scale: float = 1.0) -> None:
        mean = np.array([result[s][key]["mean"] for s in result]) * scale
        std = np.array([result[s][key]["std"] for s in result]) * scale
        ax.errorbar(xs, mean, yerr=std, fmt=style, label=label, capsize=3, color=color)

    line(left, "blind", "perfect physics, world-blind", "--o", "black")
    line(left, "told", "perfect physics, told the world (as two frames show)", ":^", "black")
    line(left, "floor", "floor (track A)", "-o", "tab:blue")
    line(left, "same", "peer memory", "-s", "tab:orange")
    line(left, "oracle", "oracle (told the world)", "-^", "tab:green")
    left.set(xlabel="gravity x (all families)", ylabel="held-out D^50, pooled",
             title="Error against gravity's strength")
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    line(right, "worth", "perfect physics: told below world-blind (as seen)", ":^", "black", 100.0)
    line(right, "margin", "oracle below the floor", "-^", "tab:green", 100.0)
    gap = np.array([(result[s]["wrong"]["mean"] - result[s]["same"]["mean"])
                    / result[s]["floor"]["mean"] for s in result]) * 100.0
    right.plot(xs, gap, "-s", label="wrong-world above peer memory", color="tab:orange")
    right.axhline(0.0, color="grey", lw=0.8)
    right.set(xlabel="gravity x (all families)", ylabel="% of D^50",
              title="What the world is worth")
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with writing(path):
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(out_dir: str | Path, runs: Sequence[GravityRun], meta: Mapping[str, Any],
                 families: Mapping[str, Mapping[str, tuple[float, float]]],
                 missing: Sequence[str]) -> Path:
    """``out_dir/report.md``, ``report.json`` and ``figures/dose_response.png``."""
    out_dir = Path(out_dir)
    lines = study_header("EPM-JEPA gravity study: what the world is worth against gravity's "
                         "strength", meta, missing)
    result: dict[str, Any] = {}
    if not runs:
        lines += ["No run has finished yet.", ""]
    else:
        result = analyse(runs)
        fig_dose_response(result, out_dir / "figures" / "dose_response.png")
        lines += ["![D^50 and the oracle's margin against gravity](figures/dose_response.png)", "",
                  "Held-out worlds pooled (interp and extrap), D^50 (n = 50 transitions of "
                  "memory; the floor and the oracle have none), mean +- standard deviation "
                  "over seeds:", ""]
        lines += table_lines(result, families)
    with writing(out_dir / "report.md"):
        (out_dir / "report.md").write_text("\n".join(lines).rstrip() + "\n")
    payload = {"meta": dict(meta), "families": families, "missing": list(missing),
               "scales": result}
    with writing(out_dir / "report.json"):
        (out_dir / "report.json").write_text(json.dumps(payload, indent=2, default=jsonable) + "\n")
    return out_dir / "report.md"
