"""A world model that uses what it is told: the predictor of residual blocks with the track's
modulation in every block (agent.blocks), the latent replay (agent.replay) and the memory's
objectives (agent.memory.carry)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from test_group_memory import grouped_source
from test_group_memory import world_cfg as group_cfg

from agent import AgentConfig, Learner
from agent.blocks import BlockPredictor
from agent.build import build_networks
from agent.memory import AttentionAggregator
from agent.memory.carry import PhysicsHead, identity_loss, physics_loss
from agent.memory.view import MemoryView
from agent.metrics import stack
from agent.objective import Loss
from agent.speed import Speed
from agent.step import carry_terms, memory_codes, replay_updates


def world_cfg(track: str = "C", **kw) -> AgentConfig:
    """test_group_memory's learner, its memory varied in training as the worlds protocol's."""
    return group_cfg(track, **{"vary_memory": True, **kw})


# ---------------------------------------------------------------------------- the blocks
@pytest.mark.parametrize("track", ["B", "C", "D", "E"])
def test_every_blocks_modulation_is_the_base_predictor_at_e_agg_zero_and_not_elsewhere(
    track: str,
) -> None:
    cfg = world_cfg(track, predictor_blocks=3, hidden_dim=32)
    nets = build_networks(cfg)
    assert isinstance(nets.predictor, BlockPredictor) and len(nets.predictor.blocks) == 3
    z = torch.randn(5, cfg.context_frames * cfg.latent_dim)
    base = nets.predictor(z)
    assert base.shape == (5, cfg.n_horizons, cfg.latent_dim)
    zero = nets.modulator(nets.predictor, z, torch.zeros(5, cfg.exp_dim))
    assert torch.equal(zero.pred, base)
    for p in nets.modulator.parameters():  # D's adaLN-Zero starts at zero: move it off
        torch.nn.init.normal_(p, std=0.1)
    e = torch.randn(5, cfg.exp_dim)
    moved = nets.modulator(nets.predictor, z, e).pred
    assert (moved - base).abs().amax() > 1e-4
    # per sample: a sample's prediction depends on its own e_agg only
    e2 = e.clone()
    e2[0] = 0
    again = nets.modulator(nets.predictor, z, e2).pred
    assert torch.equal(again[0], base[0]) and torch.allclose(again[1:], moved[1:])


def test_every_block_gets_the_modulation() -> None:
    """Track C's LoRA delta of block i changes the prediction through block i (a delta on the
    last block alone moves it, as does one on the first)."""
    cfg = world_cfg("C", predictor_blocks=2, hidden_dim=16, lora_rank=2)
    nets = build_networks(cfg)
    z, e = torch.randn(4, cfg.context_frames * cfg.latent_dim), torch.randn(4, cfg.exp_dim)
    base = nets.predictor(z)
    mod = nets.modulator
    for i in range(2):
        with torch.no_grad():
            keep = mod.u.clone()
            mod.u.zero_()
            mod.u[i] = keep[i]
            assert (mod(nets.predictor, z, e).pred - base).abs().amax() > 1e-5
            mod.u.copy_(keep)


def test_block_predictor_predicts_a_change_of_the_newest_latent() -> None:
    """With its output layer at zero the prediction is norm(z_last) at every horizon."""
    cfg = world_cfg("A", predictor_blocks=2, hidden_dim=16)
    pred = BlockPredictor.from_config(cfg)
    with torch.no_grad():
        pred.out.weight.zero_()
        pred.out.bias.zero_()
    z = torch.randn(3, 2 * cfg.latent_dim)
    want = pred.norm(z[:, cfg.latent_dim :]).unsqueeze(1).expand(3, cfg.n_horizons, -1)
    assert torch.allclose(pred(z), want)


def test_blocks_and_replay_are_checked_at_construction() -> None:
    with pytest.raises(ValueError, match="predictor_blocks"):
        world_cfg(predictor_blocks=-1)
    with pytest.raises(ValueError, match="predictor_blocks: residual blocks"):
        world_cfg(encoder="map", encoder_channels=(8, 16), latent_dim=1024, predictor="conv",
                  predictor_blocks=2)  # fmt: skip
    with pytest.raises(ValueError, match="replay_updates: a replayed window reads"):
        AgentConfig.from_preset("tiny", track="C", replay_updates=2)  # global memory
    AgentConfig.from_preset("tiny", track="A", replay_updates=2)  # no memory: fine
    with pytest.raises(ValueError, match="replay_span"):
        world_cfg(replay_updates=1, replay_span=0)
    with pytest.raises(ValueError, match="replay_updates: the replay runs on the plain step"):
        Speed(captured=True).paths(world_cfg(replay_updates=1, stream_cache=False), None)


# ---------------------------------------------------------------------------- the replay
def test_the_replay_never_moves_the_encoder_and_moves_the_predictor_and_memory() -> None:
    """After one step the learner with replay has the plain learner's encoder and EMA target,
    bit for bit, and another predictor; a replay update once the memory holds entries moves the
    predictor, the modulator and the memory pathway, never the encoder or its target."""
    cfg = world_cfg("C", total_steps=50)
    plain, replayed = Learner(cfg, speed=Speed()), Learner(cfg.replace(replay_updates=3),
                                                           speed=Speed())  # fmt: skip
    source = grouped_source(cfg)
    batch = source.next()
    plain.update(batch)
    replayed.update(batch)
    a, b = dict(plain.nets.named_parameters()), dict(replayed.nets.named_parameters())
    assert all(torch.equal(a[n], b[n]) for n in a if n.startswith(("encoder.", "target.")))
    assert not torch.equal(a["predictor.fc1.weight"], b["predictor.fc1.weight"])
    for _ in range(3):
        replayed.update(source.next())
    before = {n: p.clone() for n, p in replayed.nets.named_parameters()}
    replay_updates(replayed.model, replayed.knobs(), replayed.paths)
    for name, p in replayed.nets.named_parameters():
        same = torch.equal(before[name], p)
        if name.startswith(("encoder.", "target.")):
            assert same, name
        elif name.startswith(("predictor.", "modulator.", "experience.", "aggregator.")):
            assert not same, name
    assert replayed.replay is not None and replayed.replay.count == 4


def test_a_replayed_window_reads_its_own_worlds_memory_as_it_stood() -> None:
    cfg = world_cfg("C", total_steps=50, replay_updates=1, replay_span=4, replay_draw=3)
    learner = Learner(cfg, speed=Speed())
    source = grouped_source(cfg)
    stored = []
    for _ in range(6):
        batch = source.next().to(learner.device)
        u = learner.memory_draws(True)
        view = learner.memory_view(True, batch, u)
        stored.append((view.pairs.clone(), view.mask.clone()))
        learner.step_on(batch, learner.knobs(), u)
        learner.step += 1
    replay = learner.replay
    assert replay is not None and replay.count == 6
    r = replay.draw(now=6)
    assert r.z.shape == (3 * cfg.batch_size, cfg.context_frames, cfg.latent_dim)
    assert r.memory is not None and r.memory.pairs.shape[0] == 3 * cfg.num_groups
    assert ((r.age >= 1) & (r.age <= 4)).all()  # the newest 4 steps only
    for j, age in enumerate(r.age.tolist()):
        pairs, mask = stored[6 - age]
        rows = slice(j * cfg.batch_size, (j + 1) * cfg.batch_size)
        groups = r.memory.group[rows]
        assert torch.equal(r.memory.pairs[groups], pairs[learner.groups])
        assert torch.equal(r.memory.mask[rows], mask)


@pytest.mark.parametrize("track,oracle", [("A", False), ("C", False), ("D", True)])
def test_a_run_with_replay_resumes_exactly(track: str, oracle: bool) -> None:
    """Cut after 4 steps, the learner's state loaded into a new one: the next 4 steps equal
    the uncut run's, bit for bit (the replay's store and draws are in the state)."""
    cfg = world_cfg(track, oracle=oracle, total_steps=50, replay_updates=2, replay_span=3,
                    predictor_blocks=2, hidden_dim=16)  # fmt: skip
    batches = [b for src in [grouped_source(cfg)] for b in (src.next() for _ in range(8))]
    whole = Learner(cfg, speed=Speed())
    ms = [whole.update(b) for b in batches]
    first = Learner(cfg, speed=Speed())
    for b in batches[:4]:
        first.update(b)
    resumed = Learner(cfg, speed=Speed())
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))
    rest = [resumed.update(b) for b in batches[4:]]
    want, got = stack(ms[4:]), stack(rest)
    assert all(np.array_equal(want[k], got[k], equal_nan=True) for k in want)
    for (n, p), q in zip(whole.nets.named_parameters(), resumed.nets.parameters(), strict=True):
        assert torch.equal(p, q), n


@pytest.mark.parametrize("speed", [Speed(visible_slots=True, lazy_pair=True), Speed(beside=True)])
def test_the_cpu_layers_give_the_plain_replay_step(speed: Speed) -> None:
    """The replay through a CPU's layers (visible slots; the second thread) equals the plain
    step's to rounding."""
    cfg = world_cfg("C", total_steps=50, replay_updates=2)
    batches = [b for src in [grouped_source(cfg)] for b in (src.next() for _ in range(5))]
    plain, layered = Learner(cfg, speed=Speed()), Learner(cfg, speed=speed)
    a = stack([plain.update(b) for b in batches])
    b = stack([layered.update(b) for b in batches])
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-6, err_msg=k)


# ---------------------------------------------------------------------------- the objectives
def test_the_identity_loss_is_low_when_each_worlds_halves_agree_and_high_when_they_do_not() -> None:
    torch.manual_seed(0)
    agg = AttentionAggregator(4, 8)
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    memory = MemoryView(torch.zeros(2, 6, 3, 4), torch.ones(6, 6, dtype=torch.bool), group)
    query, keep = torch.randn(6, 4), torch.ones(6, dtype=torch.bool)
    worlds = torch.eye(8)[:2].view(2, 1, 8).expand(2, 6, 8)  # each world one code
    apart = identity_loss(agg, query, worlds.contiguous(), memory, keep)
    by_half = torch.eye(8)[torch.arange(6) % 2]  # slot s holds code s % 2 in every world
    across = identity_loss(agg, query, by_half.expand(2, 6, 8).contiguous(), memory, keep)
    # SupCon's floor is log(positives): 3 a sample; halves that tell nothing give log(6)
    assert apart.item() == pytest.approx(math.log(3), abs=1e-3)
    assert across.item() == pytest.approx(math.log(6), abs=1e-3)
    # no sample sees both halves of its world: no loss, and nothing is read
    one_half = memory._replace(mask=torch.arange(6).expand(6, 6) % 2 == 0)
    assert identity_loss(agg, query, worlds.contiguous(), one_half, keep) == 0


def test_the_physics_loss_is_one_minus_r2_summed_over_the_varying_features() -> None:
    head = PhysicsHead(4, 3)
    physics = torch.tensor([[0.1, 1.0, 0.0], [0.3, 1.0, 0.0], [0.5, 1.0, 0.0], [9.0, 1.0, 0.0]])
    keep = torch.tensor([True, True, True, False])
    for p in head.parameters():
        torch.nn.init.zeros_(p)
    with torch.no_grad():  # the head says the kept samples' mean: R^2 = 0 on the varying one
        head.net[2].bias.copy_(torch.tensor([0.3, 1.0, 0.0]))
    assert physics_loss(head, torch.randn(4, 4), physics, keep).item() == pytest.approx(1.0)


def test_the_memory_objectives_train_the_memory_pathway_and_not_the_encoder() -> None:
    cfg = world_cfg("C", total_steps=50, lambda_identity=0.5, lambda_physics=1.0)
    learner = Learner(cfg, speed=Speed())
    assert learner.nets.physics_head is not None
    source = grouped_source(cfg)
    for _ in range(4):
        learner.update(source.next())
    batch = source.next().to(learner.device)  # both worlds valid, their memories filled
    assert batch.valid.all()
    memory = learner.memory_view(True, batch)
    e = memory_codes(learner.nets, memory, learner.spec)
    z = torch.randn(cfg.batch_size, cfg.context_frames, cfg.latent_dim, requires_grad=True)
    none = Loss(torch.zeros(()), torch.zeros(()), torch.zeros(()))
    w = batch.valid.float()
    loss = carry_terms(learner.nets, learner.spec, none, z, memory, e, batch.physics, w)
    assert loss.total > 0
    loss.total.backward()
    assert z.grad is None  # the query is detached: the encoder is not asked
    for name in ("physics_head.net.0.weight", "aggregator.w_k.weight", "experience.pos"):
        grad = dict(learner.nets.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name
    # the floor and the oracle have no memory to train: their configs take the weights, unused
    assert Learner(cfg.replace(track="A")).nets.physics_head is None
    assert Learner(cfg.replace(oracle=True)).nets.physics_head is None
    with pytest.raises(ValueError, match="lambda_identity"):
        AgentConfig.from_preset("tiny", track="C", lambda_identity=0.1)
