"""Test-wide settings: no display, no audio, and a small thread count so tests stay predictable."""

import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("MPLBACKEND", "Agg")


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``bf16`` run bf16 kernels: skipped where this CPU has none (an AVX2-only
    x86-64 CPU), the skip reason saying what torch found missing."""
    import pytest

    from agent.config import bf16_unsupported

    why = bf16_unsupported("cpu")
    if why is None:
        return
    skip = pytest.mark.skip(reason=f"bf16: {why}")
    for item in items:
        if item.get_closest_marker("bf16") is not None:
            item.add_marker(skip)
