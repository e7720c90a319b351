"""The Moving MNIST world: batched numpy physics + rendering, Gymnasium envs, digits, datasets.

``import env`` registers ``MovingMNIST-v0`` with Gymnasium::

    gymnasium.make("MovingMNIST-v0", gravity=0.0)                 # one world, TimeLimit(20)
    gymnasium.make_vec("MovingMNIST-v0", num_envs=64)             # native MovingMNISTVectorEnv

See ``docs/env.md`` for the full API.
"""

import gymnasium as _gym

from env.core import SceneBatch, render_frames
from env.dataset import (
    DatasetError,
    PaperDataset,
    PaperDatasetConfig,
    SplitView,
    generate_sequences,
    generate_split,
    initial_scenes,
    open_dataset,
    split_sizes,
    write_dataset,
)
from env.digits import Digits, DigitsError, load_digits
from env.moving_mnist import MovingMNISTEnv
from env.physics import PHYSICS_FEATURES, PHYSICS_FIELDS, PhysicsParams, physics_features
from env.vector import NO_EPISODE_LIMIT, MovingMNISTVectorEnv
from env.worlds import FAMILIES, HELD_OUT, WorldFamily, WorldSchedule, check_disjoint, family

ENV_ID = "MovingMNIST-v0"

if ENV_ID not in _gym.registry:
    _gym.register(
        id=ENV_ID,
        entry_point="env.moving_mnist:make_registered",
        vector_entry_point="env.vector:MovingMNISTVectorEnv",
        max_episode_steps=20,
    )

__all__ = [  # grouped by the module they come from
    "ENV_ID", "SceneBatch", "render_frames",
    "DatasetError", "PaperDataset", "PaperDatasetConfig", "SplitView", "generate_sequences",
    "generate_split", "initial_scenes", "open_dataset", "split_sizes", "write_dataset",
    "Digits", "DigitsError", "load_digits",
    "MovingMNISTEnv", "MovingMNISTVectorEnv", "NO_EPISODE_LIMIT",
    "PHYSICS_FEATURES", "PHYSICS_FIELDS", "PhysicsParams", "physics_features",
    "FAMILIES", "HELD_OUT", "WorldFamily", "WorldSchedule", "check_disjoint", "family",
]  # fmt: skip
