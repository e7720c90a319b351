"""Quick checks that the paper-faithful reference is what it claims (not benchmarks: they run
with `pytest benchmarks` and are skipped by `--benchmark-only`)."""

from __future__ import annotations

import pytest
import torch

from benchmarks.paper_reference import (
    Encoder,
    RefConfig,
    ReferenceTrainer,
    SequenceSampler,
    random_sequences,
)

SMALL = {"batch_size": 4, "buffer_capacity": 8}


def test_encoder_has_the_papers_172k_parameters() -> None:
    assert sum(p.numel() for p in Encoder(RefConfig()).parameters()) == 172_656


def test_unknown_track_fails() -> None:
    with pytest.raises(ValueError, match="track"):
        RefConfig(track="Z")


def test_empty_buffer_track_c_equals_track_a_predictor() -> None:
    a = ReferenceTrainer(RefConfig(track="A", **SMALL))
    c = ReferenceTrainer(RefConfig(track="C", **SMALL))
    c.predictor.load_state_dict(a.predictor.state_dict())
    z = torch.randn(4, 64)
    assert torch.equal(a.predict(z, None), c.predict(z, c.aggregate(z)))


@pytest.mark.parametrize("track", ["A", "B", "C"])
def test_steps_run_and_the_buffer_is_a_fifo(track: str) -> None:
    trainer = ReferenceTrainer(RefConfig(track=track, **SMALL))
    sampler = SequenceSampler(random_sequences(8), batch_size=4)
    trainer.prefill(10)  # capacity 8: the two oldest are evicted
    trainer.prime_detector(sampler.next())
    before = [p.clone() for p in trainer.target_encoder.parameters()]
    for _ in range(3):
        out = trainer.train_step(sampler.next())
        assert torch.isfinite(out["loss"])
    assert trainer.step == 3
    moved = any(
        not torch.equal(b, p)
        for b, p in zip(before, trainer.target_encoder.parameters(), strict=True)
    )
    assert moved  # the EMA target follows the online encoder
    if trainer.has_memory:
        assert len(trainer.buffer) == 8
