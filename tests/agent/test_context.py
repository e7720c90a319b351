"""Context frames and per-horizon outputs (beyond the paper): shapes, identities, a short run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent import AgentConfig, DatasetSource, Learner
from agent.evaluation import EvalData, adaptation_curve
from agent.modulators import LoRAModulator
from agent.networks import Predictor


def test_config_layout() -> None:
    paper = AgentConfig()
    assert paper.frame_offsets == (0, 5, 10, 20, 19) and paper.window == 21
    assert paper.pair_offsets == (19, 20)
    own = AgentConfig(push_pair="input")
    assert own.frame_offsets == (0, 1, 6, 11, 21) and own.pair_offsets == (0, 1)
    ctx = AgentConfig(push_pair="input", context_frames=3)
    assert ctx.frame_offsets == (0, 1, 2, 7, 12, 22) and ctx.window == 23
    assert ctx.pair_offsets == (1, 2) and ctx.input_position == 2
    for bad in ({"context_frames": 0}, {"push_pair": "oldest"}, {"per_horizon": 1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            AgentConfig(**bad)


def test_per_horizon_predictor_and_lora_identity() -> None:
    torch.manual_seed(0)
    pred = Predictor(8, 32, context=3, heads=3)
    mod = LoRAModulator(24, 32, 6, 2, out_dim=24)
    z = torch.randn(5, 24)
    base = pred(z)
    assert base.shape == (5, 3, 8)
    torch.testing.assert_close(base.mean(-1), torch.zeros(5, 3), atol=1e-6, rtol=0)  # per head
    out = mod(pred, z, torch.zeros(5, 6))
    assert torch.equal(out.pred, base)  # e_agg = 0: the base predictor, bit for bit
    assert not torch.equal(mod(pred, z, torch.randn(5, 6)).pred, base)


@pytest.mark.parametrize("track", ["A", "B", "C", "D", "E"])
def test_a_short_run_and_its_evaluation(track: str) -> None:
    frames = np.random.default_rng(0).integers(0, 256, size=(16, 24, 1, 64, 64), dtype=np.uint8)
    cfg = AgentConfig.of_size(
        "tiny", track=track, context_frames=3, per_horizon=True, push_pair="input",
        kappa=0.3, detector_warmup=2,
    )  # fmt: skip
    learner, source = Learner(cfg), DatasetSource(frames, cfg, seed=0)
    losses = [float(learner.update(source.next()).loss_total) for _ in range(6)]
    assert np.isfinite(losses).all()
    data = EvalData(shift_train=frames[:8], shift_test=frames[8:], base_test=frames[:8])
    curve = adaptation_curve(learner, data, ns=(0, 2))
    assert all(np.isfinite([r.d_shift, r.d_base, r.sigma_embed]).all() for r in curve)
    assert len(curve[0].d_shift_per_h) == 3
    with pytest.raises(ValueError, match="window of 23"):
        DatasetSource(frames[:, :21], cfg)
