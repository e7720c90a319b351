"""The held-out report's decoded predictions (runners.online.pixels, runners.online.strips)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from runners.online.events import ending_scalars
from runners.online.rundir import RunFolder
from tests.runners.cli_helpers import TINY_WORLDS, assert_events_are_the_store, cli, event_scalars

#: A tiny run whose floor and ceiling are heads on its settled latent.
TINY = [*(a for a in TINY_WORLDS if a != "--no-bounds"), "--settle", "0.5", "--set", "fit_batch=8",
        "--set", "fit_worlds=2"]  # fmt: skip
ROWS = {"decoded_true", "no_change", "own", "same", "wrong"}


def test_a_run_draws_what_each_learner_predicts_and_the_decoder_changes_nothing(
    tmp_path: Path,
) -> None:
    res = cli("train_online", *TINY, "--steps", "40", "--out", str(tmp_path), "--name", "on")
    assert res.returncode == 0, res.stderr
    run = tmp_path / "on"
    s = json.loads((run / "summary.json").read_text())
    px = s["held_out"]["pixels"]
    assert px["n"] == max(s["held_out"]["ns"]) and px["decoder"]["steps"] == 20
    assert px["decoder"]["frames"] == 1 * 128 * 8  # one drawn world: 16 a 1,000 steps
    k = len(px["horizons"])
    assert set(px["families"]) == {"interp", "extrap"}
    for rows in px["families"].values():
        assert set(rows) == ROWS
        for values in rows.values():  # per horizon, then their mean
            assert len(values) == k + 1 and abs(np.mean(values[:k]) - values[k]) < 1e-4
            assert all(0.0 <= v <= 36 * 2**0.5 for v in values)
    floor = s["held_out"]["heads"]["A"]["pixels"]  # the floor head's, by the run's decoder
    assert set(floor["families"]["interp"]) == {"own"}  # the truth the run's own, the same
    rows = s["bounds"]["pixels"]["rows"]
    assert rows["floor (track A)"]["interp"] == floor["families"]["interp"]["own"]
    assert rows["peer memory"]["interp"] == px["families"]["interp"]["same"]
    pooled = rows["ceiling (oracle)"]
    halves = zip(pooled["interp"], pooled["extrap"], strict=True)
    assert pooled["pooled"] == pytest.approx([(a + b) / 2 for a, b in halves], rel=1e-12)
    assert "where the decoded predictions put the digits at h=8" in res.stdout
    with np.load(RunFolder.strips_path(RunFolder(run).latest)) as strips:
        assert strips["interp/true"].shape == (3, k, 64, 64) and strips["interp/same"].dtype == np.uint8
        assert list(strips["horizons"]) == px["horizons"]
    assert (run / "figures" / "predictions.png").stat().st_size > 10_000
    # In TensorBoard: the run's steps, and at its last step its ending (the bounds' pixel rows
    # among its numbers) with the strips' figure.
    acc = assert_events_are_the_store(run)
    ending = ending_scalars(s)
    assert "pixels/h8/pooled/ceiling_oracle" in ending and "bounds/D^50/pooled/floor" in ending
    assert all(re.fullmatch(r"[\w.^/-]+", t) for t in ending), ending  # one word each
    for tag, value in ending.items():
        steps, got = event_scalars(acc, tag)
        assert list(steps) == [40] and got[0] == np.float32(value), tag
    assert "figures/predictions" in acc.Tags()["images"]
    # runners.evaluate draws the same on demand: the same checkpoint, the same numbers.
    ev = cli("evaluate", str(run), "--predictions", str(tmp_path / "p.png"),
             "--out", str(tmp_path / "p.json"))  # fmt: skip
    assert ev.returncode == 0, ev.stderr
    assert json.loads((tmp_path / "p.json").read_text())["held_out"]["pixels"] == px
    assert (tmp_path / "p.png").stat().st_size > 10_000 and (tmp_path / "p.strips.npz").is_file()

    # Without the decoder: the same learner, bit for bit, and the same D.
    res = cli("train_online", *TINY, "--steps", "40", "--decoder-steps", "0",
              "--out", str(tmp_path), "--name", "off")
    assert res.returncode == 0, res.stderr
    off = json.loads((tmp_path / "off" / "summary.json").read_text())
    assert off["held_out"]["pixels"] is None
    assert off["held_out"]["families"] == s["held_out"]["families"]
    assert not (tmp_path / "off" / "figures" / "predictions.png").exists()
    refused = cli("evaluate", str(tmp_path / "off"), "--predictions", str(tmp_path / "q.png"))
    assert refused.returncode == 2 and "--decoder-steps" in refused.stderr
    assert "Traceback" not in refused.stderr
    a, b = (torch.load(p / "checkpoints" / "latest.pt", weights_only=False)
            for p in (run, tmp_path / "off"))
    assert _same(a["learner"], b["learner"])  # weights, optimiser, memory, detector, step


def _same(x: object, y: object) -> bool:
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y, strict=True))
    if isinstance(x, torch.Tensor):
        return torch.equal(x, y)
    return x == y


def test_the_report_leaves_the_learner_and_the_generators_as_they_were(tmp_path: Path) -> None:
    from agent import Learner
    from runners.online.command import build_config

    cfg = build_config([*TINY_WORLDS, "--steps", "20"])
    learner = Learner(cfg.agent)
    evaluator = cfg.protocol.evaluator(cfg)
    before = learner.state_dict()
    rngs = torch.get_rng_state(), np.random.get_state()[1].copy()
    strips = tmp_path / "s.npz"
    px = evaluator.report(learner, cfg.schedule.final_ns, strips)["pixels"]
    assert _same(learner.state_dict(), before)
    assert all(p.grad is None for p in learner.nets.parameters())
    assert torch.equal(torch.get_rng_state(), rngs[0])
    assert np.array_equal(np.random.get_state()[1], rngs[1])
    again = evaluator.report(learner, cfg.schedule.final_ns)["pixels"]
    assert again == px  # deterministic
    # Started early, when the weights froze (a process beside the run): the same decoder.
    evaluator.weights_final(learner)
    assert evaluator.decoder is not None
    assert evaluator.report(learner, cfg.schedule.final_ns)["pixels"] == px
    # Weights that changed after all (a checkpoint loaded into the learner): fit again on them.
    with torch.no_grad():
        next(learner.nets.target.target.parameters()).mul_(1.5)
    changed = evaluator.report(learner, cfg.schedule.final_ns)["pixels"]
    fresh = cfg.protocol.evaluator(cfg).report(learner, cfg.schedule.final_ns)["pixels"]
    assert changed == fresh and changed != px
    evaluator.close()
    assert evaluator.decoder is None
    with np.load(strips) as z:
        assert {"interp/true", "extrap/no_change"} <= set(z)


def _fit_args(steps: int):  # noqa: ANN202 (the learner, the fit's other inputs)
    from agent import Learner
    from runners.online.command import build_config

    cfg = build_config([*TINY_WORLDS, "--steps", "20"])
    sets = cfg.protocol.evaluator(cfg).sets
    return Learner(cfg.agent), (sets.families, sets.seed, steps)


def test_the_decoder_fit_in_its_own_process_is_the_one_fit_here() -> None:
    from runners.online import pixels

    learner, args = _fit_args(40)
    target = learner.nets.target.target.state_dict()
    here = pixels.fit(learner.cfg, target, *args).state_dict()
    away = pixels.DecoderProcess(learner, *args)  # its result waits for its process
    ended = pixels.DecoderProcess(learner, *args, patience=0.0)  # ended at once, fit here
    for fitted in (away, ended):
        dec, info = fitted.result()
        assert info["steps"] == 40 and info["frames"] == 1 * 128 * 8
        assert not any(p.requires_grad for p in dec.parameters())
        for p, q in zip(here.values(), dec.state_dict().values(), strict=True):
            assert torch.equal(p, q)
        fitted.stop()  # (a second time: nothing left to end)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_decoder_process_runs_only_where_a_core_would_idle() -> None:
    from runners.online import pixels

    learner, args = _fit_args(4000)
    away = pixels.DecoderProcess(learner, *args)
    deadline, policy = time.monotonic() + 120, None
    while policy != os.SCHED_IDLE and time.monotonic() < deadline:
        policy = os.sched_getscheduler(away._proc.pid)
        time.sleep(0.05)
    away.stop()
    assert policy == os.SCHED_IDLE
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this process's, as it was
    with pytest.raises(RuntimeError, match="stopped"):
        away.result()
