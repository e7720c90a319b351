"""The live view's predictions (``runners.live.predictions``): a pixel decoder fit online
beside each track decodes what the track predicts for the shown streams. A probe: the tracks
step exactly as without it, the global generators untouched; the decoder learns; the screen
draws the band with and without predictions."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pygame
import pytest
import torch
from live_fake import FakeDriver, FakeWorld

from agent.memory.read import MemoryView
from agent.objective import per_horizon
from agent.step import context_latents, modulated_prediction
from runners.live import drivers
from runners.live.app import App, AppConfig
from runners.live.model import overlay
from runners.live.predictions import LEARN_EVERY, LivePredictions
from runners.live.screen import SIZE

#: tests/runners/test_visualize.py's tiny worlds run: 8 streams, 4 worlds of 2.
TINY_WORLDS = ["--preset", "tiny", "--set", "eval_shift_test=8", "--eval-world-seqs", "4", "--eval-worlds", "2", "--base-world-seqs", "4", "--base-worlds", "2", "--episode-steps", "21", "40"]  # fmt: skip


def session(tmp_path: Path, name: str, *more: str) -> Any:
    """A tiny worlds session of track C with its floor (A) and ceiling (oracle)."""
    from runners import visualize

    argv = ["--headless", "--tracks", "C", "--steps", "200", "--out", str(tmp_path),
            "--name", name, *TINY_WORLDS, *more]  # fmt: skip
    return visualize.setup(argv, log=lambda _: None)


def assert_same(a: Any, b: Any, where: str = "state") -> None:
    """Two state dicts equal bit for bit (tensors, arrays, numbers, nested)."""
    if isinstance(a, Mapping):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b), where
    else:
        assert a == b or (a != a and b != b), where  # NaN equals NaN here


def test_predictions_leave_every_track_as_without_them(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(drivers, "PRED_HZ", 1e9)  # shown after every step
    seen, twin = session(tmp_path, "seen"), session(tmp_path, "twin", "--no-predictions")
    for d in seen.app.drivers:
        d._live.every = 1  # the decoder learns after every step
    for _ in range(12):
        # Each session's step from the same global generators' state: the one with the
        # decoder learning beside it leaves them as the one without.
        torch_rng, numpy_rng = torch.get_rng_state(), np.random.get_state()
        seen.app.advance()
        after = torch.get_rng_state(), np.random.get_state()
        torch.set_rng_state(torch_rng)
        np.random.set_state(numpy_rng)
        twin.app.advance()
        assert torch.equal(torch.get_rng_state(), after[0])
        assert_same(np.random.get_state(), after[1])
        for d in seen.app.drivers:  # and the shown predictions leave them untouched
            torch_rng, numpy_rng = torch.get_rng_state(), np.random.get_state()
            assert d.predictions() is not None
            assert torch.equal(torch.get_rng_state(), torch_rng)
            assert_same(np.random.get_state(), numpy_rng)
    assert all(d.predictions() is None for d in twin.app.drivers)
    assert [d._live.size for d in seen.app.drivers] == [12 * 8 * 3] * 3  # 8 streams, 3 horizons
    for a, b in zip(seen.loops, twin.loops, strict=True):  # weights, optimiser, memory, detector
        assert_same(a.learner.state_dict(), b.learner.state_dict(), a.cfg.agent.track)
        assert np.array_equal(a.feed.frames, b.feed.frames)
    for s in (seen, twin):
        s.release()
    pygame.display.quit()


def test_predictions_are_the_batch_future_and_the_learner_prediction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = session(tmp_path, "p")
    app = s.app
    assert all(d.predictions() is None for d in app.drivers)  # no step yet
    for _ in range(6):
        app.advance()
    for d in app.drivers:
        p = d.predictions()
        spec, cfg = d.learner.spec, d.learner.cfg
        k, shown = len(cfg.horizons), d.shown
        assert p.horizons == tuple(cfg.horizons) and p.step == 6
        learnt = len(range(0, 6, LEARN_EVERY))  # after steps 1, 1 + LEARN_EVERY, ...
        assert p.pairs == learnt * 8 * k  # 8 streams' target frames each
        assert p.true.shape == p.decoded.shape == (len(shown), k, 64, 64)
        assert p.true.dtype == p.decoded.dtype == np.uint8
        frames = d._batch.frames  # the last step's batch: its target columns, shown streams
        assert np.array_equal(p.true, frames[shown, spec.past:spec.past + k, 0].numpy())
        # The shown streams' prediction: the one of the whole batch's memory view, their rows
        # (the group memories of the shown streams alone are encoded).
        rows = torch.as_tensor(shown)
        batch = d._batch
        full = d.learner.memory_view(training=False, batch=batch)
        view = MemoryView(full.pairs, full.mask[rows], full.group[rows])
        physics = batch.physics[rows]
        with torch.no_grad(), d.learner.autocast():
            z = context_latents(d.learner.nets, batch.frames[rows], spec)
            mod, _ = modulated_prediction(d.learner.nets, z, view, spec, physics)
        want = per_horizon(mod.pred.float()).expand(-1, k, -1)
        assert torch.allclose(d._live.predict(batch), want, atol=1e-5)
    # At most PRED_HZ refreshes a second, and only after a new step (no refit on one batch).
    d = app.drivers[1]
    p = d.predictions()
    monkeypatch.setattr(drivers, "PRED_HZ", 1e-6)
    app.advance()
    assert d.predictions() is p
    monkeypatch.setattr(drivers, "PRED_HZ", 1e9)
    newer = d.predictions()
    assert newer is not p and newer.step == 7 and d.predictions() is newer
    s.release()
    pygame.display.quit()


def test_the_decoder_learns_the_frames(tmp_path: Path) -> None:
    s = session(tmp_path, "d", "--no-bounds")
    (driver,) = s.app.drivers
    live = LivePredictions(driver.learner, driver.shown, seed=1, ring=512)
    for _ in range(24):  # 24 batches' target frames: 8 streams x 3 horizons each
        s.app.advance()
        live.observe(driver._batch)
    assert live.size == 512
    ink = live.ink[: live.size]
    mean = ink.mean(0, keepdim=True).clamp(1e-4, 1 - 1e-4).expand_as(ink)  # every pixel's mean
    constant = float(torch.nn.functional.binary_cross_entropy(mean, ink))
    before = live.ring_loss()
    live.fit(300)
    after = live.ring_loss()
    assert after < 0.5 * before and after < constant  # it reads the latent, not just the mean
    s.release()
    pygame.display.quit()


# -- the screen (the fake feed) ----------------------------------------------------------------


class NoPredictions(FakeDriver):
    def predictions(self) -> None:
        return None


@pytest.mark.parametrize("with_predictions", [True, False])
def test_the_screen_draws_the_predictions_band(with_predictions: bool) -> None:
    pygame.display.init()
    pygame.font.init()
    surface = pygame.display.set_mode(SIZE)
    world = FakeWorld(worlds=True)
    kind = FakeDriver if with_predictions else NoPredictions
    app = App([kind(t, world) for t in "AC"], AppConfig(), surface)
    for _ in range(10):
        app.advance()
    snap = app.snapshot()
    assert all((t.predictions is not None) == with_predictions for t in snap.tracks)
    app.screen.draw(snap)
    img = pygame.surfarray.array3d(surface)  # (W, H, 3)
    left, *cols = app.screen.pred_rects
    assert len(cols) == 2 and left.right < cols[0].left and cols[0].bottom == left.bottom
    for i, rect in enumerate(cols):
        band = img[rect.left:rect.right, rect.top:rect.bottom]
        green = (band[..., 1] > 120) & (band[..., 0] < 60)  # the true future alone
        magenta = (band[..., 0] > 60) & (band[..., 1] < 60)  # the prediction alone
        assert (int(green.sum() + magenta.sum()) > 20) == with_predictions, i
        if i == 0 and with_predictions:  # the fake A predicts no motion: both colours apart
            assert green.sum() > 20 and magenta.sum() > 20
    grey = img[left.left:left.right, left.top:left.bottom]
    assert (grey[..., 0] > 200).sum() > 50 if with_predictions else (grey[..., 0] > 200).sum() == 0
    pygame.display.quit()


def test_overlay_colours() -> None:
    pred = np.array([[0, 100], [100, 0]], np.uint8)
    true = np.array([[0, 255], [0, 255]], np.uint8)
    rgb = overlay(pred, true)
    assert rgb.shape == (2, 2, 3)
    assert rgb[0, 1].tolist() == [1.0, 1.0, 1.0]  # both: white (the prediction at its brightest)
    assert rgb[1, 0].tolist() == [1.0, 0.0, 1.0]  # the prediction alone: magenta
    assert rgb[1, 1].tolist() == [0.0, 1.0, 0.0]  # the true frame alone: green
