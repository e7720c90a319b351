"""The stream latent cache (``cfg.stream_cache``, ``agent.sources.LatentCache``): each stream
frame encoded once per encoder, exact where the weights do not move, kept across a resume."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from agent import AgentConfig, Learner, StreamSource, columns

LONG = 400  # episode length of the fake streams: no reset inside the tests' windows


def stream(cfg: AgentConfig, fake_env_cls) -> StreamSource:
    return StreamSource(fake_env_cls([LONG] * cfg.batch_size), cfg)


def count_ema_frames(learner: Learner, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Frames the EMA encoder encodes at each call (the learner's target encoder, patched)."""
    calls: list[int] = []
    target = learner.nets.target.target
    real = target.forward

    def counted(x: torch.Tensor) -> torch.Tensor:
        calls.append(int(x.shape[0]))
        return real(x)

    monkeypatch.setattr(target, "forward", counted)
    return calls


@pytest.mark.parametrize("context", [1, 2])
def test_each_frame_meets_the_ema_encoder_once(
    context: int, stream_tiny: AgentConfig, fake_env_cls, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = stream_tiny.replace(context_frames=context)
    learner = Learner(cfg)
    calls = count_ema_frames(learner, monkeypatch)
    src = stream(cfg, fake_env_cls)
    hs = cfg.horizons
    steps = hs[-1] - hs[0] + 3
    for _ in range(steps):
        learner.update(src.next())
    # A frame is the target at horizon h one horizon gap after it was the target at the next
    # longer horizon: at step i the targets encoded are the newest and those whose frame was not
    # yet a target at the stream's first batch (i below the gap to the next horizon).
    gap = {h: nxt - h for h, nxt in zip(hs, hs[1:], strict=False)}
    expected = [cfg.batch_size * sum(h == hs[-1] or i < gap[h] for h in hs) for i in range(steps)]
    assert calls == expected
    assert expected[-1] == cfg.batch_size  # the steady state: one frame per stream per step
    assert len(learner.latents.target) <= cfg.window  # nothing older than a window is kept


def test_a_gap_in_the_clock_recomputes_everything(
    stream_tiny: AgentConfig, fake_env_cls, monkeypatch: pytest.MonkeyPatch
) -> None:
    learner = Learner(stream_tiny)
    calls = count_ema_frames(learner, monkeypatch)
    src = stream(stream_tiny, fake_env_cls)
    learner.update(src.next())
    src.next()  # a batch the learner never sees
    learner.update(src.next())
    k, b = stream_tiny.n_horizons, stream_tiny.batch_size
    assert calls == [k * b, k * b]


@pytest.mark.parametrize("track", ["A", "C"])
def test_with_still_weights_the_cache_is_exact(
    track: str, stream_tiny: AgentConfig, fake_env_cls
) -> None:
    """Frozen weights (the memory phase after a switch): cached latents are the recomputed
    ones, so every metric and memory entry matches the exact path bit for bit."""
    runs = []
    for cache in (True, False):
        cfg = stream_tiny.replace(track=track, stream_cache=cache, detector_warmup=2, kappa=0.01)
        learner = Learner(cfg)
        learner.freeze_weights()
        src = stream(cfg, fake_env_cls)
        recs = columns([learner.update(src.next()) for _ in range(8)])
        runs.append((recs, learner.buffer.pairs.clone()))
    (a, pa), (b, pb) = runs
    assert a["memory/boundary"].sum() >= 1
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert torch.equal(pa, pb)


def test_training_with_the_cache_stays_close_to_exact(
    stream_tiny: AgentConfig, fake_env_cls
) -> None:
    """While training, a cached target is up to max(h) - min(h) steps old: its EMA weights have
    moved at most 1 - tau^(max(h) - min(h)) of the way since (docs/agent.md, "Stream batches
    share frames"); the losses stay within that share of the exact path's."""
    losses = []
    for cache in (True, False):
        cfg = stream_tiny.replace(stream_cache=cache)
        learner = Learner(cfg)
        src = stream(cfg, fake_env_cls)
        losses.append(columns([learner.update(src.next()) for _ in range(12)])["loss/pred"])
    cached, exact = losses
    assert cached[0] == exact[0]  # the first step encodes every target either way
    assert not np.array_equal(cached, exact)
    h = stream_tiny.horizons
    bound = 1 - stream_tiny.tau_base ** (h[-1] - h[0])  # 0.058 for (5, 10, 20), tau 0.996
    np.testing.assert_allclose(cached, exact, rtol=bound)


def test_the_cache_survives_a_state_round_trip(stream_tiny: AgentConfig, fake_env_cls) -> None:
    """A learner rebuilt from ``state_dict`` (a resume) continues exactly as the original."""
    learner = Learner(stream_tiny)
    src = stream(stream_tiny, fake_env_cls)
    for _ in range(5):
        learner.update(src.next())
    buf = io.BytesIO()  # through bytes, as a checkpoint (no tensor shared between the two)
    torch.save(learner.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=False)
    assert set(state["latents"]["target"]) == set(learner.latents.target)
    other = Learner(stream_tiny)
    other.load_state_dict(state)
    batches = [src.next() for _ in range(4)]
    a = columns([learner.update(b) for b in batches])
    b = columns([other.update(b) for b in batches])
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_dataset_batches_never_touch_the_cache(tiny: AgentConfig, frames: np.ndarray) -> None:
    from agent import DatasetSource

    learner = Learner(tiny)
    learner.update(DatasetSource(frames, tiny, seed=0).next())
    assert learner.latents.t is None and not learner.latents.target
