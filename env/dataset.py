"""The paper's Moving MNIST datasets: a batched generator, a zarr v3 writer and a lazy reader.

``generate_sequences(n, seed=s, ...)`` returns exactly the episodes a single
``MovingMNISTEnv(max_episode_steps=seq_len - 1)`` shows when reset with ``seed=s`` and then reset
``n - 1`` more times (same draws, same physics, same renderer), only batched.

A paper dataset has two worlds, ``base`` (gravity 0) and ``shift`` (gravity 0.5), each split into
``train``/``val``/``test`` (80/10/10 %), each split using the digits of its own pool. Every split
is generated from its own seed, ``SeedSequence([seed, world_id, split_id])``, so one split can be
regenerated in memory (:func:`generate_split`) without the others and equals what the store holds.

Store layout (zarr v3)::

    PATH.zarr/                attrs: format, generator_version, complete, config, digits, sizes
      base/{train,val,test}/  attrs: world, split, gravity, n, seed_entropy
        frames      (N, T, 1, 64, 64) uint8    chunks of 16 sequences, blosc-lz4
        positions   (N, T, n_digits, 2) float32  top-left corners, x then y, px
        velocities  (N, T, n_digits, 2) float32  px/frame
        digit_ids   (N, n_digits) int64          indices into the digit source
      shift/{train,val,test}/ ...

A store is written to ``PATH.partial`` and renamed to ``PATH`` only when complete, and its root
attribute ``complete`` is set last; readers refuse a store without it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from env.core import SceneBatch, check_scene_config, int_at_least, render_frames
from env.digits import SPLITS, Digits, check_split, load_digits, split_sizes
from env.physics import PhysicsArrays, PhysicsParams, physics_step

FORMAT_NAME = "epm-jepa/moving-mnist"
GENERATOR_VERSION = 1
WORLDS: tuple[str, ...] = ("base", "shift")
ARRAYS: tuple[str, ...] = ("frames", "positions", "velocities", "digit_ids")
ROLLOUT_CHUNK = 256  # sequences rolled out at once: bounds the working set, not the result
SeedLike = int | Sequence[int] | np.random.SeedSequence
DigitsLike = str | os.PathLike[str] | Digits | None


class DatasetError(ValueError):
    """A dataset path that cannot be written or read; the message says why."""


# ----------------------------------------------------------------------------- generation


def _check_counts(n: int, seq_len: int) -> None:
    if not int_at_least(n, 0):
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if not int_at_least(seq_len, 1):
        raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")


def initial_scenes(
    n: int,
    *,
    seed: SeedLike,
    split: str,
    physics: PhysicsParams,
    digits: DigitsLike = None,
    n_digits: int = 2,
    speed_range: tuple[float, float] = (2.0, 4.0),
) -> SceneBatch:
    """The exact (float64) state at frame 0 of the ``n`` sequences that :func:`generate_sequences`
    draws from the same arguments, drawn in sequence order as consecutive env resets do. Stepping
    it (``SceneBatch.step``) re-runs them frame for frame; with other physics it branches them."""
    init = SceneBatch(n, load_digits(digits), split, n_digits, speed_range, physics)
    rng = np.random.default_rng(seed)
    init.apply_draws(np.arange(n), rng.random((n, n_digits, 5)))
    return init


def _empty(n: int, seq_len: int, n_digits: int, size: int = 64) -> dict[str, np.ndarray]:
    return {
        "frames": np.empty((n, seq_len, 1, size, size), dtype=np.uint8),
        "positions": np.empty((n, seq_len, n_digits, 2), dtype=np.float32),
        "velocities": np.empty((n, seq_len, n_digits, 2), dtype=np.float32),
        "digit_ids": np.empty((n, n_digits), dtype=np.int64),
    }


def _simulate(init: SceneBatch, start: int, stop: int, out: dict[str, np.ndarray]) -> None:
    """Roll out scenes ``start:stop`` of ``init`` (one physics for all) into ``out`` (arrays of
    :func:`_empty` for m = stop - start sequences)."""
    pos = init.positions[start:stop].copy()  # (m, D, 2) float64
    vel = init.velocities[start:stop].copy()
    sprites = init.sprites[start:stop]  # (m, D, 28, 28)
    physics = PhysicsArrays(stop - start, init.physics.get(start))
    frames = out["frames"]
    for t in range(frames.shape[1]):
        if t:
            physics_step(pos, vel, physics, init.limit)
        render_frames(sprites, pos, init.canvas_size, out=frames[:, t])
        out["positions"][:, t] = pos
        out["velocities"][:, t] = vel
    out["digit_ids"][:] = init.digit_ids[start:stop]


def _generate(init: SceneBatch, seq_len: int) -> dict[str, np.ndarray]:
    """``init``'s scenes rolled out to ``seq_len`` frames (the arrays of :func:`_empty`)."""
    n = init.num_scenes
    out = _empty(n, seq_len, init.n_digits, init.canvas_size)
    for start in range(0, n, ROLLOUT_CHUNK):
        stop = min(n, start + ROLLOUT_CHUNK)
        _simulate(init, start, stop, {k: v[start:stop] for k, v in out.items()})
    return out


def generate_sequences(
    n: int,
    *,
    seed: SeedLike,
    gravity: float,
    split: str,
    digits: DigitsLike = None,
    n_digits: int = 2,
    seq_len: int = 21,
    gravity_direction: float = 90.0,
    restitution: float = 1.0,
    friction: float = 0.0,
    speed_range: tuple[float, float] = (2.0, 4.0),
) -> dict[str, np.ndarray]:
    """Generate ``n`` Moving MNIST sequences in memory, deterministically from ``seed``.

    Sequence ``i`` is the ``i``-th episode of a ``MovingMNISTEnv(max_episode_steps=seq_len - 1)``
    reset with ``seed`` (an int) and then reset again after every episode.

    Args:
        n: number of sequences.
        seed: int, sequence of ints or ``SeedSequence`` for ``np.random.default_rng``.
        gravity, gravity_direction, restitution, friction: the physics (see ``PhysicsParams``).
        split: digit pool (``train``/``val``/``test``).
        digits: digit source (see ``load_digits``).
        n_digits, seq_len, speed_range: world shape.

    Returns:
        ``frames`` (n, seq_len, 1, 64, 64) uint8, ``positions`` and ``velocities``
        (n, seq_len, n_digits, 2) float32, ``digit_ids`` (n, n_digits) int64.
    """
    _check_counts(n, seq_len)
    params = PhysicsParams(gravity, gravity_direction, restitution, friction)
    init = initial_scenes(n, seed=seed, split=split, physics=params, digits=digits,
                          n_digits=n_digits, speed_range=speed_range)  # fmt: skip
    return _generate(init, seq_len)


# ----------------------------------------------------------------------------- paper config


@dataclass(frozen=True)
class PaperDatasetConfig:
    """Everything that determines a paper dataset (besides the digit source)."""

    seed: int = 0
    """Root seed; split (world, split) uses ``SeedSequence([seed, world_id, split_id])``."""
    base_sequences: int = 10_000
    """Sequences in the base world, split 80/10/10 into train/val/test."""
    shift_sequences: int = 1_000
    """Sequences in the shifted world, split 80/10/10."""
    base_gravity: float = 0.0
    """Gravity of the base world, px/frame^2."""
    shift_gravity: float = 0.5
    """Gravity of the shifted world, px/frame^2."""
    gravity_direction: float = 90.0
    """Direction of gravity in degrees (90 = down), both worlds."""
    restitution: float = 1.0
    """Wall restitution, both worlds."""
    friction: float = 0.0
    """Friction, both worlds."""
    n_digits: int = 2
    """Digits per frame."""
    seq_len: int = 21
    """Frames per sequence."""
    speed_range: tuple[float, float] = (2.0, 4.0)
    """Initial speed range, px/frame."""

    def __post_init__(self) -> None:
        if not int_at_least(self.seed, 0):
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        object.__setattr__(self, "speed_range", tuple(float(v) for v in self.speed_range))
        check_scene_config(self.n_digits, self.speed_range, 64)
        _check_counts(0, self.seq_len)
        for world in WORLDS:
            self.sizes(world)  # validates the counts
            try:
                self.physics(world)
            except ValueError as err:
                raise ValueError(f"{world} world: {err}") from None

    def sizes(self, world: str) -> dict[str, int]:
        """Sequences per split of ``world``."""
        n = {"base": self.base_sequences, "shift": self.shift_sequences}[_check_world(world)]
        try:
            return split_sizes(n)
        except ValueError:
            raise ValueError(f"{world}_sequences must be an integer >= 3, got {n!r}") from None

    def gravity(self, world: str) -> float:
        return {"base": self.base_gravity, "shift": self.shift_gravity}[_check_world(world)]

    def physics(self, world: str) -> PhysicsParams:
        """The physics of ``world``."""
        return PhysicsParams(
            self.gravity(world), self.gravity_direction, self.restitution, self.friction
        )

    def split_seed(self, world: str, split: str) -> list[int]:
        """Entropy of split (world, split)'s generator, independent of every other split."""
        return [int(self.seed), WORLDS.index(_check_world(world)), SPLITS.index(check_split(split))]

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "speed_range": list(self.speed_range)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PaperDatasetConfig:
        return cls(**{**d, "speed_range": tuple(d["speed_range"])})


def _check_world(world: str) -> str:
    if world not in WORLDS:
        raise ValueError(f"world must be one of {', '.join(WORLDS)}, got {world!r}")
    return world


def _split_scenes(
    config: PaperDatasetConfig, world: str, split: str, digits: DigitsLike, n: int
) -> SceneBatch:
    """The first ``n`` sequences of split (world, split) at frame 0 (:func:`initial_scenes`)."""
    return initial_scenes(n, seed=config.split_seed(world, split), split=split,
                          physics=config.physics(world), digits=digits, n_digits=config.n_digits,
                          speed_range=config.speed_range)  # fmt: skip


def generate_split(
    world: str,
    split: str,
    config: PaperDatasetConfig | None = None,
    digits: DigitsLike = None,
    n: int | None = None,
) -> dict[str, np.ndarray]:
    """One split of the paper dataset in memory, equal to ``open_dataset(p).split(world, split)
    .load()`` for a store written with the same config and digits. ``n`` (default: the split's
    size) takes only the first ``n`` sequences, which are the store's first ``n``.

    Returns the arrays of :func:`generate_sequences`.
    """
    config = config or PaperDatasetConfig()
    size = config.sizes(world)[check_split(split)]
    n = size if n is None else n
    _check_counts(n, config.seq_len)
    return _generate(_split_scenes(config, world, split, digits, n), config.seq_len)


# ----------------------------------------------------------------------------- writer


def _is_zarr_store(path: Path) -> bool:
    return (path / "zarr.json").is_file()


def _partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def _clear_target(path: Path, overwrite: bool) -> Path:
    """Check that a store may be written at ``path``; remove a partial store an interrupted write
    left, and return the partial path to write to."""
    if path.exists():
        if not overwrite:
            raise DatasetError(
                f"{path} already exists (pass overwrite=True / --overwrite to replace it)"
            )
        if not (_is_zarr_store(path) or (path.is_dir() and not any(path.iterdir()))):
            raise DatasetError(f"{path} exists and is not a zarr store; refusing to overwrite it")
    partial = _partial_path(path)
    if partial.exists():
        if not _is_zarr_store(partial):
            raise DatasetError(f"{partial} exists and is not a zarr store; remove it first")
        shutil.rmtree(partial)  # left over from an interrupted write
    if not path.parent.is_dir():
        raise DatasetError(f"{path.parent} does not exist (parent folder of {path})")
    return partial


def _root_attrs(config: PaperDatasetConfig, digits: Digits) -> dict[str, Any]:
    return {
        "format": FORMAT_NAME,
        "generator_version": GENERATOR_VERSION,
        "complete": False,
        "config": config.to_dict(),
        "seed": config.seed,
        "gravity": {world: config.gravity(world) for world in WORLDS},
        "sizes": {world: config.sizes(world) for world in WORLDS},
        "digits": {
            "name": digits.name,
            "sha256": digits.sha256,
            "count": len(digits),
            "pool_sizes": {s: int(digits.pool(s).shape[0]) for s in SPLITS},
        },
    }


def _create_arrays(group: Any, n: int, t: int, d: int, chunk: int) -> dict[str, Any]:
    """The empty zarr arrays of a split of ``n`` sequences (layout in the module doc)."""
    from zarr.codecs import BloscCodec

    rows = min(n, 4096)
    lz4 = BloscCodec(cname="lz4", clevel=5, shuffle="noshuffle")
    frames = group.create_array("frames", shape=(n, t, 1, 64, 64), dtype="uint8",
                                chunks=(chunk, t, 1, 64, 64), compressors=lz4)  # fmt: skip
    arrays = {"frames": frames}
    for name in ("positions", "velocities"):
        arrays[name] = group.create_array(name, shape=(n, t, d, 2), dtype="float32",
                                          chunks=(rows, t, d, 2))  # fmt: skip
    arrays["digit_ids"] = group.create_array("digit_ids", shape=(n, d), dtype="int64",
                                             chunks=(rows, d))  # fmt: skip
    return arrays


def _write_split(root: Any, config: PaperDatasetConfig, world: str, split: str, digits: Digits,
                 chunk_sequences: int, progress: Callable[[int], Any] | None) -> None:  # fmt: skip
    """Generate split (world, split) and write it into its group of ``root``, whole chunks of
    ``frames`` at a time."""
    n, t, d = config.sizes(world)[split], config.seq_len, config.n_digits
    group = root.create_group(f"{world}/{split}")
    group.attrs.update({"world": world, "split": split, "gravity": config.gravity(world), "n": n,
                        "seed_entropy": config.split_seed(world, split)})  # fmt: skip
    chunk = min(n, chunk_sequences)
    arrays = _create_arrays(group, n, t, d, chunk)
    init = _split_scenes(config, world, split, digits, n)
    batch = chunk * max(1, ROLLOUT_CHUNK // chunk)  # whole chunks per write
    for start in range(0, n, batch):
        stop = min(n, start + batch)
        part = _empty(stop - start, t, d)
        _simulate(init, start, stop, part)
        for name, arr in arrays.items():
            arr[start:stop] = part[name]
        if progress is not None:
            progress(stop - start)


def write_dataset(
    path: str | os.PathLike[str],
    config: PaperDatasetConfig | None = None,
    digits: DigitsLike = None,
    *,
    overwrite: bool = False,
    progress: Callable[[int], Any] | None = None,
    chunk_sequences: int = 16,
) -> Path:
    """Generate the paper dataset and write it as one zarr v3 store (layout in the module doc).

    Args:
        path: the store to create (a folder, conventionally ``*.zarr``).
        config: sizes, seed and physics (default: the paper's).
        digits: digit source (see ``load_digits``).
        overwrite: replace an existing store at ``path`` (only a zarr store or an empty folder).
        progress: called with the number of sequences just written (e.g. ``tqdm.update``).
        chunk_sequences: sequences per chunk of ``frames`` (one file, compressed as a unit):
            16 reads a whole split fast and one sequence in a few ms.

    Returns:
        The path of the finished store. Raises :class:`DatasetError` for a path that cannot be
        written; an interrupted write leaves no store at ``path``.
    """
    import zarr

    config = config or PaperDatasetConfig()
    path = Path(path)
    digit_set = load_digits(digits)
    partial = _clear_target(path, overwrite)
    try:
        root = zarr.open_group(store=str(partial), mode="w", zarr_format=3)
        root.attrs.update(_root_attrs(config, digit_set))
        for world in WORLDS:
            for split in SPLITS:
                _write_split(root, config, world, split, digit_set, chunk_sequences, progress)
        root.attrs["complete"] = True  # written last: readers refuse a store without it
        if path.exists():
            shutil.rmtree(path)
        os.replace(partial, path)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return path


# ----------------------------------------------------------------------------- reader


class SplitView:
    """One split of a stored dataset, read lazily.

    Attributes:
        frames: zarr array (N, T, 1, 64, 64) uint8 (index it like numpy to read).
        positions, velocities: zarr arrays (N, T, n_digits, 2) float32.
        digit_ids: zarr array (N, n_digits) int64.
        world, split, gravity: what the split is.
    """

    def __init__(self, group: Any, world: str, split: str) -> None:
        self.group = group
        self.world, self.split = world, split
        self.attrs: dict[str, Any] = dict(group.attrs)
        self.gravity = float(self.attrs["gravity"])
        self.frames, self.positions, self.velocities, self.digit_ids = (group[a] for a in ARRAYS)

    def __len__(self) -> int:
        return int(self.frames.shape[0])

    def __repr__(self) -> str:
        return f"SplitView({self.world}/{self.split}, n={len(self)}, gravity={self.gravity})"

    def load(self) -> dict[str, np.ndarray]:
        """All arrays in memory, as returned by :func:`generate_sequences`."""
        return {name: getattr(self, name)[...] for name in ARRAYS}


class PaperDataset:
    """A finished paper dataset store opened for reading (see :func:`open_dataset`)."""

    def __init__(self, path: Path, root: Any) -> None:
        self.path = path
        self.root = root
        self.attrs: dict[str, Any] = dict(root.attrs)
        self.config = PaperDatasetConfig.from_dict(self.attrs["config"])
        self.digits_name: str = self.attrs["digits"]["name"]
        self.digits_sha256: str = self.attrs["digits"]["sha256"]

    def split(self, world: str, split: str) -> SplitView:
        """Lazy view of ``world``/``split`` (``base``|``shift``, ``train``|``val``|``test``)."""
        return SplitView(self.root[f"{_check_world(world)}/{check_split(split)}"], world, split)

    def sizes(self) -> dict[str, dict[str, int]]:
        return {w: dict(s) for w, s in self.attrs["sizes"].items()}

    def __repr__(self) -> str:
        return f"PaperDataset({str(self.path)!r}, sizes={json.dumps(self.attrs['sizes'])})"


def open_dataset(path: str | os.PathLike[str]) -> PaperDataset:
    """Open a store written by :func:`write_dataset` (``python -m runners.make_dataset``).

    Raises :class:`DatasetError` if ``path`` is missing, not such a store, incomplete (an
    interrupted write) or from a newer generator version.
    """
    import zarr

    path = Path(path)
    if not path.exists():
        hint = ""
        if _partial_path(path).exists():
            hint = f" ({_partial_path(path)} is an interrupted write; generate the dataset again)"
        raise DatasetError(f"{path}: no dataset there{hint}")
    if not _is_zarr_store(path):
        raise DatasetError(f"{path}: not a zarr v3 store (no zarr.json)")
    try:
        root = zarr.open_group(store=str(path), mode="r", zarr_format=3)
    except Exception as err:  # zarr raises several types for unreadable metadata
        raise DatasetError(f"{path}: cannot open as a zarr v3 group ({err})") from None
    attrs = dict(root.attrs)
    if attrs.get("format") != FORMAT_NAME:
        raise DatasetError(
            f"{path}: not a Moving MNIST dataset store (format {attrs.get('format')!r})"
        )
    if attrs.get("complete") is not True:
        raise DatasetError(
            f"{path}: incomplete store (its writing was interrupted); generate it again"
        )
    version = attrs.get("generator_version")
    if not isinstance(version, int) or version > GENERATOR_VERSION:
        raise DatasetError(
            f"{path}: written by generator version {version!r}, this code reads <= {GENERATOR_VERSION}"
        )
    return PaperDataset(path, root)
