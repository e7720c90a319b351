"""Paper datasets: generator, zarr round trip, regeneration, atomic writes, reader errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

import env
from env import DatasetError, PaperDatasetConfig, generate_sequences, open_dataset, write_dataset
from env.dataset import split_sizes

SMALL = PaperDatasetConfig(seed=3, base_sequences=20, shift_sequences=10)


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("ds") / "small.zarr"
    write_dataset(path, SMALL)
    return path


def test_generate_sequences_shapes_and_determinism():
    a = generate_sequences(7, seed=1, gravity=0.5, split="val", n_digits=3, seq_len=9)
    assert a["frames"].shape == (7, 9, 1, 64, 64) and a["frames"].dtype == np.uint8
    assert a["positions"].shape == (7, 9, 3, 2) and a["positions"].dtype == np.float32
    assert a["velocities"].shape == (7, 9, 3, 2) and a["velocities"].dtype == np.float32
    assert a["digit_ids"].shape == (7, 3)
    b = generate_sequences(7, seed=1, gravity=0.5, split="val", n_digits=3, seq_len=9)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    c = generate_sequences(7, seed=2, gravity=0.5, split="val", n_digits=3, seq_len=9)
    assert not np.array_equal(a["frames"], c["frames"])
    empty = generate_sequences(0, seed=1, gravity=0.0, split="train")
    assert empty["frames"].shape == (0, 21, 1, 64, 64)


def test_generate_sequences_equals_env_episodes():
    """Sequence i is episode i of a single env reset with the same seed."""
    data = generate_sequences(4, seed=9, gravity=0.5, split="test", seq_len=21)
    e = env.MovingMNISTEnv(gravity=0.5, split="test", max_episode_steps=20)
    for i in range(4):
        obs, info = e.reset(seed=9 if i == 0 else None)
        frames, pos = [obs], [info["positions"]]
        truncated = False
        while not truncated:
            obs, _, _, truncated, info = e.step(0)
            frames.append(obs)
            pos.append(info["positions"])
        np.testing.assert_array_equal(data["frames"][i], np.stack(frames))
        np.testing.assert_array_equal(data["positions"][i], np.stack(pos).astype(np.float32))
        np.testing.assert_array_equal(data["digit_ids"][i], info["digit_ids"])


def test_initial_scenes_rerun_and_branch_the_generated_sequences():
    """initial_scenes is the exact state of generate_sequences' frame 0: rolled on, it renders
    every later frame bit for bit; a copy branched under other physics departs from them and
    leaves the original where it was."""
    physics = env.PhysicsParams(0.4, 30.0, 0.9, 0.01)
    data = generate_sequences(5, seed=[4, 2], split="test", seq_len=15, **physics.as_dict())
    scenes = env.initial_scenes(5, seed=[4, 2], split="test", physics=physics)
    np.testing.assert_array_equal(scenes.render(), data["frames"][:, 0])
    twin = scenes.copy()
    np.testing.assert_array_equal(twin.rollout([1, 2, 7, 14]), data["frames"][:, [1, 2, 7, 14]])
    np.testing.assert_array_equal(twin.positions.astype(np.float32), data["positions"][:, 14])
    np.testing.assert_array_equal(scenes.render(), data["frames"][:, 0])  # untouched
    blind = scenes.copy()
    blind.physics.assign(np.arange(5), [env.PhysicsParams()] * 5)
    assert not np.array_equal(blind.rollout([14])[:, 0], data["frames"][:, 14])
    with pytest.raises(ValueError, match="increasing and positive"):
        scenes.copy().rollout([2, 2])
    with pytest.raises(ValueError, match="increasing and positive"):
        scenes.copy().rollout([0])


def test_gravity_in_generated_data():
    data = generate_sequences(50, seed=0, gravity=0.5, split="train")
    dvy = np.diff(data["velocities"][..., 1], axis=1)
    assert np.isclose(dvy, 0.5, atol=1e-5).mean() > 0.8
    flat = generate_sequences(50, seed=0, gravity=0.0, split="train")
    speed = np.linalg.norm(flat["velocities"], axis=-1)
    np.testing.assert_allclose(speed, np.broadcast_to(speed[:, :1], speed.shape), atol=1e-5)


def test_split_sizes():
    assert split_sizes(10_000) == {"train": 8000, "val": 1000, "test": 1000}
    assert split_sizes(1_000) == {"train": 800, "val": 100, "test": 100}
    assert split_sizes(20) == {"train": 16, "val": 2, "test": 2}
    with pytest.raises(ValueError, match="2"):
        split_sizes(2)


def test_store_layout_and_attributes(small_store, digits):
    root = zarr.open_group(str(small_store), mode="r")
    attrs = dict(root.attrs)
    assert attrs["complete"] is True and attrs["seed"] == 3
    assert attrs["gravity"] == {"base": 0.0, "shift": 0.5}
    assert attrs["sizes"]["base"] == {"train": 16, "val": 2, "test": 2}
    assert attrs["sizes"]["shift"] == {"train": 8, "val": 1, "test": 1}
    assert attrs["digits"]["sha256"] == digits.sha256 and attrs["generator_version"] == 1
    frames = root["base/train/frames"]
    assert frames.shape == (16, 21, 1, 64, 64) and frames.dtype == np.uint8
    assert frames.chunks == (16, 21, 1, 64, 64)
    assert root["shift/test/positions"].shape == (1, 21, 2, 2)
    assert root["shift/test"].attrs["gravity"] == 0.5
    json.dumps(attrs)  # plain JSON


def test_round_trip_and_regeneration(small_store, tmp_path):
    ds = open_dataset(small_store)
    assert ds.config == SMALL and ds.sizes()["shift"]["train"] == 8
    for world in ("base", "shift"):
        for split in ("train", "val", "test"):
            view = ds.split(world, split)
            loaded = view.load()
            regenerated = env.generate_split(world, split, SMALL)
            assert len(view) == SMALL.sizes(world)[split]
            for k in ("frames", "positions", "velocities", "digit_ids"):
                np.testing.assert_array_equal(
                    loaded[k], regenerated[k], err_msg=f"{world}/{split}/{k}"
                )
            # lazy access reads the same data
            np.testing.assert_array_equal(view.frames[0], loaded["frames"][0])
    # each split uses its own digit pool
    digits = env.load_digits()
    test_ids = ds.split("base", "test").load()["digit_ids"]
    assert np.isin(test_ids, digits.pool("test")).all()
    # same seed -> same arrays, byte for byte, in a second store
    again = write_dataset(tmp_path / "again.zarr", SMALL)
    a, b = open_dataset(small_store), open_dataset(again)
    np.testing.assert_array_equal(
        a.split("shift", "train").frames[...], b.split("shift", "train").frames[...]
    )


def test_splits_are_independent():
    """A split's arrays do not depend on the sizes of the other splits."""
    bigger_base = PaperDatasetConfig(seed=3, base_sequences=50, shift_sequences=10)
    a = env.generate_split("shift", "test", SMALL)
    b = env.generate_split("shift", "test", bigger_base)
    np.testing.assert_array_equal(a["frames"], b["frames"])
    c = env.generate_split("shift", "val", SMALL)
    assert not np.array_equal(a["frames"], c["frames"])
    first = env.generate_split("base", "train", SMALL, n=3)
    np.testing.assert_array_equal(
        first["frames"], env.generate_split("base", "train", SMALL)["frames"][:3]
    )


def test_refuses_to_overwrite(small_store, tmp_path):
    with pytest.raises(DatasetError, match="already exists.*overwrite"):
        write_dataset(small_store, SMALL)
    not_a_store = tmp_path / "mine"
    not_a_store.mkdir()
    (not_a_store / "thesis.tex").write_text("precious")
    with pytest.raises(DatasetError, match="not a zarr store"):
        write_dataset(not_a_store, SMALL, overwrite=True)
    assert (not_a_store / "thesis.tex").exists()


def test_overwrite_replaces(tmp_path):
    path = tmp_path / "o.zarr"
    write_dataset(path, SMALL)
    other = PaperDatasetConfig(seed=4, base_sequences=10, shift_sequences=5)
    write_dataset(path, other, overwrite=True)
    assert open_dataset(path).config == other
    assert not (tmp_path / "o.zarr.partial").exists()


def test_interrupted_write_leaves_nothing(tmp_path):
    path = tmp_path / "int.zarr"
    calls = []

    def interrupt(n):
        calls.append(n)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_dataset(path, SMALL, progress=interrupt)
    assert not path.exists() and not (tmp_path / "int.zarr.partial").exists()
    with pytest.raises(DatasetError, match="no dataset"):
        open_dataset(path)


def test_reader_refuses_incomplete_and_foreign_stores(tmp_path, small_store):
    # a store killed hard (no cleanup) keeps complete=False and is refused
    partial = tmp_path / "killed.zarr.partial"
    root = zarr.open_group(str(partial), mode="w", zarr_format=3)
    root.attrs.update(
        {"format": "epm-jepa/moving-mnist", "complete": False, "generator_version": 1}
    )
    with pytest.raises(DatasetError, match="incomplete"):
        open_dataset(partial)
    with pytest.raises(DatasetError, match="interrupted write"):
        open_dataset(tmp_path / "killed.zarr")
    # ... and a rerun cleans the stale partial up
    write_dataset(tmp_path / "killed.zarr", SMALL)
    assert not partial.exists() and open_dataset(tmp_path / "killed.zarr")
    foreign = tmp_path / "foreign.zarr"
    zarr.open_group(str(foreign), mode="w", zarr_format=3).attrs["format"] = "other"
    with pytest.raises(DatasetError, match="not a Moving MNIST dataset"):
        open_dataset(foreign)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(DatasetError, match="not a zarr v3 store"):
        open_dataset(plain)
    future = tmp_path / "future.zarr"
    g = zarr.open_group(str(future), mode="w", zarr_format=3)
    g.attrs.update({"format": "epm-jepa/moving-mnist", "complete": True, "generator_version": 99})
    with pytest.raises(DatasetError, match="version 99"):
        open_dataset(future)
    ds = open_dataset(small_store)
    with pytest.raises(ValueError, match="world.*moon"):
        ds.split("moon", "train")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"base_sequences": 2}, "base_sequences.*2"),
        ({"shift_sequences": -5}, "shift_sequences.*-5"),
        ({"shift_gravity": float("nan")}, "shift world.*gravity.*nan"),
        ({"seed": -1}, "seed.*-1"),
        ({"friction": 1.0}, "friction"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PaperDatasetConfig(**kwargs)


def test_bad_generate_arguments():
    with pytest.raises(ValueError, match="n must"):
        generate_sequences(-1, seed=0, gravity=0.0, split="train")
    with pytest.raises(ValueError, match="split.*nope"):
        generate_sequences(1, seed=0, gravity=0.0, split="nope")
    with pytest.raises(ValueError, match="gravity.*inf"):
        generate_sequences(1, seed=0, gravity=float("inf"), split="train")
