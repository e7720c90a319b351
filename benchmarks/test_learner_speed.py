"""Learner throughput: `Learner.update()` steps/s at the paper's batch (64) for every track, from
both sources, in fp32 and bf16, each as a ratio to the paper-faithful reference step measured in
the same run (`benchmarks/paper_reference.py`, tracks A-C; D and E are compared with C's).

    pytest benchmarks/test_learner_speed.py --benchmark-only

Both the reference and the learner are measured in the steady state of a run: the experience
buffer full (256 random latent pairs pushed before timing), warmup rounds untimed (first-step and
any compile cost), and each timed round of --bench-steps steps ends with a device sync.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent import AgentConfig, DatasetSource, Learner, StreamSource
from benchmarks.conftest import (
    BenchSettings,
    ReferenceRates,
    make_reference_step,
    prefill,
    record,
    reference_track_for,
    skip_unless_selected,
    timed_rate,
)
from benchmarks.paper_reference import TRACKS as REFERENCE_TRACKS
from env import MovingMNISTVectorEnv

TRACKS = ("A", "B", "C", "D", "E")
SOURCES = ("dataset", "stream")
PRECISIONS = ("fp32", "bf16")
STREAM_EPISODE_STEPS = 400  # = runners' RunConfig.episode_length default


# ------------------------------------------------------------------------------- reference
@pytest.mark.parametrize("track", REFERENCE_TRACKS)
def test_reference_step(
    benchmark, bench: BenchSettings, base_sequences, reference_rates: ReferenceRates, track: str
) -> None:
    """The paper-faithful step (fp32, plain loop, detector .item()); ratio 1 by definition."""
    skip_unless_selected(bench, track)
    frames, data = base_sequences
    trainer, step = make_reference_step(track, bench, frames)
    rate = timed_rate(benchmark, step, bench)
    if rate is not None:
        reference_rates.set(track, rate)  # learner ratios of this run use this figure
    record(
        benchmark,
        kind="reference",
        track=track,
        source="dataset",
        data=data,
        precision="fp32",
        batch_size=trainer.cfg.batch_size,
        steps_per_s=rate,
        ratio_to_reference=1.0 if rate else None,
        reference_track=track,
        buffer_size=len(trainer.buffer) if trainer.has_memory else 0,
        steps_per_round=bench.steps,
        params_trainable=trainer.n_trainable(),
        boundary_rate=trainer.boundaries / max(1, trainer.step),
    )


# --------------------------------------------------------------------------------- learner
def make_source(kind: str, cfg, device: torch.device, frames: np.ndarray):
    if kind == "dataset":
        return DatasetSource(frames, cfg, device, shifted=0, seed=0)
    # Long episodes as train_online's default (400 steps): with the env's own default (20) every
    # 21-frame window would span a reset and every sample would be masked out.
    vec = MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=STREAM_EPISODE_STEPS)
    return StreamSource(vec, cfg, device, seed=0)


def make_learner_step(
    track: str, source: str, precision: str, bench: BenchSettings, frames: np.ndarray
):
    """(learner, source, step) for the paper config of `track` with a full buffer."""
    # A stream pushes the input's own pair (the paper's newest pair would leak the future).
    pair = "input" if source == "stream" else "newest"
    cfg = AgentConfig.of_size("paper", track=track, precision=precision, push_pair=pair)
    learner = Learner(cfg, device=bench.device)
    src = make_source(source, cfg, bench.device, frames)
    prefill(learner, cfg.buffer_capacity)
    return learner, src, cfg, lambda: learner.update(src.next())


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("track", TRACKS)
def test_learner_update(
    benchmark,
    bench: BenchSettings,
    base_sequences,
    reference_rates: ReferenceRates,
    track: str,
    source: str,
    precision: str,
) -> None:
    """`learner.update(source.next())` steps/s; the source's cost is part of the step."""
    skip_unless_selected(bench, track, precision)
    frames, data = base_sequences
    learner, src, cfg, step = make_learner_step(track, source, precision, bench, frames)
    ref = reference_rates.get(track, fresh=True) if bench.paired else None
    rate = timed_rate(benchmark, step, bench)
    if rate is not None and ref is None:
        ref = reference_rates.get(track)
    metrics = step().as_dict()  # one more step, outside the timing, to read the state
    record(
        benchmark,
        kind="learner",
        track=track,
        source=source,
        data=data if source == "dataset" else "MovingMNISTVectorEnv",
        precision=precision,
        batch_size=cfg.batch_size,
        steps_per_s=rate,
        reference_steps_per_s=ref,
        reference_track=reference_track_for(track),
        ratio_to_reference=(rate / ref) if rate and ref else None,
        buffer_size=int(metrics["memory/buffer_size"]),
        steps_per_round=bench.steps,
        valid_frac=float(metrics["stream/valid_frac"]),
        loss_finite=bool(torch.isfinite(metrics["loss/total"])),
    )
