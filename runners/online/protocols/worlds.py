"""The worlds protocol (the default): training across worlds, then a held-out world.

Every stream lives in worlds drawn from the training family (``--train-*``), in groups that
share a world and one memory for a residency of episodes; at the switch every stream moves to a
held-out world and, under ``--after-switch memory``, the weights freeze. Its evaluation is on
held-out worlds of the ``interp`` and ``extrap`` families (``runners.online.world_sets``), and
beside it train its floor and ceiling (``runners.online.bounds``). Definitions:
docs/definitions.md; the options: docs/train_online.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from runners.cli import CliError

if TYPE_CHECKING:  # the config is read without torch and env; they come with a run's parts
    import numpy as np
    import torch

    from env import PhysicsParams
    from runners.online.evaluation import CurveEvaluator
    from runners.online.feeds import Feed
    from runners.online.protocols.run import Run
    from runners.online.switch import Switch

#: The worlds protocol's families, in order: the training one, then the held-out ones.
FAMILY_NAMES = ("train", "interp", "extrap")


@dataclass
class Worlds:
    """The worlds protocol: the streams in worlds drawn from --train-family (in groups that share
    a world for a residency of episodes, with a group memory), redrawn at a residency's end; at
    the switch every stream moves to the held-out world."""

    kind: ClassVar[str] = "worlds"
    #: The default switch: a held-out world stronger than every training world (family
    #: "extrap": gravity 0.75 straight down, the training worlds' at most 0.5), where the
    #: floor's error jumps and memory has the most to add (docs/definitions.md#after-the-switch).
    switch: ClassVar[tuple[tuple[str, float], ...]] = (("gravity", 0.75), ("gravity_direction", 90.0))
    #: The memory sizes of the adaptation curve at the end, and best.pt's collapse guard.
    final_ns: ClassVar[tuple[int, ...]] = (0, 1, 5, 10, 25, 50)
    best_min_sigma: ClassVar[float] = 0.2
    #: What its evaluation calls D_shift's world, its memory and D_base's (tables, figures).
    names: ClassVar[tuple[str, str, str]] = ("switch world", "own memories",
                                             "training worlds, no memory")
    #: No store: every stream and every evaluation world is generated.
    data: ClassVar[str | None] = None
    #: The heads that bound its runs (``--bounds``): the floor (track A) and the ceiling (the
    #: oracle), by their head names (``agent.heads``), reported by ``runners.online.bounds``.
    bound_heads: ClassVar[tuple[str, ...]] = ("A", "oracle")
    #: Its seeds may train stacked as one model (``--stack-seeds``, ``agent.stacked``).
    stacks: ClassVar[bool] = True
    #: ``runners.evaluate``'s options for this protocol's runs alone.
    evaluate_options: ClassVar[tuple[str, ...]] = ("world_probe", "predictions", "eval_worlds",
                                                   "eval_world_seqs")
    #: ``runners.visualize``'s options for this protocol's sessions alone.
    view_options: ClassVar[tuple[str, ...]] = ("shift_direction",)
    #: The protocol's learner, on top of the preset's (``runners.online.presets``): the last two
    #: frames in (velocity visible; acceleration, and so the world, not), one prediction per
    #: horizon at horizons short enough to learn in minutes; one memory per world shared by the
    #: 8 streams that live in it (the paper's one buffer, generalised:
    #: docs/definitions.md#group-memory), read without the sample's own episode, written at every
    #: step, emptied at a new world, its entries three frames long (a pair shows a velocity,
    #: which the context already holds; three show its change, where the world's gravity is),
    #: and a varied amount of it in training (so it works from its first entry); frames scaled
    #: to 0..1 (the paper feeds raw 0..255); a fast EMA target (tau 0.98 -> 0.99, the paper's
    #: 0.996 -> 0.9999), which keeps the target encoder within a step of the online one, so that
    #: D's "no change" (the online z_t) is the target's own and D measures predicted motion
    #: (docs/results.md, "The online-target gap inflates 'no change'").
    learner: ClassVar[dict[str, Any]] = {
        "tau_base": 0.98, "tau_end": 0.99, "context_frames": 2, "per_horizon": True,
        "horizons": (2, 4, 8), "memory_scope": "group", "group_size": 8, "memory_read": "peer",
        "entry_frames": 3, "memory_write": "every", "vary_memory": True,
        "input_scale": 1.0 / 255.0,
    }  # fmt: skip
    train_family: Literal["train"] = "train"
    """The name of the family each stream's worlds are drawn from before the switch (its worlds: --train-gravity, --train-arcs, and --set train_restitution=..., train_friction=...)."""
    train_gravity: tuple[float, float] = (0.1, 0.5)
    """Training worlds: gravity range LOW HIGH (px/frame^2), drawn uniformly."""
    train_arcs: tuple[float, ...] = (-30.0, 30.0, 60.0, 120.0, 150.0, 210.0, 240.0, 300.0)
    """Training worlds: gravity directions, arcs as START END pairs in degrees (0 right, 90 down; END > START, may pass 360)."""
    train_restitution: tuple[float, float] = (1.0, 1.0)
    """Training worlds: restitution range LOW HIGH (1: elastic walls)."""
    train_friction: tuple[float, float] = (0.0, 0.0)
    """Training worlds: friction range LOW HIGH (velocity lost per frame, below 1)."""
    interp_gravity: tuple[float, float] = (0.15, 0.45)
    """Held-out worlds between the training ones (interp): gravity range."""
    interp_arcs: tuple[float, ...] = (30.0, 60.0, 120.0, 150.0, 210.0, 240.0, 300.0, 330.0)
    """interp: direction arcs (START END pairs, degrees)."""
    interp_restitution: tuple[float, float] = (1.0, 1.0)
    """interp: restitution range."""
    interp_friction: tuple[float, float] = (0.0, 0.0)
    """interp: friction range."""
    extrap_gravity: tuple[float, float] = (0.6, 0.8)
    """Held-out worlds beyond the training ones (extrap): gravity range."""
    extrap_arcs: tuple[float, ...] = (-30.0, 30.0, 60.0, 120.0, 150.0, 210.0, 240.0, 300.0)
    """extrap: direction arcs (START END pairs, degrees)."""
    extrap_restitution: tuple[float, float] = (1.0, 1.0)
    """extrap: restitution range."""
    extrap_friction: tuple[float, float] = (0.0, 0.0)
    """extrap: friction range."""
    episode_steps: tuple[int, int] = (100, 200)
    """Each episode lasts a number of steps drawn uniformly from this range."""
    residency: tuple[int, int] = (1, 1)
    """A world lasts this many episodes (drawn uniformly) of its streams; with --memory-scope group the --group-size streams of a group share it (env.WorldSchedule)."""
    eval_worlds: int = 8
    """Worlds per held-out family (interp, extrap) in the held-out report."""
    eval_world_seqs: int = 96
    """Test sequences per held-out world."""
    base_worlds: int = 3
    """Training-family worlds: the periodic evaluations' D_base, the probes' fitting set."""
    base_world_seqs: int = 48
    """Test sequences per training-family world."""

    @property
    def source(self) -> str:
        return "stream"

    def where(self) -> str:
        """What the streams live in before the first switch (for plots and the run's header)."""
        return f"{self.train_family} worlds"

    def phase_label(self, physics: str, switched: bool) -> str:
        """What the streams live in: their training worlds until a switch holds them in one
        (``physics``, its label)."""
        return physics if switched else self.where()

    def switch_family(self, physics: PhysicsParams) -> str:
        """The name of the family the switch world ``physics`` lies in ("none": outside all)."""
        from runners.online.world_sets import family_of

        return family_of(physics, self.families())

    def one_world(self, steps: np.ndarray, first_switch: int | None) -> np.ndarray:
        """Which of ``steps`` hold every stream in one world (a run records that world's
        physics; NaN where each group lives in its own): from the first switch on."""
        import numpy as np

        first = np.iinfo(np.int64).max if first_switch is None else first_switch
        return np.asarray(steps) >= first

    def resumed_physics(self, saved: object, vec_env: Any) -> PhysicsParams | None:
        """The physics a resumed run goes on in: the world its streams were held in, as its
        checkpoint saved it (``saved``: a dict, the schedule's restored state holds the streams
        there), or the base physics while they live in the training worlds (a switch's own
        after a scheduled one, a view's after an interactive one); None where none was saved.
        A damaged one raises ``TypeError`` or ``ValueError``."""
        del vec_env  # the env's physics are each stream's own world
        from env.physics import PhysicsParams

        return PhysicsParams(**saved) if isinstance(saved, dict) else None

    def base_physics(self) -> PhysicsParams:
        """The physics a run's switches start from (each stream's own world aside)."""
        from env.physics import PhysicsParams

        return PhysicsParams()

    def families(self) -> dict[str, Any]:
        """The protocol's world families (``env.WorldFamily``) by name, from its options; a bad or
        empty range, or two families that share a world, is one ``CliError`` line."""
        import env

        out = {}
        for name in FAMILY_NAMES:
            arcs = getattr(self, f"{name}_arcs")
            if len(arcs) % 2 or not arcs:
                raise CliError(f"{name}_arcs must be START END pairs of degrees, got {list(arcs)}")
            try:
                out[name] = env.WorldFamily(
                    name, getattr(self, f"{name}_gravity"),
                    tuple(zip(arcs[::2], arcs[1::2], strict=True)),
                    getattr(self, f"{name}_restitution"), getattr(self, f"{name}_friction"),
                )  # fmt: skip
            except ValueError as err:
                raise CliError(f"the {name} worlds ({name}_*): {err}") from None
        try:
            env.check_disjoint(list(out.values()))
        except ValueError as err:
            raise CliError(str(err)) from None
        return out

    def check(self, switches: tuple[Switch, ...]) -> None:
        """What the field types cannot check: one ``CliError`` line naming the option."""
        self.families()  # every family valid, no two sharing a world
        for name, least in (("episode_steps", 21), ("residency", 1)):
            lo, hi = getattr(self, name)
            if not least <= lo <= hi:
                raise CliError(f"{name} must be LOW HIGH with {least} <= LOW <= HIGH, got {lo} {hi}")
        for name, least, why in (
            ("eval_world_seqs", 2, ""), ("base_world_seqs", 2, ""), ("base_worlds", 1, ""),
            ("eval_worlds", 2, " (the wrong-world control is another world of the family)"),
        ):  # fmt: skip
            if getattr(self, name) < least:
                raise CliError(f"{name} must be at least {least}{why}, got {getattr(self, name)}")

    def open_store(self) -> None:
        return None

    def for_evaluation(self, cfg: Run, data: None, ns: tuple[int, ...]) -> None:
        """``runners.evaluate``'s store and ``cfg``: no store (--data is refused, the worlds are
        generated), world sets long enough for the largest of ``ns``."""
        cfg.schedule.final_ns = ns

    def feed(self, cfg: Run, device: torch.device, store: None = None,
             vec_env: Any = None) -> Feed:
        """Every stream in the training worlds, in groups of ``group_size`` that share a world
        for a residency (``vec_env``: a block of a shared env, ``feeds.make_scheduled_feed``)."""
        from runners.online.feeds import make_scheduled_feed

        a = cfg.agent
        group = a.group_size if a.memory_scope == "group" else 1
        return make_scheduled_feed(
            a.batch_size, self.families()["train"], self.episode_steps, a, device, a.seed,
            group_size=group, residency=self.residency, vec_env=vec_env,
        )  # fmt: skip

    def evaluator(self, cfg: Run, store: None = None) -> CurveEvaluator:
        """The held-out worlds' evaluation on world sets drawn from the run's seed."""
        from runners.online.evaluation import WorldsEvaluator
        from runners.online.world_sets import make_world_sets

        s = cfg.schedule
        sets = make_world_sets(
            cfg.agent, cfg.shift_physics, train_family=self.train_family,
            n_max=max(s.eval_ns + tuple(s.final_ns or ())), shift_seqs=s.eval_shift_test,
            world_seqs=self.eval_world_seqs, worlds_per_family=self.eval_worlds,
            base=(self.base_worlds, self.base_world_seqs),
            seed=cfg.agent.seed + s.eval_seed_offset, families=self.families(),
        )  # fmt: skip
        return WorldsEvaluator(sets, s.eval_ns, list(cfg.agent.horizons), s.decoder_steps)
