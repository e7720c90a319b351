"""How results look, in one place: numbers as text (``num``, ``pct``, ``times``), matplotlib set
up for files (no display) and one way to save a figure (``save_figure``), and the track colours of the figures (white background) and of the
live view (dark background)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from runners.cli import writing


def num(x: Any, digits: int = 3, sign: str = "", missing: str = "-") -> str:
    """A number as text with ``digits`` decimals (``sign="+"``: signed); ``missing`` for None or
    a value that is not finite; an int or a str as it is (a step, a count, a label)."""
    if x is None:
        return missing
    if isinstance(x, (int, str)):
        return str(x)
    return f"{x:{sign}.{digits}f}" if math.isfinite(x) else missing


def pct(x: float | None, digits: int = 0, sign: str = "", missing: str = "-") -> str:
    """A fraction as a percentage with ``digits`` decimals (0.412 -> "41%"); ``missing`` for None
    or a value that is not finite."""
    return missing if x is None or not math.isfinite(x) else f"{100 * x:{sign}.{digits}f}%"


def times(x: float | None, missing: str = "-") -> str:
    """A ratio as "2.4x"; ``missing`` for None or a value that is not finite."""
    return missing if x is None or not math.isfinite(x) else f"{x:.1f}x"

#: The held-out report's memory sources (docs/definitions.md#dn-on-held-out-worlds) as every
#: table, figure and report names them.
MEMORY_LABELS: dict[str, str] = {"own": "own memory", "same": "peer memory",
                                 "wrong": "wrong-world memory"}

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


def table(head: Sequence[Any], rows: Iterable[Sequence[Any]], right: int = 0) -> list[str]:
    """A Markdown table's lines: its head, the rule under it (its last ``right`` columns aligned
    right) and a line per row: every table of a summary, a report and a study."""
    def line(cells: Iterable[Any]) -> str:
        return "| " + " | ".join(map(str, cells)) + " |"

    rule = "|" + "---|" * (len(head) - right) + "---:|" * right
    return [line(head), rule, *map(line, rows)]


#: Dots per inch of every saved figure (a study's may ask for more).
DPI = 90


def save_figure(fig: Any, path: Path, dpi: int = DPI) -> Path:
    """Lay ``fig`` out, write it to ``path`` (its folder made; a failed write raises ``OSError``
    naming the file) and close it, written or not: every figure of a run, a study and a report."""
    try:
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        with writing(path):
            fig.savefig(path, dpi=dpi)
    finally:
        pyplot().close(fig)
    return path
