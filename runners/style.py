"""How results look, in one place: numbers as text (``num``, ``pct``, ``times``), one table (``Table``:
aligned text or Markdown; ``table``: Markdown lines), matplotlib set up for files (no display)
and one way to save a figure (``save_figure``), and the track colours of the figures (white
background) and of the live view (dark background)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

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


@dataclass(frozen=True)
class Table:
    """A section of the summary, built once: a caption, then rows of label cells (under
    ``labels``, in Markdown only) and value cells (under ``heads``), as aligned text (``text``:
    each label column ``widths`` wide, None: its longest label; each value column ``cell``,
    None: its longest cell or head and two spaces) or as a Markdown table (``markdown``).
    ``style``: "ruled", the top table (no caption, no indent, a rule under the heads);
    "headless", no heads in text; "inline", a one-row table as one line of head-value pairs.
    ``md_caption``: Markdown's, where it says more; ``note`` follows the table (a line each of
    its lines)."""

    caption: str
    labels: tuple[str, ...]
    heads: list[str]
    rows: list[list[str]]
    widths: tuple[int, ...] | None = None
    cell: int | None = None
    style: Literal["", "ruled", "headless", "inline"] = ""
    md_caption: str = ""
    note: str = ""

    def text(self) -> list[str]:
        """The table as aligned text lines."""
        k, ruled = len(self.labels), self.style == "ruled"
        if self.style == "inline":
            return [f"{self.caption}: " + ", ".join(
                f"{h} {v}" for h, v in zip(self.heads, self.rows[0][k:], strict=True))]
        widths = self.widths or [max(len(r[i]) for r in self.rows) for i in range(k)]
        cells = [self.cell or 2 + max(len(c) for c in [h, *(r[k + j] for r in self.rows)])
                 for j, h in enumerate(self.heads)]

        def line(row: list[str]) -> str:
            left = " ".join(c.ljust(w) for c, w in zip(row[:k], widths, strict=True))
            right = "".join(c.rjust(w) for c, w in zip(row[k:], cells, strict=True))
            return ("" if ruled else "  ") + left + right

        out = [] if ruled else [f"{self.caption}:"]
        out += [] if self.style == "headless" else [line([""] * k + self.heads)]
        out += [line(["-" * w for w in widths] + ["-" * (w - 2) for w in cells])] if ruled else []
        return [*out, *map(line, self.rows), *(f"  {x}" for x in self.note.splitlines())]

    def markdown(self) -> list[str]:
        """The table as Markdown lines: its caption, the table, its note."""
        caption = self.md_caption or self.caption[:1].upper() + self.caption[1:]
        return [*([f"{caption}:", ""] if caption else []),
                *table([*self.labels, *self.heads], self.rows, right=len(self.heads)),
                *(["", *(f"- {x}" for x in self.note.splitlines())] if "\n" in self.note else
                  ["", self.note[:1].upper() + self.note[1:]] if self.note else [])]


def tables_text(tables: Iterable[Table | None]) -> str:
    """Tables as printed (None: one the summary or report lacks), a blank line between them."""
    return "\n\n".join("\n".join(t.text()) for t in tables if t is not None)


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
