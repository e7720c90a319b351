"""The worlds protocol's evaluation worlds: test sequences of the switch world, of worlds drawn
from the training family (D_base) and of held-out worlds (interpolation and extrapolation),
generated deterministically from the run's seed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import env
from agent.evaluation import WorldSet, sequence_length


@dataclass
class WorldSets:
    """The evaluation's worlds: the switch world, training-family worlds, held-out worlds."""

    shift: WorldSet
    base: list[WorldSet]
    held_out: list[WorldSet]
    seed: int = 0  # what they were drawn from (the gravity probe draws its own worlds from it)
    # the run's families by name (the training one first; the gravity probe draws from them)
    families: dict[str, env.WorldFamily] = field(default_factory=lambda: dict(env.FAMILIES))


def family_of(physics: env.PhysicsParams,
              families: dict[str, env.WorldFamily] | None = None) -> str:  # fmt: skip
    """The name of the family ``physics`` lies in (``"none"`` outside every family);
    ``families``: the run's (default ``env.FAMILIES``)."""
    for name, fam in (families or env.FAMILIES).items():
        if fam.contains(physics):
            return name
    return "none"


def world_set(
    name: str, physics: env.PhysicsParams, n: int, seq_len: int, seed: Sequence[int],
    family: str | None = None,
) -> WorldSet:  # fmt: skip
    """``n`` test sequences (unseen digits) of one world, with their digits' positions and the
    simulator's state at their first frame; ``family``: its family's name (default: the
    ``env.FAMILIES`` one it lies in)."""
    seqs = env.generate_sequences(n, seed=list(seed), split="test", seq_len=seq_len,
                                  **physics.as_dict())
    scenes = env.initial_scenes(n, seed=list(seed), split="test", physics=physics)
    return WorldSet(name, family or family_of(physics), env.physics_features(physics),
                    seqs["frames"], seqs["positions"], scenes)  # fmt: skip


def make_world_sets(agent_cfg: Any, shift: env.PhysicsParams, *, train_family: str, n_max: int,
                    shift_seqs: int, world_seqs: int, worlds_per_family: int, seed: int,
                    base: tuple[int, int] | None = None,
                    families: dict[str, env.WorldFamily] | None = None) -> WorldSets:
    """Deterministic evaluation worlds for a run: ``shift_seqs`` sequences of the switch world,
    ``world_seqs`` of each of ``worlds_per_family`` worlds drawn from each held-out family
    (``families`` but the training one; default ``env.FAMILIES``) and ``base`` (WORLDS, SEQS;
    default the held-out's) of the training family, long enough for memories of ``n_max``
    entries."""
    families = dict(families or env.FAMILIES)
    length = sequence_length(agent_cfg, n_max)
    rng = np.random.default_rng([seed, 0x3E7A])

    def draw(fam: str, k: int, worlds: int = worlds_per_family, seqs: int = world_seqs
             ) -> list[WorldSet]:  # fmt: skip
        return [world_set(f"{fam}-{i}", p, seqs, length, [seed, 0x3E7A, k, i], fam)
                for i, p in enumerate(families[fam].sample(rng, worlds))]

    held = [name for name in families if name != train_family]
    return WorldSets(
        shift=world_set("switch", shift, shift_seqs, length, [seed, 0x3E7A, 99],
                        family_of(shift, families)),
        base=draw(train_family, 0, *(base or (worlds_per_family, world_seqs))),
        held_out=[w for k, fam in enumerate(held, 1) for w in draw(fam, k)],
        seed=seed,
        families={train_family: families[train_family], **{f: families[f] for f in held}},
    )  # fmt: skip
