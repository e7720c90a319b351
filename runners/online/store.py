"""The paper protocol's dataset store (``runners.make_dataset``): opened and checked with every
failure as one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import env
from runners.cli import CliError
from runners.online.config import Paper, RunConfig


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


def check_store(cfg: RunConfig, store: env.PaperDataset) -> None:
    """The dataset source can only switch between the store's two gravities."""
    paper = cfg.protocol
    assert isinstance(paper, Paper)
    path = str(paper.data)
    g_shift = split_view(store, "shift", "train", path).gravity
    g_base = split_view(store, "base", "train", path).gravity
    seq_len = int(split_frames(store, "base", "train", path).shape[1])
    if seq_len < cfg.agent.window:
        raise CliError(
            f"--data {path}: sequences of {seq_len} frames are shorter than a sample's window of "
            f"{cfg.agent.window} (context_frames {cfg.agent.context_frames}, push_pair "
            f"{cfg.agent.push_pair}); use the stream source"
        )
    if g_base != paper.base_gravity:
        raise CliError(
            f"--source dataset: the store's base world has gravity {g_base:g}, "
            f"the run's base gravity is {paper.base_gravity:g}"
        )
    for g in (cfg.physics_at(sw.step).gravity for sw in cfg.schedule.switches or ()):
        if g not in (g_base, g_shift):
            raise CliError(
                f"--source dataset: the store holds gravity {g_base:g} and {g_shift:g}; "
                f"a switch to {g:g} needs the stream source"
            )
