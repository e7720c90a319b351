"""Checkpoint: bit-exact resume from both sources, atomic writes, clear errors."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from agent import (
    AgentConfig,
    CheckpointError,
    DatasetSource,
    Learner,
    StreamSource,
    columns,
    load_checkpoint,
    read_checkpoint_config,
    save_checkpoint,
)


def run(learner: Learner, src, n: int) -> dict[str, np.ndarray]:
    return columns([learner.update(src.next()) for _ in range(n)])


def make_cfg(track: str = "C") -> AgentConfig:
    # Frequent boundaries so the buffer and detector state matter for the resume.
    return AgentConfig.of_size(
        "tiny", track=track, kappa=0.3, detector_warmup=2, total_steps=20
    )


@pytest.mark.parametrize("stream", [False, True])
def test_resume_is_bit_exact(
    tmp_path: Path, frames: np.ndarray, fake_env_cls, stream: bool
) -> None:
    cfg, n = make_cfg(), 6
    if stream:
        cfg = cfg.replace(push_pair="input")

    def source():
        if stream:
            return StreamSource(fake_env_cls([23, 30, 26, 40, 21, 25, 60, 33]), cfg)
        return DatasetSource(frames, cfg, seed=1)

    ref_learner, ref_src = Learner(cfg), source()
    ref = run(ref_learner, ref_src, 2 * n)

    learner, src = Learner(cfg), source()
    first = run(learner, src, n)
    save_checkpoint(tmp_path / "latest.pt", learner, src, extra={"note": "hi"})
    random.random(), np.random.random(), torch.rand(1)  # disturb the global RNGs
    learner2, src2 = Learner(cfg.replace(seed=99)), source()
    assert load_checkpoint(tmp_path / "latest.pt", learner2, src2) == {"note": "hi"}
    second = run(learner2, src2, n)
    for name in ref:
        np.testing.assert_array_equal(
            np.concatenate([first[name], second[name]]), ref[name], err_msg=name
        )
    for p, q in zip(
        ref_learner.nets.state_dict().values(), learner2.nets.state_dict().values(), strict=True
    ):
        assert torch.equal(p, q)
    assert torch.equal(ref_learner.buffer.pairs, learner2.buffer.pairs)
    assert ref["memory/boundary"].sum() > 0 and learner2.step == 2 * n


def test_rng_state_is_restored(tmp_path: Path) -> None:
    learner = Learner(make_cfg())
    save_checkpoint(tmp_path / "c.pt", learner)
    expect = (torch.rand(3), np.random.random(), random.random())
    load_checkpoint(tmp_path / "c.pt")
    assert torch.equal(torch.rand(3), expect[0]) and np.random.random() == expect[1]
    assert random.random() == expect[2]


def test_errors_are_clear(tmp_path: Path) -> None:
    learner = Learner(make_cfg("C"))
    path = save_checkpoint(tmp_path / "c.pt", learner)
    assert read_checkpoint_config(path) == learner.cfg
    with pytest.raises(CheckpointError, match="track C, the learner is track B"):
        load_checkpoint(path, Learner(make_cfg("B")))
    with pytest.raises(CheckpointError, match="hidden_dim"):
        load_checkpoint(path, Learner(make_cfg("C").replace(hidden_dim=32)))
    bad = tmp_path / "bad.pt"
    bad.write_bytes(path.read_bytes()[:300])
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(bad, learner)
    payload = torch.load(path, weights_only=False)
    for version in (1, 99):  # an earlier version's checkpoint, and a later one's
        payload["format_version"] = version
        torch.save(payload, tmp_path / "other.pt")
        with pytest.raises(CheckpointError, match=f"written by version {version} of this project, "
                           "this is version 2"):
            load_checkpoint(tmp_path / "other.pt", learner)
    with pytest.raises(CheckpointError, match="no such"):
        load_checkpoint(tmp_path / "missing.pt", learner)


def test_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    learner = Learner(make_cfg())
    path = save_checkpoint(tmp_path / "latest.pt", learner, extra={"v": 1})

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, learner, extra={"v": 2})
    monkeypatch.undo()
    assert load_checkpoint(path, learner) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]  # no temp file left


@pytest.mark.parametrize("damage", ["half", "random", "empty", "flipped", "no_config"])
def test_damaged_files_are_errors_never_numbers(tmp_path: Path, damage: str) -> None:
    """Truncated, random, empty, flipped-byte (checksum) and incomplete files: CheckpointError."""
    import os
    import zipfile

    learner = Learner(make_cfg())
    path = save_checkpoint(tmp_path / "c.pt", learner)
    data = bytearray(path.read_bytes())
    if damage == "half":
        data = data[: len(data) // 2]
    elif damage == "random":
        data = bytearray(os.urandom(len(data)))
    elif damage == "empty":
        data = bytearray()
    elif damage == "flipped":  # bytes inside one tensor's data: the zip's CRC-32 catches it
        with zipfile.ZipFile(path) as z:
            member = max((i for i in z.infolist() if "/data/" in i.filename),
                         key=lambda i: i.file_size)
        at = member.header_offset  # the local header: its name and extra (padding) lengths
        start = at + 30 + int.from_bytes(data[at + 26 : at + 28], "little") + int.from_bytes(
            data[at + 28 : at + 30], "little"
        )
        data[start + 16 : start + 24] = bytes(255 - b for b in data[start + 16 : start + 24])
    else:
        payload = torch.load(path, weights_only=False)
        del payload["config"]
        torch.save(payload, path)
        data = bytearray(path.read_bytes())
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=str(path)):
        load_checkpoint(path, Learner(make_cfg()))
    with pytest.raises(CheckpointError, match=str(path)):
        read_checkpoint_config(path)


def test_failed_write_names_the_checkpoint_and_keeps_the_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: OSError naming latest.pt (not the temp file), the previous file intact."""
    import errno

    learner = Learner(make_cfg())
    path = save_checkpoint(tmp_path / "latest.pt", learner, extra={"v": 1})

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError, match="No space left") as info:
        save_checkpoint(path, learner, extra={"v": 2})
    assert info.value.filename == str(path) and info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert load_checkpoint(path, learner) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]
    with pytest.raises(OSError) as info:
        save_checkpoint("/proc/no/latest.pt", learner)
    assert info.value.filename == "/proc/no/latest.pt"
