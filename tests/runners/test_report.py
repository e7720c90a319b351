"""The report: aggregation of run folders, the paper's statistics, figures, regeneration."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import env
from agent.checkpoint import learner_from_checkpoint as checkpoint_learner
from runners import study
from runners.online.recorder import Recorder
from runners.studies import analysis, runs, stats, sweep

# Peak D_shift^50 per (track, seed): the paper's per-seed numbers where it gives them.
PEAKS = {
    "A": {42: 0.8000, 43: 0.8159, 44: 0.8108},
    "B": {42: 0.8217, 43: 0.8249, 44: 0.8248},
    "C": {42: 0.7776, 43: 0.7931, 44: 0.7838},
}
STEPS = (10, 20, 30, 40)


def make_run(root: Path, track: str, seed: int, peak: float, peak_at: int = 2,
             finished: bool = True) -> Path:
    """A run folder with evaluations at STEPS whose D_shift^50 bottoms out at ``peak``."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"track": track, "seed": seed, "steps": 40,
                                                  "agent": {"lambda_reg": 0.05}}))
    rec = Recorder(root)
    for i, step in enumerate(STEPS):
        d50 = peak + 0.01 * abs(i - peak_at)  # V shape: lowest at index peak_at
        rec.append_eval(step=step, ns=[0, 10, 50], d_shift=[1.0, 0.9, d50],
                        d_shift_per_h=[[d50] * 3] * 3, d_base=0.5, d_base_per_h=[0.5] * 3,
                        sigma_embed=0.40 + 0.01 * i, excluded=0, horizons=[5, 10, 20],
                        sigma_z=0.6, sigma_target=0.6)
    done = 40 if finished else 20
    (root / "summary.json").write_text(json.dumps(
        {"steps": 40, "steps_done": done, "stopped": None if finished else "PAUSE file"}))
    return root


def test_load_run_finds_peak_final_and_sigma(tmp_path):
    r = runs.load_run(make_run(tmp_path / "r", "C", 42, 0.7776), {"track": "C", "seed": "42"})
    assert r is not None and r.finished
    assert r.peak == pytest.approx(0.7776, abs=1e-6)
    assert r.peak_step == 30
    assert r.sigma_at_peak == pytest.approx(0.42, abs=1e-6)
    assert r.final == pytest.approx(0.7876, abs=1e-6)  # one step after the peak
    assert r.final_step == 40
    assert r.settling == pytest.approx(0.01, abs=1e-6)
    assert runs.load_run(tmp_path / "missing") is None


def test_by_track_reproduces_the_papers_table_from_its_own_seeds(tmp_path):
    recs = [runs.load_run(make_run(tmp_path / f"{t}{s}", t, s, p))
            for t, seeds in PEAKS.items() for s, p in seeds.items()]
    tracks = runs.by_track(recs)
    assert list(tracks) == ["A", "B", "C"]
    c = tracks["C"].peak
    assert (round(c.mean, 4), round(c.std, 4)) == (0.7848, 0.0078)
    assert (c.ci_low, c.ci_high) == pytest.approx((0.7776, 0.7931), abs=1e-6)
    assert round(tracks["A"].peak.mean, 4) == 0.8089
    d, oc = runs.pre_registered(tracks)
    assert d == pytest.approx(stats.delta(tracks["B"].peak.mean, c.mean))
    assert oc == "C"


def test_paper_study_pairs_the_delta_seed_by_seed_with_its_t_interval(tmp_path):
    """study paper's reading of the pre-registration: delta = (D_B - D_C) / D_B within each seed
    both tracks ran, its 95% t-interval over those seeds, the outcome by the interval."""
    from scipy.stats import t as student_t

    from runners.studies import paper

    recs = [runs.load_run(make_run(tmp_path / f"{t}{s}", t, s, p))
            for t, seeds in PEAKS.items() for s, p in seeds.items()]
    recs.append(runs.load_run(make_run(tmp_path / "C45", "C", 45, 0.70)))  # no B: not paired
    tracks = runs.by_track(recs)
    per_seed = {s: (PEAKS["B"][s] - PEAKS["C"][s]) / PEAKS["B"][s] for s in (42, 43, 44)}
    iv = paper.paired(tracks, "peak")
    assert iv["seeds"] == 3 and set(iv["per_seed"]) == {"42", "43", "44"}
    assert [iv["per_seed"][str(s)] for s in (42, 43, 44)] == pytest.approx(list(per_seed.values()), abs=1e-6)
    x = np.array(list(per_seed.values()))
    half = student_t.ppf(0.975, 2) * x.std(ddof=1) / np.sqrt(3)
    assert (iv["low"], iv["high"]) == pytest.approx((x.mean() - half, x.mean() + half), abs=1e-6)  # float32 records
    final = paper.paired(tracks, "final")  # each run's last evaluation: its peak + 0.01
    assert final["per_seed"]["42"] == pytest.approx((0.8317 - 0.7876) / 0.8317, abs=1e-6)
    lines = paper.paired_lines(tracks)
    assert lines[2] == (f"- peak: {100 * iv['mean']:+.2f}% [{100 * iv['low']:+.2f}%, "
                        f"{100 * iv['high']:+.2f}%] over 3 seeds (bootstrap "
                        f"[{100 * iv['boot_low']:+.2f}%, {100 * iv['boot_high']:+.2f}%]): "
                        f"{stats.answer(iv['low'], iv['high'])}")


def test_group_table_pools_seeds(tmp_path):
    recs = []
    for lam, base in (("0.05", 0.78), ("0.1", 0.81)):
        for s in (1, 2):
            run = make_run(tmp_path / f"l{lam}s{s}", "C", s, base + 0.002 * s)
            recs.append(runs.load_run(run, {"track": "C", "seed": str(s), "lambda_reg": lam}))
    rows = runs.group_table(recs, ["lambda_reg"])
    assert [r["lambda_reg"] for r in rows] == ["0.05", "0.1"]
    assert rows[0]["runs"] == 2 and rows[0]["peak"].n == 2
    assert rows[0]["peak"].mean == pytest.approx(0.783, abs=1e-6)
    md = sweep.group_table_markdown(rows, ["lambda_reg"])
    assert "| 0.1 | 2 (2) | 0.8130 +- 0.0014" in md


def _reproduction_tree(out: Path, steps: int = 40, unfinished: str | None = None) -> None:
    group = out / "runs" / f"tiny-{steps}"
    for t, seeds in PEAKS.items():
        for s, p in seeds.items():
            name = f"track-{t}_seed-{s}"
            make_run(group / name, t, s, p, finished=name != unfinished)


def test_the_paper_studys_report_only_rebuilds_the_report_from_run_folders(tmp_path, capsys):
    out = tmp_path / "repro"
    _reproduction_tree(out, unfinished="track-B_seed-44")
    data = tmp_path / "data.zarr"
    data.mkdir()
    argv = ["--report-only", "--data", str(data), "--out", str(out), "--steps", "40",
            "--preset", "tiny", "--no-analysis"]
    assert study.main(["paper", *argv]) == 0
    md = (out / "report.md").read_text()
    # Per-seed rows, per-track rows beside the paper, delta and outcome.
    assert "| C | 42 | 0.7776 | 30 | 0.7876 | 40 | 0.4200 | 0.0100 |" in md
    assert "| C | 3 | 0.7848 +- 0.0078 | [0.7776, 0.7931] |" in md
    assert "0.7848 +- 0.0078 | [0.7776, 0.7931] | 0.4123 |" in md  # the paper's row
    delta = (np.mean(list(PEAKS["B"].values())) - np.mean(list(PEAKS["C"].values()))) / np.mean(
        list(PEAKS["B"].values()))
    assert f"| ours | {100 * delta:.2f}% | C: null result" in md
    assert "| paper | 4.74% | C: null result" in md
    assert "`runs/tiny-40/track-B_seed-44`" in md  # the unfinished run is named
    # Paired seed by seed, the t-interval over the three seeds.
    per = [(PEAKS["B"][s] - PEAKS["C"][s]) / PEAKS["B"][s] for s in (42, 43, 44)]
    half = 4.302652729749464 * np.std(per, ddof=1) / np.sqrt(3)  # t(0.975, 2)
    assert (f"- peak: +{100 * np.mean(per):.2f}% [+{100 * (np.mean(per) - half):.2f}%, "
            f"+{100 * (np.mean(per) + half):.2f}%] over 3 seeds") in md
    for fig in ("fig2_seed_bars.png", "fig3_trajectories.png", "sigma_embed.png"):
        png = out / "figures" / fig
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    payload = json.loads((out / "report.json").read_text())
    assert payload["outcome"] == "C" and len(payload["runs"]) == 9
    # Regeneration is deterministic (fixed bootstrap seed).
    assert study.main(["paper", *argv]) == 0
    assert (out / "report.md").read_text() == md


def test_report_only_with_ablations_fills_tables_3_and_4(tmp_path):
    out = tmp_path / "repro"
    _reproduction_tree(out, steps=40)
    group = out / "runs" / "tiny-60"
    make_run(group / "track-C_seed-42", "C", 42, 0.7776, peak_at=1)
    for seed, at in ((42, 8), (43, 8), (42, 10)):
        make_run(group / f"track-C_seed-{seed}_freeze_buffer_at-{at}_freeze_ema_at-{at}",
                 "C", seed, 0.79)
    make_run(group / "track-C_seed-42_lambda_reg-0.1", "C", 42, 0.8139)
    data = tmp_path / "d.zarr"
    data.mkdir()
    assert study.main(["paper", "--report-only", "--data", str(data), "--out", str(out),
                       "--steps", "40", "--preset", "tiny", "--no-analysis", "--ablations",
                       "--ablation-steps", "60", "--freeze-steps", "8", "10",
                       "--lambdas", "0.05", "0.1", "0.15"]) == 0
    md = (out / "report.md").read_text()
    assert "Table 3" in md and "Table 4" in md
    assert "| baseline (seed 42) | - | 0.7776 (20) | 0.7976 | +0.0200 |" in md
    assert "| freeze-8-rep2 (seed 43) | 8 |" in md
    assert "| 0.10 | 0.8139 (30) |" in md and "| 0.8139 | 0.8619 | 0.4661 |" in md
    assert "track-C_seed-42_lambda_reg-0.15" in md  # missing: listed, not invented
    assert (out / "figures" / "ablation_trajectories.png").stat().st_size > 5000


def test_effective_rank_and_attention_summaries():
    assert analysis.effective_rank(np.ones(8)) == pytest.approx(8.0)
    assert analysis.effective_rank(np.array([1.0, 0, 0])) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 4)) @ np.diag([1, 1, 1, 1e-6])
    assert analysis.effective_rank(analysis.singular_values(x)) == pytest.approx(3.0, abs=0.05)
    # 4 filled slots out of 6: ages 0..3 from the FIFO pointer; all weight on the newest.
    attn = np.zeros((2, 6))
    attn[:, 1] = 1.0
    world = np.array([0, 1, 1, 0, 0, 0])
    age = np.array([1, 0, 3, 2, 5, 4])
    filled = np.array([True, True, True, True, False, False])
    a = analysis.attention_by_origin(attn, world, age, filled)
    assert a["entries"] == 4 and a["shift_entries"] == 2 and a["shift_share"] == 0.5
    assert a["shift_mass"] == 1.0 and a["newest_mass"] == 1.0
    assert a["by_age"][0] == {"ages": [0, 10], "entries": 4, "mass": 1.0,
                              "per_entry_vs_uniform": 1.0}
    assert a["by_age_rank"] == [1.0, 0.0, 0.0, 0.0]
    assert a["entropy_norm"] == pytest.approx(0.0, abs=1e-9)


def _latents(checkpoint: Path, frames: np.ndarray) -> np.ndarray:
    """The online encoder's latents (M, latent) of frames (M, 1, 64, 64) under ``checkpoint``
    (float64)."""
    import torch

    learner = checkpoint_learner(checkpoint)
    with torch.no_grad():
        z = learner.encode(torch.as_tensor(np.ascontiguousarray(frames)))
    return z.double().numpy()


def test_the_paper_study_end_to_end_on_a_tiny_run_then_regenerates_without_rerunning(tmp_path, capsys):
    out = tmp_path / "repro"
    argv = ["--out", str(out), "--preset", "tiny", "--steps", "20", "--seeds", "1",
            "--tracks", "C", "--dataset-sizes", "40", "40", "--eval-every", "10",
            "--workers", "1", "--final-ns", "0", "10", "50"]
    assert study.main(["paper", *argv]) == 0
    run = out / "runs" / "tiny-20" / "track-C_seed-1"
    assert (out / "data" / "paper.zarr").is_dir()  # generated because --data was not given
    cfg = json.loads((run / "config.json").read_text())
    assert (cfg["protocol"]["source"], cfg["schedule"]["switches"], cfg["schedule"]["steps"]) == (
        "dataset", [], 20)
    assert (run / "checkpoints" / "best.pt").is_file()
    md = (out / "report.md").read_text()
    assert "| C | 1 |" in md and "needs B and C" in md
    # The deferred analyses ran on the real checkpoints (best and latest).
    cached = json.loads((out / "analysis" / "tiny-20" / "track-C_seed-1.json").read_text())
    test = env.open_dataset(out / "data" / "paper.zarr").split("shift", "test").load()["frames"]
    cap = cfg["agent"]["buffer_capacity"]
    for phase, checkpoint in (("peak", "best.pt"), ("final", "latest.pt")):
        # The effective rank, recomputed: the checkpoint's latents of every shift_test frame,
        # row-centred, their singular values s; exp of the entropy of s / sum(s).
        z = _latents(run / "checkpoints" / checkpoint, test.reshape(-1, *test.shape[2:]))
        s = np.linalg.svd(z - z.mean(0), compute_uv=False)
        p = s / s.sum()
        assert cached[phase]["samples"] == test.shape[0] * test.shape[1] == z.shape[0]
        erank = np.exp(-(p * np.log(p)).sum())
        assert cached[phase]["erank_latent"] == pytest.approx(erank, rel=1e-5)
        np.testing.assert_allclose(cached[phase]["spectrum_latent"], s / s[0], rtol=1e-4, atol=1e-6)
        # Attention with the 50 shift-world transitions D_shift^50 uses added: they fill the
        # whole memory (50 > capacity), so every entry is from the shift world and all the
        # attention is on it; the mean weights of the entries, newest first, sum to one.
        att = cached[phase]["attention"]
        assert (att["entries"], att["shift_entries"], att["shift_share"]) == (cap, cap, 1.0)
        assert att["shift_mass"] == pytest.approx(1.0, abs=1e-6)
        assert len(att["by_age_rank"]) == cap
        assert sum(att["by_age_rank"]) == pytest.approx(1.0, abs=1e-6)
        assert att["newest_mass"] == att["by_age_rank"][0]
    assert [p["n"] for p in cached["peak"]["adaptation_curve"]] == list(analysis.ADAPT_NS)
    for fig in ("svd_spectra.png", "attention_by_age.png", "adaptation_curve.png"):
        assert (out / "figures" / fig).stat().st_size > 5000
    capsys.readouterr()
    # Again: the finished run is skipped, the analyses come from the cache, same report.
    stamp = (run / "summary.json").stat().st_mtime_ns
    assert study.main(["paper", *argv]) == 0
    assert "skipped track-C_seed-1: already finished" in capsys.readouterr().out
    assert (run / "summary.json").stat().st_mtime_ns == stamp
    assert (out / "report.md").read_text() == md


def test_collapse_guard_skips_low_sigma_evaluations_for_the_peak(tmp_path):
    """A low D at an evaluation whose sigma_embed is below the guard is not the peak."""
    run = make_run(tmp_path / "r", "C", 42, peak=0.80, peak_at=2)
    # sigma_embed at the four evaluations is 0.40, 0.41, 0.42, 0.43; guard 0.415 leaves out
    # the first two, so the lowest eligible D (index 2, the V's bottom) is still the peak ...
    rec = runs.load_run(run, min_sigma=0.415)
    assert (rec.peak_step, rec.excluded_by_guard) == (30, 2)
    # ... and a guard above every sigma falls back to all evaluations.
    assert runs.load_run(run, min_sigma=0.9).peak_step == 30
    # Move the bottom of the V into the guarded region: the peak moves to the best eligible.
    run2 = make_run(tmp_path / "r2", "C", 42, peak=0.80, peak_at=0)
    plain = runs.load_run(run2)
    guarded = runs.load_run(run2, min_sigma=0.415)
    assert (plain.peak_step, plain.peak) == (10, pytest.approx(0.80))
    assert (guarded.peak_step, guarded.peak) == (30, pytest.approx(0.82))
    assert guarded.excluded_by_guard == 2 and plain.excluded_by_guard == 0
