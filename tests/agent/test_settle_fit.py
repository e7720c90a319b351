"""Settle, then fit: the reservoir of settled windows and the learner's fit updates on it."""

from __future__ import annotations

import copy

import pytest
import torch

import env
from agent import AgentConfig, Learner, StreamSource
from agent.reservoir import Reservoir


def world_cfg(**kw) -> AgentConfig:
    base = {"push_pair": "input", "memory_scope": "group", "batch_size": 6, "group_size": 3,
            "memory_write": "every", "buffer_capacity": 8, "context_frames": 2, "entry_frames": 3,
            "horizons": (2, 4), "per_horizon": True, "input_scale": 1 / 255, "vary_memory": True,
            "predictor_blocks": 2, "total_steps": 20, "settle": 0.2, "fit_updates": 2, "fit_batch": 6, "fit_worlds": 2,
            "reservoir_size": 40}  # fmt: skip
    return AgentConfig.of_size("tiny", **{**base, **kw})


def source(cfg: AgentConfig, seed: int = 0) -> StreamSource:
    vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None)
    sched = env.WorldSchedule(vec, "train", episode_steps=(8, 12), seed=seed,
                              group_size=cfg.group_size, residency=(1, 2))  # fmt: skip
    return StreamSource(sched, cfg, seed=seed)


def filled(n: int, size: int, worlds: int = 3, seed: int = 0) -> Reservoir:
    """A reservoir offered n windows whose latents encode their number, world = number % worlds,
    episode = number // 2 (two windows an episode)."""
    r = Reservoir(size, context=2, entry=3, horizons=2, latent_dim=1, physics_dim=4, seed=seed)
    num = torch.arange(n, dtype=torch.float32)
    valid = torch.ones(n, dtype=torch.bool)
    valid[::5] = False  # every fifth is invalid and never enters
    world = torch.arange(n) % worlds
    r.add(num.view(n, 1, 1).expand(n, 2, 1), num.view(n, 1, 1).expand(n, 3, 1),
          num.view(n, 1, 1).expand(n, 2, 1), world.float().view(n, 1).expand(n, 4), world,
          torch.arange(n) // 2, valid)  # fmt: skip
    return r


# ---------------------------------------------------------------------------- the reservoir
def test_the_reservoir_keeps_valid_windows_and_a_uniform_sample_once_full() -> None:
    r = filled(30, 100)
    assert r.seen == 24 and r.filled == 24  # 6 of 30 invalid
    kept = r.ctx[: r.filled, 0, 0].long()
    assert kept.tolist() == [i for i in range(30) if i % 5]  # in order while there is room
    assert torch.equal(r.world[: r.filled], kept % 3) and torch.equal(r.episode[: r.filled], kept // 2)
    # Offered 10,000 windows into 100 slots, each window is kept with probability 1/100: the
    # kept ones' mean number is the offered mean's (about 5,000), not the newest's.
    counts = torch.zeros(3)
    for seed in range(3):
        big = Reservoir(100, 2, 3, 2, 1, 4, seed=seed)
        for start in range(0, 10_000, 500):  # offered in steps, as a run does
            num = torch.arange(start, start + 500, dtype=torch.float32)
            w = torch.zeros(500, dtype=torch.long)
            big.add(num.view(-1, 1, 1).expand(-1, 2, 1), num.view(-1, 1, 1).expand(-1, 3, 1),
                    num.view(-1, 1, 1).expand(-1, 2, 1), None, w, w, torch.ones(500, dtype=torch.bool))  # fmt: skip
        assert big.seen == 10_000 and big.filled == 100
        counts[seed] = big.ctx[:, 0, 0].mean()
    assert 4_000 < counts.mean() < 6_000


def test_a_draw_mixes_worlds_and_reads_only_its_worlds_other_episodes() -> None:
    r = filled(300, 200, worlds=5)
    d = r.draw(groups=16, per_group=4, capacity=12, peer=True, vary=False)
    assert d.ctx.shape == (64, 2, 1) and d.target.shape == (64, 2, 1) and d.physics.shape == (64, 4)
    assert d.memory.pairs.shape == (16, 12, 3, 1) and d.memory.mask.shape == (64, 12)
    num = d.ctx[:, 0, 0].long()
    world = num % 5
    assert torch.equal(world.view(16, 4), world.view(16, 4)[:, :1].expand(16, 4))  # one world a group
    assert torch.equal(d.physics[:, 0].long(), world)  # each window's own physics
    entries = d.memory.pairs[:, :, 0, 0].long()  # (G, cap) the entries' numbers
    assert torch.equal(entries % 5, world.view(16, 4)[:, :1].expand(16, 12))  # the world's own
    own_episode = (num // 2).unsqueeze(1)
    expected = (entries[d.memory.group] // 2) != own_episode  # peer: never the window's episode
    assert torch.equal(d.memory.mask, expected) and not d.memory.mask.all()
    assert len(set(world.tolist())) > 1  # a minibatch mixes worlds
    varied = r.draw(groups=64, per_group=2, capacity=12, peer=True, vary=True)
    seen = varied.memory.mask.sum(1)
    assert seen.min() == 0 and seen.max() > 6  # k uniform over 0..available


def test_the_reservoir_resumes_its_draws_exactly() -> None:
    r = filled(300, 50)
    copy_ = Reservoir(50, 2, 3, 2, 1, 4, seed=123)
    copy_.load_state_dict(copy.deepcopy(r.state_dict()))
    a, b = r.draw(4, 3, 5, True, True), copy_.draw(4, 3, 5, True, True)
    assert torch.equal(a.ctx, b.ctx) and torch.equal(a.memory.mask, b.memory.mask)
    with pytest.raises(RuntimeError, match="empty"):
        Reservoir(5, 2, 3, 2, 1, 4).draw(1, 1, 1, True, True)


# ---------------------------------------------------------------------------- the learner
@pytest.mark.parametrize("oracle", [False, True])
def test_after_the_settle_the_encoder_and_target_hold_and_the_predictor_fits(oracle: bool) -> None:
    cfg = world_cfg(track="C", oracle=oracle)
    learner, src = Learner(cfg), source(cfg)
    for _ in range(cfg.settle_at):
        learner.update(src.next())
    assert learner.reservoir.seen == 0  # nothing kept before the settle
    enc = copy.deepcopy(learner.nets.encoder.state_dict())
    tgt = copy.deepcopy(learner.nets.target.state_dict())
    pred = copy.deepcopy(learner.nets.predictor.state_dict())
    for _ in range(5):
        m = learner.update(src.next())
        assert torch.isfinite(m.loss_pred)
    for k, v in learner.nets.encoder.state_dict().items():
        assert torch.equal(v, enc[k]), k
    for k, v in learner.nets.target.state_dict().items():
        assert torch.equal(v, tgt[k]), k
    assert any(not torch.equal(v, pred[k]) for k, v in learner.nets.predictor.state_dict().items())
    assert 0 < learner.reservoir.seen <= 5 * cfg.batch_size
    learner.freeze_weights()  # memory mode: neither fit nor kept windows
    seen, pred = learner.reservoir.seen, copy.deepcopy(learner.nets.predictor.state_dict())
    learner.update(src.next())
    assert learner.reservoir.seen == seen
    assert all(torch.equal(v, pred[k]) for k, v in learner.nets.predictor.state_dict().items())


def test_a_settled_learner_resumes_exactly() -> None:
    cfg = world_cfg()
    a, src_a = Learner(cfg), source(cfg)
    batches = [src_a.next() for _ in range(10)]
    for b in batches[:7]:
        a.update(b)
    b_ = Learner(cfg)
    b_.load_state_dict(copy.deepcopy(a.state_dict()))
    for b in batches[7:]:
        ma, mb = a.update(b), b_.update(b)
        assert torch.equal(ma.loss_pred, mb.loss_pred)
    for k, v in a.nets.state_dict().items():
        assert torch.equal(v, b_.nets.state_dict()[k]), k


def test_settle_is_refused_where_it_cannot_work() -> None:
    with pytest.raises(ValueError, match="settle"):
        AgentConfig.of_size("tiny", settle=0.5)  # the paper's global memory
    with pytest.raises(ValueError, match="fit_batch"):
        world_cfg(fit_batch=7)
    with pytest.raises(ValueError, match="fit_worlds"):
        world_cfg(fit_worlds=0)
    for bad in (0.0, 1.5, -1):
        with pytest.raises(ValueError, match="settle"):
            world_cfg(settle=bad)


def test_the_fits_rate_restarts_at_the_settle_and_decays_to_zero() -> None:
    from agent.step import fit_lr_at, lr_at

    cfg = world_cfg(settle=1 / 3, total_steps=300, fit_lr=2e-3)
    assert fit_lr_at(cfg, 100) == 2e-3
    assert fit_lr_at(cfg, 200) == pytest.approx(1e-3)
    assert fit_lr_at(cfg, 300) == 0.0 and fit_lr_at(cfg, 400) == 0.0
    plain = cfg.replace(fit_lr=None)  # the run's schedule goes on
    assert fit_lr_at(plain, 150) == lr_at(150, plain.lr, 300, plain.warmup_frac)
    with pytest.raises(ValueError, match="fit_lr"):
        world_cfg(fit_lr=0.0)


def test_a_slower_encoder_moves_its_weights_by_its_share_of_the_rate() -> None:
    """encoder_lr_scale: the encoder a parameter group of its own at lr x scale; the first AdamW
    step moves each weight by about its rate (the normalised update), the rest at lr."""
    cfg = world_cfg(settle=None, encoder_lr_scale=0.25, weight_decay=0.0, warmup_frac=0.0)
    learner, src = Learner(cfg), source(cfg)
    enc0 = [p.detach().clone() for p in learner.nets.encoder.parameters()]
    pred0 = [p.detach().clone() for p in learner.nets.predictor.parameters()]
    learner.update(src.next())
    groups = learner.optimizer.param_groups
    assert [g.get("lr_scale") for g in groups] == [0.25, None]
    assert groups[0]["lr"] == pytest.approx(0.25 * groups[1]["lr"])
    moved_enc = max(float((p.detach() - q).abs().max()) for p, q in zip(learner.nets.encoder.parameters(), enc0, strict=True))
    moved_pred = max(float((p.detach() - q).abs().max()) for p, q in zip(learner.nets.predictor.parameters(), pred0, strict=True))
    lr = groups[1]["lr"]
    assert moved_enc == pytest.approx(0.25 * lr, rel=0.05) and moved_pred == pytest.approx(lr, rel=0.05)
    with pytest.raises(ValueError, match="encoder_lr_scale"):
        world_cfg(encoder_lr_scale=0.0)
