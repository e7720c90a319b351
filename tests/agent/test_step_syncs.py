"""The plain step (``agent.step.jepa_step``) makes no host read and no device sync
(each would stall a GPU), and docs/agent.md shows it as it is."""

from __future__ import annotations

import numpy as np
import pytest

from agent import AgentConfig, DatasetSource, Learner


@pytest.mark.parametrize("track", ["A", "C"])
def test_the_plain_step_never_reads_a_tensor_on_the_host(
    track: str, frames: np.ndarray, no_host_reads
) -> None:
    """No .item()/bool()/float()/tolist() anywhere in the plain step (a GPU's default, where
    each would be a sync)."""
    cfg = AgentConfig.of_size("tiny", track=track, detector_warmup=0)
    learner = Learner(cfg)
    src = DatasetSource(frames, cfg, seed=0)
    batches = [src.next() for _ in range(3)]
    learner.update(batches[0])  # optimizer state is created on the first step
    with no_host_reads("update()"):
        for b in batches[1:]:
            learner.update(b)
    assert learner.step == 3


def test_docs_show_the_step_as_it_is() -> None:
    """docs/agent.md shows ``jepa_step``, its ``forward`` and ``adamw_step`` verbatim (regenerate
    the blocks when the step changes)."""
    import inspect
    from pathlib import Path

    from agent.step import adamw_step, forward, jepa_step

    doc = (Path(__file__).resolve().parents[2] / "docs" / "agent.md").read_text()
    assert f"```python\n{inspect.getsource(jepa_step).rstrip()}\n```" in doc
    pair = f"{inspect.getsource(forward).rstrip()}\n\n\n{inspect.getsource(adamw_step).rstrip()}"
    assert f"```python\n{pair}\n```" in doc


def device_world_step(track: str, device: str) -> tuple[Learner, object]:
    """A plain-step learner of the worlds protocol's kind (group memory written every step) and
    a stream source over worlds stepped and rendered on ``device`` (short episodes)."""
    import env
    from agent import StreamSource

    cfg = AgentConfig.of_size(
        "tiny", track=track, detector_warmup=0, push_pair="input", memory_scope="group",
        batch_size=8, group_size=4, memory_write="every", context_frames=2, horizons=(2, 4),
        per_horizon=True, input_scale=1 / 255,
    )  # fmt: skip
    vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None, device=device)
    sched = env.WorldSchedule(vec, "train", episode_steps=(6, 12), seed=0, group_size=4)
    source = StreamSource(sched, cfg, device=device, seed=0)
    return Learner(cfg, device=device), source


@pytest.mark.parametrize("track", ["A", "C"])
def test_a_stream_step_on_a_device_world_never_reads_a_tensor_on_the_host(
    track: str, no_host_reads
) -> None:
    """The worlds protocol's step with the world on the learner's device: the env's step, the
    windows cut there and the plain update make no host read (each would be a GPU sync)."""
    learner, source = device_world_step(track, "cpu")
    learner.update(source.next())  # optimizer state is created on the first step
    with no_host_reads("a stream step"):
        for _ in range(20):  # episodes of 6-12 steps: resets and new worlds on the way
            learner.update(source.next())
    assert learner.step == 21


def test_the_sync_watch_lists_every_synchronising_call(no_device_syncs) -> None:
    """``no_device_syncs`` (tests/conftest.py) fails its block naming each synchronising call
    torch's sync debug mode reports (as a warning: here one made by hand), with its count."""
    import warnings

    with pytest.raises(AssertionError, match=r"2x tests/agent/test_step_syncs\.py:\d+"):
        with no_device_syncs("a block"):
            for _ in range(2):
                warnings.warn("called a synchronizing CUDA operation", stacklevel=1)  # as torch words it


@pytest.mark.gpu
@pytest.mark.parametrize("track", ["A", "C"])
def test_on_a_gpu_a_stream_step_never_waits_for_the_device(track: str, no_device_syncs) -> None:
    """torch's sync debug mode watches the worlds protocol's step on a GPU: the env's step on
    the device, the windows cut there and the plain update make no synchronising call."""
    learner, source = device_world_step(track, "cuda")
    learner.update(source.next())
    with no_device_syncs("a stream step on a GPU"):
        for _ in range(20):
            learner.update(source.next())
    assert learner.step == 21
