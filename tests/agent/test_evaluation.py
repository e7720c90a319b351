"""Evaluation: memory copy, frozen weights, exact n, the curve, the excluded count."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent import (
    AgentConfig,
    DatasetSource,
    EvalData,
    Learner,
    adaptation_curve,
    evaluate,
    target_reference,
)


def trained(track: str, frames: np.ndarray, steps: int = 3) -> Learner:
    cfg = AgentConfig.of_size("tiny", track=track, buffer_capacity=8)
    learner = Learner(cfg)
    src = DatasetSource(frames, cfg, seed=0)
    for _ in range(steps):
        learner.update(src.next())
    return learner


def data(frames: np.ndarray) -> EvalData:
    return EvalData(shift_train=frames[:12], shift_test=frames[12:18], base_test=frames[18:])


def test_evaluate_leaves_the_learner_untouched(frames: np.ndarray) -> None:
    learner = trained("C", frames)
    weights = {k: v.clone() for k, v in learner.nets.state_dict().items()}
    buf = learner.buffer.state_dict()
    det = learner.detector.state_dict()
    rng = torch.get_rng_state()
    res = evaluate(learner, data(frames), n=5)
    assert res.n == 5 and len(res.d_shift_per_h) == 3 and np.isfinite(res.d_shift)
    assert res.d_shift == np.mean(res.d_shift_per_h) and res.sigma_embed > 0
    assert all(torch.equal(v, learner.nets.state_dict()[k]) for k, v in weights.items())
    assert all(torch.equal(v, learner.buffer.state_dict()[k]) for k, v in buf.items())
    assert all(torch.equal(v, learner.detector.state_dict()[k]) for k, v in det.items())
    assert torch.equal(rng, torch.get_rng_state())
    assert res.as_dict()["eval/d_shift"] == res.d_shift


def test_curve_memory_matters_for_c_not_for_a(frames: np.ndarray) -> None:
    ns = (0, 2, 10)
    for track in "AC":
        curve = adaptation_curve(trained(track, frames), data(frames), ns)
        assert [r.n for r in curve] == list(ns)
        same = curve[0].d_shift == curve[1].d_shift == curve[2].d_shift
        assert same == (track == "A"), track
    # Deterministic, and evaluate(n) is the curve's entry.
    learner = trained("C", frames)
    assert evaluate(learner, data(frames), n=2) == adaptation_curve(learner, data(frames), ns)[1]


def test_empty_memory_c_equals_a(frames: np.ndarray) -> None:
    """With an untrained learner (empty buffer) and n = 0, C and A are the same predictor."""
    a = Learner(AgentConfig.of_size("tiny", track="A"))
    c = Learner(AgentConfig.of_size("tiny", track="C"))
    assert evaluate(a, data(frames), n=0) == evaluate(c, data(frames), n=0)


def test_excluded_are_counted(frames: np.ndarray) -> None:
    learner = trained("A", frames, steps=0)
    still = np.repeat(frames[18:, :1], 21, axis=1)  # static sequences: ||zbar - z|| tiny?
    res = evaluate(learner, EvalData(frames[:12], frames[12:18], still), n=0)
    # Target (EMA) and online encoders are equal at step 0: every base sample is excluded.
    assert res.excluded == 6 * 3 and np.isnan(res.d_base)


def test_target_reference_parts_and_drift(frames: np.ndarray) -> None:
    """``target_reference``: its D is ``evaluate``'s; with the EMA equal to the online encoder
    (step 0) both references coincide exactly; once the online encoder moves away from a
    fixed EMA the gap opens, the online reference moves and the EMA's does not."""
    cfg = AgentConfig.of_size("tiny", track="C", buffer_capacity=8)
    learner, d = Learner(cfg), data(frames)
    ref = target_reference(learner, d, n=5)
    assert ref.d_shift == evaluate(learner, d, n=5).d_shift
    assert ref.latent_gap == 0.0 and ref.d_shift_target_ref == ref.d_shift
    assert ref.ref_online == ref.ref_target and ref.latent_norm > 0
    with torch.no_grad():  # the online encoder drifts; the EMA target stays where it was
        w = learner.nets.encoder.proj.weight
        w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(0)) * w.std())
    drifted = target_reference(learner, d, n=5)
    assert drifted.latent_gap > 0.1 * drifted.latent_norm
    assert drifted.ref_target == ref.ref_target  # the EMA's reference: same targets, same zbar
    assert drifted.ref_online != ref.ref_online
    assert drifted.d_shift == evaluate(learner, d, n=5).d_shift


def spread_of(z: torch.Tensor) -> float:
    """sigma_embed's statistic by its definition, in numpy: the mean over dimensions of the
    (unbiased) std across samples."""
    return float(np.asarray(z, np.float64).std(axis=0, ddof=1).mean())


@pytest.mark.parametrize("context_frames", [1, 2])
def test_sigma_z_and_sigma_target_are_the_spread_of_the_input_latents(
    frames: np.ndarray, context_frames: int
) -> None:
    """sigma_z and sigma_target: the spread of the shift test split's input frames (frame C-1)
    by the online encoder and by the EMA target, the same for every n; D unchanged by them."""
    cfg = AgentConfig.of_size("tiny", track="C", buffer_capacity=8,
                                  context_frames=context_frames)  # fmt: skip
    longer = np.concatenate([frames, frames[:, :1]], 1)  # C = 2: the input frame 1, h up to 20
    learner, d = Learner(cfg), data(frames if context_frames == 1 else longer)
    with torch.no_grad():  # the online encoder moves away from the EMA target: the two differ
        w = learner.nets.encoder.proj.weight
        w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(0)) * w.std())
    x = torch.from_numpy(np.ascontiguousarray(d.shift_test[:, context_frames - 1]))
    want_z, want_t = spread_of(learner.encode(x)), spread_of(learner.encode(x, target=True))
    assert want_z != pytest.approx(want_t, rel=1e-3)
    curve = adaptation_curve(learner, d, (0, 2, 5))
    for r in curve:
        assert r.sigma_z == pytest.approx(want_z, rel=1e-5)
        assert r.sigma_target == pytest.approx(want_t, rel=1e-5)
    if context_frames == 2:  # another frame of the input's sequences is not the input
        other = torch.from_numpy(np.ascontiguousarray(d.shift_test[:, 0]))
        assert curve[0].sigma_z != pytest.approx(spread_of(learner.encode(other)), rel=1e-3)
    if context_frames == 1:  # D against the horizons' targets alone: target_reference's D, whose
        # targets are encoded without the input frames' EMA latents
        assert target_reference(learner, d, n=5).d_shift == curve[2].d_shift
