"""The paper protocol's numbers, fingerprinted: what ``Learner`` computes at the paper preset
(dataset mode, fp32, every track) for a few steps with a filled memory, past the boundary
detector's warmup (its gated memory writes included), and what evaluation reports.
``test_paper_fingerprint.py`` checks the current code against the stored
``paper_fingerprint.json``; new options must leave the paper protocol computing exactly this.

Regenerate (only when a change to the paper protocol's numbers is intended, and say so in the
commit): ``PYTHONPATH=. python tests/agent/paper_fingerprint.py`` from the repository root.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agent import AgentConfig, Learner
from agent.evaluation import EvalData, adaptation_curve
from agent.sources import DatasetSource

STORE = Path(__file__).with_name("paper_fingerprint.json")
TRACKS = ("A", "B", "C", "D", "E")
# The memory is filled after step 2 (pushes bypass the detector, as evaluation does); from the
# detector's warmup (``detector_warmup``, 10 updates) on, boundaries fire and write the memory.
STEPS = 12
COLUMNS = ("loss_total", "loss_pred", "surprisal", "boundary", "buffer_size")  # a step's row


def sequences(n: int, seed: int) -> np.ndarray:
    """Smooth moving-blob sequences (N, 21, 1, 64, 64) uint8, from numpy alone (no digits)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:64, 0:64]
    out = np.zeros((n, 21, 1, 64, 64), np.uint8)
    for i in range(n):
        p, v = rng.uniform(12, 52, 2), rng.uniform(-2, 2, 2)
        for t in range(21):
            c = p + v * t
            out[i, t, 0] = (255 * np.exp(-((yy - c[0]) ** 2 + (xx - c[1]) ** 2) / 40.0)).astype(
                np.uint8
            )
    return out


def fingerprint(track: str) -> dict[str, Any]:
    """Per-step losses, surprisal, boundary and memory size (``COLUMNS``), parameter sums after
    the steps, and a 2-point curve."""
    torch.manual_seed(0)
    cfg = AgentConfig.of_size("paper", track=track, total_steps=100, batch_size=16)
    learner = Learner(cfg)
    base, shift = sequences(48, 1), sequences(24, 2)
    source = DatasetSource(base, cfg, seed=3)
    rows: list[list[float]] = []
    for step in range(STEPS):
        if step == 2:
            z = learner.encode(torch.from_numpy(base[:8, 19:21].reshape(-1, 1, 64, 64)))
            for i in range(4):
                learner.buffer.push(z.view(8, 2, -1)[2 * i : 2 * i + 2].mean(0), 0, step)
        m = learner.update(source.next())
        rows.append([float(getattr(m, name)) for name in COLUMNS])
    sums = {n: float(p.detach().double().sum()) for n, p in learner.nets.named_parameters()}
    data = EvalData(shift_train=shift[:12], shift_test=shift[12:], base_test=base[:12])
    curve = adaptation_curve(learner, data, ns=(0, 3))
    return {
        "steps": rows,
        "param_sums": sums,
        "curve": [[r.d_shift, r.d_base, r.sigma_embed] for r in curve],
    }


def main() -> None:
    torch.set_num_threads(1)
    STORE.write_text(json.dumps({t: fingerprint(t) for t in TRACKS}, indent=1) + "\n")
    print(f"wrote {STORE}")


if __name__ == "__main__":
    main()
