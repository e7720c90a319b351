"""The gravity probe (probes.gravity): gravity and the world's identity read from e_agg within
each family, by leave-one-world-out ridge maps and by nearest halves."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import env
from agent import AgentConfig, Learner
from agent.evaluation import WorldSet, sequence_length
from probes.gravity import entry_statistics, gravity_probe, peer_features, readout

N = 3  # memory size
WORLDS = 12  # a family's worlds
CODE = 3  # the pixels (row 0) a fake frame's code is written to


def cfg_of(track: str = "C", **kw) -> AgentConfig:
    base = {"push_pair": "input", "memory_scope": "group", "batch_size": 4, "group_size": 2,
            "context_frames": 2, "horizons": (2, 4), "per_horizon": True}  # fmt: skip
    return AgentConfig.of_size("tiny", track=track, **{**base, **kw})


def gravities(family: str, rng: np.random.Generator, worlds: int = WORLDS) -> np.ndarray:
    """(worlds, 3): worlds of an ``env.FAMILIES`` family, (g_x, g_y, |g|) each."""
    g = np.array([env.physics_features(p)[:2] for p in env.FAMILIES[family].sample(rng, worlds)])
    return np.c_[g, np.hypot(g[:, 0], g[:, 1])]


def test_a_code_of_gravity_reads_perfectly_and_noise_reads_nothing() -> None:
    """Half rows (W, 2, F) of three codes in each family: (a) a linear function of (g_x, g_y,
    |g|) with a little noise: direction, strength and the world all read; (b) noise independent
    of the world: direction about 90 degrees off (cosine about 0), strength R^2 at most about 0,
    identification about chance; (c) a code of the world's identity (a random point a world)
    that holds nothing of its gravity: identified, but neither direction nor strength reads."""
    rng = np.random.default_rng(0)
    noise, named = [], []
    for family in ("train", "interp", "extrap"):
        y = gravities(family, rng)
        mix = rng.normal(size=(3, 16))
        known = readout((y @ mix)[:, None] + 1e-3 * rng.normal(size=(WORLDS, 2, 16)), y)
        assert known["direction_deg"] < 1.0 and known["direction_cos"] > 0.999
        assert known["strength_r2"] > 0.999 and known["identified"] == 1.0
        assert known["chance"] == 1 / WORLDS and known["worlds"] == WORLDS
        noise.append(readout(rng.normal(size=(WORLDS, 2, 16)), y))
        named.append(readout(rng.normal(size=(WORLDS, 1, 16))
                             + 0.05 * rng.normal(size=(WORLDS, 2, 16)), y))  # fmt: skip
    for codes in (noise, named):
        mean = {k: np.mean([r[k] for r in codes]) for k in codes[0]}
        assert 60.0 < mean["direction_deg"] < 120.0 and abs(mean["direction_cos"]) < 0.3
        assert mean["strength_r2"] < 0.1
    assert np.mean([r["identified"] for r in noise]) <= 2 / WORLDS
    assert all(r["identified"] == 1.0 for r in named)


class Pixels(nn.Module):
    """A stand-in encoder: latent = the frame's first CODE pixels of row 0, zeros after."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.pad(x[:, 0, 0, :CODE], (0, self.dim - CODE))

    forward = encode


class Newest(nn.Module):
    """A stand-in experience encoder: e_i = an entry's newest latent, its first CODE numbers."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        return nn.functional.pad(pairs[:, -1, :CODE], (0, self.dim - CODE))


def coded_worlds(cfg: AgentConfig, family: str, rng: np.random.Generator, coded: bool,
                 seqs: int = 4) -> list[WorldSet]:  # fmt: skip
    """A family's worlds whose frames carry a code in their first CODE pixels: 128 + 100 (g_x,
    g_y, |g|) rounded in every frame (``coded``), or noise drawn anew each frame."""
    out = []
    for k, g in enumerate(gravities(family, rng)):
        frames = rng.integers(0, 256, (seqs, sequence_length(cfg, N), 1, 64, 64), dtype=np.uint8)
        if coded:
            frames[:, :, 0, 0, :CODE] = np.rint(128 + 100 * g).astype(np.uint8)
        out.append(WorldSet(f"{family}-{k}", family, np.asarray([g[0], g[1], 1.0, 0.0]), frames))
    return out


def test_the_probe_reads_a_memory_that_holds_the_world_and_not_one_that_does_not() -> None:
    """Through the learner: where every frame of a world carries its gravity, e_agg = W_e(code)
    is linear in it and the entries hold it: both read direction, strength and the world near
    perfectly, in each family apart. Where the frames carry noise, neither reads anything."""
    cfg = cfg_of()
    learner = Learner(cfg)
    learner.nets.encoder, learner.nets.experience = Pixels(cfg.latent_dim), Newest(cfg.exp_dim)
    rng = np.random.default_rng(0)
    worlds = {f: coded_worlds(cfg, f, rng, coded=True) for f in ("train", "interp")}
    codes = peer_features(learner, worlds["train"][0], N, peers=1)
    assert codes["e_agg"].shape == (4, cfg.exp_dim) and codes["entries"].shape == (4, 2 * cfg.latent_dim)  # pairs
    out = gravity_probe(learner, worlds, n=N, peers=1)
    assert set(out) == {"e_agg", "entries"} and set(out["e_agg"]) == {"train", "interp"}
    for r in (*out["e_agg"].values(), *out["entries"].values()):
        assert r["direction_deg"] < 2.0 and r["direction_cos"] > 0.99 and r["strength_r2"] > 0.95
        assert r["identified"] == 1.0 and r["chance"] == 1 / WORLDS
    assert gravity_probe(learner, worlds, n=N, peers=1, features=("e_agg",)) == {"e_agg": out["e_agg"]}
    blind = gravity_probe(learner, {f: coded_worlds(cfg, f, rng, coded=False)
                                    for f in ("train", "interp")}, n=N, peers=1)  # fmt: skip
    rows = [*blind["e_agg"].values(), *blind["entries"].values()]
    mean = {k: np.mean([r[k] for r in rows]) for k in rows[0]}
    assert 60.0 < mean["direction_deg"] < 120.0 and abs(mean["direction_cos"]) < 0.3
    assert mean["strength_r2"] < 0.1 and mean["identified"] <= 2 / WORLDS
    with pytest.raises(ValueError, match="each needs 2 peers"):  # halves of 2 sequences
        gravity_probe(learner, worlds, n=N, peers=2)


def test_a_learner_without_memory_has_nothing_to_probe() -> None:
    cfg = cfg_of("A")
    rng = np.random.default_rng(0)
    w = coded_worlds(cfg, "train", rng, coded=True)[0]
    with pytest.raises(ValueError, match="reads no memory"):
        peer_features(Learner(cfg), w, N)


def test_entry_statistics_are_the_mean_latent_change_and_median_change_of_velocity() -> None:
    """Entries (t-2, t-1, t) of a path z = a t^2 + b t + c per sample: the mean newest latent,
    the mean change, and the change of velocity 2a, which a bounce (one outlier entry) does not
    move because it is a median. Masked slots are not read; a sample with none reads zeros."""
    t = torch.arange(6.0).view(1, 6, 1, 1) + torch.arange(3.0).view(1, 1, 3, 1)  # (1, 6, 3, 1)
    a = torch.tensor([0.5, -1.0]).view(2, 1, 1, 1)
    pairs = (a * t**2 + 3 * t + 1).expand(2, 6, 3, 1).clone()  # (2, 6, 3, 1), 6 entries each
    pairs[0, 5, 2] += 100.0  # a bounce in sample 0's last entry
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False  # sample 1 reads its first four
    stats = entry_statistics(pairs, mask).numpy()  # (2, 3): newest, change, change of velocity
    assert stats.shape == (2, 3)
    assert stats[0, 2] == pytest.approx(1.0)  # 2a, the bounce ignored
    assert stats[1, 2] == pytest.approx(-2.0)
    newest = pairs[1, :4, 2, 0]
    assert stats[1, 0] == pytest.approx(float(newest.mean()))
    change = pairs[1, :4, 2, 0] - pairs[1, :4, 1, 0]
    assert stats[1, 1] == pytest.approx(float(change.mean()))
    none = entry_statistics(pairs, torch.zeros(2, 6, dtype=torch.bool)).numpy()
    assert (none == 0).all()
    assert entry_statistics(pairs[:, :, 1:], mask).shape == (2, 2)  # pairs: no second difference


