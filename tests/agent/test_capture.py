"""The captured step (``agent.capture``, ``Learner(captured=True)``): off a GPU the same path
runs eagerly with its tensor inputs, bit for bit the plain step; on a GPU (where present) its
CUDA graphs give the eager step's numbers to rounding.

On a CPU the capture machinery itself runs with ``CallGraph`` in the CUDA graph's place (capture
records the step, replay calls it on the static inputs it was made with): the static inputs
copied in, the warmup, a graph per flag combination, the replays, the metrics copied out and
the reset on a loaded state are checked against the plain step, bit for bit."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import env
from agent import AgentConfig, Learner, StreamSource
from agent.capture import CallGraph, CapturedStep


def world_cfg(track: str) -> AgentConfig:
    return AgentConfig.of_size(
        "tiny", track=track, detector_warmup=0, push_pair="input", memory_scope="group",
        batch_size=8, group_size=4, memory_write="every", context_frames=2, horizons=(2, 4),
        per_horizon=True, input_scale=1 / 255, vary_memory=True, stream_cache=False,
        total_steps=40, entry_frames=3,
    )  # fmt: skip


def batches(cfg: AgentConfig, n: int, device: str = "cpu") -> list:
    vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None,
                                   device=None if device == "cpu" else device)  # fmt: skip
    sched = env.WorldSchedule(vec, "train", episode_steps=(6, 12), seed=1, group_size=4)
    source = StreamSource(sched, cfg, device=device, seed=1)
    return [source.next() for _ in range(n)]


def train(learner: Learner, data: list, freeze_at: int) -> list:
    out = []
    for i, b in enumerate(data):
        if i == freeze_at:
            learner.freeze_weights()  # memory mode: another graph
        out.append(learner.update(b))
    return out


WARMUP = 2  # eager steps of each flag combination before its graph is captured
FREEZE = 9  # learning (steps 0-8: 2 eager, 7 replayed), then memory mode (9-13: 2, 3)


def graphed(cfg: AgentConfig) -> Learner:
    """A learner whose update runs the capture machinery with ``CallGraph`` for CUDA graphs."""
    learner = Learner(cfg)
    learner.captured = CapturedStep(learner, capture=True, warmup=WARMUP, graph=CallGraph)
    return learner


def assert_same_learners(a: Learner, b: Learner, ma: list, mb: list) -> None:
    """Two learners' metrics step by step, weights (and EMA target), optimizer state, detector
    and memory, bit for bit."""
    for t, (x, y) in enumerate(zip(ma, mb, strict=True)):
        for name, p, q in zip(x._fields, x, y, strict=True):
            assert torch.equal(p, q) or bool(p.isnan() & q.isnan()), f"step {t}, {name}"
    for (name, p), q in zip(a.nets.state_dict().items(), b.nets.state_dict().values(),
                            strict=True):  # fmt: skip
        assert torch.equal(p, q), name
    for p, q in zip(a.nets.trainable(), b.nets.trainable(), strict=True):
        sa, sb = a.optimizer.state[p], b.optimizer.state[q]
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    for x, y in ((a.detector, b.detector), (a.buffer, b.buffer)):
        sa, sb = x.state_dict(), y.state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa if isinstance(sa[k], torch.Tensor))


@pytest.mark.parametrize("track", ["A", "B", "C", "D", "E"])
def test_off_a_gpu_the_captured_step_and_its_replayed_graphs_are_the_plain_step_bit_for_bit(
    track: str,
) -> None:
    """The eager captured path (a CPU's) and the capture machinery with ``CallGraph`` (static
    inputs, a graph captured per flag combination after the warmup, replayed) against the plain
    step, over learning and memory mode."""
    cfg = world_cfg(track)
    data = batches(cfg, 14)
    plain, captured, replayed = Learner(cfg), Learner(cfg, captured=True), graphed(cfg)
    assert captured.captured is not None and not captured.captured.capture
    a = train(plain, data, FREEZE)
    assert_same_learners(plain, captured, a, train(captured, data, FREEZE))
    assert_same_learners(plain, replayed, a, train(replayed, data, FREEZE))
    steps = replayed.captured
    assert set(steps.graphs) == {(True, True, True), (False, True, True)}  # (learn, ema, write)
    assert set(steps.eager_steps.values()) == {WARMUP}
    assert float(a[-1].buffer_size) > 0 and float(a[3].lr) > 0


def test_a_captured_step_refuses_the_stream_latent_cache() -> None:
    cfg = world_cfg("C").replace(stream_cache=True)
    with pytest.raises(ValueError, match="stream_cache=false"):
        Learner(cfg, captured=True)
    with pytest.raises(ValueError, match="CUDA device"):
        CapturedStep(Learner(world_cfg("C")), capture=True)


def assert_close_runs(a: Learner, b: Learner, ma: list, mb: list, rtol: float, atol: float) -> None:
    """Two learners' metrics, step by step, and weights to rounding; their memories' sizes."""
    for t, (x, y) in enumerate(zip(ma, mb, strict=True)):
        for name, p, q in zip(x._fields, x, y, strict=True):
            torch.testing.assert_close(q, p, rtol=rtol, atol=atol, equal_nan=True,
                                       msg=lambda m, t=t, name=name: f"step {t}, {name}: {m}")  # fmt: skip
    for p, q in zip(a.nets.parameters(), b.nets.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=rtol, atol=atol)
    np.testing.assert_array_equal(a.buffer.size.cpu(), b.buffer.size.cpu())


@pytest.mark.gpu
@pytest.mark.parametrize("track", ["A", "C"])
def test_on_a_gpu_the_captured_step_is_the_eager_step_to_rounding(track: str) -> None:
    cfg = world_cfg(track).replace(precision="fp32")
    data = batches(cfg, 24, "cuda")
    eager = Learner(cfg, "cuda")
    captured = Learner(cfg, "cuda", captured=True)
    assert captured.captured.capture
    a, b = train(eager, data, 18), train(captured, data, 18)
    assert len(captured.captured.graphs) == 2  # learning, then memory mode
    # Rounding: the graph's float32 lr and tau against the eager step's Python floats, and
    # kernels chosen apart, over 18 AdamW steps (seen on an H100: 1 weight of 1024 off by 2e-5).
    assert_close_runs(eager, captured, a, b, rtol=1e-3, atol=1e-4)


def test_a_captured_learner_resumes_from_a_state_dict_as_the_plain_one_goes_on() -> None:
    """Loading a state dict drops the graphs and sets the optimizer for the captured step
    again; off a GPU the resumed learner (a fresh one, and the saved one reloading its own
    state over its graphs), eager or replaying ``CallGraph``, goes on exactly as the plain one."""
    cfg = world_cfg("C")
    data = batches(cfg, 12)
    plain = Learner(cfg)
    train(plain, data[:6], 99)
    a = train(plain, data[6:], 99)
    for make in (lambda: Learner(cfg, captured=True), lambda: graphed(cfg)):
        first, fresh = make(), make()
        train(first, data[:6], 99)
        graph = first.captured.graph is not None
        assert bool(first.captured.graphs) == graph  # a graph captured before the state was saved
        # a copy for each, as a checkpoint read back is: AdamW's load_state_dict keeps the very
        # tensors it is given where their device and dtype fit (a state loaded twice is shared)
        state = first.state_dict()
        fresh.load_state_dict(copy.deepcopy(state))
        first.load_state_dict(copy.deepcopy(state))
        for learner in (fresh, first):
            assert learner.optimizer.param_groups[0]["lr"] is learner.captured.lr
            assert not learner.captured.graphs and not learner.captured.eager_steps
        assert_same_learners(plain, fresh, a, train(fresh, data[6:], 99))
        assert_same_learners(plain, first, a, train(first, data[6:], 99))
        assert bool(fresh.captured.graphs) == graph == bool(first.captured.graphs)
