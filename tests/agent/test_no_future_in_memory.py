"""No memory entry a sample reads holds a latent of a frame later than that sample's input.

The frames of ``FakeVectorEnv`` carry their time in a pixel, and every stream runs in step (one
long episode each), so an encoder that returns that pixel as the latent makes the memory's
contents readable as frame times. A frozen learner (detector and buffer live) then runs the
stream: before each step, the newest frame time held in memory must not be after the batch's
input frames. The paper's newest pair, forced onto a stream, fails the same check (the check can
fail), which is why a stream source refuses it.
"""

from __future__ import annotations

import numpy as np
import pytest

from agent import AgentConfig, Learner, StreamSource


def memory_vs_input(
    learner: Learner, source: StreamSource, input_pos: int, steps: int, encoder_cls
):
    """Per step: (newest frame time in memory, earliest input frame time of the batch)."""
    learner.nets.encoder = encoder_cls(learner.cfg.latent_dim, pixel=1)  # the frame's time
    learner.freeze_weights()
    rows = []
    for _ in range(steps):
        batch = source.next()
        t_input = batch.frames[:, input_pos, 0, 0, 1].float()
        filled = learner.buffer.mask()
        if bool(filled.any()):
            rows.append((float(learner.buffer.pairs[filled].max()), float(t_input.min())))
        learner.update(batch)
    return rows


def stream_cfg(context: int, scope: str = "global") -> AgentConfig:
    own = {"group_size": 1, "memory_read": "all"} if scope == "group" else {}
    return AgentConfig.of_size(
        "tiny", track="C", push_pair="input", context_frames=context, kappa=0.05,
        detector_warmup=2, memory_scope=scope, **own,
    )  # fmt: skip


@pytest.mark.parametrize(
    "context,scope", [(1, "global"), (2, "global"), (3, "global"), (2, "group")]
)
def test_memory_never_holds_a_frame_after_the_input(
    fake_env_cls, pixel_encoder, context: int, scope: str
) -> None:
    cfg = stream_cfg(context, scope)
    source = StreamSource(fake_env_cls([250] * cfg.batch_size), cfg)
    rows = memory_vs_input(Learner(cfg), source, cfg.input_position, 80, pixel_encoder)
    assert len(rows) > 40  # the memory filled early and was checked on most steps
    newest, earliest = np.asarray(rows).T
    assert (newest <= earliest).all()
    assert (newest == earliest - 1).any()  # the input's own pair: one frame before the next input


def test_the_papers_newest_pair_on_a_stream_would_leak(fake_env_cls, pixel_encoder) -> None:
    cfg = stream_cfg(1)
    with pytest.raises(ValueError, match="push_pair"):
        StreamSource(fake_env_cls([250] * cfg.batch_size), cfg.replace(push_pair="newest"))
    # Forced past the guard: the paper's frame layout read from the same stream.
    source = StreamSource(fake_env_cls([250] * cfg.batch_size), cfg)
    paper = cfg.replace(push_pair="newest")
    source.offsets = np.asarray(paper.frame_offsets)
    rows = memory_vs_input(Learner(paper), source, paper.input_position, 80, pixel_encoder)
    newest, earliest = np.asarray(rows).T
    assert (newest > earliest).all()  # every entry is ~20 frames ahead of the next input
