"""The run's summary: a few numbers that tell the story, as JSON, Markdown and a printed table.
``sections`` reads the summary into its tables, each built once (``Table``), which
``format_table`` prints at the end of a run and ``format_markdown`` writes to summary.md."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agent import tracks
from agent.objective import head_metric_name
from runners.cli import writing
from runners.online import bounds
from runners.online.config import RunConfig
from runners.online.evaluation import EvalRecord
from runners.online.protocols import PROTOCOLS
from runners.online.rundir import RunFolder
from runners.online.switch import switches_from_json
from runners.style import MEMORY_LABELS, Table, num, tables_text

if TYPE_CHECKING:
    from runners.online.loop import RunRecords


def _f(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _eval_at(evals: list[EvalRecord], step: int | None, n: int) -> dict[str, Any] | None:
    """The evaluation at ``step`` (the last one at or before it)."""
    e = next((e for e in reversed(evals) if step is not None and e.step <= step), None)
    if e is None:
        return None
    return {"step": int(e.step), "d_base": _f(e.d_base), f"d_shift_{n}": _f(e.d(n)),
            "d_shift_0": _f(e.d(0)) if 0 in e.ns else None, "sigma_embed": _f(e.sigma_embed),
            "sigma_z": _f(e.sigma_z), "sigma_target": _f(e.sigma_target)}


def _window_mean(a: np.ndarray | None, at: int | None, win: int) -> float | None:
    """The mean of the finite values among the ``win`` steps from ``at`` on (``win`` < 0: the
    ``-win`` steps before it); None: none."""
    if a is None or at is None:
        return None
    seg = a[max(0, at + win) : at] if win < 0 else a[at : at + win]
    seg = seg[np.isfinite(seg)]
    return _f(seg.mean()) if len(seg) else None


def build_summary(
    run_dir: Path, cfg: RunConfig, records: RunRecords, evals: list[EvalRecord], *,
    wall_time: float, final_curve: list[dict[str, Any]] | None, best: tuple[float, int],
    stopped: str | None, held_out: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary of a run from what its loop recorded (``RunRecords``, the evaluations). Its
    ``buffer``: the memory's last size, capacity, scope and entries by world; ``stream_error``:
    the rolling means before and after the first switch (``fs``) and at the end, and the bins
    since the switch."""
    steps_done, n, fs = records.steps, cfg.schedule.headline_n, cfg.first_switch
    err, valid = records.column("stream/norm_error"), records.column("stream/valid_frac")
    win = cfg.schedule.rolling_window
    size = int(records.last.get("memory/buffer_size", 0)) if steps_done else 0
    n_shift = int(round(size * float(records.last.get("memory/shift_share", 0.0)))) if size else 0
    return {
        "run_dir": str(run_dir), "protocol": cfg.protocol.kind, "track": cfg.agent.track,
        "head": cfg.agent.head_name, "preset": cfg.preset, "source": cfg.protocol.source, "seed": cfg.agent.seed, "after_switch": cfg.schedule.after_switch,
        "switches": [sw.to_json() for sw in switches_from_json(cfg.schedule.switches)],
        "switch_world_family": cfg.protocol.switch_family(cfg.shift_physics) if fs is not None else None,
        "steps": cfg.schedule.steps, "steps_done": steps_done, "stopped": stopped,
        "wall_time_s": round(wall_time, 1),
        "steps_per_s": round(steps_done / wall_time, 2) if wall_time > 0 else None,
        "headline_n": n, "end_of_base": _eval_at(evals, fs, n),
        "end": _eval_at(evals, steps_done, n),
        "boundary_events_before_switch": records.boundaries_before,
        "boundary_events_after_switch": records.boundaries_after,
        "buffer": {"size": size, "capacity": cfg.agent.buffer_capacity,
                   "scope": cfg.agent.memory_scope, "shift_world": n_shift,
                   "base_world": size - n_shift},
        "stream_error": {**stream_error(err, fs, steps_done, win), "window": win,
                         "heads": {h: stream_error(records.column(head_metric_name(h)), fs,
                                                   steps_done, win)
                                   for h in cfg.agent.heads}},
        "stream_valid_frac": _f(np.nanmean(valid)) if valid is not None and steps_done else None,
        "best": {"d_shift": _f(best[0]),
                 "step": best[1] if math.isfinite(best[0]) else None,
                 "min_sigma": cfg.schedule.best_min_sigma},
        "adaptation_curve": final_curve, "held_out": held_out,
    }


def stream_error(err: np.ndarray | None, fs: int | None, steps: int, win: int) -> dict[str, Any]:
    """A predictor's stream error (its column ``err``, one value a step): the rolling means of
    ``win`` steps before and after the first switch (``fs``) and at the end, and its bins since
    the switch (``since_switch``)."""
    return {"end_of_base": _window_mean(err, fs, -win), "just_after_switch": _window_mean(err, fs, win),
            "end": _window_mean(err, steps, -win), "since_switch": since_switch(err, fs)}


#: Bins of steps since the first switch for the stream error after it (the last one is cut at
#: the end of the run).
SINCE_SWITCH_EDGES = (0, 25, 50, 100, 200, 500, 1000, 2000, 5000, 10_000)


def since_switch(err: np.ndarray | None, fs: int | None) -> list[dict[str, Any]]:
    """The stream error after the first switch by steps since it: one row per bin
    ``[from, to)`` of ``SINCE_SWITCH_EDGES`` the run reached, with the mean error over its
    steps (NaN steps, where no window was valid yet, skipped) and its valid share of steps."""
    if err is None or fs is None or fs >= len(err):
        return []
    after = np.asarray(err[fs:], dtype=np.float64)
    edges = [e for e in SINCE_SWITCH_EDGES if e < len(after)] + [len(after)]
    return [{"from": a, "to": b, "mean": _window_mean(after, a, b - a),
             "valid_steps": round(float(np.isfinite(after[a:b]).mean()), 3)}
            for a, b in zip(edges[:-1], edges[1:], strict=True)]


# -- the summary's tables: each built once, printed as text and written as Markdown -------------
def sections(s: dict[str, Any]) -> list[Table]:
    """The summary's tables in order: the top table, the stream error since the switch, the
    adaptation curve at the end, then the held-out worlds' (``held_out_tables``)."""
    found = [top_table(s), since_switch_table(s), curve_table(s),
             *held_out_tables(s["held_out"], "at the end")]
    return [t for t in found if t is not None]


def format_table(s: dict[str, Any]) -> str:
    """The summary as printed at the end of a run: the story, the tables, the bounds."""
    b = s.get("bounds")
    return "\n".join([*([bounds.story(b) + ".", ""] if b else []),
                      tables_text([*sections(s), *bounds.tables(b)])])


def format_markdown(s: dict[str, Any]) -> str:
    """summary.md: the run in a title and a line, the story, the tables, the bounds, the best
    checkpoint and the figures."""
    b, best = s.get("bounds"), s["best"]
    sw = ", ".join(f"{x.label()} at step {x.step}" for x in switches_from_json(s["switches"]))
    lines = [f"# Run summary: track {s['track']} ({s['protocol']} protocol, {s['preset']} preset, "
             f"{s['source']} source, seed {s['seed']})", "",
             f"{s['steps_done']} of {s['steps']} steps in {s['wall_time_s']} s "
             f"({s['steps_per_s']} steps/s); {sw or 'no switch'}; after the switch: "
             f"{s['after_switch']} mode." + (f" Stopped early ({s['stopped']})." if s["stopped"]
                                             else ""), ""]
    lines += [f"**{bounds.story(b)}.**", ""] if b else []
    lines += [x for t in [*sections(s), *bounds.tables(b)] for x in [*t.markdown(), ""]]
    if best["d_shift"] is not None:
        guard = best["min_sigma"]
        lines += [f"Best D_shift^{s['headline_n']}: {best['d_shift']:.3f} at step {best['step']} "
                  "(checkpoints/best.pt" + (f"; evaluations with sigma_embed < {guard} not "
                                            "counted)." if guard else ")."), ""]
    return "\n".join([*lines, "Figures: `figures/overview.png` (the story), "
                      "`figures/sigma_embed.png`, `figures/losses.png`"
                      + (", `figures/bounds.png`" if b else "")
                      + (", `figures/predictions.png`" if (s["held_out"] or {}).get("pixels")
                         else "") + ".", ""])


def top_table(s: dict[str, Any]) -> Table:
    """Each quantity at the end of base training and at the end of the run."""
    n, se, buf = s["headline_n"], s["stream_error"], s["buffer"]
    a, e = s["end_of_base"] or {}, s["end"] or {}
    shift, mem, base = PROTOCOLS[s["protocol"]].names
    end_step = num(e.get("step"))
    if e.get("step") is not None and e["step"] < s["steps_done"]:  # nothing could change since
        end_step += " (weights frozen since)"

    def both(label: str, key: str) -> list[str]:
        return [label, num(a.get(key)), num(e.get(key))]

    rows = [["evaluated at step", num(a.get("step")), end_step],
            both(f"D_base ({base}, 1 = no change)", "d_base"),
            both(f"D_shift^{n} ({shift}, {n} {mem})", f"d_shift_{n}"),
            both(f"D_shift^0 ({shift}, no memory)", "d_shift_0"),
            [f"rolling stream error ({se['window']} steps)", num(se["end_of_base"]),
             num(se["end"])],
            ["boundary events (before / after switch)", str(s["boundary_events_before_switch"]),
             str(s["boundary_events_after_switch"]) if s["switches"] else "-"],
            ["memory per group at the end (switch world / older / capacity)"
             if buf["scope"] == "group" else "buffer at the end (shift / base / capacity)", "",
             f"{buf['shift_world']} / {buf['base_world']} / {buf['capacity']}"]]
    return Table("", ("quantity",), ["end of base training", "end of run"], rows, style="ruled")


def since_switch_table(s: dict[str, Any]) -> Table | None:
    """The stream error by steps since the first switch (``since_switch``), against its rolling
    mean before it: one line, or a row for the run's predictor and each of its heads (scored on
    the same windows and memory each step); None without a switch."""
    se, frozen = s["stream_error"], " (weights frozen)" if s["after_switch"] == "memory" else ""
    if not se["since_switch"]:
        return None
    bins = [f"{r['from']}-{r['to']}" for r in se["since_switch"]]
    heads = {s.get("head") or s["track"]: se, **se.get("heads", {})}
    if len(heads) == 1:
        return Table(f"stream error by steps since the switch{frozen}, against "
                     f"{num(se['end_of_base'])} before it", ("steps since the switch",), bins,
                     [["stream error", *(num(r["mean"]) for r in se["since_switch"])]],
                     style="inline")  # fmt: skip
    rows = [[tracks.head_label(name), num(h["end_of_base"]), *(num(r["mean"]) for r in h["since_switch"])]
            for name, h in heads.items()]
    return Table(f"stream error by steps since the switch{frozen}, every head on the same "
                 f"windows", ("",), ["before", *bins], rows)  # fmt: skip


def curve_table(s: dict[str, Any]) -> Table | None:
    """The adaptation curve at the end, D_shift^n by n (None without it)."""
    curve, protocol = s["adaptation_curve"], PROTOCOLS[s["protocol"]]
    shift, mem, _ = protocol.names
    return Table(f"D_shift^n at the end ({shift}, n {mem})",
                 ("",), [f"n={r['n']}" for r in curve],
                 [["D_shift^n", *(num(r["d_shift"]) for r in curve)]], style="inline"
                 ) if curve else None


def held_out_tables(held: dict[str, Any] | None, when: str) -> list[Table]:
    """The held-out worlds' D^n per family and memory, then the probes, the gravity probe, the
    reference check, perfect physics and the decoded predictions' pixel errors (those ``held``
    holds; none without it)."""
    if not held:
        return []
    ns, probes = held["ns"], held.get("probes")
    ref, pp, px = held.get("reference"), held.get("perfect_physics"), held.get("pixels")
    targets = list(next(iter(probes.values()))) if probes else []
    found = [
        Table(f"held-out worlds {when}, D^n (n = " + " ".join(map(str, ns)) + ")",
              ("family", "memory"), [f"n={n}" for n in ns],
              [[fam, m, *map(num, d)] for fam, mems in held["families"].items()
               for m, d in mems.items()], widths=(7, 6), cell=7, style="headless",
              md_caption=f"Held-out worlds {when} (D^n, mean over each family's worlds; memory: "
                         "own = the sequence's own n transitions, same = another sequence of "
                         "the same world, wrong = a sequence of another held-out world)"),
        Table("probes of the digits' state on held-out worlds, R^2 and the error in px (px/frame "
              "for the velocity), fit on training worlds (linear; context_mlp: a small MLP; "
              "docs/definitions.md#probes)", ("latent",), targets,
              [[latent, *(num(row.get(t)) for t in targets)] for latent, row in probes.items()],
              widths=(11,), cell=13) if probes else None,
        gravity_probe_table(held.get("gravity_probe")),
        _by_horizon(REFERENCE_CAPTION, "", held["horizons"], REFERENCE_ROWS, ref) if ref else None,
        _by_horizon(PERFECT_PHYSICS_CAPTION, "physics", pp["horizons"], PERFECT_PHYSICS_ROWS,
                    pp["families"]) if pp else None,
        _by_horizon(PIXEL_CAPTION.format(n=px["n"]), "decoded", px["horizons"], PIXEL_ROWS,
                    px["families"]) if px else None,
    ]
    return [t for t in found if t is not None]


#: The gravity probe's columns: (header, format of a family's readout).
GRAVITY_PROBE_COLUMNS = (("direction error", "{direction_deg:.1f} deg"),
                         ("direction cos", "{direction_cos:.3f}"),
                         ("strength R^2", "{strength_r2:.3f}"),
                         ("identified (chance)", "{identified:.3f} ({chance:.3f})"))


def gravity_probe_table(probe: dict[str, Any] | None) -> Table | None:
    """The gravity probe: a row per feature (e_agg, the entries) and family (None without it)."""
    if not probe:
        return None
    rows = [[feature, fam, *(fmt.format(**r) for _, fmt in GRAVITY_PROBE_COLUMNS)]
            for feature in ("e_agg", "entries") for fam, r in probe.get(feature, {}).items()
            if fam != "held_out"]  # the mean of the held-out families' rows
    return Table("the gravity probe, within each family: gravity by leave-one-world-out ridge "
                 "maps of world means, the world by its nearest half "
                 f"(docs/definitions.md#the-gravity-probe), n = {probe['n']} peer transitions, "
                 f"{probe['worlds']} worlds a family", ("feature", "family"),
                 [h for h, _ in GRAVITY_PROBE_COLUMNS], rows, widths=(8, 7),
                 note="entries: the same entries summarised by hand (mean latent, mean change, "
                 "median change of velocity)")


#: What each row of the reference check is (agent.evaluation.reference_check).
REFERENCE_ROWS = {"d": "D (the paper's: against the online z_t)",
                  "d_target_ref": "D against the EMA target's zbar_t",
                  "d_future_online": "D of the online latent of the true future"}
REFERENCE_CAPTION = ("how much of D is predicted motion (held-out worlds, empty memory; "
                     "docs/definitions.md#the-reference-check)")

#: The rows of perfect physics in the latent (probes.perfect_physics), by branch.
PERFECT_PHYSICS_ROWS = {"exact": "the world's own physics", "blind": "world-blind (no gravity)",
                        "other": "another world of the family",
                        "seen": "world-blind, as two frames show it",
                        "told": "the world's own, as two frames show it",
                        "seen_mean": "world-blind, hedged over the training worlds",
                        "told_mean": "the world's own, hedged"}
PERFECT_PHYSICS_CAPTION = ("perfect physics in this latent: the simulator branched at the input "
                           "frame, rendered, encoded by the EMA target, scored by D "
                           "(docs/definitions.md#perfect-physics-the-physics-ceiling)")

#: The rows of the decoded predictions' digit position errors (runners.online.pixels).
PIXEL_ROWS = {"decoded_true": "the true future", "no_change": "no change (the input)", **MEMORY_LABELS}
PIXEL_CAPTION = ("where the decoded predictions put the digits: mean distance from the true "
                 "positions in px (held-out worlds, n = {n}; docs/definitions.md#the-pixel-decoder)")

#: The world probe's rows (probes.world).
WORLD_PROBE_ROWS = {"latent": "D, the latents only", "latent_world": "D, the latents and the world",
                    "gain": "the world's worth (1 - ratio)"}


def _by_horizon(caption: str, label: str, horizons: list[int], names: dict[str, str],
                families: dict[str, dict[str, list[float]]]) -> Table:
    """Per family, a row per key of ``names`` (its label) the family holds: D per horizon, then
    the mean (the reference check, perfect physics, the world probe)."""
    rows = [[fam, name, *map(num, got[key])] for fam, got in families.items()
            for key, name in names.items() if key in got]
    return Table(caption, ("family", label), [*(f"h={h}" for h in horizons), "mean"], rows,
                 widths=(7, max(map(len, names.values()))), cell=7)


def world_probe_table(probe: dict[str, Any] | None) -> Table | None:
    """The world probe per family and pooled (``evaluate --world-probe``; None without it)."""
    if not probe:
        return None
    fit = probe["fit"]
    start = f", windows from frame {fit['start']}" if fit["start"] else ""
    return _by_horizon("the world probe: predictors fit offline on the frozen EMA-target latents "
                       f"of {fit['sequences']} sequences of {fit['worlds']} training worlds "
                       f"({fit['predictor']}{start}), on held-out worlds "
                       "(docs/definitions.md#the-world-probe)", "", probe["horizons"],
                       WORLD_PROBE_ROWS, probe["families"])


def write_summary(run_dir: Path, s: dict[str, Any]) -> None:
    """``summary.json`` and ``summary.md``; a failed write raises ``OSError`` naming the file."""
    folder = RunFolder(run_dir)
    with writing(folder.summary_json):
        folder.summary_json.write_text(json.dumps(s, indent=2) + "\n")
    with writing(folder.summary_md):
        folder.summary_md.write_text(format_markdown(s))


# -- adaptation curve (evaluate and the end of train_online) ------------------------------------
def curve_report(results: list[Any], *, step: int, checkpoint: str, data: str,
                 horizons: list[int]) -> dict[str, Any]:
    """JSON-able adaptation curve from ``agent.adaptation_curve`` results."""
    rows = [{"n": int(r.n), "d_shift": _f(r.d_shift), "d_shift_per_h": [*map(_f, r.d_shift_per_h)],
             "d_base": _f(r.d_base), "d_base_per_h": [*map(_f, r.d_base_per_h)],
             "sigma_embed": _f(r.sigma_embed), "excluded": int(r.excluded)} for r in results]
    return {"checkpoint": checkpoint, "step": step, "data": data, "horizons": horizons,
            "curve": rows}


def format_curve(rep: dict[str, Any]) -> str:
    """The adaptation curve as an aligned table: D_shift^n overall and per horizon, D_base,
    sigma_embed and the excluded pairs by n."""
    head = ["n", "D_shift", *[f"h={h}" for h in rep["horizons"]], "D_base", "sigma_embed",
            "excluded"]
    body = [[str(r["n"]), num(r["d_shift"]), *map(num, r["d_shift_per_h"]), num(r["d_base"]),
             num(r["sigma_embed"]), str(r["excluded"])] for r in rep["curve"]]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    rule = ["-" * w for w in widths]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True))
                     for row in [head, rule, *body])
