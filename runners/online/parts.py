"""Small factories: the parts of one online run, built from its resolved ``RunConfig``.

``build_parts(cfg, folder)`` is the one construction path, for a fresh start and for a resume
alike (a resume then loads the checkpoint into the parts it built). Each part is built by its
own factory so a caller (the visualizer, a test, a benchmark) can build or replace one alone:

- ``resolve_device``: auto -> cuda when available, else cpu;
- ``make_learner``: ``agent.Learner`` of the run's ``AgentConfig``;
- ``make_world``: the world the learner lives in and its source of batches: under the worlds
  protocol a ``ScheduledWorld`` (``runners.online.worlds_protocol``: every stream's episodes in worlds
  drawn from a family); under the paper's, ``StreamWorld`` (a live
  ``env.MovingMNISTVectorEnv`` whose physics switch mid-stream) or ``DatasetWorld`` (i.i.d.
  sequences of a ``make_dataset`` store's base or shift split);
- ``make_evaluator``: the worlds protocol's ``WorldsEvaluator`` (generated world sets), or the
  paper's ``Evaluator`` on its splits (``make_eval_data``, from the store or generated);
- ``Recorder``: the run's ``run.zarr`` (``runners.online.recorder``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import env
from agent import Batch, DatasetSource, EvalData, Learner, StreamSource
from runners.cli import CliError
from runners.online.config import RunConfig, Worlds, device_name, world_families
from runners.online.evaluation import CurveEvaluator, Evaluator
from runners.online.recorder import Recorder
from runners.online.rundir import RunFolder
from runners.online.worlds_protocol import (
    ScheduledWorld,
    WorldsEvaluator,
    make_scheduled_world,
    make_world_sets,
)


def resolve_device(name: str) -> torch.device:
    """auto -> cuda when available else cpu; cuda without a GPU -> CliError."""
    if name == "auto":
        return torch.device(device_name(name))
    if name == "cuda" and not torch.cuda.is_available():
        raise CliError("--device cuda: no CUDA GPU is available here (use --device cpu or auto)")
    return torch.device(name)


def make_learner(cfg: RunConfig, device: torch.device) -> Learner:
    return Learner(cfg.agent, device=device)


# -- the dataset store -------------------------------------------------------------------------
def open_store(path: str) -> env.PaperDataset:
    """``env.open_dataset`` with every failure turned into one line."""
    if not Path(path).exists():
        raise CliError(f"--data {path}: no such file or folder")
    try:
        return env.open_dataset(path)
    except Exception as err:  # the reader's own message names what is wrong
        raise CliError(f"--data {path}: cannot read it as a make_dataset store ({err})") from None


def split_view(store: env.PaperDataset, world: str, split: str, path: str) -> Any:
    """``store.split(world, split)``, a missing split as one line."""
    try:
        return store.split(world, split)
    except Exception as err:
        raise CliError(f"--data {path}: the store has no usable {world}/{split} split ({err})") from None


def split_frames(
    store: env.PaperDataset, world: str, split: str, path: str, limit: int | None = None
) -> Any:
    """``(N, T, 1, 64, 64)`` frames of one split (lazy zarr array unless ``limit``)."""
    frames = split_view(store, world, split, path).frames
    if limit is not None:
        return np.asarray(frames[: min(limit, frames.shape[0])])
    return frames


# -- the world ---------------------------------------------------------------------------------
class StreamWorld:
    """B parallel streams of a live vector env; ``enter`` switches their physics mid-stream."""

    def __init__(self, vec_env: env.MovingMNISTVectorEnv, source: StreamSource) -> None:
        self.vec_env = vec_env
        self.source = source

    def enter(self, physics: env.PhysicsParams, world: int) -> None:
        """Every stream's physics from the next frame on; samples tagged ``world``."""
        self.vec_env.set_physics(**physics.as_dict())
        self.source.set_world(world)

    def next(self) -> Batch:
        return self.source.next()


class DatasetWorld:
    """I.i.d. sequences of a store's base (world 0) or shift (world 1) train split."""

    def __init__(self, cfg: RunConfig, store: env.PaperDataset, device: torch.device) -> None:
        self.cfg, self.store, self.device = cfg, store, device
        self.vec_env = None
        self.source = self._source(0)

    def _source(self, world: int) -> DatasetSource:
        cfg = self.cfg
        frames = split_frames(self.store, "shift" if world else "base", "train", str(cfg.paper.data))
        return DatasetSource(frames, cfg.agent, self.device, world=world, seed=cfg.agent.seed + world)

    def enter(self, physics: env.PhysicsParams, world: int) -> None:
        """The split of ``world`` (the store holds two gravities; checked by ``check_store``)."""
        if world != self.source.world:
            self.source = self._source(world)

    def next(self) -> Batch:
        return self.source.next()


World = StreamWorld | DatasetWorld | ScheduledWorld


def make_vec_env(cfg: RunConfig, n_streams: int) -> env.MovingMNISTVectorEnv:
    """The B parallel streams of the base world (long episodes, staggered phases)."""
    return env.MovingMNISTVectorEnv(
        n_streams, gravity=cfg.physics_at(0).gravity, max_episode_steps=cfg.paper.episode_length
    )


def stagger(vec_env: env.MovingMNISTVectorEnv, episode_length: int) -> None:
    """Spread the streams' episode phases evenly over ``episode_length`` so their resets (and
    the windows a reset masks) do not all fall on the same steps. Stream i's first episode is
    shortened by ``i * L / B`` steps (through the env's documented state dict)."""
    state = vec_env.get_state()
    n = vec_env.num_envs
    offset = (np.arange(n) * episode_length) // n
    elapsed = np.asarray(state["elapsed"], np.int64)
    state["elapsed"] = np.minimum(elapsed + offset, episode_length - 1)
    vec_env.set_state(state)


def make_world(
    cfg: RunConfig, device: torch.device, store: env.PaperDataset | None = None
) -> World:
    """The run's world before any switch: streams in the training worlds (worlds protocol), or
    live streams in the base physics, or the store's base split (paper protocol)."""
    if isinstance(w := cfg.protocol, Worlds):
        a = cfg.agent
        group = a.group_size if a.memory_scope == "world" else 1
        return make_scheduled_world(
            a.batch_size, world_families(w)["train"], w.episode_steps, a, device, a.seed,
            group_size=group, residency=w.residency,
        )  # fmt: skip
    if cfg.paper.source == "dataset":
        if store is None:
            raise CliError("--source dataset needs --data PATH.zarr (written by runners.make_dataset)")
        check_store(cfg, store)
        return DatasetWorld(cfg, store, device)
    vec_env = make_vec_env(cfg, cfg.agent.batch_size)
    source = StreamSource(vec_env, cfg.agent, device, seed=cfg.agent.seed)
    source.start()
    if cfg.paper.stagger and cfg.paper.episode_length:
        stagger(vec_env, cfg.paper.episode_length)
    return StreamWorld(vec_env, source)


def check_store(cfg: RunConfig, store: env.PaperDataset) -> None:
    """The dataset source can only switch between the store's two gravities."""
    path = str(cfg.paper.data)
    g_shift = split_view(store, "shift", "train", path).gravity
    g_base = split_view(store, "base", "train", path).gravity
    seq_len = int(split_frames(store, "base", "train", path).shape[1])
    if seq_len < cfg.agent.window:
        raise CliError(
            f"--data {path}: sequences of {seq_len} frames are shorter than a sample's window of "
            f"{cfg.agent.window} (context_frames {cfg.agent.context_frames}, push_pair "
            f"{cfg.agent.push_pair}); use the stream source"
        )
    if g_base != cfg.paper.base_gravity:
        raise CliError(
            f"--source dataset: the store's base world has gravity {g_base:g}, "
            f"the run's base gravity is {cfg.paper.base_gravity:g}"
        )
    for g in (cfg.physics_at(sw.step).gravity for sw in cfg.schedule.switches or ()):
        if g not in (g_base, g_shift):
            raise CliError(
                f"--source dataset: the store holds gravity {g_base:g} and {g_shift:g}; "
                f"a switch to {g:g} needs the stream source"
            )


# -- evaluation --------------------------------------------------------------------------------
def make_eval_data(cfg: RunConfig, store: env.PaperDataset | None = None) -> EvalData:
    """Evaluation splits: from ``--data`` when given, else generated in memory, deterministically
    with ``env.generate_sequences`` (the generator of ``make_dataset``): shift train/test in the
    first switch's physics, base test in the base physics; test splits show unseen digits."""
    if store is not None:
        path = str(cfg.paper.data)
        return EvalData(
            shift_train=split_frames(store, "shift", "train", path, cfg.paper.eval_shift_train),
            shift_test=split_frames(store, "shift", "test", path, cfg.schedule.eval_shift_test),
            base_test=split_frames(store, "base", "test", path, cfg.paper.eval_base_test),
        )
    seed = cfg.agent.seed + cfg.schedule.eval_seed_offset
    shift, base = cfg.shift_physics, cfg.base_physics
    a = cfg.agent  # an evaluation window: the context frames, then the horizons (21 in the paper)
    seq_len = a.context_frames + a.horizons[-1]

    def gen(n: int, s: int, physics: env.PhysicsParams, split: str) -> np.ndarray:
        return env.generate_sequences(
            n, seed=s, split=split, seq_len=seq_len, **physics.as_dict()
        )["frames"]

    return EvalData(
        shift_train=gen(cfg.paper.eval_shift_train, seed, shift, "train"),
        shift_test=gen(cfg.schedule.eval_shift_test, seed + 1, shift, "test"),
        base_test=gen(cfg.paper.eval_base_test, seed + 2, base, "test"),
    )


def make_evaluator(
    cfg: RunConfig, store: env.PaperDataset | None = None
) -> CurveEvaluator:
    s = cfg.schedule
    if isinstance(w := cfg.protocol, Worlds):
        sets = make_world_sets(
            cfg.agent, cfg.shift_physics, train_family=w.train_family,
            n_max=max(s.eval_ns + tuple(s.final_ns or ())), shift_seqs=s.eval_shift_test,
            world_seqs=w.eval_world_seqs, worlds_per_family=w.eval_worlds,
            seed=cfg.agent.seed + s.eval_seed_offset, families=world_families(w),
        )  # fmt: skip
        return WorldsEvaluator(sets, s.eval_ns, list(cfg.agent.horizons))
    return Evaluator(make_eval_data(cfg, store), s.eval_ns, list(cfg.agent.horizons))


# -- all of them ---------------------------------------------------------------------------------
@dataclass
class RunParts:
    """What an ``OnlineLoop`` is assembled from."""

    device: torch.device
    learner: Learner
    world: World
    recorder: Recorder
    evaluator: CurveEvaluator


def build_parts(cfg: RunConfig, folder: RunFolder) -> RunParts:
    """Every part of the run in ``folder``, in its initial state (a resume loads into them)."""
    device = resolve_device(cfg.device)
    store = open_store(cfg.paper.data) if cfg.paper.data else None
    return RunParts(
        device=device,
        learner=make_learner(cfg, device),
        world=make_world(cfg, device, store),
        recorder=Recorder(folder),
        evaluator=make_evaluator(cfg, store),
    )
