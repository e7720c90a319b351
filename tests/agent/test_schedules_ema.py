"""LR warmup + cosine, tau cosine ramp, and the EMA update rule."""

from __future__ import annotations

import math

import torch

from agent.ema import EMATarget
from agent.networks import Predictor
from agent.step import lr_at, tau_at


def test_lr_warmup_then_cosine() -> None:
    lrs = [lr_at(s, 1.0, 100, 0.05) for s in range(101)]
    assert lrs[:5] == [0.2, 0.4, 0.6, 0.8, 1.0]  # 5 warmup steps, linear
    assert math.isclose(lrs[5 + 95 // 2], 0.5 * (1 + math.cos(math.pi * 47 / 95)))
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:], strict=False))  # then decreasing
    assert lrs[100] == 0.0 and lr_at(1000, 1.0, 100, 0.05) == 0.0
    assert lr_at(0, 1.0, 100, 0.0) == 1.0  # no warmup


def test_tau_cosine_ramp() -> None:
    assert tau_at(0, 0.996, 0.9999, 100) == 0.996
    assert math.isclose(tau_at(50, 0.996, 0.9999, 100), (0.996 + 0.9999) / 2)
    assert tau_at(100, 0.996, 0.9999, 100) == 0.9999 == tau_at(500, 0.996, 0.9999, 100)


def test_ema_update_rule_and_no_gradients() -> None:
    torch.manual_seed(0)
    online = Predictor(4, 8)
    ema = EMATarget(online)
    before = [p.clone() for p in ema.target.parameters()]
    with torch.no_grad():
        for p in online.parameters():
            p.add_(1.0)
    ema.update(online, 0.9)
    for b, t, o in zip(before, ema.target.parameters(), online.parameters(), strict=True):
        torch.testing.assert_close(t, 0.9 * b + 0.1 * o)
        assert not t.requires_grad
    assert not ema(torch.randn(2, 4)).requires_grad
