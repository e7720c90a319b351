"""Figures of one run, read from its folder (``run.zarr`` + ``config.json``), written as PNGs.

Every figure has a title, labelled axes and the gravity switches drawn as annotated vertical
lines, so a person understands the run without reading code::

    make_figures("runs/my-run")   # -> runs/my-run/figures/*.png
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes

from agent import tracks
from agent.objective import head_metric_name
from runners.online.bounds import POOLED
from runners.online.config import RunConfig, flat
from runners.online.recorder import Recorder
from runners.online.rundir import RunFolder
from runners.online.switch import Switch, switches_from_json
from runners.style import MEMORY_LABELS, pyplot, save_figure

plt = pyplot()
PHASE_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def phase_spans(starts: Sequence[int], n: int) -> list[tuple[int, int]]:
    """The steps ``[a, b)`` of each phase of a run of ``n`` steps (``starts``: the switches)."""
    edges = [0, *[s for s in starts if 0 < s < n], n]
    return list(zip(edges[:-1], edges[1:], strict=True))


def rolling_by_phase(values: np.ndarray, window: int, starts: Sequence[int]) -> np.ndarray:
    """Trailing mean over ``window`` steps that restarts at every phase start (NaNs skipped)."""
    out = np.full(values.shape, np.nan, dtype=np.float64)
    for a, b in phase_spans(starts, len(values)):
        seg = values[a:b].astype(np.float64)
        ok = np.isfinite(seg)
        c = np.concatenate([[0.0], np.cumsum(np.where(ok, seg, 0.0))])
        n = np.concatenate([[0], np.cumsum(ok)])
        i = np.arange(1, len(seg) + 1)
        lo = np.maximum(i - window, 0)
        cnt = n[i] - n[lo]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[a:b] = np.where(cnt > 0, (c[i] - c[lo]) / np.maximum(cnt, 1), np.nan)
    return out


def _over_steps(ax: Axes, cfg: dict[str, Any], title: str, ylabel: str,
                legend: str | None = None, fontsize: int = 8) -> None:
    """A panel over the steps of the run: its labels, title and legend (at ``legend``), and the
    switches as annotated vertical lines."""
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title, pad=14)
    switches: Sequence[Switch] = cfg.get("switches") or []
    for i, sw in enumerate(switches):
        ax.axvline(sw.step, color="k", ls="--", lw=1.0, alpha=0.7)
        mode = f", {cfg.get('after_switch', '')} mode" if i == 0 else ""
        ax.annotate(f"{sw.label()}{mode}", xy=(sw.step, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(0, 2), textcoords="offset points", fontsize=8, ha="center",
                    va="bottom", color="0.25")
    if legend:
        ax.legend(loc=legend, fontsize=fontsize)


def _load(run_dir: Path) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
    from runners.online.command import config_from_dict

    folder = RunFolder(run_dir)
    cfg = flat(folder.read_config())  # by field name
    cfg["switches"] = switches_from_json(cfg.get("switches"))
    cfg["run"] = config_from_dict(folder.read_config())  # the run's RunConfig, its protocol asked
    rec = Recorder(folder, read_only=True)
    return cfg, rec.read_metrics(), rec.read_eval()


def _first_switch(m: dict[str, np.ndarray], cfg: dict[str, Any]) -> int | None:
    """The step of the first switch, where the run recorded the stream error after it."""
    switches, e = cfg.get("switches") or [], m.get("stream/norm_error")
    return switches[0].step if switches and e is not None and switches[0].step < len(e) else None


def _phase_starts(cfg: dict[str, Any]) -> list[int]:
    return [sw.step for sw in cfg.get("switches") or []]


def plot_surprisal(ax: Axes, m: dict[str, np.ndarray], cfg: dict[str, Any]) -> None:
    step = m["step"]
    s = m.get("memory/surprisal")
    if s is None:
        return
    ax.plot(step, s, lw=0.6, color="#1f77b4", label="surprisal s_t")
    thr = m.get("memory/threshold")
    if thr is not None:
        ax.plot(step, thr, lw=1.0, color="#ff7f0e", label="threshold mu + kappa sigma")
    b = m.get("memory/boundary")
    if b is not None:
        ev = step[np.nan_to_num(b) > 0.5]
        if len(ev):
            ax.plot(ev, np.zeros(len(ev)), "|", color="#d62728", ms=12, mew=1.0,
                    label=f"boundary event ({len(ev)})", clip_on=False)
    ok = s[min(len(s) // 10, 100):]
    if np.isfinite(ok).any():
        hi = np.nanmax(ok)
        if thr is not None:
            hi = max(hi, np.nanmax(thr[min(len(s) // 10, 100):]))
        ax.set_ylim(0, float(hi) * 1.15)
    _over_steps(ax, cfg, "Surprisal, detector threshold and boundary events",
                "surprisal (latent error)", "upper right")


def plot_stream_error(ax: Axes, m: dict[str, np.ndarray], cfg: dict[str, Any]) -> None:
    step = m["step"]
    e = m.get("stream/norm_error")
    if e is None:
        return
    starts = _phase_starts(cfg)
    w = int(cfg.get("rolling_window", 100))
    roll = rolling_by_phase(e, w, starts)
    ax.plot(step, e, lw=0.4, color="0.75", label="per step")
    run: RunConfig = cfg["run"]
    for i, (a, b) in enumerate(phase_spans(starts, len(step))):
        ax.plot(step[a:b], roll[a:b], lw=1.6, color=PHASE_COLORS[i % len(PHASE_COLORS)],
                label=f"rolling mean ({w} steps), {run.phase_label(a)}")
    ax.axhline(1.0, color="k", lw=0.8, ls=":", label='1.0 = "no change"')
    # Ignore the first window of the run (random init) when choosing the y range.
    tail = roll[min(2 * w, len(roll) // 4):]  # the window that still holds the first steps too
    top = np.nanmax(tail) if np.isfinite(tail).any() else 1.5
    ax.set_ylim(0, max(1.2, float(top) * 1.15))
    _over_steps(ax, cfg, "Rolling stream error per phase (lower is better)",
                "normalised error on the stream", "lower left")


def plot_after_switch(ax: Axes, m: dict[str, np.ndarray], cfg: dict[str, Any]) -> None:
    """The stream error after the first switch by steps since it (per step, a 25-step rolling
    mean, the summary's bins), against the error just before it, and the memory per stream."""
    from runners.online.summary import since_switch

    e, fs = m.get("stream/norm_error"), _first_switch(m, cfg)
    if e is None or fs is None:
        ax.text(0.5, 0.5, "no switch in this run", ha="center", transform=ax.transAxes)
        return
    after = e[fs:].astype(np.float64)
    x = np.arange(len(after))
    w = int(cfg.get("rolling_window", 100))
    before = e[max(0, fs - w):fs]
    before = before[np.isfinite(before)]
    ax.plot(x, after, lw=0.4, color="0.75", label="per step")
    ax.plot(x, rolling_by_phase(after, 25, []), lw=1.4, color=PHASE_COLORS[1],
            label="rolling mean (25 steps)")
    for i, r in enumerate(since_switch(e, fs)):
        if r["mean"] is not None:
            ax.hlines(r["mean"], r["from"], r["to"], color="k", lw=2.2,
                      label="mean per bin (summary)" if i == 0 else None)
    if before.size:
        ax.axhline(float(before.mean()), color=PHASE_COLORS[0], ls="--", lw=1.2,
                   label=f"before the switch (last {w} steps)")
    ax.set_xscale("symlog", linthresh=10.0)
    ax.set_xlabel("steps since the switch (symlog)")
    ax.set_ylabel("normalised error on the stream")
    frozen = ", weights frozen" if cfg.get("after_switch") == "memory" else ""
    ax.set_title(f"After the switch ({cfg['switches'][0].label()}{frozen})", pad=14)
    finite = after[np.isfinite(after)]
    if finite.size:
        lo, hi = np.quantile(finite, [0.02, 0.98])
        ax.set_ylim(max(0.0, float(lo) - 0.25), float(hi) + 0.05)  # room for the legend below
    size = m.get("memory/buffer_size")
    handles, labels = ax.get_legend_handles_labels()
    if size is not None:
        ax2 = ax.twinx()
        ax2.plot(x, size[fs:], color="#2ca02c", lw=1.0, alpha=0.8, label="memory per stream")
        ax2.set_ylabel("memory entries (per stream)", color="#2ca02c")
        ax2.set_ylim(bottom=0)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, loc="lower right", fontsize=7, ncol=2)


def plot_d_curves(ax: Axes, ev: dict[str, np.ndarray], cfg: dict[str, Any]) -> None:
    if not ev:
        ax.text(0.5, 0.5, "no evaluation yet", ha="center", transform=ax.transAxes)
        return
    step, (shift, mem, base) = ev["step"], cfg["run"].protocol.names
    head = int(cfg.get("headline_n", 50))
    for j, n in enumerate(map(int, ev["ns"])):
        lw, alpha = (2.0, 1.0) if n == head else (1.0, 0.6)
        ax.plot(step, ev["d_shift"][:, j], "o-", ms=3, lw=lw, alpha=alpha,
                label=f"D_shift^{n} ({shift}, {n} {mem})")
    ax.plot(step, ev["d_base"], "s-", ms=3, color="k", lw=1.5, label=f"D_base ({base})")
    ax.axhline(1.0, color="k", lw=0.8, ls=":", label='1.0 = "no change"')
    _over_steps(ax, cfg, "D_shift and D_base over training (lower is better)",
                "normalised prediction error D", "best", 7)


MEMORY_STYLES = {"own": ("-", "o"), "same": ("--", "s"), "wrong": (":", "x")}
FAMILY_COLORS = {"switch": "k", "interp": "#1f77b4", "extrap": "#d62728"}


def plot_world_curves(ax: Axes, rep: dict[str, Any], cfg: dict[str, Any]) -> None:
    """D^n over n at the end: the switch world (own memory) and each held-out family's mean per
    memory source (own, same world, wrong world)."""
    curve = rep.get("curve") or []
    if curve:
        ax.plot([r["n"] for r in curve], [r["d_shift"] for r in curve], "o-", color="k", lw=2.0,
                label="switch world, own memory")
    held = rep.get("held_out") or {}
    ns = held.get("ns", [])
    for fam, mems in (held.get("families") or {}).items():
        for mem, d in mems.items():
            ls, mk = MEMORY_STYLES.get(mem, ("-", "."))
            ax.plot(ns, d, ls=ls, marker=mk, ms=4, lw=1.2, color=FAMILY_COLORS.get(fam, "0.4"),
                    label=f"{fam} worlds, {mem} memory")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("n = transitions of the world in memory (symlog)")
    ax.set_ylabel("normalised prediction error D^n")
    ax.set_title(f"Track {cfg.get('track')}, weights frozen: D^n over memory size (lower is better)",
                 pad=14)
    ax.legend(loc="best", fontsize=7)


#: plot_sigma's lines: (eval array, label, color); sigma_z and sigma_target where recorded.
SIGMA_LINES = (("sigma_embed", "sigma_embed: predictions", "#9467bd"),
               ("sigma_z", "sigma_z: online latents z_t", "#1f77b4"),
               ("sigma_target", "sigma_target: EMA target latents zbar_t", "#2ca02c"))


def plot_sigma(ax: Axes, ev: dict[str, np.ndarray], cfg: dict[str, Any]) -> None:
    """The spreads (mean per-dimension std over the evaluation's samples) of the predictions and
    of the input frames' latents, online and EMA target, at each evaluation."""
    if not ev:
        return
    for key, label, color in SIGMA_LINES:
        if key in ev:
            ax.plot(ev["step"], ev[key], "o-", ms=3, color=color, label=label)
    ax.set_ylim(bottom=0)
    _over_steps(ax, cfg, "Spread of predictions and latents (collapse -> 0)",
                "mean per-dim std across samples", "best", 7)


def plot_buffer(ax: Axes, m: dict[str, np.ndarray], cfg: dict[str, Any]) -> None:
    step = m["step"]
    size = m.get("memory/buffer_size")
    share = m.get("memory/shift_share")
    if size is None:
        return
    cap = cfg.get("buffer_capacity")
    ax.plot(step, size, color="#1f77b4", lw=1.5, label="buffer size")
    if cap:
        ax.axhline(cap, color="#1f77b4", ls=":", lw=0.8, label=f"capacity {cap}")
    _over_steps(ax, cfg, "Experience buffer: fill and share of shift-world entries",
                "entries in the experience buffer")
    ax.yaxis.label.set_color("#1f77b4")
    if share is not None:
        ax2 = ax.twinx()
        ax2.plot(step, share, color="#d62728", lw=1.5, label="shift-world share")
        ax2.set_ylabel("share of shift-world entries", color="#d62728")
        ax2.set_ylim(-0.02, 1.02)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)


def plot_delta(ax: Axes, m: dict[str, np.ndarray], cfg: dict[str, Any]) -> None:
    d = m.get("mod/delta_abs")
    if d is None:
        return
    ax.plot(m["step"], d, lw=0.8, color="#2ca02c")
    track = cfg.get("track", "C")
    what = tracks.track(track).generates
    _over_steps(ax, cfg, f"Track {track}: size of the experience-generated modulation ({what})",
                f"mean |{what}|")


def plot_losses(ax: Axes, m: dict[str, np.ndarray], cfg: dict[str, Any]) -> None:
    for k, c in (("loss/total", "k"), ("loss/pred", "#1f77b4"), ("loss/reg", "#ff7f0e")):
        if k in m:
            ax.plot(m["step"], m[k], lw=0.6, color=c, label=k)
    ax.set_yscale("log")
    _over_steps(ax, cfg, "Training losses (flat after the switch in memory mode: weights frozen)",
                "loss (log scale)", "upper right")


def make_figures(run_dir: str | Path) -> list[Path]:
    """Write the run's figures to ``<run_dir>/figures``: ``overview.png``, one page that tells
    the story (the stream error, after the switch, D over training, the surprisal and the
    boundary events, D^n over memory on held-out worlds, the buffer), and a figure each for
    what it leaves out (``sigma_embed``, ``losses``, ``lora_delta``); the paths written."""
    folder = RunFolder(run_dir)
    cfg, m, ev = _load(folder.root)
    out = folder.figures
    out.mkdir(parents=True, exist_ok=True)
    if len(m["step"]) == 0:
        return []
    rep = folder.read_json(RunFolder.curve_path(folder.latest))  # None: none written
    protocol = cfg["run"].protocol
    worlds_rep = rep if rep and rep.get("held_out") else None  # the held-out worlds' report
    panels: list[tuple[Any, dict[str, Any]]] = [(plot_stream_error, m)]
    if cfg.get("switches"):
        panels.append((plot_after_switch, m))
    panels += [(plot_d_curves, ev), (plot_surprisal, m)]
    if worlds_rep:  # the worlds protocol's story: D^n over memory on held-out worlds
        panels.append((plot_world_curves, worlds_rep))
    panels.append((plot_buffer, m))
    cols = 3 if len(panels) > 4 else 2
    fig, axes = plt.subplots(2, cols, figsize=(6 * cols, 7))
    for ax, (fn, data) in zip(axes.flat, panels, strict=False):
        fn(ax, data, cfg)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    sw = ", ".join(f"{s.label()} at step {s.step}" for s in cfg.get("switches") or []) or "no switch"
    fig.suptitle(f"Track {cfg.get('track')} ({cfg.get('preset')} preset, {protocol.where()}; {sw}, "
                 f"{cfg.get('after_switch')} mode after the switch", fontsize=11)
    written = [save_figure(fig, out / "overview.png")]
    singles = [("sigma_embed.png", plot_sigma, ev), ("losses.png", plot_losses, m)]
    delta = m.get("mod/delta_abs")
    if delta is not None and np.isfinite(delta).any():
        singles.append(("lora_delta.png", plot_delta, m))
    for name, fn, data in singles:
        fig, ax = plt.subplots(figsize=(8, 4))
        fn(ax, data, cfg)
        written.append(save_figure(fig, out / name))
    return written


# -- the floor, the memory and the ceiling (runners.online.bounds) -------------------------------
BOUND_STYLES = {"floor": ("#7f7f7f", "floor: track A (no memory)"),
                "ceiling": ("#2ca02c", "ceiling: the oracle (true physics)")}


def _after_switch_error(m: dict[str, np.ndarray], fs: int, name: str, window: int = 50,
                        before: int = 300) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(steps since the first switch ``fs``, from ``before`` steps ahead of it (negative), rolling
    mean of the stream error column ``name``, restarting at the switch)."""
    start = max(fs - before, 0)
    vals = np.asarray(m[name][start:], np.float64)
    rolling = rolling_by_phase(vals, window, [fs - start])
    rolling[~np.isfinite(vals)] = np.nan  # no window valid yet (a new episode): nothing to show
    return np.arange(len(vals)) - (fs - start), rolling


def bounds_figure(main: RunFolder, s: dict[str, Any]) -> Path:
    """figures/bounds.png: left, the stream error after the switch of the chosen track and of
    each head beside it (the same windows, the same memory, step by step); right, its held-out
    D^n over n for each memory source, between the floor's and the ceiling's (pooled
    families)."""
    b = s["bounds"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6))
    cfg, m, _ = _load(main.root)
    fs = _first_switch(m, cfg)
    if fs is not None:
        left.plot(*_after_switch_error(m, fs, "stream/norm_error"), lw=1.8, color=PHASE_COLORS[1],
                  label=f"track {b['track']}", zorder=3)  # fmt: skip
        for head in s["stream_error"].get("heads", {}):
            color = BOUND_STYLES["ceiling" if head == "oracle" else "floor"][0] \
                if head in ("A", "oracle") else None  # fmt: skip
            left.plot(*_after_switch_error(m, fs, head_metric_name(head)), lw=1.2, color=color,
                      label=tracks.head_label(head))
        left.axvline(0.0, color="black", lw=0.8, ls=":")
    left.set_xlabel("steps since the switch (before it, negative)")
    left.set_ylabel("normalised error on the stream (rolling mean, 50 steps)")
    left.set_title("Around the switch to a held-out world (weights frozen after it)", pad=10)
    left.legend(loc="best", fontsize=8)
    held = s["held_out"]
    ns = held["ns"]
    for mem, style in zip(held["memories"], ("-", "--", ":"), strict=False):
        fams = held["families"]
        d = np.mean([fams[f][mem] for f in fams], axis=0)
        right.plot(ns, d, style, marker="o", ms=4, lw=1.6, color=PHASE_COLORS[1],
                   label=f"track {b['track']}, {MEMORY_LABELS.get(mem, mem)}")
    for name in ("floor", "ceiling"):
        color, label = BOUND_STYLES[name]
        right.axhline(b[name]["d"][POOLED], color=color, lw=1.6, label=label)
    pp = b.get("perfect_physics")
    if pp and POOLED in pp["d"]["blind"]:
        right.axhline(pp["d"]["blind"][POOLED], color="k", ls=":", lw=1.4,
                      label="perfect world-blind physics in this latent")
    right.set_xscale("symlog", linthresh=1.0)
    right.set_xlim(left=0)
    right.set_xlabel("transitions in memory n (symlog)")
    right.set_ylabel("D^n on held-out worlds (lower is better)")
    right.set_title("Held-out worlds: memory between the floor and the ceiling", pad=10)
    right.legend(loc="best", fontsize=7)
    return save_figure(fig, main.figures / "bounds.png")
