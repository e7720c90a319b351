"""agent.evaluation.world_curves: D^n per held-out world, own / same-world / wrong-world
memories; the reference check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent import AgentConfig, Learner, evaluation
from agent.evaluation import (
    WorldSet,
    encode_worlds,
    family_means,
    input_index,
    reference_check,
    sequence_length,
    sequence_memory,
    world_curves,
    wrong_worlds,
)

NS = (0, 1, 3)


def worlds(cfg: AgentConfig, n: int = 5) -> list[WorldSet]:
    rng = np.random.default_rng(0)
    length = sequence_length(cfg, max(NS))
    out = []
    for k, fam in enumerate(("interp", "interp", "extrap", "extrap")):
        frames = rng.integers(0, 256, (n, length, 1, 64, 64), dtype=np.uint8)
        physics = np.asarray([0.1 * k, 0.2, 1.0, 0.0])
        out.append(WorldSet(f"{fam}-{k}", fam, physics, frames))
    return out


def cfg_of(track: str = "C", **kw) -> AgentConfig:
    base = {"push_pair": "input", "context_frames": 2, "per_horizon": True, "batch_size": 4}
    if track != "A":
        base.update(memory_scope="group", group_size=1, memory_read="all")  # one memory a stream
    return AgentConfig.of_size("tiny", track=track, **{**base, **kw})


def test_sequence_layout() -> None:
    cfg = cfg_of()
    assert input_index(cfg, 50) == 51  # pairs (j-1, j), j = 1 .. 50, before input frame 51
    assert sequence_length(cfg, 50) == 51 + 20 + 1
    assert input_index(cfg.replace(context_frames=4), 1) == 3


def test_memory_curves_start_together_and_differ_after() -> None:
    cfg = cfg_of()
    learner = Learner(cfg)
    ws = worlds(cfg)
    curves = world_curves(learner, ws, NS)
    assert len(curves) == 4 * 3
    by = {(c.world, c.memory): c for c in curves}
    for w in ws:
        d0 = {by[(w.name, m)].d[0] for m in ("own", "same", "wrong")}
        assert len(d0) == 1  # n = 0: an empty memory whatever its source
        assert by[(w.name, "own")].d[1:] != by[(w.name, "wrong")].d[1:]
        assert len(by[(w.name, "own")].d_per_h[0]) == cfg.n_horizons
    assert world_curves(learner, ws, NS) == curves  # deterministic, learner untouched
    means = family_means(curves)
    assert set(means) == {"interp", "extrap"}
    extrap = np.mean([by[("extrap-2", "own")].d, by[("extrap-3", "own")].d], axis=0)
    assert np.allclose(means["extrap"]["own"], extrap)
    interp = np.mean([by[("interp-0", "own")].d, by[("interp-1", "own")].d], axis=0)
    assert np.allclose(means["interp"]["own"], interp)


@pytest.mark.parametrize("track,oracle", [("A", False), ("C", True)])
def test_floor_and_ceiling_do_not_read_memory(track: str, oracle: bool) -> None:
    cfg = cfg_of(track, oracle=oracle)
    curves = world_curves(Learner(cfg), worlds(cfg), NS)
    for c in curves:
        assert len(set(c.d)) == 1  # the same D at every n and for every memory source
    if oracle:  # but the oracle's D depends on the world it is told
        ws = worlds(cfg)
        ws[0].physics = ws[0].physics + 1.0
        moved = world_curves(Learner(cfg), ws, NS, ("own",))
        assert moved[0].d != curves[0].d and moved[1].d == curves[3].d


@pytest.mark.parametrize("track,oracle", [("A", False), ("C", True)])
def test_a_learner_without_memory_is_scored_once_from_its_context_frames(
    track: str, oracle: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Track A and the oracle: the context frames alone encoded, one score for every n, equal
    (to the rounding of other batch shapes) to scoring through each n's memory."""
    cfg = cfg_of(track, oracle=oracle, precision="fp32")
    learner, ws = Learner(cfg), worlds(cfg)
    calls: list[int] = []
    real = learner.encode
    monkeypatch.setattr(learner, "encode", lambda x, target=False: calls.append(len(x)) or
                        real(x, target=target))  # fmt: skip
    short = world_curves(learner, ws, NS, ("own",))
    # the context frames, the horizons' targets and the input frame by the EMA target (sigma_target)
    assert sum(calls) == len(ws) * 5 * (cfg.context_frames + cfg.n_horizons + 1)
    monkeypatch.setattr("agent.evaluation.encodes_memory", lambda nets: True)  # the long way
    full = world_curves(learner, ws, NS, ("own",))
    for a, b in zip(short, full, strict=True):
        assert len(set(a.d)) == 1 and a.excluded == b.excluded
        np.testing.assert_allclose(a.d, b.d, rtol=1e-5)
        np.testing.assert_allclose(a.d_per_h, b.d_per_h, rtol=1e-5)
        np.testing.assert_allclose(a.sigma_embed, b.sigma_embed, rtol=1e-5)


def test_heads_on_one_latent_score_the_worlds_encoded_once() -> None:
    """``encode_worlds`` once, then every learner with those encoders: a learner with memory
    scores exactly what it encodes itself; one without (track A, the oracle) reads only the
    context frames of it, equal to its own encoding to the rounding of other batch shapes;
    a learner with memory refuses the context frames alone."""
    cfg = cfg_of("C", precision="fp32")
    learner, ws = Learner(cfg), worlds(cfg)
    shared = encode_worlds(learner, ws, max(NS))
    assert world_curves(learner, ws, NS, encoded=shared) == world_curves(learner, ws, NS)
    for head_cfg in (cfg_of("A", precision="fp32"), cfg_of("C", oracle=True, precision="fp32")):
        head = Learner(head_cfg)
        head.nets.encoder, head.nets.target = learner.nets.encoder, learner.nets.target
        for a, b in zip(world_curves(head, ws, NS, ("own",), encoded=shared),
                        world_curves(head, ws, NS, ("own",)), strict=True):  # fmt: skip
            np.testing.assert_allclose(a.d, b.d, rtol=1e-5)
            np.testing.assert_allclose(a.sigma_z, b.sigma_z, rtol=1e-5)
    context = encode_worlds(learner, ws, max(NS), full=False)
    assert context[0][0].shape[1] == cfg.context_frames
    with pytest.raises(ValueError, match="every frame up to its input"):
        world_curves(learner, ws, NS, encoded=context)


@pytest.mark.parametrize("track", ["A", "C"])
def test_sigma_z_and_sigma_target_are_the_spread_of_each_worlds_input_latents(
    track: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each world's curves carry the spread (the mean over dimensions of the unbiased std across
    its sequences) of its input frames' online latents and EMA target latents, for every memory
    source; D is that of the targets at the horizons alone (the input frame's EMA latent read
    beside them changes none of it)."""
    cfg = cfg_of(track)
    learner, ws = Learner(cfg), worlds(cfg)
    with torch.no_grad():  # the EMA target apart from the online encoder: the two spreads differ
        for p in learner.nets.target.parameters():
            p.mul_(1.1)
    i = input_index(cfg, max(NS))
    memories = ("own",) if track == "A" else ("own", "same", "wrong")
    curves = world_curves(learner, ws, NS, memories)
    for c in curves:
        w = next(w for w in ws if w.name == c.world)
        x = torch.from_numpy(np.ascontiguousarray(w.frames[:, i]))
        z, zbar = (np.asarray(learner.encode(x, target=t), np.float64) for t in (False, True))
        assert c.sigma_z == pytest.approx(z.std(axis=0, ddof=1).mean(), rel=1e-5)
        assert c.sigma_target == pytest.approx(zbar.std(axis=0, ddof=1).mean(), rel=1e-5)
        assert c.sigma_z != pytest.approx(c.sigma_target, rel=1e-3)
    # D against the horizons' targets alone: the same when the input frame is not encoded by
    # the EMA target at all (a zero latent in its place)
    real = evaluation.encode

    def without(*args, input_target: bool = False, **kw):  # type: ignore[no-untyped-def]
        z, targets, _ = real(*args, **kw)
        return z, targets, torch.zeros_like(z[:, -1]) if input_target else None

    monkeypatch.setattr(evaluation, "encode", without)
    again = world_curves(learner, ws, NS, memories)
    assert [(c.d, c.d_per_h, c.sigma_embed) for c in again] == [
        (c.d, c.d_per_h, c.sigma_embed) for c in curves]
    assert all(c.sigma_target == 0.0 for c in again)


def test_bad_requests() -> None:
    cfg = cfg_of()
    with pytest.raises(ValueError, match="unknown source"):
        world_curves(Learner(cfg), worlds(cfg), NS, ("elsewhere",))
    with pytest.raises(ValueError, match="two worlds of each family, 'extrap' has one"):
        world_curves(Learner(cfg), worlds(cfg)[:3], NS)


def test_the_wrong_world_is_the_farthest_world_of_the_same_family() -> None:
    """The control's memory comes from another world of the sample's family, the one farthest
    in gravity (never a near-duplicate of the world, never another family's)."""
    def world(name: str, fam: str, gx: float, gy: float) -> WorldSet:
        return WorldSet(name, fam, np.asarray([gx, gy, 1.0, 0.0]), None)

    ws = [world("i0", "interp", 0.2, 0.0), world("i1", "interp", 0.21, 0.01),
          world("e0", "extrap", 0.7, 0.0), world("i2", "interp", -0.2, 0.0),
          world("e1", "extrap", 0.0, -0.7)]  # fmt: skip
    assert wrong_worlds(ws) == [3, 3, 4, 1, 2]


def test_reference_check_is_exact_where_the_encoders_agree() -> None:
    """A fresh learner's EMA target is its online encoder: the two references give the same D
    and the online latent of the true future is the target itself (D 0). Once they differ,
    so do the references."""
    cfg = cfg_of("C")
    learner = Learner(cfg)
    ws = worlds(cfg)
    ref = reference_check(learner, ws)
    assert set(ref) == {"interp", "extrap"}
    for rows in ref.values():
        assert all(len(v) == cfg.n_horizons + 1 for v in rows.values())  # per horizon, mean
        assert rows["d"] == rows["d_target_ref"]
        assert rows["d_future_online"] == [0.0] * (cfg.n_horizons + 1)
    with torch.no_grad():  # move the EMA target away from the online encoder
        for p in learner.nets.target.parameters():
            p.mul_(1.1)
    moved = reference_check(learner, ws)["interp"]
    assert moved["d"] != moved["d_target_ref"] and min(moved["d_future_online"]) > 0


def test_a_peer_memory_holds_the_newest_pairs_of_its_peers_as_their_shared_fifo_would() -> None:
    # z[b, t] = 100 * b + t (a 1-d latent), so every pair names its sequence and frame
    z = (100 * torch.arange(3).view(3, 1) + torch.arange(8).view(1, 8)).float().unsqueeze(-1)
    peers = [z.roll(-1, 0), z.roll(-2, 0)]
    view = sequence_memory(peers, i=6, n=3)  # steps 4 and 5 written by both peers; the newest 3
    newest = view.pairs[0, :, 1, 0].tolist()  # sample 0: its peers are sequences 1 and 2
    assert newest == [204.0, 105.0, 205.0]
    assert view.pairs[0, :, 0, 0].tolist() == [203.0, 104.0, 204.0]
    assert view.mask.all() and view.pairs.shape == (3, 3, 2, 1)
    one = sequence_memory(z.roll(-1, 0), i=6, n=3)  # one source: its pairs j = 3, 4, 5
    assert one.pairs[0, :, 1, 0].tolist() == [103.0, 104.0, 105.0]
    empty = sequence_memory(peers, i=6, n=0)
    assert not empty.mask.any()


def test_peer_curves_read_more_sequences_of_the_world() -> None:
    cfg = cfg_of()
    learner = Learner(cfg)
    ws = worlds(cfg)
    one = {(c.world, c.memory): c.d for c in world_curves(learner, ws, NS)}
    three = {(c.world, c.memory): c.d for c in world_curves(learner, ws, NS, peers=3)}
    for w in ws:
        assert one[(w.name, "own")] == three[(w.name, "own")]
        assert one[(w.name, "same")][0] == three[(w.name, "same")][0]  # n = 0: empty
        assert one[(w.name, "same")][2] != three[(w.name, "same")][2]


def test_each_samples_part_of_d_adds_up_to_the_curves_d() -> None:
    """``samples``: each sample's ratio per horizon and whether it counts; each horizon's mean
    over the counted samples, then the mean over horizons, is the curve's D at that n."""
    cfg = cfg_of("C")
    curves = world_curves(Learner(cfg), worlds(cfg), NS, samples=(0, 3))
    for c in curves:
        assert set(c.samples) == {0, 3}
        for n, (ratio, ok) in c.samples.items():
            assert ratio.shape == ok.shape == (5, cfg.n_horizons)
            d = np.mean([ratio[ok[:, k], k].mean() for k in range(cfg.n_horizons)])
            assert d == pytest.approx(c.d[NS.index(n)], rel=1e-6)
