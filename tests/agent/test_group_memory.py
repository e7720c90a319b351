"""Group memory: one FIFO per group of streams sharing a world, read by its peers."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import env
from agent import AgentConfig, Learner, StreamSource
from agent.memory import AttentionAggregator, GroupBuffer
from agent.memory.read import MemoryView
from agent.objective import columns
from agent.step import memory_codes


def world_cfg(track: str = "C", **kw) -> AgentConfig:
    base = {"push_pair": "input", "memory_scope": "group", "batch_size": 6, "group_size": 3,
            "memory_write": "every", "buffer_capacity": 8, "context_frames": 2,
            "horizons": (2, 4), "per_horizon": True, "input_scale": 1 / 255}  # fmt: skip
    return AgentConfig.of_size("tiny", track=track, **{**base, **kw})


def grouped_source(cfg: AgentConfig, seed: int = 0, residency=(2, 3)) -> StreamSource:
    vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None)
    sched = env.WorldSchedule(vec, "train", episode_steps=(8, 12), seed=seed,
                              group_size=cfg.group_size, residency=residency)  # fmt: skip
    return StreamSource(sched, cfg, seed=seed)


# ---------------------------------------------------------------------------- the buffer
def test_world_buffer_writes_each_groups_writers_in_order_and_wraps() -> None:
    buf = GroupBuffer(2, 3, 1)
    group = torch.tensor([0, 0, 1, 1])
    episode = torch.tensor([10, 11, 12, 13])
    for step in range(3):  # group 0: both streams write; group 1: only its second stream
        pairs = torch.tensor([1.0, 2.0, 3.0, 4.0]).add(10 * step).view(4, 1, 1).expand(4, 2, 1)
        write = torch.tensor([True, True, False, True])
        buf.push(pairs, group, episode, torch.zeros(4, dtype=torch.long), step, write)
    assert buf.size.tolist() == [3, 3] and buf.ptr.tolist() == [0, 0]
    # group 0 wrote 6 entries into 3 slots: the newest three, oldest first from ptr
    assert buf.pairs[0, :, 0, 0].tolist() == [12.0, 21.0, 22.0]
    assert buf.episode[0].tolist() == [11, 10, 11]
    assert buf.pairs[1, :, 0, 0].tolist() == [4.0, 14.0, 24.0]
    assert buf.steps[1].tolist() == [0, 1, 2]
    assert buf.age()[0].tolist() == [2, 1, 0]
    other = GroupBuffer(2, 3, 1)
    other.load_state_dict(buf.state_dict())
    assert torch.equal(other.pairs, buf.pairs) and torch.equal(other.episode, buf.episode)
    with pytest.raises(ValueError, match="group memory shape"):
        GroupBuffer(3, 3, 1).load_state_dict(buf.state_dict())
    # a group whose world id changes is emptied; the other keeps its entries
    buf.enter(group, torch.tensor([5, 5, 7, 7]))
    assert buf.size.tolist() == [0, 0]  # the first ids: both worlds are new
    buf.push(torch.ones(4, 2, 1), group, episode, torch.zeros(4, dtype=torch.long), 3,
             torch.ones(4, dtype=torch.bool))  # fmt: skip
    buf.enter(group, torch.tensor([5, 5, 9, 9]))
    assert buf.size.tolist() == [2, 0]


def test_a_peer_read_masks_the_samples_own_episode_and_vary_shows_the_newest_k() -> None:
    buf = GroupBuffer(1, 4, 1)
    group = torch.zeros(2, dtype=torch.long)
    for step in range(2):
        buf.push(torch.zeros(2, 2, 1), group, torch.tensor([100, 200]), torch.zeros(2).long(),
                 step, torch.ones(2, dtype=torch.bool))  # fmt: skip
    mine = torch.tensor([100, 200])
    peer = MemoryView.of_group(buf, group, mine)
    assert peer.mask.tolist() == [[False, True, False, True], [True, False, True, False]]
    everything = MemoryView.of_group(buf, group, None)
    assert everything.mask.all()
    newest_two = MemoryView.of_group(buf, group, None, torch.tensor([0.5, 0.0]))  # k = 2, 0
    assert newest_two.mask.tolist() == [[False, False, True, True], [False] * 4]


# ---------------------------------------------------------------------------- the forward
def test_each_worlds_entries_are_encoded_once_and_read_by_its_samples() -> None:
    cfg = world_cfg()
    learner = Learner(cfg)
    buf = learner.buffer
    g = torch.Generator().manual_seed(0)
    for step in range(5):
        buf.push(torch.randn(6, 2, cfg.latent_dim, generator=g), learner.groups,
                 torch.arange(6), torch.zeros(6).long(), step, torch.ones(6, dtype=torch.bool))
    rows = []
    handle = learner.nets.experience.register_forward_hook(
        lambda mod, inp, out: rows.append(inp[0].shape[0])
    )
    view = MemoryView.of_group(buf, learner.groups, torch.arange(6))
    codes = memory_codes(learner.nets, view, learner.spec)
    handle.remove()
    assert rows == [cfg.num_groups * cfg.buffer_capacity]  # W x cap rows, not B x cap
    assert codes.shape == (2, 8, cfg.exp_dim)
    # the grouped attention equals a per-sample memory holding each sample's world (the same
    # sums, in another order: to float32 rounding)
    z = torch.randn(6, cfg.latent_dim, generator=g)
    agg: AttentionAggregator = learner.nets.aggregator
    grouped = agg(z, codes, view.mask, learner.groups)
    per_sample = agg(z, codes[learner.groups], view.mask)
    torch.testing.assert_close(grouped.e_agg, per_sample.e_agg)
    torch.testing.assert_close(grouped.attn, per_sample.attn)
    assert (grouped.attn[~view.mask] == 0).all()


# ---------------------------------------------------------------------------- the step
def test_streams_write_their_worlds_memory_which_empties_when_the_world_changes() -> None:
    cfg = world_cfg(total_steps=200)
    learner = Learner(cfg)
    source = grouped_source(cfg)
    changes = 0
    # The step tags each group's FIFO should hold, oldest first: emptied with a new world, then
    # one tag (the step) per valid stream of the group, in stream order, the oldest dropped.
    tags: list[list[int]] = [[], []]
    for _ in range(70):
        batch = source.next()
        before = learner.buffer.key.clone()
        step = learner.step
        learner.update(batch)
        buf = learner.buffer
        key = batch.world_key.view(2, 3)[:, 0]
        assert torch.equal(buf.key, key)
        changed = key != before
        changes += int(changed.sum())
        # every filled entry was written in the group's current world, by one of its streams
        for g in range(2):
            filled = buf.mask()[g]
            writers = buf.episode[g][filled] % cfg.batch_size
            assert ((writers // cfg.group_size) == g).all()
            world_steps = buf.steps[g][filled]
            assert int(buf.size[g]) <= cfg.buffer_capacity
            if changed[g] and before[g] >= 0:
                assert int(buf.size[g]) == 0  # the first frame of a new world: none valid yet
            if changed[g]:
                tags[g] = []
            writers = int(batch.valid.view(2, 3)[g].sum())
            tags[g] = (tags[g] + [step] * writers)[-cfg.buffer_capacity :]
            assert int(buf.size[g]) == len(tags[g])
            newest_first = [int(buf.steps[g][(int(buf.ptr[g]) - 1 - a) % cfg.buffer_capacity])
                            for a in range(len(tags[g]))]  # fmt: skip
            assert newest_first == tags[g][::-1], (g, step)
            assert sorted(world_steps.tolist()) == sorted(tags[g])
    assert changes >= 2 + 2  # the first worlds, then at least one redraw per group


def test_world_memory_is_deterministic_and_resumes_exactly() -> None:
    cfg = world_cfg(total_steps=60, vary_memory=True)
    source = grouped_source(cfg)
    batches = [source.next() for _ in range(30)]
    a = Learner(cfg)
    for b in batches[:15]:
        a.update(b)
    state = copy.deepcopy(a.state_dict())  # (the live tensors go on changing)
    rest_a = columns([a.update(b) for b in batches[15:]])
    c = Learner(cfg)
    c.load_state_dict(state)
    rest_c = columns([c.update(b) for b in batches[15:]])
    for key in rest_a:
        np.testing.assert_array_equal(rest_a[key], rest_c[key], err_msg=key)


def test_the_boundary_detector_runs_per_world() -> None:
    cfg = world_cfg(memory_write="boundary", total_steps=60, detector_warmup=2, kappa=0.5)
    learner = Learner(cfg)
    source = grouped_source(cfg)
    assert learner.detector.mu.shape == (cfg.num_groups,)
    decisions = []
    update = learner.detector.update
    learner.detector.update = lambda s, active: decisions.append(update(s, active)) or decisions[-1]
    fired_any = 0
    for _ in range(40):
        batch = source.next()
        ptr, key = learner.buffer.ptr.clone(), learner.buffer.key.clone()
        learner.update(batch)
        fired = decisions[-1]
        assert fired.shape == (cfg.num_groups,)
        same_world = learner.buffer.key == key  # (a new world empties its memory)
        wrote = (learner.buffer.ptr != ptr) & same_world
        fired = fired & same_world
        writers = batch.valid.view(2, 3).sum(1)
        assert torch.equal(wrote, fired & (writers > 0))  # a world is written when it fired
        fired_any += int(fired.sum())
    assert 0 < fired_any < 40 * cfg.num_groups


GROUP_SIZE_4 = "group_size: must divide batch_size=6 (got 4)"
GROUP_SIZE_0 = "group_size: must be a positive integer (got 0)"
LARGER = ("group_size: larger than buffer_capacity=4 (a step writes up to group_size entries into "
          "a world's memory) (got 6)")  # fmt: skip
NEWEST = "memory_scope: group memory keeps the streams' own pairs: push_pair 'input' (got 'group')"


@pytest.mark.parametrize(
    ("kw", "message", "argv", "cli_message"),
    [
        ({"group_size": 4}, GROUP_SIZE_4, ["--batch-size", "6", "--group-size", "4"], GROUP_SIZE_4),
        ({"group_size": 0}, GROUP_SIZE_0, ["--group-size", "0"], GROUP_SIZE_0),
        ({"group_size": 6, "buffer_capacity": 4}, LARGER,
         ["--batch-size", "6", "--group-size", "6", "--buffer-capacity", "4"], LARGER),
        ({"memory_read": "own"}, "memory_read: expected one of peer, all (got 'own')",
         ["--memory-read", "own"], "--memory-read: expected one of 'peer', 'all', got 'own'"),
        ({"push_pair": "newest"}, NEWEST, ["--set", "push_pair=newest"], NEWEST),
    ],
    ids=["divide", "zero", "capacity", "read", "pair"],
)
def test_bad_options_are_one_line_errors(kw, message, argv, cli_message) -> None:
    """The config's own error is exactly one line; the same option on train_online's command
    line is that line, ``python -m runners.train_online: error: ...``, and exit status 2, before
    anything runs (``run_main`` over the command's config, resolved as ``main`` resolves it)."""
    from runners.online.command import TRAIN_PROG, build_config
    from tests.runners.cli_helpers import assert_one_line_error, main_error

    with pytest.raises(ValueError) as err:
        world_cfg(**kw)
    assert str(err.value) == message and "\n" not in message

    def main(args: list[str]) -> int:
        build_config(args)  # resolved as train_online's main resolves it, before any work
        return 0

    res = main_error(main, ["--preset", "tiny", *argv], TRAIN_PROG)
    assert assert_one_line_error(res) == f"{TRAIN_PROG}: error: {cli_message}"


@pytest.mark.parametrize("context", [1, 2, 3])
@pytest.mark.parametrize("cache", [True, False])
def test_an_entry_of_three_frames_is_three_consecutive_frames_up_to_the_input(
    fake_env_cls, pixel_encoder, context: int, cache: bool
) -> None:
    """Frames carry their time in a pixel; an encoder returning it makes entries readable: each
    is (t-2, t-1, t) with t the writing step's input, whatever the context and the cache."""
    cfg = AgentConfig.of_size(
        "tiny", track="C", push_pair="input", context_frames=context, memory_scope="group",
        group_size=2, memory_write="every", entry_frames=3, stream_cache=cache,
    )  # fmt: skip
    assert cfg.past_frames == max(context, 3)
    learner = Learner(cfg)
    learner.nets.encoder = pixel_encoder(cfg.latent_dim, pixel=1)
    learner.freeze_weights()
    source = StreamSource(fake_env_cls([250] * cfg.batch_size), cfg)
    checked = 0
    for _ in range(30):
        batch = source.next()
        t_input = batch.frames[:, cfg.input_position, 0, 0, 1].float()
        learner.update(batch)
        buf = learner.buffer
        entries = buf.pairs[buf.mask()][..., 0]  # (M, 3) frame times
        assert entries.shape[1] == 3
        np.testing.assert_array_equal(entries[:, 1] - entries[:, 0], 1)
        np.testing.assert_array_equal(entries[:, 2] - entries[:, 1], 1)
        newest = buf.pairs[..., -1, 0].gather(1, ((buf.ptr - 1) % buf.capacity).view(-1, 1))
        assert torch.equal(newest.view(-1).repeat_interleave(cfg.group_size), t_input)
        checked += len(entries)
    assert checked > 0
