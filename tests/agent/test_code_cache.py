"""``cfg.code_cache``: a world memory's e_i computed once per entry (``agent.memory.codes``).
Exact with still weights; while training it changes the numbers (docs/agent.md, "Speed")."""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch

import env
from agent import AgentConfig, Learner, StreamSource
from agent.metrics import stack
from agent.speed import Speed


def world_cfg(**kw) -> AgentConfig:
    base = {"push_pair": "input", "memory_scope": "world", "batch_size": 6, "group_size": 3,
            "memory_write": "every", "buffer_capacity": 8, "context_frames": 2,
            "horizons": (2, 4), "per_horizon": True, "input_scale": 1 / 255,
            "entry_frames": 3, "total_steps": 60}  # fmt: skip
    return AgentConfig.from_preset("tiny", track="C", **{**base, **kw})


def batches(cfg: AgentConfig, n: int, seed: int = 0) -> list:
    vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None)
    sched = env.WorldSchedule(vec, "train", episode_steps=(8, 12), seed=seed,
                              group_size=cfg.group_size, residency=(2, 3))  # fmt: skip
    source = StreamSource(sched, cfg, seed=seed)
    return [source.next() for _ in range(n)]


def run(cfg: AgentConfig, data: list, frozen: bool = False, speed: Speed | None = None):
    learner = Learner(cfg, speed=speed if speed is not None else Speed())
    if frozen:
        learner.freeze_weights()
    return learner, stack([learner.update(b) for b in data])


def test_with_still_weights_held_codes_are_the_codes_recomputed() -> None:
    """Frozen weights (the memory phase after a switch): the held e_i are the ones the plain
    step recomputes, so metrics and memory entries match (to rounding: the experience encoder
    runs on fewer rows)."""
    data = batches(world_cfg(), 30)
    plain, a = run(world_cfg(), data, frozen=True)
    fast, b = run(world_cfg(code_cache=True), data, frozen=True)
    assert np.nanmax(a["memory/buffer_size"]) > 4  # the memories fill
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=key)
    torch.testing.assert_close(fast.buffer.pairs, plain.buffer.pairs, rtol=1e-5, atol=1e-6)


def test_each_entry_meets_the_experience_encoder_once() -> None:
    cfg = world_cfg(code_cache=True)
    data = batches(cfg, 25)
    learner = Learner(cfg, speed=Speed())
    rows: list[int] = []
    learner.nets.experience.register_forward_hook(lambda m, i, o: rows.append(i[0].shape[0]))
    written = []
    for batch in data:
        before = learner.buffer.steps.clone()
        learner.update(batch)
        written.append(int((learner.buffer.steps != before).sum()))
    assert rows[0] == 0  # an empty memory
    # every later step encodes at most what the step before wrote (read by a peer): never more
    assert all(r <= w for r, w in zip(rows[1:], written[:-1], strict=True))
    assert sum(rows) > cfg.batch_size  # ... and it does encode
    # the plain step encodes the read slots of every world at every step
    plain_rows: list[int] = []
    plain = Learner(world_cfg(), speed=Speed())
    plain.nets.experience.register_forward_hook(lambda m, i, o: plain_rows.append(i[0].shape[0]))
    for batch in data:
        plain.update(batch)
    assert sum(plain_rows) > 3 * sum(rows)


def test_the_experience_encoder_still_learns_from_new_entries() -> None:
    cfg = world_cfg(code_cache=True)
    learner = Learner(cfg, speed=Speed())
    start = copy.deepcopy(learner.nets.experience.state_dict())
    for batch in batches(cfg, 12):
        learner.update(batch)
    moved = [not torch.equal(start[k], v) for k, v in learner.nets.experience.state_dict().items()]
    assert all(moved)


@pytest.mark.parametrize("beside", [False, True])
def test_training_with_held_codes_is_deterministic_and_resumes_exactly(beside: bool) -> None:
    cfg = world_cfg(code_cache=True, vary_memory=True)
    data = batches(cfg, 30)
    speed = Speed(visible_slots=True, beside=beside)
    a = Learner(cfg, speed=speed)
    for batch in data[:15]:
        a.update(batch)
    buf = io.BytesIO()  # through bytes, as a checkpoint
    torch.save(a.state_dict(), buf)
    rest_a = stack([a.update(batch) for batch in data[15:]])
    buf.seek(0)
    c = Learner(cfg, speed=speed)
    c.load_state_dict(torch.load(buf, weights_only=False))
    rest_c = stack([c.update(batch) for batch in data[15:]])
    for key in rest_a:
        np.testing.assert_array_equal(rest_a[key], rest_c[key], err_msg=key)
    _, plain = run(world_cfg(vary_memory=True), data)
    _, again = run(cfg, data, speed=speed)
    np.testing.assert_array_equal(plain["loss/pred"][0], again["loss/pred"][0])  # nothing held
    assert not np.array_equal(plain["loss/pred"], again["loss/pred"])  # then the numbers move


def test_a_checkpoint_without_held_codes_starts_by_encoding_every_entry() -> None:
    cfg = world_cfg(code_cache=True)
    data = batches(cfg, 10)
    learner = Learner(cfg, speed=Speed())
    for batch in data[:8]:
        learner.update(batch)
    state = learner.state_dict()
    del state["codes"]
    other = Learner(cfg, speed=Speed())
    other.load_state_dict(state)
    rows: list[int] = []
    other.nets.experience.register_forward_hook(lambda m, i, o: rows.append(i[0].shape[0]))
    other.update(data[8])
    assert rows[0] > cfg.batch_size  # every entry read, not only the newest


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"code_cache": True, "memory_scope": "per_stream"}, "code_cache: .* needs memory_scope"),
     ({"code_cache": 1}, "code_cache: must be true or false")],
)  # fmt: skip
def test_bad_code_cache_options_are_one_line_errors(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        world_cfg(**kw)
