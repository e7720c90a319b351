"""The paper protocol: one base world for every stream, then the switches.

Every stream lives in the base world (``--base-gravity``), live (``--source stream``) or as
i.i.d. sequences of a ``runners.make_dataset`` store (``--source dataset --data PATH.zarr``);
the switches change its physics (by default gravity 0 -> 0.5 at 2/3 of the run). Its evaluation
is D_shift^n on the switch's world and D_base on the base world, on the store's splits or on
generated ones. Definitions: docs/definitions.md; the options: docs/train_online.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from runners.cli import CliError
from runners.online.switch import check_physics

if TYPE_CHECKING:  # the config is read without torch and env; they come with a run's parts
    import torch

    import env
    from agent import EvalData
    from env import PhysicsParams
    from runners.online.evaluation import CurveEvaluator
    from runners.online.feeds import Feed
    from runners.online.protocols.run import Run
    from runners.online.switch import Switch

Source = Literal["stream", "dataset"]
NEEDS_DATA = "--source dataset needs --data PATH.zarr (written by runners.make_dataset)"


@dataclass
class Paper:
    """The paper protocol: one base world for every stream, then the switches."""

    kind: ClassVar[str] = "paper"
    #: The default switch (and the evaluation's shift world in a run without one).
    switch: ClassVar[tuple[tuple[str, float], ...]] = (("gravity", 0.5),)
    #: The memory sizes of the adaptation curve at the end; best.pt is the plain lowest.
    final_ns: ClassVar[tuple[int, ...]] = (0, 10, 25, 50, 100, 256)
    best_min_sigma: ClassVar[float] = 0.0
    #: What its evaluation calls D_shift's world, its memory and D_base's (tables, figures).
    names: ClassVar[tuple[str, str, str]] = ("shift test", "memories", "base test")
    #: The protocol's learner on top of the preset's: the paper's own (Tables 4-5).
    learner: ClassVar[dict[str, Any]] = {}
    #: No floor or ceiling beside its runs (``Worlds.bound_heads``).
    bound_heads: ClassVar[tuple[str, ...]] = ()
    #: Its seeds train one run a process (``Worlds.stacks``).
    stacks: ClassVar[bool] = False
    #: ``runners.evaluate``'s options for this protocol's runs alone.
    evaluate_options: ClassVar[tuple[str, ...]] = ("data", "target_reference")
    #: ``runners.visualize``'s options for this protocol's sessions alone.
    view_options: ClassVar[tuple[str, ...]] = ()
    base_gravity: float = 0.0
    """Gravity of the base world (px/frame^2) before any switch."""
    source: Source = "stream"
    """stream: the live vector env; dataset: i.i.d. sequences of a make_dataset store (--data)."""
    data: str | None = None
    """Store written by runners.make_dataset: the dataset source's train splits and the evaluation splits."""
    episode_length: int | None = 400
    """Stream episode length in steps (None: endless)."""
    stagger: bool = True
    """Start the parallel streams at staggered phases of their episodes."""
    eval_shift_train: int = 512
    """Shift-world train sequences (memory pushes) for evaluation."""
    eval_base_test: int = 128
    """Base-world test sequences for D_base."""

    def where(self) -> str:
        return f"{self.source} source"

    def phase_label(self, physics: str, switched: bool) -> str:
        """What the streams live in: one world, ``physics`` (its label), switched or not."""
        del switched
        return physics

    def switch_family(self, physics: PhysicsParams) -> None:
        """No families of worlds here (``Worlds.switch_family``)."""
        del physics

    def one_world(self, steps: np.ndarray, first_switch: int | None) -> np.ndarray:
        """Which of ``steps`` hold every stream in one world: all (``Worlds.one_world``)."""
        del first_switch
        return np.ones(len(steps), bool)

    def resumed_physics(self, saved: object, vec_env: Any) -> PhysicsParams | None:
        """The physics a resumed run goes on in: the env's own (a view may have changed them;
        None without an env: the schedule's), not the checkpoint's ``saved``."""
        del saved
        return None if vec_env is None else vec_env.physics(0)

    def base_physics(self) -> PhysicsParams:
        """The base world's physics, before any switch."""
        from env.physics import PhysicsParams

        return PhysicsParams(gravity=self.base_gravity)

    def check(self, switches: tuple[Switch, ...]) -> None:
        """What the field types cannot check: one ``CliError`` line naming the option."""
        for name in ("eval_shift_train", "eval_base_test"):
            if getattr(self, name) < 1:
                raise CliError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.episode_length is not None and self.episode_length < 21:
            raise CliError(f"episode_length must be at least 21 frames (one training window) or "
                           f"None, got {self.episode_length}")
        try:
            check_physics({"gravity": self.base_gravity})
        except ValueError as err:
            raise CliError(f"base_gravity: {err}") from None
        if self.source == "dataset":
            if not self.data:
                raise CliError(NEEDS_DATA)
            for sw in switches:
                if set(sw.params) != {"gravity"}:
                    others = ", ".join(n for n in sw.params if n != "gravity")
                    raise CliError(f"--source dataset: the switch at step {sw.step} changes "
                                   f"{others}; the store only holds its two gravities (use the "
                                   "stream source)")

    def open_store(self) -> env.PaperDataset | None:
        """The ``--data`` store (None without one), every failure one line."""
        from runners.online.store import open_store

        return None if not self.data else open_store(self.data)

    def for_evaluation(self, cfg: Run, data: str | None, ns: tuple[int, ...]
                       ) -> env.PaperDataset | None:  # fmt: skip
        """``runners.evaluate``'s store and ``cfg``: the --data store with its splits whole, or
        None (the splits generated at the run's sizes)."""
        del ns  # the splits are long enough for every n
        if data is None:
            return None
        cfg.protocol = whole = dataclasses.replace(self, data=data, eval_shift_train=10**9,
                                                   eval_base_test=10**9)
        cfg.schedule.eval_shift_test = 10**9
        return whole.open_store()

    def feed(self, cfg: Run, device: torch.device, store: env.PaperDataset | None = None,
             vec_env: Any = None) -> Feed:
        """Live streams in the base physics, their phases staggered, or the store's base split."""
        import env
        from runners.online.feeds import DatasetSplits, PaperStreams, stagger, world_device

        if vec_env is not None:
            raise ValueError("a given env is for the worlds protocol's feed")
        if self.source == "dataset":
            if store is None:
                raise CliError(NEEDS_DATA)
            check_store(cfg, self, store)
            return DatasetSplits(cfg.agent, self.data, store, device)
        vec_env = env.MovingMNISTVectorEnv(  # the streams of the base world
            cfg.agent.batch_size, gravity=cfg.physics_at(0).gravity,
            max_episode_steps=self.episode_length, device=world_device(device))
        source = PaperStreams(vec_env, cfg.agent, device, seed=cfg.agent.seed)
        source.start()
        if self.stagger and self.episode_length:
            stagger(vec_env, self.episode_length)
        return source

    def evaluator(self, cfg: Run, store: env.PaperDataset | None = None) -> CurveEvaluator:
        """D_shift^n and D_base on the splits (``eval_data``)."""
        from runners.online.evaluation import Evaluator

        return Evaluator(eval_data(cfg, self, store), cfg.schedule.eval_ns,
                         list(cfg.agent.horizons))


def eval_data(cfg: Run, paper: Paper, store: env.PaperDataset | None = None) -> EvalData:
    """Evaluation splits: from ``--data`` when given, else generated in memory, deterministically
    with ``env.generate_sequences`` (the generator of ``make_dataset``): shift train/test in the
    first switch's physics, base test in the base physics; test splits show unseen digits."""
    import env
    from agent import EvalData
    from runners.online.store import split_frames

    s = cfg.schedule
    if store is not None:
        path = str(paper.data)
        return EvalData(
            shift_train=split_frames(store, "shift", "train", path, paper.eval_shift_train),
            shift_test=split_frames(store, "shift", "test", path, s.eval_shift_test),
            base_test=split_frames(store, "base", "test", path, paper.eval_base_test),
        )
    seed = cfg.agent.seed + s.eval_seed_offset
    shift, base = cfg.shift_physics, cfg.base_physics
    a = cfg.agent  # an evaluation window: the context frames, then the horizons (21 in the paper)
    seq_len = a.context_frames + a.horizons[-1]

    def gen(n: int, s: int, physics: env.PhysicsParams, split: str) -> np.ndarray:
        seqs = env.generate_sequences(n, seed=s, split=split, seq_len=seq_len, **physics.as_dict())
        return seqs["frames"]

    return EvalData(
        shift_train=gen(paper.eval_shift_train, seed, shift, "train"),
        shift_test=gen(s.eval_shift_test, seed + 1, shift, "test"),
        base_test=gen(paper.eval_base_test, seed + 2, base, "test"),
    )


def check_store(cfg: Run, paper: Paper, store: env.PaperDataset) -> None:
    """The dataset source can only switch between the store's two gravities."""
    from runners.online.store import split_frames, split_view

    path = str(paper.data)
    g_shift = split_view(store, "shift", "train", path).gravity
    g_base = split_view(store, "base", "train", path).gravity
    seq_len = int(split_frames(store, "base", "train", path).shape[1])
    if seq_len < cfg.agent.window:
        raise CliError(f"--data {path}: sequences of {seq_len} frames are shorter than a sample's "
                       f"window of {cfg.agent.window} (context_frames {cfg.agent.context_frames}, "
                       f"push_pair {cfg.agent.push_pair}); use the stream source")
    if g_base != paper.base_gravity:
        raise CliError(f"--source dataset: the store's base world has gravity {g_base:g}, "
                       f"the run's base gravity is {paper.base_gravity:g}")
    for g in (cfg.physics_at(sw.step).gravity for sw in cfg.schedule.switches or ()):
        if g not in (g_base, g_shift):
            raise CliError(f"--source dataset: the store holds gravity {g_base:g} and "
                           f"{g_shift:g}; a switch to {g:g} needs the stream source")
