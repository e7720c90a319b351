"""World families: draws lie in their family, the families are disjoint, draws are seeded."""

from __future__ import annotations

import numpy as np
import pytest

from env.physics import PhysicsParams
from env.worlds import FAMILIES, HELD_OUT, WorldFamily, family


def test_draws_lie_in_their_family_and_in_no_other() -> None:
    rng = np.random.default_rng(0)
    for name, fam in FAMILIES.items():
        worlds = fam.sample(rng, 2000)
        assert all(fam.contains(w) for w in worlds), name
        for other in FAMILIES.values():
            if other is not fam:
                assert not any(other.contains(w) for w in worlds), (name, other.name)


def test_draws_cover_the_family() -> None:
    worlds = family("train").sample(np.random.default_rng(1), 4000)
    g = np.asarray([w.gravity for w in worlds])
    d = np.asarray([w.gravity_direction for w in worlds])
    assert 0.1 <= g.min() < 0.12 and 0.48 < g.max() <= 0.5
    # Four arcs of 60 degrees around the axes: about a quarter of the draws in each.
    near = np.minimum.reduce([np.abs((d - c + 180) % 360 - 180) for c in (0, 90, 180, 270)])
    assert near.max() <= 30.0
    counts = np.bincount(((d + 45) % 360 // 90).astype(int), minlength=4)
    assert counts.min() > 900


def test_seeded_and_prefix_free() -> None:
    """The same seed draws the same worlds; fewer worlds from a seed are a prefix of more (so
    ``--eval-worlds 2`` evaluates the first two worlds of ``--eval-worlds 4``); a draw of n is one
    ``rng.random((n, 4))``, its values mapped in closed form, and takes nothing else from rng."""
    fam = family("interp")
    a = fam.sample(np.random.default_rng(5), 10)
    b = fam.sample(np.random.default_rng(5), 10)
    assert a == b
    assert all(isinstance(w, PhysicsParams) for w in a)
    for k in (0, 1, 3, 9):
        assert fam.sample(np.random.default_rng(5), k) == a[:k], k
    assert fam.sample(np.random.default_rng(5), 25)[:10] == a

    # Closed form on a family of two arcs, [20, 30) and [100, 130), laid end to end on [0, 40).
    two = WorldFamily("two", (0.1, 0.3), ((20.0, 30.0), (100.0, 130.0)), (0.5, 0.9), (0.0, 0.2))
    rng, ref = np.random.default_rng(7), np.random.default_rng(7)
    worlds = two.sample(rng, 50)
    u = ref.random((50, 4))
    at = u[:, 1] * 40.0
    direction = np.where(at < 10.0, 20.0 + at, 100.0 + at - 10.0)
    got = np.asarray([[w.gravity, w.gravity_direction, w.restitution, w.friction] for w in worlds])
    want = np.stack([0.1 + 0.2 * u[:, 0], direction, 0.5 + 0.4 * u[:, 2], 0.2 * u[:, 3]], 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert 0 < (at < 10.0).sum() < 50  # both arcs drawn
    assert rng.random() == ref.random()  # nothing more was drawn


def test_held_out_families_are_named_and_bad_input_is_refused() -> None:
    assert set(HELD_OUT) < set(FAMILIES)
    with pytest.raises(ValueError, match="unknown world family 'moon'"):
        family("moon")
    with pytest.raises(ValueError, match="empty"):
        WorldFamily("bad", (0.5, 0.1), ((0.0, 10.0),))
    with pytest.raises(ValueError, match="arcs"):
        WorldFamily("bad", (0.1, 0.5), ((10.0, 10.0),))
    with pytest.raises(ValueError, match="friction"):
        WorldFamily("bad", (0.1, 0.5), ((0.0, 10.0),), friction=(0.0, 1.5))


def test_the_named_families_are_disjoint_and_overlaps_are_found() -> None:
    from env import WorldFamily, check_disjoint

    check_disjoint(list(FAMILIES.values()))
    train = FAMILIES["train"]
    assert train.overlaps(train)
    stronger = WorldFamily("strong", (0.45, 0.7), ((80.0, 100.0),))  # gravity and arc meet
    assert train.overlaps(stronger) and stronger.overlaps(train)
    assert not FAMILIES["interp"].overlaps(stronger)  # no arc in common
    wrapped = WorldFamily("wrapped", (0.1, 0.2), ((350.0, 370.0),))  # passes 0 degrees
    assert train.overlaps(wrapped)
    bouncy = WorldFamily("bouncy", (0.1, 0.5), ((0.0, 10.0),), restitution=(0.5, 0.9))
    assert not train.overlaps(bouncy)  # restitution 1 in train only
    with pytest.raises(ValueError, match="families train and strong overlap"):
        check_disjoint([train, FAMILIES["interp"], stronger])
