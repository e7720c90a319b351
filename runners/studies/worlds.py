"""The study ``worlds``: the comparison the paper could not make, tracks A-E and the oracle on
the worlds protocol (docs/worlds_study.md): each seed one ``train_online`` run whose heads are
the arms, on its one settled latent (``agent.heads``); a run an arm and seed where runs do not
settle (the gpu preset, ``--stack``).

``OUT/report.md`` reads each finished run's held-out adaptation curves from its
``summary.json`` (own, same and wrong memory: docs/worlds_study.md#what-it-reports) and reports
the quantities of docs/definitions.md#worlds-study-quantities, then the peer memory. Ratios are
of seed means (a per-seed ratio explodes when the oracle's gain is near zero); per-seed values
are in ``report.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agent import tracks
from agent.config import TRACKS, Track
from runners.cli import CliError
from runners.online.bounds import POOLED, share
from runners.online.config import HEADLINE_N
from runners.studies import grid, launch, question, stats
from runners.style import MEMORY_LABELS, TRACK_COLORS, num, pct, pyplot, save_figure, table

#: The train_online options the study sets itself, with its own option to use instead.
OWNED = {"--protocol": "", "--track": "--tracks", "--seed": "--seeds",
         "--oracle": "--oracle-track", "--no-oracle": "--oracle-track"}


@dataclass
class Options(launch.Seeded):
    """Tracks A-E and the oracle on the worlds protocol (held-out worlds, own / same / wrong
    memory), then OUT/report.md: each seed one run whose heads are the arms, fit on its one
    settled latent (a run an arm and seed where runs do not settle: --preset gpu, --stack). Any
    other option (e.g. --device cuda, --context-frames 3) is passed to every run of
    runners.train_online."""

    out: str = "worlds-study"
    """output folder"""
    tracks: tuple[Track, ...] = TRACKS
    """tracks to run (default: all five)"""
    oracle_track: Literal["B", "C", "D", "E", "none"] = "C"
    """the pathway the oracle feeds the true physics into (none = no oracle arm); other than C, its predictor trains the encoder until the settle"""
    trainer: Track | None = None
    """the track whose predictor trains the encoder until the settle, every other arm a head beside it (default: the floor, A, so that every memory track is a head fit from the same start; without A in --tracks, the oracle's pathway); only where runs settle"""
    stack: bool = False
    """each arm's seeds as one stacked run (train_online --stack-seeds), each arm a job of the backend (--workers N arms at once, each a process of its own); for one GPU (with --device cuda); its runs live under names of their own (<arm>-s<seed>); stacked runs do not settle, so each arm is a run of its own"""


def plan(opts: Options, passthrough: Sequence[str]) -> launch.Plan:
    """Every arm's runs, arms in order, seeds inside, each labelled (arm, seed): where the run
    settles (the cpu preset), one run a seed whose heads are the arms (``one_latent``), else a
    run an arm and seed (the gpu preset, ``--settle None``, ``--stack``)."""
    if opts.steps is not None and opts.steps < 1:
        raise CliError("--steps must be at least 1")
    arms = [(t, (("track", t),), ()) for t in dict.fromkeys(opts.tracks)]
    if opts.oracle_track != "none":
        arms.append((ORACLE, (("track", opts.oracle_track),), (("oracle", "true"),)))
    labels = [(arm, seed) for arm, _, _ in arms for seed in opts.seed_list()]
    common = ["--protocol", "worlds", "--preset", opts.preset, "--no-bounds",
              *opts.steps_args(), *passthrough]
    trainer = own_track(opts)
    if not opts.stack and one_latent(common, trainer):
        heads = [a for a, _, _ in arms if a != trainer]
        seeds = {seed: grid.Point((("track", trainer), ("heads", " ".join(heads)), ("seed", seed)))
                 for seed in opts.seed_list()}  # fmt: skip
        specs = dict(zip(seeds, launch.make_specs(list(seeds.values()), opts.group(), common),
                         strict=True))  # fmt: skip
        return launch.Plan([(label, specs[label[1]]) for label in labels], list(specs.values()))
    points = [grid.Point((*head, ("seed", seed), *tail))
              for _, head, tail in arms for seed in opts.seed_list()]
    specs, jobs = launch.plan_points(points, opts.group(), common, opts.stack)
    return launch.Plan(list(zip(labels, specs, strict=True)), jobs)


def own_track(opts: Options) -> str:
    """The track whose predictor trains the encoder until the settle in a seed's one run:
    ``--trainer``, by default the floor A (every memory track then a head, fit from the same
    start), without A the oracle's pathway (``--oracle-track``), else the first memory track of
    ``--tracks``. A head ``oracle`` is the trainer's ceiling track's oracle (C for the floor), so
    the trainer is the oracle's pathway or, where that is C, the floor."""
    if opts.trainer is None:
        if "A" in opts.tracks and opts.oracle_track in ("none", tracks.ceiling_track(["A"])):
            return "A"
        return opts.oracle_track if opts.oracle_track != "none" else tracks.ceiling_track(opts.tracks)
    trainer = opts.trainer
    if trainer not in opts.tracks:
        raise CliError(f"--trainer {trainer} is not one of --tracks ({' '.join(opts.tracks)})")
    if opts.oracle_track != "none" and tracks.ceiling_track([trainer]) != opts.oracle_track:
        allowed = " or ".join(dict.fromkeys(t for t in ("A", opts.oracle_track)
                                            if tracks.ceiling_track([t]) == opts.oracle_track))
        raise CliError(f"--trainer {trainer} cannot carry the oracle on track "
                       f"{opts.oracle_track}'s pathway: use --trainer {allowed}")
    return trainer


def one_latent(common: Sequence[str], trainer: str) -> bool:
    """Whether runs of these options settle under the worlds protocol, so that a seed's arms can
    be heads of one run (``agent.heads``); a run these options would not build is not."""
    from runners.online.command import build_config

    try:
        a = build_config([*common, "--track", trainer]).agent
    except CliError:
        return False  # (check_specs names the bad value on the arms' runs)
    return a.settle is not None


def report(opts: Options, plan: launch.Plan, commands: list[str]) -> Path:
    """``OUT/report.md``, ``report.json`` and ``figures/held_out_curves.png`` of the finished
    runs, the others named as missing."""
    runs, missing = launch.collect(plan, opts.out, load_worlds_run)
    oracle = [f"oracle (track {opts.oracle_track})"] if opts.oracle_track != "none" else []
    meta = {
        "protocol": "worlds (train_online's default): training across worlds of the train "
                    "family, every stream switched to a held-out world, weights frozen",
        **opts.meta(),
        "arms": " ".join([*dict.fromkeys(opts.tracks), *oracle]),
        "evaluation": "held-out interp / extrap worlds at the end of the run: D^n from an empty "
                      "memory plus n own / same-world / wrong-world entries",
        "commands": commands,
    }
    result, body = (analyse(runs) if runs else {}), None
    if runs:
        fig_curves(runs, Path(opts.out) / "figures" / "held_out_curves.png")
        body = []
        if result["question"] is not None:  # tracks B and C: the paper's question leads
            question.figure({"Weights (C) against input (B): peer memory, held-out worlds, D^50":
                             result["question"]["primary"]},
                            Path(opts.out) / "figures" / "delta_per_seed.png")  # fmt: skip
            body = question.lines(result["question"], "figures/delta_per_seed.png")
        if result["after_switch"] is not None:
            body += question.switch_lines(result["after_switch"])
        body += ["![D^n over n per arm](figures/held_out_curves.png)", "", *report_lines(result)]
    return launch.write_report(opts.out, "EPM-JEPA worlds-protocol study", meta, missing, body,
                               {"meta": meta, "missing": missing, **result})


#: The families a worlds run reports (their mean: ``POOLED``).
FAMILIES = ("interp", "extrap")
#: The issue's targets (reported as met or not, never tuned to).
TARGETS = {"oracle_gain": 0.25, "memory_drop": 0.20, "oracle_share": 0.5}
#: Below this oracle gain the oracle share is not reported (a ratio of two noises).
MIN_ORACLE_GAIN = 0.01
ORACLE = "oracle"
ORACLE_COLOR = "black"
#: The gravity probe's features, by the prefix of their numbers in a peer-memory row, and the
#: numbers of each a row takes (docs/definitions.md#the-gravity-probe).
GRAVITY_FEATURES = {"e_agg": "gravity", "entries": "entries"}
GRAVITY_KEYS = ("direction_deg", "direction_cos", "strength_r2", "identified")


@dataclass(frozen=True)
class WorldsRun:
    """One finished worlds run: its arm ("A".."E" or "oracle"), seed and curves."""

    arm: str
    seed: str
    ns: tuple[int, ...]
    #: curves[family][memory] -> D^n over ``ns`` (family includes ``all``)
    curves: dict[str, dict[str, np.ndarray]]
    #: D_shift^n on the switch world (own memory), over ``switch_ns``
    switch_ns: tuple[int, ...] = ()
    switch_curve: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: the horizons, and D^50 per horizon with own memory over every held-out world
    horizons: tuple[int, ...] = ()
    per_h: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: the gravity probe: {feature ("e_agg", "entries"): {family (``held_out``: the held-out
    #: families' mean): its readout}}; None without memory
    gravity: dict[str, dict[str, dict[str, float]]] | None = None
    #: perfect world-blind physics in this run's latent (probes.perfect_physics): D over the
    #: horizons' mean by family (and ``all``), and per horizon pooled (runs before it: empty)
    blind: dict[str, float] = field(default_factory=dict)
    #: its stream error around the switch (the summary's ``stream_error``, its own or its
    #: head's): ``end_of_base`` (the 100 steps before it) and ``since_switch`` windows
    stream: dict[str, Any] = field(default_factory=dict)
    blind_per_h: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def at(self, family: str, memory: str = "own", n: int = HEADLINE_N) -> float:
        """D^n of one family and memory (NaN if not measured)."""
        curve = self.curves.get(family, {}).get(memory)
        if curve is None or n not in self.ns:
            return math.nan
        return float(curve[self.ns.index(n)])


def load_worlds_run(run_dir: str | Path, arm: str, seed: str) -> WorldsRun | None:
    """The held-out curves of ``arm`` in a finished worlds run: its own predictor's or a head's
    (``agent.heads``; its switch curve and gravity probe are the run's own predictor's alone);
    None when it has no summary yet, a ``CliError`` for another protocol's, one without
    held-out curves or without the arm (never mixed silently)."""
    path = Path(run_dir) / "summary.json"
    if not path.exists():
        return None
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CliError(f"cannot read {path}: {err}") from None
    held = summary.get("held_out")
    if summary.get("protocol") != "worlds" or not held:
        raise CliError(f"{path} is not a worlds-protocol run with held-out curves")
    own = summary.get("head", arm) == arm  # (a run before heads: its arm's own)
    if not own:
        if arm not in (held.get("heads") or {}):
            raise CliError(f"{path} has no {_arm_label(arm)}")
        held = {**held["heads"][arm], "gravity_probe": None}
    ns = tuple(int(n) for n in held["ns"])
    curves = {f: {m: np.asarray(v, np.float64) for m, v in held["families"].get(f, {}).items()}
              for f in FAMILIES}
    pooled_mems = set.intersection(*(set(curves[f]) for f in FAMILIES))
    curves[POOLED] = {m: np.mean([curves[f][m] for f in FAMILIES], axis=0)
                      for m in sorted(pooled_mems)}
    stream = summary.get("stream_error") or {}
    stream = stream if own else (stream.get("heads") or {}).get(arm, {})
    rows = (summary.get("adaptation_curve") or []) if own else []
    per_h = [w["d_per_h"][ns.index(HEADLINE_N)] for w in held.get("worlds", [])
             if w.get("memory") == "own" and HEADLINE_N in ns]
    return WorldsRun(
        arm=arm, seed=seed, ns=ns, curves=curves,
        switch_ns=tuple(int(r["n"]) for r in rows),
        switch_curve=np.asarray([r["d_shift"] for r in rows], dtype=np.float64),
        horizons=tuple(int(h) for h in held.get("horizons", ())),
        per_h=np.asarray(per_h, dtype=np.float64).mean(axis=0) if per_h else np.zeros(0),
        gravity={f: v for f, v in (held.get("gravity_probe") or {}).items()
                 if f in GRAVITY_FEATURES} or None,
        **_blind(held.get("perfect_physics")),
        stream={k: stream[k] for k in ("end_of_base", "since_switch") if k in stream},
    )


def _blind(pp: dict[str, Any] | None) -> dict[str, Any]:
    """WorldsRun's perfect world-blind physics from a held-out report (nothing before it)."""
    fams = (pp or {}).get("families", {})
    if POOLED not in fams or "blind" not in fams[POOLED]:
        return {}
    blind = {f: rows["blind"][-1] for f, rows in fams.items()
             if "blind" in rows}  # fmt: skip
    return {"blind": blind, "blind_per_h": np.asarray(fams[POOLED]["blind"][:-1], np.float64)}


def _lowest(rows: Mapping[str, Any], value: Callable[[Any], float]) -> str | None:
    """The key of the row with the lowest finite ``value`` (None: no row)."""
    return min(rows, key=lambda k: value(rows[k]) if np.isfinite(value(rows[k])) else math.inf,
               default=None)


def _arm_summary(rs: Sequence[WorldsRun]) -> dict[str, Any]:
    """One arm's numbers over its seeds: each family's curves by memory (mean, std, D^50 and
    per seed), D^50 per horizon and perfect world-blind physics per horizon."""
    fams: dict[str, Any] = {}
    for fam in (*FAMILIES, POOLED):
        fams[fam] = {}
        for mem in sorted(set.intersection(*(set(r.curves.get(fam, {})) for r in rs))):
            mean, std = stats.band([r.curves[fam][mem] for r in rs])  # (ns,) over seeds
            fams[fam][mem] = {"mean": mean.tolist(), "std": std.tolist(),
                              "at_n": vars(stats.summarize([r.at(fam, mem) for r in rs])),
                              "per_seed": {r.seed: r.at(fam, mem) for r in rs}}
    per_h = [r.per_h for r in rs if r.per_h.size and r.horizons == rs[0].horizons]
    blind = [r.blind_per_h for r in rs if r.blind_per_h.size and r.horizons == rs[0].horizons]
    return {
        "seeds": [r.seed for r in rs], "ns": list(rs[0].ns), "families": fams,
        "horizons": list(rs[0].horizons),
        "d50_per_horizon": np.mean(per_h, axis=0).tolist() if per_h else [],
        # perfect world-blind physics in the arm's latent, pooled (probes.perfect_physics)
        "blind_per_horizon": np.mean(blind, axis=0).tolist() if blind else [],
    }


def _arm_d(arms: Mapping[str, list[WorldsRun]], arm: str, fam: str, mem: str = "own",
           n: int = HEADLINE_N) -> float:  # fmt: skip
    """D^n of one arm, family and memory: the mean over the arm's seeds (NaN: none)."""
    return stats.finite_mean([r.at(fam, mem, n) for r in arms.get(arm, [])])


def _family_metrics(arms: Mapping[str, list[WorldsRun]], memory_arms: Sequence[str],
                    fam: str) -> dict[str, Any]:  # fmt: skip
    """One family's own-memory numbers: D_A, D_oracle, the oracle gain, each memory track's
    drop, oracle share and wrong- and same-world gaps, and the delta with its outcome."""
    d_a, d_o = _arm_d(arms, tracks.FLOOR, fam), _arm_d(arms, ORACLE, fam)
    gain = stats.ratio(d_a - d_o, d_a)
    row: dict[str, Any] = {"d_A": d_a, "d_oracle": d_o, "oracle_gain": gain, "tracks": {}}
    for arm in memory_arms:
        d0, dn = _arm_d(arms, arm, fam, n=0), _arm_d(arms, arm, fam)
        row["tracks"][arm] = {
            "d0": d0, "d50": dn,
            "memory_drop": stats.ratio(d0 - dn, d0),
            "oracle_share": stats.ratio(d_a - dn, d_a - d_o) if gain >= MIN_ORACLE_GAIN else math.nan,
            "wrong_gap_per_seed": {
                r.seed: stats.ratio(r.at(fam, "wrong") - r.at(fam), r.at(fam))
                for r in arms[arm]},
            "wrong_gap": stats.ratio(_arm_d(arms, arm, fam, "wrong") - dn, dn),
            "same_gap": stats.ratio(_arm_d(arms, arm, fam, "same") - dn, dn),
        }
    # NaN where track B or C did not run
    dl = stats.delta(_arm_d(arms, tracks.INPUT, fam), _arm_d(arms, tracks.WEIGHTS, fam))
    row["delta"], row["outcome"] = dl, stats.outcome(dl)
    return row


def _own_targets(pooled: Mapping[str, Any], best: str | None) -> dict[str, Any]:
    """The issue's targets on the pooled held-out worlds, for the best memory track."""
    bt = pooled["tracks"].get(best, {}) if best else {}
    return {
        "oracle_gain": _target(pooled["oracle_gain"], TARGETS["oracle_gain"]),
        "memory_drop": _target(bt.get("memory_drop", math.nan), TARGETS["memory_drop"]),
        "oracle_share": _target(bt.get("oracle_share", math.nan), TARGETS["oracle_share"]),
        "wrong_worse": {"value": bt.get("wrong_gap", math.nan), "goal": "> 0 in every seed",
                        "met": bool(bt.get("wrong_gap_per_seed")) and all(
                            np.isfinite(g) and g > 0 for g in bt["wrong_gap_per_seed"].values())},
    }


def _target(value: float, goal: float) -> dict[str, Any]:
    return {"value": value, "goal": goal, "met": bool(np.isfinite(value) and value >= goal)}


def analyse(runs: Sequence[WorldsRun]) -> dict[str, Any]:
    """Every number of the report, as plain JSON-able data (docs/definitions.md, the
    worlds-study quantities)."""
    arms = stats.group(runs, lambda r: r.arm)
    memory_arms = [a for a in arms if a not in (tracks.FLOOR, ORACLE)]
    metrics = {fam: _family_metrics(arms, memory_arms, fam) for fam in (*FAMILIES, POOLED)}
    best = _lowest(metrics[POOLED]["tracks"], lambda t: t["d50"])
    return {"arms": {arm: _arm_summary(rs) for arm, rs in arms.items()},
            "question": question.analyse(arms, ORACLE),
            "after_switch": question.after_switch(arms, ORACLE),
            "families": [*FAMILIES, POOLED], "n": HEADLINE_N, "metrics": metrics,
            "peer": peer_metrics(arms, memory_arms), "best_memory_track": best,
            "targets": _own_targets(metrics[POOLED], best)}


#: The group-memory targets (issue 23), per seed on the pooled held-out worlds; the gravity
#: probe's (on e_agg) direction cosine and strength R^2 each (they stand for its R^2 before).
PEER_TARGETS = {"share": 0.5, "direction_cos": 0.8, "strength_r2": 0.8}


def _gravity_numbers(run: WorldsRun, fam: str) -> dict[str, float]:
    """A run's gravity probe on one family (``all``: the held-out families' mean) as
    ``gravity_<key>`` (e_agg) and ``entries_<key>`` (the entries); NaN without it."""
    fam = "held_out" if fam == POOLED else fam
    return {f"{prefix}_{k}": float(((run.gravity or {}).get(feature) or {}).get(fam, {})
                                   .get(k, math.nan))
            for feature, prefix in GRAVITY_FEATURES.items() for k in GRAVITY_KEYS}  # fmt: skip


def _peer_seed(r: WorldsRun, fam: str, floor: WorldsRun | None,
               ceiling: WorldsRun | None) -> dict[str, float]:  # fmt: skip
    """One seed's peer memory on one family, beside the floor and the ceiling of its seed."""
    d_a = floor.at(fam) if floor else math.nan
    d_o = ceiling.at(fam) if ceiling else math.nan
    peer, wrong = r.at(fam, "same"), r.at(fam, "wrong")
    return {"peer": peer, "wrong": wrong, "own": r.at(fam), "d_A": d_a, "d_oracle": d_o,
            "share": share(d_a, peer, d_o, math.nan), "wrong_gap": stats.ratio(wrong - peer, peer),
            **_gravity_numbers(r, fam)}


def peer_metrics(arms: Mapping[str, list[WorldsRun]], memory_arms: Sequence[str]) -> dict[str, Any]:
    """The peer memory (``same``) against the floor and the ceiling, per family and per seed, and
    the group-memory targets for the best memory track (docs/worlds_study.md#what-it-reports)."""
    floor = {r.seed: r for r in arms.get(tracks.FLOOR, [])}
    ceiling = {r.seed: r for r in arms.get(ORACLE, [])}
    out: dict[str, Any] = {"families": {}}
    for fam in (*FAMILIES, POOLED):
        rows = {}
        for arm in memory_arms:
            per_seed = {r.seed: _peer_seed(r, fam, floor.get(r.seed), ceiling.get(r.seed))
                        for r in arms[arm]}
            vals = list(per_seed.values())  # an arm has a run at least
            mean = {k: stats.finite_mean([v[k] for v in vals]) for k in vals[0]}
            mean["share"] = share(mean["d_A"], mean["peer"], mean["d_oracle"], math.nan)  # of seed means
            rows[arm] = {"mean": mean, "per_seed": per_seed}
        dl = (stats.delta(rows[tracks.INPUT]["mean"]["peer"], rows[tracks.WEIGHTS]["mean"]["peer"])
              if {tracks.INPUT, tracks.WEIGHTS} <= set(rows) else math.nan)
        out["families"][fam] = {"tracks": rows, "delta": dl, "outcome": stats.outcome(dl)}
    out["best"] = best = _lowest(out["families"][POOLED]["tracks"], lambda t: t["mean"]["peer"])
    seeds = out["families"][POOLED]["tracks"][best]["per_seed"] if best else {}

    def every(check: Any) -> bool:
        return bool(seeds) and all(check(v) for v in seeds.values())

    out["targets"] = {
        "below_floor": every(lambda v: v["peer"] < v["d_A"]),
        "half_the_gap": every(lambda v: np.isfinite(v["share"])
                              and v["share"] >= PEER_TARGETS["share"]),
        "wrong_worse": every(lambda v: v["wrong"] > v["peer"]),
        "gravity": every(lambda v: all(
            np.isfinite(v[f"gravity_{k}"]) and v[f"gravity_{k}"] >= PEER_TARGETS[k]
            for k in ("direction_cos", "strength_r2"))),
    }
    return out


def _arm_label(arm: str) -> str:
    return "oracle (true physics)" if arm == ORACLE else f"track {arm}"


def _arm_order(arms: Mapping[str, Any]) -> list[str]:
    return sorted(arms, key=lambda a: (a == ORACLE, a))


def _plot_arm(ax: Any, arm: str, rs: Sequence[WorldsRun], fam: str | None, memory: str) -> None:
    """One arm's curves on a panel of ``fig_curves``: the switch world's (``fam`` None), or a
    family's (the floor and the ceiling read no memory: their own curve, the same at every n)."""
    color = ORACLE_COLOR if arm == ORACLE else TRACK_COLORS.get(arm)
    for mem in ["own"] if fam is None or arm in (tracks.FLOOR, ORACLE) else [memory, "wrong"]:
        if fam is None:
            ns = rs[0].switch_ns
            if not all(r.switch_ns == ns for r in rs) or not ns:
                continue
            curves = [r.switch_curve for r in rs]
        elif any(mem not in r.curves.get(fam, {}) for r in rs):
            continue
        else:
            ns, curves = rs[0].ns, [r.curves[fam][mem] for r in rs]
        mean, std = stats.band(curves)
        x, wrong = np.arange(len(ns)), mem == "wrong"
        label = _arm_label(arm).split(" (")[0] + (" wrong world" if wrong else "")
        ax.plot(x, mean, color=color, lw=1.2 if wrong else 2, ls="--" if wrong else "-",
                marker="o", ms=3, label=label)
        if not wrong:
            ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.15)
        ax.set_xticks(x, [str(n) for n in ns])


def fig_curves(runs: Sequence[WorldsRun], path: Path, memory: str = "same") -> Path:
    """D^n over n per arm (mean +- std over seeds): the switch world, then each held-out family
    with ``memory`` (default the peer memory, ``same``; the floor and the ceiling read none);
    the memory tracks' wrong-world control dashed."""
    panels = [("switch world (own memory)", None), *((f"held-out {f}", f) for f in FAMILIES)]
    fig, axes = pyplot().subplots(1, len(panels), figsize=(5 * len(panels), 4), sharey=False)
    arms = stats.group(runs, lambda r: r.arm)
    for ax, (title, fam) in zip(axes, panels, strict=True):
        for arm in _arm_order(arms):
            _plot_arm(ax, arm, arms[arm], fam, memory)
        blind = [r.blind[fam] for r in runs if fam is not None and fam in r.blind]
        if blind:  # every arm's latent; they agree to about 0.02
            ax.axhline(float(np.mean(blind)), color="k", ls=":", lw=1.2,
                       label="perfect world-blind physics")
        ax.set_title(title if fam is None else f"{title} ({MEMORY_LABELS.get(memory, memory)})")
        ax.set_xlabel("memory entries n")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("D^n (1 = no change)")
    axes[-1].legend(fontsize=7, loc="best")
    return save_figure(fig, path, dpi=110)


def _own_at(arm: Mapping[str, Any], fam: str, n: int) -> str:
    """An arm's own-memory D^n on a family as "mean +- std" ("-": not measured)."""
    block = arm["families"][fam].get("own")
    if not block or n not in arm["ns"]:
        return "-"
    i = arm["ns"].index(n)
    return f"{block['mean'][i]:.4f} +- {block['std'][i]:.4f}"


def curves_table_lines(arms: Mapping[str, Any], order: Sequence[str]) -> list[str]:
    """The held-out curves table: each arm's own-memory D^0 and D^50 per family."""
    head = ["arm", "seeds", "interp D^0", "interp D^50", "extrap D^0", "extrap D^50", "all D^50"]
    rows = []
    for arm in order:
        a = arms[arm]
        own = a["families"][POOLED].get("own")
        rows.append([_arm_label(arm), len(a["seeds"]),
                     *(_own_at(a, fam, n) for fam in FAMILIES for n in (0, HEADLINE_N)),
                     stats.Summary(**own["at_n"]).ms() if own else "-"])
    return [f"## Held-out worlds: D^{HEADLINE_N} (own memory), mean +- std over seeds", "",
            *table(head, rows)]


def per_horizon_lines(arms: Mapping[str, Any], order: Sequence[str]) -> list[str]:
    """Each arm's D^50 per horizon, then perfect world-blind physics in its latent per horizon
    and the arm's D^50 over it (1: as precise as perfect physics that ignores the world); none
    before the horizons, or the physics, were recorded."""
    hs = next((arms[a]["horizons"] for a in order if arms[a]["d50_per_horizon"]), [])
    if not hs:
        return []
    shown = [a for a in order if arms[a]["d50_per_horizon"] and arms[a]["horizons"] == hs]
    lines = ["", f"Per horizon (held-out worlds pooled, own memory, n = {HEADLINE_N}, mean over seeds):", "",
             *table(["arm", *(f"h = {h}" for h in hs)],
                    ([_arm_label(a), *(f"{x:.4f}" for x in arms[a]["d50_per_horizon"])]
                     for a in shown))]
    blind = [(a, arms[a]["blind_per_horizon"], arms[a]["d50_per_horizon"]) for a in shown
             if arms[a].get("blind_per_horizon")]
    if not blind:
        return lines
    cells = ([_arm_label(a), *(f"{x:.4f}" for x in b),
              *(f"{stats.ratio(y, x):.2f}x" for y, x in zip(d, b, strict=True))] for a, b, d in blind)
    return lines + [
        "", "Perfect world-blind physics in each arm's latent (the simulator branched at the "
        "input frame without gravity, rendered, encoded, scored by D; held-out worlds pooled, "
        "mean over seeds; docs/definitions.md#perfect-physics-the-physics-ceiling) and the "
        "arm's D^50 over it:", "",
        *table(["arm", *(f"blind h = {h}" for h in hs), *(f"D / blind, h = {h}" for h in hs)],
               cells)]


def memory_lines(result: Mapping[str, Any]) -> list[str]:
    """The memory section: per family, each memory track against the floor and the ceiling."""
    lines = ["", "## Memory against the floor (track A) and the ceiling (oracle), n = 50", "",
             "oracle gain = (D_A - D_oracle) / D_A; memory drop = (D^0 - D^50) / D^0; oracle "
             "share = (D_A - D^50) / (D_A - D_oracle); wrong / same gap = (D_wrong|same^50 - "
             "D_own^50) / D_own^50 (positive: own memory is better). Ratios of seed means; the share "
             f"is left out (-) where the oracle gains less than {MIN_ORACLE_GAIN:.0%}. A share "
             "above 1 means memory lowers the error more than the true physics does: it "
             "carries more than the world's parameters (a large same-world gap says what: the "
             "sequence's own history).", ""]
    head = ["track", "D^0", "D^50", "memory drop", "oracle share", "wrong-world gap",
            "same-world gap"]
    for fam in result["families"]:
        m = result["metrics"][fam]
        rows = ([arm, num(t["d0"], 4), num(t["d50"], 4), pct(t["memory_drop"], 2, "+"),
                 num(t["oracle_share"], 2), pct(t["wrong_gap"], 2, "+"), pct(t["same_gap"], 2, "+")]
                for arm, t in sorted(m["tracks"].items()))
        lines += [f"**{fam}**: D_A {num(m['d_A'], 4)}, D_oracle {num(m['d_oracle'], 4)}, "
                  f"oracle gain {pct(m['oracle_gain'], 2, '+')}", "", *table(head, rows), ""]
    return lines


def delta_lines(result: Mapping[str, Any]) -> list[str]:
    """The pre-registered test's table: D_B, D_C, delta and its outcome per family."""
    rows = []
    for fam in result["families"]:
        m = result["metrics"][fam]
        tb, tc = m["tracks"].get(tracks.INPUT, {}), m["tracks"].get(tracks.WEIGHTS, {})
        rows.append([fam, num(tb.get("d50"), 4), num(tc.get("d50"), 4), pct(m["delta"], 2, "+"),
                     f"{m['outcome']}: {stats.OUTCOME_TEXT.get(m['outcome'], 'needs B and C')}"])
    return ["## Pre-registered test on held-out worlds: delta = (D_B - D_C) / D_B at n = 50", "",
            *table(["worlds", "D_B", "D_C", "delta", "outcome"], rows)]


def targets_lines(result: Mapping[str, Any]) -> list[str]:
    """The issue's targets table: each target's goal, measured value and whether it is met."""
    tg = result["targets"]
    rows = [["knowing the world matters: oracle gain", ">= 25%",
             pct(tg["oracle_gain"]["value"], 2, "+"), _yes(tg["oracle_gain"]["met"])],
            [f"memory adapts: best memory track ({result['best_memory_track']}) D^50 below D^0",
             ">= 20%", pct(tg["memory_drop"]["value"], 2, "+"), _yes(tg["memory_drop"]["met"])],
            ["... recovering the oracle's gain (share)", ">= 0.50",
             num(tg["oracle_share"]["value"], 4), _yes(tg["oracle_share"]["met"])],
            ["wrong-world memory worse than own", "> 0, every seed",
             pct(tg["wrong_worse"]["value"], 2, "+"), _yes(tg["wrong_worse"]["met"])]]
    return ["", "## The issue's targets (held-out worlds pooled)", "",
            *table(["target", "goal", "measured", "met"], rows), ""]


def report_lines(result: Mapping[str, Any]) -> list[str]:
    """The Markdown body: curves table, targets, oracle share, controls, pre-registered test."""
    arms = result["arms"]
    order = _arm_order(arms)
    lines = [*curves_table_lines(arms, order), *per_horizon_lines(arms, order),
             *memory_lines(result), *delta_lines(result), *targets_lines(result)]
    if result.get("peer", {}).get("best"):
        lines += peer_lines(result["peer"])
    return lines


def _peer_family_lines(fam: str, block: Mapping[str, Any]) -> list[str]:
    """One family's peer-memory table, then the pre-registered delta on it (where B and C ran)."""
    head = ["track", "D_A", "D_oracle", "peer D^50", "own D^50", "wrong D^50", "share",
            "wrong - peer", "gravity probe, e_agg", "gravity probe, entries"]
    rows = []
    for arm, row in sorted(block["tracks"].items()):
        m = row["mean"]
        rows.append([arm, *(num(m[k], 4) for k in ("d_A", "d_oracle", "peer", "own", "wrong")),
                     num(m["share"], 2), pct(m["wrong_gap"], 2, "+"), _probe(m, "gravity"),
                     _probe(m, "entries")])
    lines = [f"**{fam}**", "", *table(head, rows), ""]
    if np.isfinite(block["delta"]):  # tracks B and C both ran
        oc = block["outcome"]
        lines += [f"Pre-registered delta (D_B - D_C) / D_B on peer memory: "
                  f"{pct(block['delta'], 2, '+')}, {oc}: {stats.OUTCOME_TEXT.get(oc, '')}.", ""]
    return lines


def peer_lines(peer: Mapping[str, Any]) -> list[str]:
    """The group-memory section: peer memory between the floor and the ceiling, per family and
    per seed, the gravity probe, the pre-registered delta on it and the group-memory targets."""
    lines = [f"## Peer memory (other sequences of the same world), n = {HEADLINE_N}", "",
             "What a group memory is for: D^50 with 50 entries from *other* sequences of the "
             "world (`same`; docs/definitions.md#dn-on-held-out-worlds), against the floor (A) "
             "and the ceiling (oracle) of the same seed. share = (D_A - D_peer) / (D_A - D_oracle) "
             "(of seed means); wrong - peer = (D_wrong - D_peer) / D_peer (positive: the right "
             "world's memory is better); the gravity probe on e_agg, and on the same entries' "
             "statistics, within each family: direction cosine (mean error), strength R^2, share "
             "of worlds identified (docs/definitions.md#the-gravity-probe).", ""]
    for fam, block in peer["families"].items():
        lines += _peer_family_lines(fam, block)
    best, t = peer["best"], peer["targets"]
    head = ["seed", "D_A", "D_oracle", "peer D^50", "wrong D^50", "share", "gravity probe, e_agg",
            "gravity probe, entries"]
    rows = ([seed, *(num(v[k], 4) for k in ("d_A", "d_oracle", "peer", "wrong")),
             num(v["share"], 2), _probe(v, "gravity"), _probe(v, "entries")]
            for seed, v in peer["families"][POOLED]["tracks"][best]["per_seed"].items())
    return lines + [
        f"Per seed, pooled, the best memory track by peer D^50 ({best}):", "", *table(head, rows),
        "", "## The group-memory targets (pooled held-out worlds, every seed)", "",
        *table(["target", "met"], [
            [f"the best memory track's ({best}) peer D^50 below track A's",
             _yes(t["below_floor"])],
            ["it closes at least half the oracle gap", _yes(t["half_the_gap"])],
            ["wrong-world memory worse than peer memory", _yes(t["wrong_worse"])],
            [f"the gravity probe on e_agg: direction cosine at least "
             f"{PEER_TARGETS['direction_cos']}, strength R^2 at least "
             f"{PEER_TARGETS['strength_r2']}", _yes(t["gravity"])]]), ""]


def _probe(row: Mapping[str, float], prefix: str) -> str:
    """A gravity probe cell: direction cosine (mean error) / strength R^2 / worlds identified."""
    deg = row[f"{prefix}_direction_deg"]
    return (f"{num(row[f'{prefix}_direction_cos'], 4)} ("
            + ("-" if not np.isfinite(deg) else f"{deg:.0f} deg")
            + f") / {num(row[f'{prefix}_strength_r2'], 4)} / "
            f"{num(row[f'{prefix}_identified'], 4)}")


def _yes(met: bool) -> str:
    return "yes" if met else "**no**"
