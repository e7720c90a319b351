"""The run's summary: a few numbers that tell the story, as JSON, Markdown and a printed table."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runners.cli import writing
from runners.online import bounds
from runners.online.config import Paper, RunConfig
from runners.online.evaluation import EvalRecord
from runners.online.rundir import RunFolder
from runners.online.switch import switches_from_json

if TYPE_CHECKING:
    from runners.online.loop import RunRecords


def _f(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _eval_at(evals: list[EvalRecord], step: int | None, n: int) -> dict[str, Any] | None:
    """The evaluation at ``step`` (the last one at or before it); sigma_z and sigma_target only
    where recorded (not in a run recorded before them)."""
    if step is None:
        return None
    before = [e for e in evals if e.step <= step]
    if not before:
        return None
    e = before[-1]
    return {
        "step": int(e.step),
        "d_base": _f(e.d_base),
        f"d_shift_{n}": _f(e.d(n)),
        "d_shift_0": _f(e.d(0)) if 0 in e.ns else None,
        "sigma_embed": _f(e.sigma_embed),
        **{k: _f(v) for k, v in (("sigma_z", e.sigma_z), ("sigma_target", e.sigma_target))
           if not math.isnan(v)},
    }


def _tail_mean(a: np.ndarray | None, end: int | None, win: int) -> float | None:
    """The mean of the finite values among the ``win`` before ``end`` (None: none)."""
    if a is None or end is None or end <= 0:
        return None
    seg = a[max(0, end - win) : end]
    seg = seg[np.isfinite(seg)]
    return _f(seg.mean()) if len(seg) else None


def _head_mean(a: np.ndarray | None, start: int | None, win: int) -> float | None:
    """The mean of the finite values among the ``win`` from ``start`` on (None: none)."""
    if a is None or start is None or start >= len(a):
        return None
    seg = a[start : start + win]
    seg = seg[np.isfinite(seg)]
    return _f(seg.mean()) if len(seg) else None


def _buffer_summary(cfg: RunConfig, records: RunRecords) -> dict[str, Any]:
    """The summary's ``buffer``: the memory's last size, capacity, scope and entries by world."""
    steps_done = records.steps
    buf_size = int(records.last.get("memory/buffer_size", 0)) if steps_done else 0
    buf_share = float(records.last.get("memory/shift_share", 0.0)) if steps_done else 0.0
    n_shift = int(round(buf_size * buf_share))
    return {
        "size": buf_size,
        "capacity": cfg.agent.buffer_capacity,
        "scope": cfg.agent.memory_scope,
        "shift_world": n_shift,
        "base_world": buf_size - n_shift,
    }


def _stream_error_summary(
    err: np.ndarray | None, fs: int | None, steps_done: int, win: int
) -> dict[str, Any]:
    """The summary's ``stream_error``: its rolling means before and after the first switch
    (``fs``) and at the end, and its bins since the switch."""
    return {
        "end_of_base": _tail_mean(err, fs, win),
        "just_after_switch": _head_mean(err, fs, win),
        "end": _tail_mean(err, steps_done, win),
        "window": win,
        "since_switch": since_switch(err, fs),
    }


def build_summary(
    run_dir: Path,
    cfg: RunConfig,
    records: RunRecords,
    evals: list[EvalRecord],
    *,
    wall_time: float,
    final_curve: list[dict[str, Any]] | None,
    best: tuple[float, int],
    stopped: str | None,
    held_out: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary of a run from what its loop recorded (``RunRecords``, the evaluations)."""
    steps_done = records.steps
    n = cfg.schedule.headline_n
    fs = cfg.first_switch
    err = records.column("stream/norm_error")
    valid = records.column("stream/valid_frac")
    win = cfg.schedule.rolling_window
    return {
        "run_dir": str(run_dir),
        "protocol": cfg.protocol.kind,
        "track": cfg.agent.track,
        "preset": cfg.preset,
        "source": cfg.protocol.source if isinstance(cfg.protocol, Paper) else "stream",
        "seed": cfg.agent.seed,
        "after_switch": cfg.schedule.after_switch,
        "switches": [sw.to_json() for sw in switches_from_json(cfg.schedule.switches)],
        "switch_world_family": _family_of(cfg) if cfg.worlds_protocol and fs is not None else None,
        "steps": cfg.schedule.steps,
        "steps_done": steps_done,
        "stopped": stopped,
        "wall_time_s": round(wall_time, 1),
        "steps_per_s": round(steps_done / wall_time, 2) if wall_time > 0 else None,
        "headline_n": n,
        "end_of_base": _eval_at(evals, fs, n) if fs is not None else None,
        "end": _eval_at(evals, steps_done, n),
        "boundary_events_before_switch": records.boundaries_before,
        "boundary_events_after_switch": records.boundaries_after,
        "buffer": _buffer_summary(cfg, records),
        "stream_error": _stream_error_summary(err, fs, steps_done, win),
        "stream_valid_frac": _f(np.nanmean(valid)) if valid is not None and steps_done else None,
        "best": {"d_shift": _f(best[0]) if math.isfinite(best[0]) else None,
                 "step": best[1] if math.isfinite(best[0]) else None,
                 "min_sigma": cfg.schedule.best_min_sigma},
        "adaptation_curve": final_curve,
        "held_out": held_out,
    }


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
    rows = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        seg = after[a:b]
        ok = np.isfinite(seg)
        rows.append({"from": a, "to": b, "mean": _f(seg[ok].mean()) if ok.any() else None,
                     "valid_steps": round(float(ok.mean()), 3)})
    return rows


def _family_of(cfg: RunConfig) -> str:
    from runners.online.config import Worlds, world_families
    from runners.online.world_sets import family_of

    fams = world_families(cfg.protocol) if isinstance(cfg.protocol, Worlds) else None
    return family_of(cfg.shift_physics, fams)


def _fmt(x: Any, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def table_rows(s: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(quantity, end of base training, end of run) rows."""
    n = s["headline_n"]
    a = s.get("end_of_base") or {}
    e = s.get("end") or {}
    se = s["stream_error"]
    buf = s["buffer"]
    sw = s["switches"]
    worlds = s.get("protocol") == "worlds"
    shift = "switch world" if worlds else "shift test"
    base = "training worlds, no memory" if worlds else "base test"
    mem = "own memories" if worlds else "memories"
    end_step = _fmt(e.get("step"))
    if e.get("step") is not None and e["step"] < s["steps_done"]:  # nothing could change since
        end_step += " (weights frozen since)"
    scope = buf.get("scope", "global")
    where = {"group": "memory per group", "world": "memory per group"}.get(scope)
    rows = [
        ("evaluated at step", _fmt(a.get("step")), end_step),
        (f"D_base ({base}, 1 = no change)", _fmt(a.get("d_base")), _fmt(e.get("d_base"))),
        (f"D_shift^{n} ({shift}, {n} {mem})", _fmt(a.get(f"d_shift_{n}")),
         _fmt(e.get(f"d_shift_{n}"))),
        (f"D_shift^0 ({shift}, no memory)", _fmt(a.get("d_shift_0")), _fmt(e.get("d_shift_0"))),
        (f"rolling stream error ({se['window']} steps)", _fmt(se.get("end_of_base")),
         _fmt(se.get("end"))),
        ("boundary events (before / after switch)", str(s["boundary_events_before_switch"]),
         str(s["boundary_events_after_switch"]) if sw else "-"),
        ((f"{where} at the end (switch world / older / capacity)" if where else
          "buffer at the end (shift / base / capacity)"), "",
         f"{buf['shift_world']} / {buf['base_world']} / {buf['capacity']}"),
    ]
    return rows


def format_table(s: dict[str, Any]) -> str:
    rows = table_rows(s)
    head = ("", "end of base training", "end of run")
    w0 = max(len(r[0]) for r in [*rows, head])
    w1 = max(len(r[1]) for r in [*rows, head])
    w2 = max(len(r[2]) for r in [*rows, head])
    line = f"{'-' * w0}  {'-' * w1}  {'-' * w2}"
    out = [f"{head[0]:<{w0}}  {head[1]:>{w1}}  {head[2]:>{w2}}", line]
    if s.get("bounds"):
        out = [bounds.story(s["bounds"]) + ".", "", *out]
    out += [f"{a:<{w0}}  {b:>{w1}}  {c:>{w2}}" for a, b, c in rows]
    since = since_switch_line(s)
    if since:
        out += ["", since]
    curve = s.get("adaptation_curve")
    if curve and s.get("protocol") == "worlds":
        out += ["", "D_shift^n at the end (switch world, n own memories): " + ", ".join(
            f"n={r['n']} {_fmt(r['d_shift'])}" for r in curve)]
    out += held_out_text(s.get("held_out"), "at the end")
    if s.get("bounds"):
        out += bounds.bounds_text(s["bounds"])
    return "\n".join(out)


def held_out_text(held: dict[str, Any] | None, when: str) -> list[str]:
    """The held-out worlds' D^n per family and memory, then the probes, as text lines."""
    if not held:
        return []
    out = ["", f"held-out worlds {when}, D^n (n = " + " ".join(map(str, held["ns"])) + "):"]
    for fam, mems in held["families"].items():
        for m, d in mems.items():
            out.append(f"  {fam:<7} {m:<6} " + " ".join(f"{_fmt(x):>6}" for x in d))
    return (out + probes_text(held.get("probes")) + gravity_probe_text(held.get("gravity_probe"))
            + reference_text(held.get("reference"), held.get("horizons", []))
            + perfect_physics_text(held.get("perfect_physics")))


GRAVITY_PROBE_CAPTION = ("the gravity probe, within each family: gravity by leave-one-world-out "
                         "ridge maps of world means, the world by its nearest half "
                         "(docs/definitions.md#the-gravity-probe)")


ENTRIES_CAPTION = ("entries: the same entries summarised by hand (mean latent, mean change, "
                   "median change of velocity)")

#: The gravity probe's columns: (header, key, format) of each family's readout.
GRAVITY_PROBE_COLUMNS = (("direction error", "direction_deg", "{:.1f} deg"),
                         ("direction cos", "direction_cos", "{:.3f}"),
                         ("strength R^2", "strength_r2", "{:.3f}"),
                         ("identified (chance)", "identified", "{:.3f}"))


def gravity_probe_text(probe: dict[str, Any] | None) -> list[str]:
    """The gravity probe: a caption, then one aligned line per feature (e_agg, the entries) and
    family (none without it)."""
    if not probe:
        return []
    widths = [len(h) + 2 for h, _, _ in GRAVITY_PROBE_COLUMNS]
    lines = ["", f"{GRAVITY_PROBE_CAPTION}, n = {probe['n']} peer transitions, "
             f"{probe['worlds']} worlds a family:", " " * 18 + "".join(
                 f"{h:>{w}}" for (h, _, _), w in zip(GRAVITY_PROBE_COLUMNS, widths, strict=True))]
    for feature in ("e_agg", "entries"):
        for fam, r in probe.get(feature, {}).items():
            if fam == "held_out":  # the mean of the held-out families' lines
                continue
            cells = [fmt.format(r[k]) for _, k, fmt in GRAVITY_PROBE_COLUMNS]
            cells[-1] += f" ({r['chance']:.3f})"
            lines.append(f"  {feature:<8} {fam:<7}" + "".join(
                f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
    return [*lines, f"  {ENTRIES_CAPTION}"]


#: What each row of the reference check is (agent.adaptation.reference_check).
REFERENCE_ROWS = {
    "d": "D (the paper's: against the online z_t)",
    "d_target_ref": "D against the EMA target's zbar_t",
    "d_future_online": "D of the online latent of the true future",
}
REFERENCE_CAPTION = ("how much of D is predicted motion (held-out worlds, empty memory; "
                     "docs/definitions.md#the-reference-check)")


def reference_text(ref: dict[str, dict[str, list[float]]] | None, horizons: list[int]) -> list[str]:
    """The reference check as aligned text lines, per family: per horizon, then the mean."""
    if not ref:
        return []
    head = "".join(f"{f'h={h}':>7}" for h in horizons) + f"{'mean':>7}"
    w = max(len(v) for v in REFERENCE_ROWS.values())
    out = ["", REFERENCE_CAPTION + ":", f"  {'':<7} {'':<{w}}" + head]
    for fam, rows in ref.items():
        for key, label in REFERENCE_ROWS.items():
            out.append(f"  {fam:<7} {label:<{w}}" + "".join(f"{_fmt(x):>7}" for x in rows[key]))
    return out


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


def perfect_physics_text(pp: dict[str, Any] | None) -> list[str]:
    """Perfect physics in the latent as aligned text lines, per family and branch: per
    horizon, then the mean (none in reports written before it)."""
    if not pp:
        return []
    head = "".join(f"{f'h={h}':>7}" for h in pp["horizons"]) + f"{'mean':>7}"
    w = max(len(v) for v in PERFECT_PHYSICS_ROWS.values())
    out = ["", PERFECT_PHYSICS_CAPTION + ":", f"  {'':<7} {'':<{w}}" + head]
    for fam, rows in pp["families"].items():
        for key, d in rows.items():
            out.append(f"  {fam:<7} {PERFECT_PHYSICS_ROWS[key]:<{w}}"
                       + "".join(f"{_fmt(x):>7}" for x in d))
    return out


#: The world probe's rows (probes.world).
WORLD_PROBE_ROWS = {
    "latent": "D, the latents only",
    "latent_world": "D, the latents and the world",
    "gain": "the world's worth (1 - ratio)",
}


def world_probe_text(probe: dict[str, Any] | None) -> list[str]:
    """The world probe as aligned text lines, per family and pooled: per horizon, then the
    mean (none without it)."""
    if not probe:
        return []
    fit = probe["fit"]
    head = "".join(f"{f'h={h}':>7}" for h in probe["horizons"]) + f"{'mean':>7}"
    w = max(len(v) for v in WORLD_PROBE_ROWS.values())
    start = f", windows from frame {fit['start']}" if fit.get("start") else ""
    out = ["", "the world probe: predictors fit offline on the frozen EMA-target latents of "
           f"{fit['sequences']} sequences of {fit['worlds']} training worlds ({fit['predictor']}"
           f"{start}), on held-out worlds (docs/definitions.md#the-world-probe):",
           f"  {'':<7} {'':<{w}}" + head]
    for fam, rows in probe["families"].items():
        for key, label in WORLD_PROBE_ROWS.items():
            out.append(f"  {fam:<7} {label:<{w}}" + "".join(f"{_fmt(x):>7}" for x in rows[key]))
    return out


PROBES_CAPTION = ("linear probes of the digits' state, R^2 on held-out worlds (fit on "
                  "training worlds; docs/definitions.md#probes)")


def probes_text(probes: dict[str, dict[str, float]] | None) -> list[str]:
    """The probe table as aligned text lines (none without probes)."""
    if not probes:
        return []
    targets = list(next(iter(probes.values())))
    out = ["", PROBES_CAPTION + ":", "  " + " " * 8 + "".join(f"{t:>10}" for t in targets)]
    for latent, row in probes.items():
        out.append(f"  {latent:<8}" + "".join(f"{_fmt(row[t]):>10}" for t in targets))
    return out


def since_switch_line(s: dict[str, Any]) -> str:
    """``stream error by steps since the switch (...): 0-25 0.642, 25-50 0.593, ...`` or ""."""
    rows = s["stream_error"].get("since_switch") or []
    if not rows:
        return ""
    base = s["stream_error"].get("end_of_base")
    frozen = " (weights frozen)" if s.get("after_switch") == "memory" else ""
    return (f"stream error by steps since the switch{frozen}, against "
            f"{_fmt(base)} before it: " + ", ".join(
                f"{r['from']}-{r['to']} {_fmt(r['mean'])}" for r in rows))


def format_markdown(s: dict[str, Any]) -> str:
    sw = ", ".join(
        f"{x.label()} at step {x.step}" for x in switches_from_json(s["switches"])
    ) or "no switch"
    lines = [
        f"# Run summary: track {s['track']} ({s.get('protocol', 'paper')} protocol, "
        f"{s['preset']} preset, {s['source']} source, seed {s['seed']})",
        "",
        f"{s['steps_done']} of {s['steps']} steps in {s['wall_time_s']} s "
        f"({s['steps_per_s']} steps/s); {sw}; after the switch: {s['after_switch']} mode."
        + (f" Stopped early ({s['stopped']})." if s.get("stopped") else ""),
        "",
        *([f"**{bounds.story(s['bounds'])}.**", ""] if s.get("bounds") else []),
        "| quantity | end of base training | end of run |",
        "|---|---:|---:|",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in table_rows(s)]
    since = s["stream_error"].get("since_switch") or []
    if since:
        lines += ["", "Stream error after the switch by steps since it (the end of base "
                  f"training: {_fmt(s['stream_error'].get('end_of_base'))}):", "",
                  "| steps since the switch | " + " | ".join(
                      f"{r['from']}-{r['to']}" for r in since) + " |",
                  "|---|" + "---:|" * len(since),
                  "| stream error | " + " | ".join(_fmt(r["mean"]) for r in since) + " |"]
    curve = s.get("adaptation_curve")
    if curve:
        where = ("the switch world, n own transitions" if s.get("protocol") == "worlds"
                 else "the shift test split")
        lines += ["", f"Adaptation curve at the end (D_shift^n on {where}):", "",
                  "| n | " + " | ".join(str(r["n"]) for r in curve) + " |",
                  "|---|" + "---:|" * len(curve),
                  "| D_shift^n | " + " | ".join(_fmt(r["d_shift"]) for r in curve) + " |"]
    lines += held_out_markdown(s.get("held_out"))
    if s.get("bounds"):
        lines += ["", "```", *bounds.bounds_text(s["bounds"])[1:], "```"]
    best = s.get("best") or {}
    if best.get("d_shift") is not None:
        guard = best.get("min_sigma") or 0.0
        lines += ["", f"Best D_shift^{s['headline_n']}: {best['d_shift']:.3f} at step "
                  f"{best['step']} (checkpoints/best.pt"
                  + (f"; evaluations with sigma_embed < {guard} not counted)." if guard else ").")]
    lines += ["", "Figures: `figures/overview.png` (the story), `figures/sigma_embed.png`, "
              "`figures/losses.png`" + (", `figures/bounds.png`" if s.get("bounds") else "") + ".", ""]
    return "\n".join(lines)


def held_out_markdown(held: dict[str, Any] | None) -> list[str]:
    """The held-out worlds' D^n per family and memory source, as Markdown lines."""
    if not held:
        return []
    ns = held["ns"]
    lines = ["", "Held-out worlds at the end (D^n, mean over each family's worlds; memory: "
             "own = the sequence's own n transitions, same = another sequence of the same "
             "world, wrong = a sequence of another held-out world):", "",
             "| family | memory | " + " | ".join(f"n={n}" for n in ns) + " |",
             "|---|---|" + "---:|" * len(ns)]
    for fam, mems in held["families"].items():
        for mem, d in mems.items():
            lines.append(f"| {fam} | {mem} | " + " | ".join(_fmt(x) for x in d) + " |")
    probes = held.get("probes")
    if probes:
        targets = list(next(iter(probes.values())))
        lines += ["", PROBES_CAPTION[0].upper() + PROBES_CAPTION[1:] + ":", "",
                  "| latent | " + " | ".join(targets) + " |", "|---|" + "---:|" * len(targets)]
        lines += [f"| {latent} | " + " | ".join(_fmt(row[t]) for t in targets) + " |"
                  for latent, row in probes.items()]
    ref = held.get("reference")
    if ref:
        hs = held.get("horizons", [])
        lines += ["", REFERENCE_CAPTION[0].upper() + REFERENCE_CAPTION[1:] + ":", "",
                  "| family | | " + " | ".join(f"h={h}" for h in hs) + " | mean |",
                  "|---|---|" + "---:|" * (len(hs) + 1)]
        lines += [f"| {fam} | {label} | " + " | ".join(_fmt(x) for x in rows[key]) + " |"
                  for fam, rows in ref.items() for key, label in REFERENCE_ROWS.items()]
    pp = held.get("perfect_physics")
    if pp:
        hs = pp["horizons"]
        lines += ["", PERFECT_PHYSICS_CAPTION[0].upper() + PERFECT_PHYSICS_CAPTION[1:] + ":", "",
                  "| family | physics | " + " | ".join(f"h={h}" for h in hs) + " | mean |",
                  "|---|---|" + "---:|" * (len(hs) + 1)]
        lines += [f"| {fam} | {PERFECT_PHYSICS_ROWS[key]} | " + " | ".join(_fmt(x) for x in d)
                  + " |" for fam, rows in pp["families"].items() for key, d in rows.items()]
    return lines


def write_summary(run_dir: Path, s: dict[str, Any]) -> None:
    """``summary.json`` and ``summary.md``; a failed write raises ``OSError`` naming the file."""
    folder = RunFolder(run_dir)
    with writing(folder.summary_json):
        folder.summary_json.write_text(json.dumps(s, indent=2) + "\n")
    with writing(folder.summary_md):
        folder.summary_md.write_text(format_markdown(s))


# -- adaptation curve (evaluate and the end of train_online) ------------------------------------
def curve_report(
    results: list[Any], *, step: int, checkpoint: str, data: str, horizons: list[int]
) -> dict[str, Any]:
    """JSON-able adaptation curve from ``agent.adaptation_curve`` results."""
    rows = []
    for r in results:
        rows.append({
            "n": int(r.n),
            "d_shift": _f(r.d_shift),
            "d_shift_per_h": [_f(x) for x in r.d_shift_per_h],
            "d_base": _f(r.d_base),
            "d_base_per_h": [_f(x) for x in r.d_base_per_h],
            "sigma_embed": _f(r.sigma_embed),
            "excluded": int(r.excluded),
        })
    return {"checkpoint": checkpoint, "step": step, "data": data, "horizons": horizons,
            "curve": rows}


def format_curve(rep: dict[str, Any]) -> str:
    hs = rep["horizons"]
    head = ["n", "D_shift", *[f"h={h}" for h in hs], "D_base", "sigma_embed", "excluded"]
    body = []
    for r in rep["curve"]:
        body.append([str(r["n"]), _fmt(r["d_shift"]), *[_fmt(x) for x in r["d_shift_per_h"]],
                     _fmt(r["d_base"]), _fmt(r["sigma_embed"]), str(r["excluded"])])
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in [head, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
