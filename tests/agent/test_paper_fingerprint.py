"""The paper protocol computes what it computed before the project's own options existed.

Compares every track's fingerprint (``paper_fingerprint.py``: per-step losses and surprisal, the
sum of every parameter tensor, an adaptation curve) with the stored one. The tolerance only
absorbs floating-point differences between CPUs (oneDNN kernels); any change of what is
computed moves these numbers by orders of magnitude more.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from paper_fingerprint import STORE, TRACKS, fingerprint

STORED = json.loads(STORE.read_text())


@pytest.mark.parametrize("track", TRACKS)
def test_paper_protocol_unchanged(track: str) -> None:
    got, want = fingerprint(track), STORED[track]
    np.testing.assert_allclose(got["steps"], want["steps"], rtol=1e-4, atol=1e-6)
    assert got["param_sums"].keys() == want["param_sums"].keys()
    for name, value in want["param_sums"].items():
        assert got["param_sums"][name] == pytest.approx(value, rel=1e-4, abs=1e-4), name
    np.testing.assert_allclose(got["curve"], want["curve"], rtol=1e-4, atol=1e-6)
