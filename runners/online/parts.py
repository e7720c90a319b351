"""Small factories: the parts of one online run, built from its resolved ``RunConfig``.

``build_run_parts(cfg, folder)`` is the one construction path, for a fresh start and for a resume
alike (a resume then loads the checkpoint into the parts it built). Each part is built by its
own factory so a caller (the visualizer, a test, a benchmark) can build or replace one alone:

- ``resolve_device``: auto -> cuda when available, else cpu; ``set_threads``: one torch
  thread on a CPU unless TORCH_NUM_THREADS says otherwise;
- ``make_learner``: ``agent.Learner`` of the run's ``AgentConfig``;
- ``make_feed``: the streams the learner lives in and their batches (``runners.online.feeds``);
- ``make_evaluator``: the worlds protocol's ``WorldsEvaluator`` (``runners.online.evaluation``
  on generated world sets, ``runners.online.world_sets``), or the paper's ``Evaluator`` on its
  splits (``make_eval_data``, from the store (``runners.online.store``) or generated);
- ``Recorder``: the run's ``run.zarr`` (``runners.online.recorder``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import env
from agent import EvalData, Learner
from runners.cli import CliError
from runners.online.config import Paper, RunConfig, Worlds, device_name, world_families
from runners.online.evaluation import CurveEvaluator, Evaluator, WorldsEvaluator
from runners.online.feeds import Feed, make_feed
from runners.online.recorder import Recorder
from runners.online.rundir import RunFolder
from runners.online.store import open_store, split_frames
from runners.online.world_sets import make_world_sets


def set_threads(device: torch.device) -> None:
    """One intra-op thread on CPU unless TORCH_NUM_THREADS says otherwise: the models are small,
    and on a shared CPU more threads spin against each other (measured 20x slower under load)."""
    if device.type == "cpu":
        torch.set_num_threads(int(os.environ.get("TORCH_NUM_THREADS", "1")))


def resolve_device(name: str) -> torch.device:
    """auto -> cuda when available else cpu; cuda without a GPU -> CliError."""
    if name == "auto":
        return torch.device(device_name(name))
    if name == "cuda" and not torch.cuda.is_available():
        raise CliError("--device cuda: no CUDA GPU is available here (use --device cpu or auto)")
    return torch.device(name)


def make_learner(cfg: RunConfig, device: torch.device) -> Learner:
    """The run's learner: the plain step, replayed from CUDA graphs with ``--capture``."""
    return Learner(cfg.agent, device=device, captured=cfg.capture)


# -- evaluation --------------------------------------------------------------------------------
def make_eval_data(cfg: RunConfig, paper: Paper, store: env.PaperDataset | None = None) -> EvalData:
    """Evaluation splits: from ``--data`` when given, else generated in memory, deterministically
    with ``env.generate_sequences`` (the generator of ``make_dataset``): shift train/test in the
    first switch's physics, base test in the base physics; test splits show unseen digits."""
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
        return env.generate_sequences(
            n, seed=s, split=split, seq_len=seq_len, **physics.as_dict()
        )["frames"]

    return EvalData(
        shift_train=gen(paper.eval_shift_train, seed, shift, "train"),
        shift_test=gen(s.eval_shift_test, seed + 1, shift, "test"),
        base_test=gen(paper.eval_base_test, seed + 2, base, "test"),
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
    return Evaluator(make_eval_data(cfg, w, store), s.eval_ns, list(cfg.agent.horizons))


# -- all of them ---------------------------------------------------------------------------------
@dataclass
class RunParts:
    """What an ``OnlineLoop`` is assembled from."""

    device: torch.device
    learner: Learner
    feed: Feed
    recorder: Recorder
    evaluator: CurveEvaluator


def build_run_parts(cfg: RunConfig, folder: RunFolder, vec_env: Any = None) -> RunParts:
    """Every part of the run in ``folder``, in its initial state (a resume loads into them);
    ``vec_env``: the worlds protocol's env, given (``feeds.make_feed``)."""
    device = resolve_device(cfg.device)
    p = cfg.protocol
    store = open_store(p.data) if isinstance(p, Paper) and p.data else None
    return RunParts(
        device=device,
        learner=make_learner(cfg, device),
        feed=make_feed(cfg, device, store, vec_env),
        recorder=Recorder(folder),
        evaluator=make_evaluator(cfg, store),
    )
