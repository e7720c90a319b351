"""The analyses the paper deferred, on a run's ``best.pt`` (the peak) and ``latest.pt`` (the end)
on the shift test split: SVD spectra and effective rank (``exp(H(p))``, ``p = s / sum(s)``: Roy &
Vetterli, 2007), buffer attention by world and age, the adaptation curve (docs/reproduce.md,
"The deferred analyses"). Results are cached per checkpoint (``<cache>/<run>.json``, keyed by
the checkpoint's size and modification time) so rebuilding a report does not recompute them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runners.online.config import HEADLINE_N
from runners.online.rundir import RunFolder
from runners.studies.stats import finite_mean, group
from runners.style import TRACK_COLORS, num, pyplot, save_figure, table

AGE_BINS = ((0, 10), (10, 50), (50, 100), (100, 256))  # [lo, hi) in entries, 0 = newest
ADAPT_NS = (0, 10, 25, 50, 100, 256)
N_MEMORY = HEADLINE_N  # the shift-world transitions pushed for the analyses


# -- pure numerics ---------------------------------------------------------------------------
def singular_values(x: np.ndarray) -> np.ndarray:
    """Singular values of the row-centred matrix ``x`` (N, D), descending."""
    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=0, keepdims=True)
    return np.linalg.svd(x, compute_uv=False)


def effective_rank(s: np.ndarray) -> float:
    """``exp`` of the entropy of the normalised singular values (1 .. len(s)); 0 for all-zero."""
    s = np.asarray(s, dtype=np.float64)
    total = s.sum()
    if total <= 0:
        return 0.0
    p = s[s > 0] / total
    return float(np.exp(-(p * np.log(p)).sum()))


def attention_by_origin(attn: np.ndarray, world: np.ndarray, age: np.ndarray,
                        filled: np.ndarray) -> dict[str, Any]:
    """Summaries of attention weights over buffer slots.

    attn (B, cap) rows summing to 1 over filled slots; world, age (cap,) ints; filled (cap,) bool.
    Returns the mean mass on shift-world entries beside their share of the buffer, the mean
    mass and per-entry weight (relative to uniform 1/n) per age bin, and the normalised entropy.
    """
    attn = np.asarray(attn, dtype=np.float64)[:, filled]  # (B, n)
    world, age = np.asarray(world)[filled], np.asarray(age)[filled]
    n = attn.shape[1]
    if n == 0:
        return {"entries": 0}
    mass = attn.mean(axis=0)  # (n,) mean weight per entry
    shift = world == 1
    bins = []
    for lo, hi in AGE_BINS:
        sel = (age >= lo) & (age < hi)
        if sel.any():
            bins.append({"ages": [lo, hi], "entries": int(sel.sum()),
                         "mass": float(mass[sel].sum()),
                         "per_entry_vs_uniform": float(mass[sel].mean() * n)})
    ent = -(attn * np.log(np.clip(attn, 1e-30, None))).sum(axis=1)
    return {
        "entries": int(n),
        "shift_entries": int(shift.sum()),
        "shift_share": float(shift.mean()),
        "shift_mass": float(mass[shift].sum()),
        "newest_mass": float(mass[age == 0].sum()),
        "max_weight": float(attn.max(axis=1).mean()),
        "entropy_norm": float(ent.mean() / math.log(n)) if n > 1 else 1.0,
        "by_age": bins,
        "by_age_rank": mass[np.argsort(age)].tolist(),  # mean weight, newest first
    }


# -- on a checkpoint ---------------------------------------------------------------------------
def load_eval_frames(data: str | Path) -> dict[str, np.ndarray]:
    """``shift_train``, ``shift_test``, ``base_test`` frames (N, 21, 1, 64, 64) uint8."""
    import env

    ds = env.open_dataset(data)
    return {f"{world}_{split}": ds.split(world, split).load()["frames"]
            for world, split in (("shift", "train"), ("shift", "test"), ("base", "test"))}


def _encode(learner: Any, frames: np.ndarray, chunk: int = 512) -> Any:
    """Online-encoder latents of frames (M, 1, 64, 64) uint8 -> (M, latent) float32 tensor."""
    import torch

    return torch.cat([learner.encode(torch.as_tensor(np.ascontiguousarray(frames[i:i + chunk])))
                      for i in range(0, frames.shape[0], chunk)])


def analyse_checkpoint(checkpoint: str | Path, frames: Mapping[str, np.ndarray],
                       n: int = N_MEMORY, curve: bool = False) -> dict[str, Any]:
    """SVD, attention (and optionally the adaptation curve) for one checkpoint of one run."""
    import torch

    from agent.checkpoint import learner_from_checkpoint
    from agent.evaluation import shift_transitions, with_transitions

    learner = learner_from_checkpoint(checkpoint)
    test = frames["shift_test"]  # (N, 21, 1, 64, 64)
    with torch.no_grad():
        z = _encode(learner, test.reshape(-1, *test.shape[2:]))  # (N * 21, latent)
        pairs = shift_transitions(learner, frames["shift_train"], n)
        buffer = with_transitions(learner.buffer, pairs, n)
        with learner.spec.autocast():
            mod, agg = learner.predict(z, buffer)
    s_lat = singular_values(z.numpy())
    s_pred = singular_values(mod.pred.float().numpy())
    out: dict[str, Any] = {
        "step": int(learner.step), "samples": int(z.shape[0]),
        "erank_latent": effective_rank(s_lat), "erank_pred": effective_rank(s_pred),
        "spectrum_latent": (s_lat / s_lat[0]).tolist() if s_lat[0] > 0 else s_lat.tolist(),
        "spectrum_pred": (s_pred / s_pred[0]).tolist() if s_pred[0] > 0 else s_pred.tolist(),
        "sigma_embed": float(mod.pred.float().std(dim=0).mean()),
    }
    if agg is not None:
        age = ((buffer.ptr - 1 - torch.arange(buffer.capacity)) % buffer.capacity).numpy()
        out["attention"] = attention_by_origin(agg.attn.float().numpy(), buffer.shifted.numpy(),
                                               age, buffer.mask().numpy())
    if curve:
        out["adaptation_curve"] = _adaptation_curve(learner, frames)
    return out


def _adaptation_curve(learner: Any, frames: Mapping[str, np.ndarray]) -> list[dict[str, float]]:
    from agent.evaluation import EvalData, adaptation_curve

    data = EvalData(frames["shift_train"], frames["shift_test"], frames["base_test"])
    return [{"n": int(r.n), "d_shift": float(r.d_shift), "d_base": float(r.d_base)}
            for r in adaptation_curve(learner, data, ns=ADAPT_NS)]


def analyse_run(run_dir: str | Path, frames: Callable[[], Mapping[str, np.ndarray]],
                cache: str | Path) -> dict[str, Any] | None:
    """Peak (``best.pt``) and final (``latest.pt``) analyses of one run, cached in ``cache``;
    ``frames()`` (the evaluation frames) is called only when the cache is stale."""
    run_dir = Path(run_dir)
    folder = RunFolder(run_dir)
    ckpts = {k: p for k, p in (("peak", folder.best), ("final", folder.latest)) if p.is_file()}
    if not ckpts:
        return None
    cache_file = Path(cache) / f"{run_dir.name}.json"
    stamps = {k: [p.stat().st_size, p.stat().st_mtime] for k, p in ckpts.items()}
    cached = folder.read_json(cache_file)
    if cached is not None and cached.get("stamps") == stamps:
        return cached
    result: dict[str, Any] = {"run": run_dir.name, "stamps": stamps}
    for key, path in ckpts.items():
        result[key] = analyse_checkpoint(path, frames(), curve=(key == "peak"))
    summary = folder.read_summary() or {}
    if summary.get("adaptation_curve"):
        result["final_curve"] = summary["adaptation_curve"]
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    cache_file.write_text(json.dumps(result) + "\n")
    return result


def analyse_runs(records: Sequence[Any], data: str | Path, cache: str | Path) -> dict[str, Any]:
    """Analyses of every run (``runs.RunRecord``), keyed by run name, with track and seed; the
    evaluation frames read once, and only when some checkpoint is not cached yet."""
    loaded: dict[str, np.ndarray] = {}

    def frames() -> Mapping[str, np.ndarray]:
        if not loaded:
            loaded.update(load_eval_frames(data))
        return loaded

    out: dict[str, Any] = {}
    for rec in records:
        cache_dir = Path(cache) / Path(rec.run_dir).parent.name
        res = analyse_run(rec.run_dir, frames, cache_dir)
        if res is not None:
            out[rec.name] = {"track": rec.track, "seed": rec.seed, **res}
    return out


# -- the report section ------------------------------------------------------------------------
#: Each checkpoint the section reads, and its line style in the figures.
PHASES = (("peak", "-"), ("final", "--"))


def _curve(res: Mapping[str, Any], phase: str) -> list[dict[str, float]]:
    """A run's adaptation curve at the peak checkpoint, or at the end of the run (its summary's)."""
    curve = res["peak"].get("adaptation_curve") if phase == "peak" else res.get("final_curve")
    return curve or []


def _head_mean(rows: Sequence[Sequence[float]]) -> np.ndarray:
    """The mean of rows of different lengths over the length they share."""
    k = min(len(x) for x in rows)
    return np.mean([x[:k] for x in rows], axis=0)


def _svd_lines(tracks: Mapping[str, list[dict[str, Any]]], figs: Path) -> list[str]:
    """The section's opening and its SVD table (effective ranks, sigma_embed) per track; draws
    the spectra's figure."""
    rows = []
    for track, rs in tracks.items():
        def m(phase: str, key: str, digits: int = 2, rs: list[dict[str, Any]] = rs) -> str:
            return num(finite_mean([r[phase][key] for r in rs if phase in r]), digits)

        rows.append([track, len(rs), m("peak", "erank_latent"), m("final", "erank_latent"),
                     m("peak", "erank_pred"), m("final", "erank_pred"),
                     m("peak", "sigma_embed", 4), m("final", "sigma_embed", 4)])
    _fig_spectra(tracks, figs / "svd_spectra.png")
    return ["## Deferred analyses on the saved checkpoints", "",
            "Peak = `checkpoints/best.pt` (lowest D_shift^50), final = `checkpoints/latest.pt`. "
            "Shift test split; effective rank = exp(entropy of the normalised singular values) "
            "of the centred matrix (max = latent dimension).", "",
            "### SVD: effective rank of encoder latents and predictor outputs", "",
            *table(["track", "runs", "latents: peak", "latents: final", "predictions: peak",
                    "predictions: final", "sigma_embed: peak", "sigma_embed: final"], rows),
            "", "![SVD spectra](figures/svd_spectra.png)", ""]


def _attention_row(track: str, phase: str, a: Sequence[Mapping[str, Any]]) -> list[str]:
    """One row of the attention table: a track's attention at one phase, mean over its runs."""
    def mean(key: str) -> float:
        return finite_mean([x[key] for x in a])

    ages = [num(finite_mean([b["per_entry_vs_uniform"] for x in a for b in x["by_age"]
                             if b["ages"] == [lo, hi]]), 2) for lo, hi in AGE_BINS]
    return [track, phase, f"{mean('entries'):.0f} ({mean('shift_entries'):.0f})",
            num(mean("shift_share")), num(mean("shift_mass")), *ages, num(mean("entropy_norm"))]


def _attention_lines(tracks: Mapping[str, list[dict[str, Any]]], figs: Path) -> list[str]:
    """The attention table per track and phase (none without attention); draws its figure."""
    att = {t: rs for t, rs in tracks.items() if any("attention" in r.get("peak", {}) for r in rs)}
    if not att:
        return []
    rows = []
    for track, rs in att.items():
        for phase, _ in PHASES:
            a = [r[phase]["attention"] for r in rs if "attention" in r.get(phase, {})]
            if a:
                rows.append(_attention_row(track, phase, a))
    _fig_attention(att, figs / "attention_by_age.png")
    return ["### Attention over buffer entries during shift-world inference", "",
            f"Buffer = the checkpoint's training buffer + {N_MEMORY} pushed shift-world "
            "transitions. Shift mass = mean attention on shift-world entries (uniform "
            "attention would give their share); per-entry weight by age relative to "
            "uniform (1.0 = uniform; age 0 = newest).", "",
            *table(["track", "phase", "entries (shift)", "shift share", "shift mass",
                    *(f"age {lo}-{hi - 1}" for lo, hi in AGE_BINS), "entropy / log n"], rows),
            "", "![attention by entry age](figures/attention_by_age.png)", ""]


def _curve_lines(tracks: Mapping[str, list[dict[str, Any]]], figs: Path) -> list[str]:
    """The adaptation-curve table per track, peak and final (none without curves); draws its
    figure."""
    curves = {t: rs for t, rs in tracks.items()
              if any("adaptation_curve" in r.get("peak", {}) for r in rs)}
    if not curves:
        return []
    rows = []
    for track, rs in curves.items():
        for phase, _ in PHASES:
            vals = [num(finite_mean([p["d_shift"] for r in rs for p in _curve(r, phase)
                                     if int(p["n"]) == n]), 4) for n in ADAPT_NS]
            if any(v != "-" for v in vals):
                rows.append([track, phase, *vals])
    _fig_curves(curves, figs / "adaptation_curve.png")
    return ["### Adaptation curve: D_shift^n over n memories (mean over seeds)", "",
            *table(["track", "checkpoint", *(f"n={n}" for n in ADAPT_NS)], rows),
            "", "![adaptation curve](figures/adaptation_curve.png)", ""]


def report_section(analyses: Mapping[str, Any], figs: Path) -> list[str]:
    """Markdown lines (and figures in ``figs``) for the deferred analyses."""
    tracks = dict(sorted(group(analyses.values(), lambda res: str(res["track"])).items()))
    return [*_svd_lines(tracks, figs), *_attention_lines(tracks, figs),
            *_curve_lines(tracks, figs)]


def _fig_spectra(tracks: Mapping[str, list[dict[str, Any]]], path: Path) -> None:
    fig, axes = pyplot().subplots(1, 2, figsize=(11, 4))
    for ax, key, title in ((axes[0], "spectrum_latent", "encoder latents"),
                           (axes[1], "spectrum_pred", f"predictor outputs (n = {N_MEMORY})")):
        for track, rs in tracks.items():
            for phase, ls in PHASES:
                specs = [r[phase][key] for r in rs if phase in r]
                if specs:
                    ax.semilogy(_head_mean(specs), ls=ls, color=TRACK_COLORS.get(track),
                                label=f"{track} {phase}")
        ax.set(title=title, xlabel="singular value index", ylabel="s_i / s_1")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    save_figure(fig, path)


def _fig_attention(tracks: Mapping[str, list[dict[str, Any]]], path: Path) -> None:
    fig, ax = pyplot().subplots(figsize=(7, 4))
    for track, rs in tracks.items():
        for phase, ls in PHASES:
            rows = [r[phase]["attention"]["by_age_rank"] for r in rs
                    if "attention" in r.get(phase, {})]
            if rows:
                mean = _head_mean(rows)
                ax.plot(mean * len(mean), ls=ls, color=TRACK_COLORS.get(track),
                        label=f"{track} {phase}")  # relative to uniform
    ax.axhline(1.0, color="grey", ls=":", lw=1)
    ax.axvline(N_MEMORY - 0.5, color="red", ls=":", lw=1, label="pushed shift entries | older")
    ax.set(xlabel="entry age (0 = newest)", ylabel="mean attention weight x n (1 = uniform)",
           yscale="log")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def _fig_curves(tracks: Mapping[str, list[dict[str, Any]]], path: Path) -> None:
    fig, ax = pyplot().subplots(figsize=(7, 4))
    for track, rs in tracks.items():
        for phase, ls in PHASES:
            pts = [p for r in rs for p in _curve(r, phase)]
            if not pts:
                continue
            ns = sorted({int(p["n"]) for p in pts})
            ys = [finite_mean([p["d_shift"] for p in pts if int(p["n"]) == n]) for n in ns]
            ax.plot([max(n, 0.5) for n in ns], ys, ls=ls, marker="o", color=TRACK_COLORS.get(track),
                    label=f"{track} {phase}")
    ax.set(xscale="log", xlabel="shift-world memories n (0 plotted at 0.5)", ylabel="D_shift^n")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save_figure(fig, path)
