"""The gravity probe (probes.gravity): a linear probe of the world's gravity from e_agg."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from agent import AgentConfig, Learner
from agent.adaptation import WorldSet, sequence_length
from probes.gravity import entry_statistics, gravity_probe, peer_features

N = 3  # memory size


def cfg_of(track: str = "C", **kw) -> AgentConfig:
    base = {"push_pair": "input", "memory_scope": "group", "batch_size": 4, "group_size": 2,
            "context_frames": 2, "horizons": (2, 4), "per_horizon": True}  # fmt: skip
    return AgentConfig.from_preset("tiny", track=track, **{**base, **kw})


class Change(nn.Module):
    """A stand-in experience encoder: a pair's change z_new - z_old, in every dimension."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        return (pairs[:, 1, :1] - pairs[:, 0, :1]).expand(-1, self.dim)


def world(cfg: AgentConfig, name: str, family: str, step: int, gravity: tuple[float, float],
          rng: np.random.Generator) -> WorldSet:  # fmt: skip
    """Sequences whose pixel (0, 2) grows by ``step`` a frame (from a random start): under the
    pixel encoder every memory pair's change is ``step``."""
    length = sequence_length(cfg, N)
    frames = rng.integers(0, 256, (6, length, 1, 64, 64), dtype=np.uint8)
    start = rng.integers(0, 40, size=(6, 1))
    frames[:, :, 0, 0, 2] = start + step * np.arange(length)
    return WorldSet(name, family, np.asarray([*gravity, 1.0, 0.0]), frames)


def learner_reading_changes(cfg: AgentConfig, pixel_encoder) -> Learner:
    learner = Learner(cfg)
    learner.nets.encoder = pixel_encoder(cfg.latent_dim, pixel=2)
    learner.nets.experience = Change(cfg.exp_dim)
    return learner


def test_a_memory_that_carries_the_world_is_read_by_the_probe(pixel_encoder) -> None:
    """e_agg = W_e(change) is linear in the per-frame change, which is linear in the world's
    gravity here: R^2 1 on held-out worlds. Where every world's sequences change alike, e_agg
    says nothing of the world: R^2 at most 0."""
    cfg = cfg_of()
    learner = learner_reading_changes(cfg, pixel_encoder)
    rng = np.random.default_rng(0)

    def worlds(steps: list[int], family: str, tied: bool) -> list[WorldSet]:
        return [world(cfg, f"{family}-{k}", family, 5 if not tied else k, (k / 100, -k / 50), rng)
                for k in steps]  # fmt: skip

    fit, test = worlds([1, 2, 4, 6, 9, 12], "train", True), worlds([3, 7, 10], "interp", True)
    codes = peer_features(learner, test[0], N, peers=1)
    assert codes["e_agg"].shape == (6, cfg.exp_dim) and codes["entries"].shape == (6, 2 * cfg.latent_dim)  # pairs
    out = gravity_probe(learner, fit, test, n=N, peers=1, features=("e_agg",))["e_agg"]
    assert set(out) == {"interp", "all"}
    assert out["interp"] > 0.999 and out["all"] > 0.999
    blind = gravity_probe(learner, worlds([1, 2, 4, 6, 9, 12], "train", False),
                          worlds([3, 7, 10], "interp", False), n=N)  # fmt: skip
    assert blind["e_agg"]["all"] <= 0.0
    both = gravity_probe(learner, fit, test, n=N, peers=1)
    assert both["e_agg"] == out  # deterministic, and the same read beside the entries


def test_a_learner_without_memory_has_nothing_to_probe() -> None:
    cfg = cfg_of("A")
    rng = np.random.default_rng(0)
    w = world(cfg, "w", "train", 2, (0.1, 0.0), rng)
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


def test_the_entry_statistics_probe_reads_the_world_from_the_same_entries(pixel_encoder) -> None:
    """The probe on the entries' own statistics: here the change per frame is linear in the
    world's gravity, so it reads it (R^2 1) whatever the experience encoder does with it."""
    cfg = cfg_of()
    learner = Learner(cfg)
    learner.nets.encoder = pixel_encoder(cfg.latent_dim, pixel=2)
    rng = np.random.default_rng(0)

    def worlds(steps: list[int], family: str) -> list[WorldSet]:
        return [world(cfg, f"{family}-{k}", family, k, (k / 100, -k / 50), rng) for k in steps]

    out = gravity_probe(learner, worlds([1, 2, 4, 6, 9, 12], "train"),
                        worlds([3, 7, 10], "interp"), n=N, features=("entries",))
    assert set(out) == {"entries"} and out["entries"]["all"] > 0.999
