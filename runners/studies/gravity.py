"""The study ``gravity``: where the world matters, the worlds protocol with every family's
gravity (and the switch's) scaled, one ``train_online`` run with its bounds per scale and seed;
its report gives what the world is worth against gravity's strength, per scale the mean and
standard deviation over seeds (docs/worlds_study.md, "The gravity study").
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runners.cli import CliError
from runners.online.config import Schedule
from runners.online.presets import PRESETS
from runners.online.protocols import Worlds
from runners.studies import grid, launch, stats
from runners.studies.figures import save
from runners.style import MEMORY_LABELS, num, pct, pyplot

#: The families whose gravity range the scale multiplies, by their train_online option.
FAMILIES = {"train": "--train-gravity", "interp": "--interp-gravity", "extrap": "--extrap-gravity"}
#: The train_online options the study sets itself, with its own option to use instead.
OWNED = {"--protocol": "", "--seed": "--seeds", "--switch": "", "--no-switch": "",
         "--bounds": "", "--no-bounds": "", **dict.fromkeys(FAMILIES.values(), "")}


@dataclass
class Options(launch.Seeded):
    """The worlds protocol (floor, chosen track, oracle) with every family's gravity scaled, per
    scale and seed, then OUT/report.md and OUT/figures/dose_response.png. Any other option (e.g.
    --track D, --settle None) is passed to every run of runners.train_online."""

    out: str = "gravity-study"
    """output folder"""
    seeds: tuple[int, ...] = (0,)
    """seeds, one run per scale each"""
    scales: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 2.5)
    """factors on the train, interp and extrap families' gravity (and the switch's)"""


def families(scale: float) -> dict[str, tuple[float, float]]:
    """The families' gravity ranges (px/frame^2) at ``scale``: the worlds protocol's, scaled."""
    base = Worlds()
    return {name: (round(lo * scale, 6), round(hi * scale, 6)) for name, (lo, hi) in (
        ("train", base.train_gravity), ("interp", base.interp_gravity),
        ("extrap", base.extrap_gravity))}


def scale_args(scale: float, steps: int) -> list[str]:
    """train_online's options for ``scale``: the families' ranges and the scaled switch."""
    args: list[str] = []
    for name, (lo, hi) in families(scale).items():
        args += [FAMILIES[name], f"{lo:g}", f"{hi:g}"]
    physics = dict(Worlds.switch)
    args += ["--switch", f"{steps * 2 // 3}:gravity={physics['gravity'] * scale:g},"
                         f"direction={physics['gravity_direction']:g}"]
    return args


def plan(opts: Options, passthrough: Sequence[str]) -> launch.Plan:
    """Every scale's runs, scales in order, seeds inside, each labelled (scale, seed)."""
    if opts.steps is not None and opts.steps < 3:
        raise CliError("--steps must be at least 3 (the switch is at 2/3)")
    if not opts.scales or any(s <= 0 for s in opts.scales):
        raise CliError("--scales must be positive numbers")
    steps = opts.steps or PRESETS[opts.preset].schedule.get("steps", Schedule.steps)
    common = ["--protocol", "worlds", "--preset", opts.preset, "--bounds",
              *opts.steps_args(), *passthrough]
    runs = []
    for scale in dict.fromkeys(opts.scales):
        points = [grid.Point((("seed", s),), f"gravity-{scale:g}_") for s in opts.seed_list()]
        specs = launch.make_specs(points, opts.group(), [*scale_args(scale, steps), *common])
        runs += [((scale, p.params["seed"]), spec) for p, spec in zip(points, specs, strict=True)]
    return launch.Plan(runs)


def report(opts: Options, plan: launch.Plan, commands: list[str]) -> Path:
    """``OUT/report.md``, ``report.json`` and ``figures/dose_response.png`` of the finished
    runs, the others named as missing."""
    runs, missing = launch.collect(plan, opts.out, load_gravity_run)
    meta = {
        "protocol": "worlds (train_online's default) with its bounds, every family's gravity "
                    "range and the switch's gravity times the scale",
        **opts.meta(),
        "commands": commands,
    }
    fams = {f"{s:g}": families(s) for s in sorted(dict.fromkeys(opts.scales))}
    result, body = (analyse(runs) if runs else {}), None
    if runs:
        fig_dose_response(result, Path(opts.out) / "figures" / "dose_response.png")
        body = ["![D^50 and the oracle's margin against gravity](figures/dose_response.png)", "",
                "Held-out worlds pooled (interp and extrap), D^50 (n = 50 transitions of memory; "
                "the floor and the oracle have none), mean +- standard deviation over seeds:", "",
                *table_lines(result, fams)]
    return launch.write_report(
        opts.out, "EPM-JEPA gravity study: what the world is worth against gravity's strength",
        meta, missing, body, {"meta": meta, "families": fams, "missing": missing, "scales": result})


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
    "same": MEMORY_LABELS["same"],
    "wrong": MEMORY_LABELS["wrong"],
    "own": MEMORY_LABELS["own"],
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


def _below(x: float, ref: float) -> float:
    """How far ``x`` is below ``ref``, as a share of ``ref`` (NaN unless ``ref`` > 0)."""
    return (ref - x) / ref if ref > 0 else math.nan


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
    v = {k: _get(bounds, "perfect_physics", "d", k, "pooled")
         for k in ("blind", "seen", "told", "seen_mean", "told_mean")}
    v |= {"floor": _get(bounds, "floor", "d", "pooled"),
          "oracle": _get(bounds, "ceiling", "d", "pooled"),
          **{m: _get(bounds, "memories", m, "d", "pooled") for m in ("same", "wrong", "own")},
          **{f"probe_{k}": _get(summary.get("held_out"), "gravity_probe", "e_agg", "held_out", key)
             for k, key in PROBE_KEYS.items()}}
    v |= {"worth": _below(v["told"], v["seen"]), "margin": _below(v["oracle"], v["floor"]),
          "worth_mean": _below(v["told_mean"], v["seen_mean"])}
    return GravityRun(scale, seed, {k: v[k] for k in COLUMNS})


def analyse(runs: Sequence[GravityRun]) -> dict[str, Any]:
    """Per scale (ascending): {key: {"mean", "std", "n", "seeds": {seed: value}}}."""
    out: dict[str, Any] = {}
    for scale, at in sorted(stats.group(runs, lambda r: r.scale).items()):
        row: dict[str, Any] = {}
        for key in COLUMNS:
            vals = [r.values[key] for r in at if math.isfinite(r.values[key])]
            mean, std = stats.mean_std(vals)
            row[key] = {"mean": mean, "std": std, "n": len(vals),
                        "seeds": {r.seed: r.values[key] for r in at}}
        out[f"{scale:g}"] = row
    return out


def _cell(block: Mapping[str, Any], percent: bool) -> str:
    """Mean +- std over seeds (one seed: the mean; none: "-"), a share as a percentage."""
    mean, std, n = block["mean"], block["std"], block["n"]
    fmt = (lambda x: pct(x, 1)) if percent else num
    return "-" if not n else fmt(mean) + (f" +- {fmt(std)}" if n > 1 else "")


def table_lines(result: Mapping[str, Any], families: Mapping[str, Mapping[str, tuple[float, float]]]
                ) -> list[str]:
    """The markdown table: one row per scale, the families' gravity ranges beside it."""
    return launch.table(
        ["gravity x", "train / interp / extrap gravity", *COLUMNS.values(), "seeds"],
        ([scale, " / ".join(f"{lo:g}-{hi:g}" for lo, hi in families[scale].values()),
          *(_cell(row[k], k in PERCENT) for k in COLUMNS), row["floor"]["n"]]
         for scale, row in result.items()))


def fig_dose_response(result: Mapping[str, Any], path: Path) -> Path:
    """The report's figure (docs/worlds_study.md, "The gravity study"): seed means, bars one
    standard deviation."""
    xs = np.array([float(s) for s in result])
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(10, 5))

    def line(ax: Any, key: str, label: str, style: str, color: str, scale: float = 1.0) -> None:
        mean = np.array([result[s][key]["mean"] for s in result]) * scale
        std = np.array([result[s][key]["std"] for s in result]) * scale
        ax.errorbar(xs, mean, yerr=std, fmt=style, label=label, capsize=3, color=color)

    line(left, "blind", "perfect physics, world-blind", "--o", "black")
    line(left, "told", "perfect physics, told the world (as two frames show)", ":^", "black")
    line(left, "floor", "floor (track A)", "-o", "tab:blue")
    line(left, "same", MEMORY_LABELS["same"], "-s", "tab:orange")
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
    return save(fig, path, dpi=110)
