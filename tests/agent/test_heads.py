"""One latent, every head (agent.heads): heads fit beside a settled learner on its reservoir."""

from __future__ import annotations

import copy

import pytest
import torch

from agent import Learner
from agent import heads as head_parts
from agent.memory.read import MemoryView
from agent.step import fit_lr_at, fit_update, modulated_prediction
from tests.agent.test_settle_fit import source, world_cfg


def run(learner: Learner, batches: list) -> None:
    for b in batches:
        learner.update(b)


@pytest.fixture(scope="module")
def batches() -> list:
    cfg = world_cfg()
    src = source(cfg)
    return [src.next() for _ in range(12)]


def nets_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(v, sb[k]) for k, v in sa.items())


def test_heads_leave_the_learner_bit_for_bit_as_it_is_alone(batches: list) -> None:
    alone, with_heads = Learner(world_cfg()), Learner(world_cfg(heads=("A", "B", "oracle")))
    for b in batches:
        assert torch.equal(alone.update(b).loss_pred, with_heads.update(b).loss_pred)
    assert nets_equal(alone.nets, with_heads.nets)
    assert list(with_heads.every_head()) == ["C", "A", "B", "oracle"]
    assert with_heads.heads["oracle"].cfg.oracle and with_heads.heads["oracle"].cfg.track == "C"


def test_heads_share_the_settled_encoder_and_fit_predictors_of_their_own(batches: list) -> None:
    learner = Learner(world_cfg(heads=("A", "oracle")))
    run(learner, batches[: learner.settle_at])
    before = {n: copy.deepcopy(h.nets.predictor) for n, h in learner.heads.items()}
    enc = copy.deepcopy(learner.nets.encoder)
    run(learner, batches[learner.settle_at :])
    for name, head in learner.heads.items():
        assert head.nets.encoder is learner.nets.encoder and head.nets.target is learner.nets.target
        assert head.buffer is learner.buffer and head.reservoir is learner.reservoir
        assert head.step == learner.step == len(batches)
        assert not nets_equal(head.nets.predictor, before[name])  # it fitted
        assert not nets_equal(head.nets.predictor, learner.nets.predictor)  # a predictor of its own
        assert not any(p is q for p in head.optimizer.param_groups[0]["params"]
                       for q in learner.nets.encoder.parameters())  # fmt: skip
    assert nets_equal(learner.nets.encoder, enc)


def test_a_copied_head_predicts_what_the_trainers_base_predictor_does_at_the_settle(batches: list) -> None:
    learner = Learner(world_cfg(heads=("A", "B", "D", "oracle")))
    run(learner, batches[: learner.settle_at])
    head_parts.start(learner)
    z = torch.randn(6, 2, learner.cfg.latent_dim)
    empty = MemoryView(torch.zeros(1, 1, 3, learner.cfg.latent_dim), torch.zeros(6, 1, dtype=torch.bool),
                       torch.zeros(6, dtype=torch.long))  # fmt: skip
    physics = torch.rand(6, 4)
    base = learner.nets.predictor(z.flatten(1))
    for name, head in learner.heads.items():
        pred = modulated_prediction(head.nets, z, empty, head.spec, physics)[0].pred
        assert torch.allclose(pred, base, atol=1e-6), name
        for p, q in zip(head.nets.predictor.parameters(), learner.nets.predictor.parameters(), strict=True):
            assert p is not q and torch.equal(p, q)
            assert torch.equal(head.optimizer.state[p]["exp_avg"], learner.optimizer.state[q]["exp_avg"])


def test_a_fresh_head_starts_from_its_own_initialisation(batches: list) -> None:
    learner = Learner(world_cfg(heads=("A",), head_start="fresh"))
    init = copy.deepcopy(learner.nets.predictor)
    run(learner, batches[: learner.settle_at])
    head_parts.start(learner)
    assert nets_equal(learner.heads["A"].nets.predictor, init)
    assert not nets_equal(learner.nets.predictor, init)


def test_a_head_fits_the_same_whichever_heads_fit_beside_it(batches: list) -> None:
    """Every head takes each update on the one draw, and no head draws: head A of a learner
    with heads (A, oracle) is bit for bit head A of a learner with A alone."""
    one, two = Learner(world_cfg(heads=("A",))), Learner(world_cfg(heads=("oracle", "A")))
    run(one, batches)
    run(two, batches)
    assert nets_equal(one.heads["A"].nets, two.heads["A"].nets)


def test_heads_fit_beside_the_learner_as_they_would_after_it(batches: list,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The heads' updates run in a worker thread beside the learner's own: the same numbers as
    one after the other in the caller's thread (its intra-op threads, one here, not the
    default)."""
    import concurrent.futures

    beside = Learner(world_cfg(heads=("A", "oracle")))
    run(beside, batches)
    assert beside.head_worker is not None

    def after(trainer: Learner, draw) -> concurrent.futures.Future:
        done: concurrent.futures.Future = concurrent.futures.Future()
        for head in trainer.heads.values():
            fit_update(head.model, draw, fit_lr_at(head.cfg, trainer.step))
        done.set_result(None)
        return done

    monkeypatch.setattr(head_parts, "fit_beside", after)
    serial = Learner(world_cfg(heads=("A", "oracle")))
    run(serial, batches)
    assert serial.head_worker is None
    for name in ("C", "A", "oracle"):
        assert nets_equal(beside.every_head()[name].nets, serial.every_head()[name].nets), name


def test_every_head_is_scored_on_the_streams_windows_and_memory_each_settled_step(batches: list) -> None:
    """From the settle on each step scores every head on the observed batch's windows with the
    memory the learner read (``head_metrics``: their D here), frozen weights too: at the settle, where every
    copied head predicts what the trainer's base predictor does, the floor and the oracle score
    the same; after it they part."""
    learner = Learner(world_cfg(heads=("A", "oracle")))
    for b in batches[: learner.settle_at]:
        learner.update(b)
        assert learner.head_metrics == {}
    learner.update(batches[learner.settle_at])  # the settle: the heads start as copies
    at = {k: float(v[-1]) for k, v in learner.head_metrics.items()}
    assert set(at) == {"A", "oracle"} and at["A"] == pytest.approx(at["oracle"], rel=1e-5)
    run(learner, batches[learner.settle_at + 1 : -1])
    learner.freeze_weights()
    learner.update(batches[-1])
    after = {k: float(v[-1]) for k, v in learner.head_metrics.items()}
    assert all(torch.isfinite(torch.tensor(v)) for v in after.values())
    assert after["A"] != after["oracle"]  # each fitted its own predictor since
    # the floor has no modulation and no attention; the oracle (track C's pathway) modulates
    # by its physics and attends to nothing
    (a_delta, a_attn, _), (o_delta, o_attn, _) = (learner.head_metrics[h] for h in ("A", "oracle"))
    assert a_delta.isnan() and a_attn.isnan() and o_attn.isnan() and float(o_delta) > 0


def test_a_learner_with_heads_resumes_exactly(batches: list) -> None:
    cfg = world_cfg(heads=("A", "oracle"))
    a = Learner(cfg)
    run(a, batches[:7])
    b = Learner(cfg)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert b.heads["A"].step == 7
    run(a, batches[7:])
    run(b, batches[7:])
    for name in ("C", "A", "oracle"):
        assert nets_equal(a.every_head()[name].nets, b.every_head()[name].nets), name
    with pytest.raises(ValueError, match="heads"):
        Learner(world_cfg()).load_state_dict(copy.deepcopy(a.state_dict()))


def test_heads_are_refused_where_they_cannot_fit() -> None:
    with pytest.raises(ValueError, match="heads: heads fit on the settled reservoir"):
        world_cfg(heads=("A",), settle=None)
    with pytest.raises(ValueError, match="unknown head 'F'"):
        world_cfg(heads=("F",))
    with pytest.raises(ValueError, match="each head once"):
        world_cfg(heads=("A", "A"))
    with pytest.raises(ValueError, match="'C' is this learner's own"):
        world_cfg(heads=("C",))
    with pytest.raises(ValueError, match="'oracle' is this learner's own"):
        world_cfg(oracle=True, heads=("oracle",))
    with pytest.raises(ValueError, match="head_start"):
        world_cfg(heads=("A",), head_start="warm")


def test_the_fit_loss_is_the_steps_own_relative_error(batches: list) -> None:
    """fit_update's loss is the step's prediction error: relative per horizon with
    pred_error="relative" (it was the plain MSE whatever the setting)."""
    from agent.objective import pred_loss

    learner = Learner(world_cfg(pred_error="relative", lr=1e-9, weight_decay=0.0))
    run(learner, batches[: learner.settle_at + 1])
    cfg = learner.cfg
    draw = learner.reservoir.draw(cfg.fit_worlds, cfg.fit_batch // cfg.fit_worlds,
                                  cfg.buffer_capacity, True, False)  # fmt: skip
    with torch.no_grad():
        pred = modulated_prediction(learner.nets, draw.ctx, draw.memory, learner.spec)[0].pred
    relative = pred_loss(pred, draw.target, None, draw.ctx[:, -1])
    plain = pred_loss(pred, draw.target)
    got = fit_update(learner.model, draw, 0.0)
    assert torch.allclose(got, relative) and not torch.allclose(got, plain)
