"""Checkpoints: everything a run needs to continue bit-exactly, written atomically.

Contents: the project's version (``agent.config.VERSION``), config, learner state (weights, EMA
target, optimizer, detector, buffer, step, freeze flag), the source's state (stream windows and
env state, or the dataset RNG), the global RNGs (torch, numpy, python) and the caller's ``extra``.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agent.config import VERSION, AgentConfig, check_version
from agent.learner import Learner


class CheckpointError(Exception):
    """A checkpoint that cannot be loaded here (wrong track, newer format, corrupt file)."""


# The global generators a checkpoint keeps: name -> (get its state, set it).
_RNGS = {
    "torch": (torch.get_rng_state, torch.set_rng_state),
    "numpy": (np.random.get_state, np.random.set_state),
    "python": (random.getstate, random.setstate),
}
# What a damaged file or a state of other shapes raises as it is read or loaded.
_UNREADABLE = (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, OSError,
               ValueError, AttributeError, ModuleNotFoundError)  # fmt: skip
_MISFIT = (RuntimeError, ValueError, KeyError, TypeError, IndexError)


def save_checkpoint(
    path: str | os.PathLike, learner: Learner, source: Any = None, extra: dict[str, Any] | None = None
) -> Path:
    """Write the checkpoint to ``path`` atomically (temp file in the same folder, fsync,
    ``os.replace``): a crash mid-write leaves the previous file intact. A failed write (a full
    or read-only disk) raises ``OSError`` naming ``path``, the previous file still intact."""
    path = Path(path)
    payload = {
        "format_version": VERSION,
        "config": learner.cfg.to_dict(),
        "learner": learner.state_dict(),
        "source": source.state_dict() if source is not None else None,
        "rng": {name: get() for name, (get, _) in _RNGS.items()},
        "extra": extra or {},
    }
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        cause = _os_error(err)
        if cause is not None:  # name the checkpoint, not the temp file (or nothing)
            raise OSError(cause.errno, f"cannot write checkpoint: {cause.strerror or cause}",
                          str(path)) from err
        raise
    return path


def _os_error(err: BaseException | None) -> OSError | None:
    """The ``OSError`` behind ``err``: a full disk inside ``torch.save`` surfaces as the
    writer's RuntimeError ("unexpected pos ...") raised while handling the OSError."""
    while err is not None:
        if isinstance(err, OSError):
            return err
        err = err.__cause__ or err.__context__
    return None


def read_checkpoint(path: str | os.PathLike, map_location: Any = None) -> dict[str, Any]:
    """The checkpoint at ``path`` as read and checked, not yet applied (``apply_checkpoint``);
    ``CheckpointError`` naming the file when it is missing, damaged or of another format."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    _check_archive(path)
    try:
        # Our own files hold numpy RNG states and env state: not weights-only loadable.
        payload = torch.load(path, map_location=map_location, weights_only=False)
    except _UNREADABLE as err:
        raise CheckpointError(
            f"{path}: corrupt or not a checkpoint ({type(err).__name__}: {err})"
        ) from None
    if not isinstance(payload, dict) or "format_version" not in payload:
        raise CheckpointError(f"{path}: not an agent checkpoint (no format_version)")
    try:
        check_version(payload["format_version"], "the checkpoint")
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from None
    bad = [k for k in ("config", "learner", "rng") if not isinstance(payload.get(k), dict)]
    if bad:
        raise CheckpointError(f"{path}: damaged checkpoint (no valid {', '.join(bad)})")
    return payload


def _check_archive(path: Path) -> None:
    """A checkpoint is a zip archive whose members carry CRC-32 checksums: check them all, so a
    truncated file or flipped bytes inside a tensor never load as silently wrong numbers."""
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: corrupt checkpoint (an empty file)")
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except Exception as err:  # whatever the damage, the file is unusable
        raise CheckpointError(
            f"{path}: corrupt or not a checkpoint (truncated, or not a checkpoint archive: "
            f"{type(err).__name__}: {err})"
        ) from None
    if bad is not None:
        raise CheckpointError(f"{path}: corrupt checkpoint (checksum mismatch in {bad})")


def read_checkpoint_config(path: str | os.PathLike) -> AgentConfig:
    """The config a checkpoint was written with (to build a matching Learner first)."""
    config = read_checkpoint(path, map_location="cpu")["config"]
    try:
        return AgentConfig.from_dict(config)
    except (TypeError, ValueError, KeyError) as err:
        raise CheckpointError(f"{path}: damaged checkpoint (its config: {err})") from None


def load_checkpoint(
    path: str | os.PathLike, learner: Learner | None = None, source: Any = None,
    map_location: Any = None,
) -> dict[str, Any]:  # fmt: skip
    """Restore ``learner``, ``source`` and the global RNGs from ``path``; return the ``extra``.

    The learner keeps its own config (so freeze fields may be changed on resume) but must be of
    the checkpoint's track and shapes.
    """
    return apply_checkpoint(read_checkpoint(path, map_location), path, learner, source)


def learner_from_checkpoint(path: str | os.PathLike) -> Learner:
    """A CPU learner built with the checkpoint's own config and loaded from it, this process's
    global RNGs left as they were (``load_checkpoint`` restores the training process's)."""
    learner = Learner(read_checkpoint_config(path), device="cpu")
    states = {name: get() for name, (get, _) in _RNGS.items()}
    try:
        load_checkpoint(path, learner, map_location="cpu")
    finally:
        for name, (_, put) in _RNGS.items():
            put(states[name])
    return learner


def apply_checkpoint(
    payload: dict[str, Any], path: str | os.PathLike, learner: Learner | None = None,
    source: Any = None,
) -> dict[str, Any]:  # fmt: skip
    """``load_checkpoint`` on a payload already read from ``path`` (named in the errors)."""
    saved = payload["config"]
    if learner is not None:
        if saved.get("track") != learner.cfg.track:
            raise CheckpointError(
                f"{path}: checkpoint is track {saved.get('track')}, the learner "
                f"is track {learner.cfg.track}"
            )
        try:
            learner.load_state_dict(payload["learner"])
        except _MISFIT as err:
            diff = [k for k, v in learner.cfg.to_dict().items() if saved.get(k) != v]
            raise CheckpointError(
                f"{path}: does not fit this learner (config fields that "
                f"differ: {', '.join(diff) or 'none'}): {err}"
            ) from None
    if source is not None:
        if payload.get("source") is None:
            raise CheckpointError(f"{path}: holds no source state")
        try:
            source.load_state_dict(payload["source"])
        except _MISFIT as err:
            raise CheckpointError(
                f"{path}: its source state does not fit this source "
                f"({type(err).__name__}: {err})"
            ) from None
    try:
        for name, (_, put) in _RNGS.items():
            put(payload["rng"][name])
    except (RuntimeError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path}: damaged checkpoint (its RNG states: {err})") from None
    extra = payload.get("extra") or {}
    if not isinstance(extra, dict):
        raise CheckpointError(f"{path}: damaged checkpoint (extra is not a dict)")
    return extra
