"""The speed layers (``agent.speed``) against the plain step (``Speed()``).

Layers that run the same kernels on the same inputs (``LazyPair``, ``Beside``) must give the
plain step's numbers bit for bit over several steps with memory writes. ``VisibleSlots`` runs the
experience encoder's matmuls on fewer rows, which a BLAS may block (and so round) differently:
it is checked on one step against a tolerance derived from fp32 arithmetic
(``fp32.assert_reordered``). The stream
latent cache has its own tests (``test_latent_cache.py``).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from fp32 import assert_reordered

from agent import AgentConfig, DatasetSource, Learner, Speed, StreamSource, stack
from agent.speed import Beside, LazyPair, Plain, StreamCache, VisibleSlots

PAPER = {"track": "C"}  # the paper's memory: one shared FIFO, its newest pair on a boundary
OWN = {"track": "E", "memory_scope": "group", "group_size": 1, "memory_read": "all",
       "memory_write": "every", "vary_memory": True, "push_pair": "input", "context_frames": 2,
       "horizons": (2, 4, 8)}  # each stream its own memory (a group memory of one stream)  # fmt: skip


def layers(paths: Plain) -> list[type]:
    out = []
    while True:
        out.append(type(paths))
        if not hasattr(paths, "inner"):
            return out
        paths = paths.inner


def test_speed_builds_the_layers_it_names() -> None:
    cfg = AgentConfig.from_preset("tiny", **PAPER)
    assert layers(Speed().paths(cfg, None)) == [Plain]
    assert Speed.default("cuda") == Speed()  # a GPU: no host read, no second thread
    assert Speed.default("cpu").lazy_pair and Speed.default("cpu").visible_slots
    full = Speed(visible_slots=True, lazy_pair=True, beside=True).paths(cfg, None)
    assert layers(full) == [Beside, LazyPair, VisibleSlots, Plain]
    own = AgentConfig.from_preset("tiny", **OWN)
    assert LazyPair not in layers(Speed(lazy_pair=True).paths(own, None))
    assert StreamCache in layers(Learner(own.replace(stream_cache=True)).paths)


@pytest.mark.parametrize("track", ["A", "C"])
def test_the_plain_step_never_reads_a_tensor_on_the_host(
    track: str, frames: np.ndarray, no_host_reads
) -> None:
    """No .item()/bool()/float()/tolist() anywhere in the plain step (a GPU's default, where
    each would be a sync)."""
    cfg = AgentConfig.from_preset("tiny", track=track, detector_warmup=0)
    learner = Learner(cfg, speed=Speed())
    src = DatasetSource(frames, cfg, seed=0)
    batches = [src.next() for _ in range(3)]
    learner.update(batches[0])  # optimizer state is created on the first step
    with no_host_reads("update()"):
        for b in batches[1:]:
            learner.update(b)
    assert learner.step == 3


def run(cfg: AgentConfig, speed: Speed, source, steps: int = 8) -> tuple[dict, Learner, list]:
    """``steps`` updates; the metrics, the learner and the threads the EMA encoder ran on."""
    learner = Learner(cfg, speed=speed)
    seen: list[str] = []
    real = learner.nets.target.target.encode

    def where(x: torch.Tensor) -> torch.Tensor:
        seen.append(threading.current_thread().name)
        return real(x)

    learner.nets.target.target.encode = where  # type: ignore[method-assign]
    return stack([learner.update(source.next()) for _ in range(steps)]), learner, seen


def assert_same_bits(a: tuple, b: tuple) -> None:
    (ra, la, _), (rb, lb, _) = a, b
    assert ra["memory/boundary"].sum() >= 1  # a push happened: memory written, then read
    assert ra["memory/buffer_size"][-1] > 0
    for key in ra:
        np.testing.assert_array_equal(ra[key], rb[key], err_msg=key)
    assert torch.equal(la.buffer.pairs, lb.buffer.pairs)
    for (name, pa), pb in zip(la.nets.named_parameters(), lb.nets.parameters(), strict=True):
        assert torch.equal(pa, pb), name


@pytest.mark.parametrize(
    ("source", "over"),
    [
        ("dataset", PAPER),
        ("dataset", {"track": "A"}),
        ("dataset", {**PAPER, "memory_write": "every"}),
    ],
    ids=["C-paper", "A-paper", "C-every"],
)
def test_lazy_pair_changes_no_bit(source: str, over: dict, frames: np.ndarray) -> None:
    """The paper's pair encoded only on the steps that push it: the same encoder on the same
    frames with the same weights, so the same bits (where it does not apply, nothing changes)."""
    cfg = AgentConfig.from_preset("tiny", detector_warmup=2, kappa=0.01, **over)
    lazy = run(cfg, Speed(lazy_pair=True), DatasetSource(frames, cfg, seed=0))
    plain = run(cfg, Speed(), DatasetSource(frames, cfg, seed=0))
    assert (LazyPair in layers(lazy[1].paths)) == (len(over) == 1)
    assert_same_bits(lazy, plain)


@pytest.mark.parametrize(
    ("source", "over"),
    [("dataset", PAPER), ("stream", {**PAPER, "push_pair": "input"}), ("stream", OWN),
     ("dataset", {"track": "A"})],
    ids=["C-dataset", "C-stream-cached", "E-own-memory-cached", "A-dataset"],
)  # fmt: skip
def test_work_beside_the_online_encoder_changes_no_bit(
    source: str, over: dict, frames: np.ndarray, fake_env_cls
) -> None:
    """The EMA pass and the memory's e_i (forward, then backward from their leaf's gradient) on
    a second thread: the same kernels on the same inputs - the same bits as the plain step."""
    cfg = AgentConfig.from_preset("tiny", detector_warmup=2, kappa=0.01, **over)

    def src():
        if source == "stream":
            return StreamSource(fake_env_cls([400] * cfg.batch_size), cfg)
        return DatasetSource(frames, cfg, seed=0)

    beside, plain = run(cfg, Speed(beside=True), src()), run(cfg, Speed(), src())
    assert beside[2] and all(n.startswith("beside") for n in beside[2])
    assert plain[2] and not any(n.startswith("beside") for n in plain[2])
    if beside[1].nets.experience is not None:  # the memory's e_i got their backward there
        assert all(p.grad is not None for p in beside[1].nets.experience.parameters())
    assert_same_bits(beside, plain)


def test_beside_is_the_default_only_with_one_torch_thread() -> None:
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # each op already uses the cores: no second thread
        assert not Speed.default("cpu").beside
        torch.set_num_threads(1)
        assert Speed.default("cpu").beside == (len(__import__("os").sched_getaffinity(0)) > 1)
        # the cores the learner may count on, where other runs train at once
        assert not Speed.default("cpu", cores=1).beside and Speed.default("cpu", cores=2).beside
        assert not Speed.default("cuda", cores=4).beside
    finally:
        torch.set_num_threads(threads)


# The longest sum of a tiny-preset step: the first convolution's weight gradient, over the
# batch's B * 32 * 32 output positions (B = 8).
LONGEST_SUM = 8 * 32 * 32


def test_visible_slots_compute_the_plain_steps_numbers(frames: np.ndarray, fake_env_cls) -> None:
    """One step from the same state with filled memories, one a stream: the same e_i on the visible
    slots, and the same loss, metrics and gradients, within fp32 reordering (``assert_reordered``)."""
    cfg = AgentConfig.from_preset("tiny", detector_warmup=2, kappa=0.01, **OWN)
    warm = Learner(cfg, speed=Speed())
    src = StreamSource(fake_env_cls([400] * cfg.batch_size), cfg)
    for _ in range(6):  # fill the memories (memory_write "every")
        warm.update(src.next())
    batch, state = src.next(), warm.state_dict()
    assert int(warm.buffer.size.min()) >= 5
    out = []
    for speed in (Speed(visible_slots=True), Speed()):
        learner = Learner(cfg, speed=speed)
        learner.load_state_dict(state)
        memory = learner.memory_view(training=True)
        codes = learner.paths.codes(learner.model, memory, grad=False).result()
        rec = stack([learner.update(batch)])
        grads = {n: p.grad for n, p in learner.nets.named_parameters() if p.grad is not None}
        out.append((memory.mask, codes, rec, grads))
    (mask, ca, ra, ga), (mask_b, cb, rb, gb) = out
    assert torch.equal(mask, mask_b) and 0 < int(mask.sum()) < mask.numel()
    assert_reordered(ca[mask], cb[mask], LONGEST_SUM, "e_i on the visible slots")
    assert not ca[~mask].any()  # the hidden slots are never encoded
    for key in ra:
        assert_reordered(torch.from_numpy(ra[key]), torch.from_numpy(rb[key]), LONGEST_SUM, key)
    assert ga.keys() == gb.keys() and any(n.startswith("experience") for n in ga)
    for name in ga:
        assert_reordered(ga[name], gb[name], LONGEST_SUM, name)


def test_docs_show_the_step_as_it_is() -> None:
    """docs/agent.md shows ``jepa_step`` verbatim (regenerate the block when the step changes)."""
    import inspect
    from pathlib import Path

    from agent.step import jepa_step

    doc = (Path(__file__).resolve().parents[2] / "docs" / "agent.md").read_text()
    assert f"```python\n{inspect.getsource(jepa_step).rstrip()}\n```" in doc


def device_world_step(track: str, device: str) -> tuple[Learner, object]:
    """A plain-step learner of the worlds protocol's kind (group memory written every step) and
    a stream source over worlds stepped and rendered on ``device`` (short episodes)."""
    import env
    from agent import StreamSource

    cfg = AgentConfig.from_preset(
        "tiny", track=track, detector_warmup=0, push_pair="input", memory_scope="group",
        batch_size=8, group_size=4, memory_write="every", context_frames=2, horizons=(2, 4),
        per_horizon=True, input_scale=1 / 255,
    )  # fmt: skip
    vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None, device=device)
    sched = env.WorldSchedule(vec, "train", episode_steps=(6, 12), seed=0, group_size=4)
    source = StreamSource(sched, cfg, device=device, seed=0)
    return Learner(cfg, device=device, speed=Speed()), source


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

    with pytest.raises(AssertionError, match=r"2x tests/agent/test_speed\.py:\d+"):
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
