"""Small factories: the parts of one online run, built from its resolved ``RunConfig``.

``build_run_parts(cfg, folder)`` is the one construction path, for a fresh start and for a resume
alike (a resume then loads the checkpoint into the parts it built). Each part is built by its
own factory so a caller (the visualizer, a test, a benchmark) can build or replace one alone:

- ``resolve_device``: auto -> cuda when available, else cpu; ``set_threads``: one torch
  thread on a CPU unless TORCH_NUM_THREADS says otherwise;
- ``make_learner``: ``agent.Learner`` of the run's ``AgentConfig``;
- the protocol's ``feed``: the streams the learner lives in and their batches
  (``runners.online.feeds``), and its ``evaluator`` (``runners.online.protocols``);
- ``Recorder``: the run's ``run.zarr`` (``runners.online.recorder``), and ``Events``: the same
  in TensorBoard (``runners.online.events``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from agent import Learner
from runners.cli import CliError
from runners.online.config import RunConfig, device_name
from runners.online.evaluation import CurveEvaluator
from runners.online.events import Events
from runners.online.feeds import Feed
from runners.online.recorder import Recorder
from runners.online.rundir import RunFolder


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


# -- all of them ---------------------------------------------------------------------------------
@dataclass
class RunParts:
    """What an ``OnlineLoop`` is assembled from."""

    device: torch.device
    learner: Learner
    feed: Feed
    recorder: Recorder
    evaluator: CurveEvaluator
    events: Events


def build_run_parts(cfg: RunConfig, folder: RunFolder, vec_env: Any = None) -> RunParts:
    """Every part of the run in ``folder``, in its initial state (a resume loads into them);
    ``vec_env``: the worlds protocol's env, given (``Worlds.feed``)."""
    device = resolve_device(cfg.device)
    store = cfg.protocol.open_store()
    return RunParts(device=device, learner=make_learner(cfg, device),
                    feed=cfg.protocol.feed(cfg, device, store, vec_env), recorder=Recorder(folder),
                    evaluator=cfg.protocol.evaluator(cfg, store), events=Events(folder.root))
