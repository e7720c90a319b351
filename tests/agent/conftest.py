"""Fixtures for the agent tests: tiny configs, random frames, a fake NEXT_STEP vector env."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector.utils import batch_space
from torch import nn

from agent import AgentConfig

# One intra-op thread: on a shared 2-core machine OpenMP with 2 threads can be 20x slower.
torch.set_num_threads(1)


@pytest.fixture
def tiny() -> AgentConfig:
    return AgentConfig.of_size("tiny", track="C")


@pytest.fixture
def stream_tiny(tiny: AgentConfig) -> AgentConfig:
    """The tiny config as a stream source needs it: the memory pair is the input's own."""
    return tiny.replace(push_pair="input")


@pytest.fixture
def frames() -> np.ndarray:
    """(24, 21, 1, 64, 64) uint8 random sequences (smooth enough blobs are not needed here)."""
    return np.random.default_rng(0).integers(0, 256, size=(24, 21, 1, 64, 64), dtype=np.uint8)


class FakeVectorEnv:
    """NEXT_STEP-autoreset vector env whose frames encode (episode, t) in their pixels.

    Stream i's episodes last ``lengths[i]`` frames; frame pixel [0, 0, 0] = episode number,
    pixel [0, 0, 1] = step within the episode. ``infos["gravity"]`` = the env's gravity.
    """

    def __init__(self, lengths: list[int]) -> None:
        self.num_envs = len(lengths)
        self.lengths = np.asarray(lengths)
        self.action_space = batch_space(spaces.Discrete(1), self.num_envs)
        self.gravity = np.zeros(self.num_envs)
        self.ep = np.zeros(self.num_envs, np.int64)
        self.t = np.zeros(self.num_envs, np.int64)
        self.pending = np.zeros(self.num_envs, bool)

    def _obs(self) -> np.ndarray:
        obs = np.zeros((self.num_envs, 1, 64, 64), np.uint8)
        for i in range(self.num_envs):  # texture, a function of (stream, episode, step)
            rng = np.random.default_rng([i, int(self.ep[i]), int(self.t[i])])
            obs[i, 0, 8:40, 8:40] = rng.integers(0, 256, (32, 32), dtype=np.uint8)
        obs[:, 0, 0, 0] = self.ep % 256
        obs[:, 0, 0, 1] = self.t % 256
        return obs

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        self.ep[:] = 0
        self.t[:] = 0
        self.pending[:] = False
        return self._obs(), {"gravity": self.gravity.copy()}

    def step(self, actions: np.ndarray) -> tuple:
        assert actions.shape == (self.num_envs,)
        self.t += 1
        self.ep[self.pending] += 1
        self.t[self.pending] = 0
        truncated = (self.t == self.lengths - 1) & ~self.pending
        self.pending = truncated.copy()
        terminated = np.zeros(self.num_envs, bool)
        return (
            self._obs(),
            np.zeros(self.num_envs),
            terminated,
            truncated,
            {"gravity": self.gravity.copy()},
        )

    def get_state(self) -> dict[str, Any]:
        return {
            "ep": self.ep.copy(),
            "t": self.t.copy(),
            "pending": self.pending.copy(),
            "gravity": self.gravity.copy(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.ep, self.t = state["ep"].copy(), state["t"].copy()
        self.pending, self.gravity = state["pending"].copy(), state["gravity"].copy()


@pytest.fixture
def fake_env_cls() -> type[FakeVectorEnv]:
    return FakeVectorEnv


class PixelEncoder(nn.Module):
    """Latent = one pixel of the frame (frames[0, 0, pixel]) in every dimension: a stand-in
    encoder that makes the memory's contents readable (a frame's time, its stream)."""

    def __init__(self, dim: int, pixel: int) -> None:
        super().__init__()
        self.dim, self.pixel = dim, pixel

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 0, 0, self.pixel : self.pixel + 1].expand(-1, self.dim).clone()

    forward = encode


@pytest.fixture
def pixel_encoder() -> type[PixelEncoder]:
    return PixelEncoder

