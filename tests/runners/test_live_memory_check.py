"""The live view's check of whether memory carries the world (``runners.live.drivers``): D of
the last batch with peer memory against D with another world's memory."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))
from test_group_memory import grouped_source, world_cfg  # noqa: E402

from agent.learner import Learner  # noqa: E402
from agent.step import world_key  # noqa: E402
from runners.live.drivers import other_world_groups, peer_and_wrong_error  # noqa: E402


def test_other_world_groups_is_the_next_group_in_another_world() -> None:
    assert other_world_groups(torch.tensor([5, 5, 7, 7])).tolist() == [2, 2, 0, 0]
    assert other_world_groups(torch.tensor([1, 2, 3])).tolist() == [1, 2, 0]
    assert other_world_groups(torch.tensor([1, 1, 2])).tolist() == [2, 2, 0]
    assert other_world_groups(torch.tensor([3, 3, 3])).tolist() == [-1, -1, -1]
    assert other_world_groups(torch.tensor([4])).tolist() == [-1]


def trained(memory_read: str) -> tuple[Learner, object]:
    cfg = world_cfg("C", memory_read=memory_read)
    source, learner = grouped_source(cfg, seed=3), Learner(cfg)
    step = 0
    while True:  # 30 steps, then up to a batch with a valid window in each group
        batch = source.next()
        learner.update(batch)
        step += 1
        if step >= 30 and batch.valid.view(2, -1).any(1).all():
            return learner, batch


def test_the_wrong_world_reading_differs_and_is_the_peer_one_for_equal_memories() -> None:
    learner, batch = trained("all")
    groups = world_key(batch)[:: learner.cfg.group_size]
    assert groups[0] != groups[1]  # two groups, two worlds
    peer, wrong = peer_and_wrong_error(learner, batch)
    assert peer != wrong and 0 < peer < 5 and 0 < wrong < 5
    # The same entries in both groups' memories (read whole: memory_read="all"): the reading
    # of another world's memory is then the peer reading, bit for bit.
    buf = learner.buffer
    for t in (buf.pairs, buf.size, buf.ptr, buf.episode, buf.steps, buf.shifted):
        t[1] = t[0]
    peer, wrong = peer_and_wrong_error(learner, batch)
    assert peer == wrong


def test_no_reading_where_every_group_lives_in_one_world() -> None:
    learner, batch = trained("peer")
    assert peer_and_wrong_error(learner, batch) is not None
    one_world = dataclasses.replace(batch, world_key=torch.zeros_like(batch.world_key))
    assert peer_and_wrong_error(learner, one_world) is None
