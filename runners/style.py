"""How results look, in one place: matplotlib set up for files (no display), and the track
colours of the figures (white background) and of the live view (dark background)."""

from __future__ import annotations

from types import ModuleType

#: Track colours in figures (matplotlib colour names, on white).
TRACK_COLORS: dict[str, str] = {
    "A": "tab:blue",
    "B": "tab:orange",
    "C": "tab:green",
    "D": "tab:purple",
    "E": "tab:brown",
}

#: Track colours in the live pygame view (RGB, on its dark background).
SCREEN_TRACK_COLORS: dict[str, tuple[int, int, int]] = {
    "A": (200, 200, 205),
    "B": (90, 210, 120),
    "C": (230, 90, 230),
    "D": (80, 210, 220),
    "E": (240, 200, 80),
    "oracle": (250, 250, 250),  # the ceiling: the true physics in place of the memory
}


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the file-only Agg backend (imported on first use: commands that
    draw nothing do not pay for matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
