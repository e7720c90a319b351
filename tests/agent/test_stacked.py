"""agent.stacked.StackedLearner: S seeds trained as one, each seed's metrics, weights and memory
those of its own plain learner (``Learner``) on its own stream, to rounding."""

from __future__ import annotations

import pytest
import torch

import env
from agent import AgentConfig, Learner, StreamSource
from agent.stacked import StackedLearner

SEEDS = (5, 8)


def config(track: str, seed: int, **kw) -> AgentConfig:
    return AgentConfig.of_size(
        "tiny", track=track, seed=seed, detector_warmup=0, push_pair="input",
        memory_scope="group", batch_size=8, group_size=4, memory_write="every", context_frames=2,
        horizons=(2, 4), per_horizon=True, input_scale=1 / 255, vary_memory=True,
        stream_cache=False, total_steps=40, entry_frames=3, precision="fp32", **kw,
    )  # fmt: skip


def stream(cfg: AgentConfig, n: int) -> list:
    """n batches of the seed's own worlds stream (its generators seeded by its seed)."""
    vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None)
    sched = env.WorldSchedule(vec, "train", episode_steps=(6, 12), seed=cfg.seed, group_size=4)
    source = StreamSource(sched, cfg, seed=cfg.seed)
    return [source.next() for _ in range(n)]


def close(x: torch.Tensor, y: torch.Tensor, what: str, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    torch.testing.assert_close(x, y, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize(("track", "kw"), [("A", {}), ("B", {}), ("C", {}), ("E", {}), ("D", {"oracle": True}), ("C", {"memory_read": "all"})])
def test_each_stacked_seed_trains_as_its_own_plain_learner(track: str, kw: dict) -> None:
    cfgs = [config(track, s, **kw) for s in SEEDS]
    steps, freeze = 14, 10
    data = [stream(c, steps) for c in cfgs]
    singles = [Learner(c) for c in cfgs]
    stacked = StackedLearner(cfgs)
    sizes = []
    for t in range(steps):
        if t == freeze:  # memory mode: the weights stop, the memories go on
            stacked.freeze_weights()
            for one in singles:
                one.freeze_weights()
        got = stacked.update([d[t] for d in data])
        sizes.append(max(float(m.buffer_size) for m in got))
        for s, one in enumerate(singles):
            want = one.update(data[s][t])
            for name, x, y in zip(want._fields, want, got[s], strict=True):
                close(y, x, f"step {t}, seed {SEEDS[s]}: {name}")
    states = stacked.stack.state_dicts()
    for s, one in enumerate(singles):
        # Weights after 10 AdamW steps: to rounding, but for the attention's key bias, which
        # softmax ignores: its gradient is zero but for rounding, and Adam, dividing each
        # gradient by its own size, turns that rounding into steps of up to lr (held to that).
        for name, p in one.nets.state_dict().items():
            x, what = states[s][name], f"seed {SEEDS[s]}: {name}"
            if name.endswith("qkv.bias"):
                d = p.shape[0] // 3
                close(x[d : 2 * d], p[d : 2 * d], what, rtol=0.0, atol=freeze * cfgs[0].lr)
                x, p = torch.cat([x[:d], x[2 * d :]]), torch.cat([p[:d], p[2 * d :]])
            close(x, p, what, rtol=1e-3, atol=1e-4)
        w = one.buffer.groups
        rows = slice(s * w, (s + 1) * w)
        assert torch.equal(stacked.buffer.size[rows], one.buffer.size)
        close(stacked.buffer.pairs[rows], one.buffer.pairs, "memory")
    assert stacked.step == steps and max(sizes) > 0  # the memories were written


def test_a_stack_refuses_what_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="but for the seed"):
        StackedLearner([config("C", 1), config("C", 2, lr=1.0)])
    with pytest.raises(ValueError, match="memory_scope='group'"):
        StackedLearner([config("C", 1).replace(memory_scope="global", entry_frames=2)])
    with pytest.raises(ValueError, match="encoder_batch"):
        StackedLearner([config("C", s).replace(encoder_batch=4) for s in SEEDS])
    with pytest.raises(ValueError, match="recon_weight"):
        StackedLearner([config("C", s).replace(recon_weight=1.0) for s in SEEDS])
    stacked = StackedLearner([config("C", s) for s in SEEDS])
    with pytest.raises(ValueError, match="expected 2 batches"):
        stacked.update([])


def test_the_seeds_blocks_of_one_shared_env_feed_the_stack_as_their_own_streams() -> None:
    """``env.blocks`` as the stacked runs use it: one shared env of the seeds' blocks, each under
    its seed's schedule and read by its own ``StreamSource``: their batches are each seed's own
    stream's, and train the stack as each seed's own stream trains its plain learner."""
    from env.blocks import SharedWorlds

    cfgs = [config("C", s) for s in SEEDS]
    b = cfgs[0].batch_size
    shared = SharedWorlds(env.MovingMNISTVectorEnv(len(SEEDS) * b, max_episode_steps=None),
                          len(SEEDS))  # fmt: skip
    sources = [
        StreamSource(env.WorldSchedule(blk, "train", episode_steps=(6, 12), seed=c.seed,
                                       group_size=4), c, seed=c.seed)
        for blk, c in zip(shared.blocks, cfgs, strict=True)
    ]  # fmt: skip
    StreamSource.start_together(sources)  # the blocks step together (as runners.online.stacked)
    data = [stream(c, 12) for c in cfgs]
    singles = [Learner(c) for c in cfgs]
    stacked = StackedLearner(cfgs)
    for t in range(12):
        batches = [src.next() for src in sources]
        for s in range(len(SEEDS)):
            assert torch.equal(batches[s].frames, data[s][t].frames), (t, s)
        got = stacked.update(batches)
        for s, one in enumerate(singles):
            want = one.update(data[s][t])
            for name, x, y in zip(want._fields, want, got[s], strict=True):
                close(y, x, f"step {t}, seed {SEEDS[s]}: {name}")


def run(learner, data: list, steps: int, freeze: int | None = None) -> list:
    out = []
    for t in range(steps):
        if t == freeze:
            learner.freeze_weights()
        out.append(learner.update([d[t] for d in data]))
    return out


def test_off_a_gpu_the_captured_stack_is_the_plain_stack_bit_for_bit() -> None:
    """``captured=True`` runs ``agent.capture``'s path (tensor knobs, drawn memory) eagerly
    off a GPU: the plain stacked step's numbers exactly, through a freeze."""
    cfgs = [config("C", s) for s in SEEDS]
    data = [stream(c, 10) for c in cfgs]
    plain, captured = StackedLearner(cfgs), StackedLearner(cfgs, captured=True)
    assert captured.captured is not None and not captured.captured.capture
    for a, b in zip(run(plain, data, 10, 7), run(captured, data, 10, 7), strict=True):
        for ma, mb in zip(a, b, strict=True):
            assert all(torch.equal(x, y) or (x.isnan() & y.isnan()) for x, y in zip(ma, mb, strict=True))
    for name, p in plain.stack.params.items():
        assert torch.equal(p, captured.stack.params[name]), name


@pytest.mark.gpu
def test_on_a_gpu_the_captured_stack_is_the_eager_stack_to_rounding() -> None:
    cfgs = [config("C", s) for s in SEEDS]
    data = [stream(c, 16) for c in cfgs]
    for d in data:
        d[:] = [b.to("cuda") for b in d]
    eager, captured = StackedLearner(cfgs, "cuda"), StackedLearner(cfgs, "cuda", captured=True)
    assert captured.captured.capture
    for a, b in zip(run(eager, data, 16, 12), run(captured, data, 16, 12), strict=True):
        for ma, mb in zip(a, b, strict=True):
            for name, x, y in zip(ma._fields, ma, mb, strict=True):
                close(y, x, name, rtol=1e-3, atol=1e-4)
    assert len(captured.captured.graphs) == 2  # learning, then memory mode


def test_each_seed_state_is_a_lone_learner_state_and_back() -> None:
    """A stacked seed's state dict, loaded into a lone learner of its config, goes on as the
    seed goes on in the stack; lone learners' state dicts, loaded into a fresh stack, go on as
    the lone learners do (to rounding)."""
    cfgs = [config("C", s) for s in SEEDS]
    data = [stream(c, 14) for c in cfgs]
    stacked = StackedLearner(cfgs)
    run(stacked, [d[:8] for d in data], 8)
    lone = [Learner(c) for c in cfgs]
    for one, state in zip(lone, stacked.state_dicts(), strict=True):
        assert state.keys() == one.state_dict().keys()  # a lone learner's state, key for key
        one.load_state_dict(state)
    again = StackedLearner(cfgs)
    again.load_state_dicts([one.state_dict() for one in lone])
    rest = [d[8:] for d in data]
    for t, (got, other) in enumerate(zip(run(stacked, rest, 6), run(again, rest, 6), strict=True)):
        for s, one in enumerate(lone):
            want = one.update(rest[s][t])
            for name, x, y, z in zip(want._fields, want, got[s], other[s], strict=True):
                close(y, x, f"step {t}, seed {SEEDS[s]}: {name}")
                close(z, x, f"step {t}, seed {SEEDS[s]} (loaded stack): {name}")
