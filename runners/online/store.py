"""The paper protocol's dataset store (``runners.make_dataset``): opened and read with every
failure as one line (``Paper.check_store`` checks it against a run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import env
from runners.cli import CliError


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
