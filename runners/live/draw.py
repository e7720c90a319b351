"""Pygame widgets: text, strip charts, arrows, stream tiles and the buffer grid.

Each widget draws into a ``pygame.Rect`` of a surface and knows nothing about the learner; the
screen composer (``screen.py``) places them. Colours live here so that every panel agrees.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pygame

from runners.live import model
from runners.style import SCREEN_TRACK_COLORS, num

Color = tuple[int, int, int]

BG: Color = (16, 18, 22)
PANEL: Color = (27, 30, 36)
GRID: Color = (52, 57, 67)
TEXT: Color = (222, 224, 230)
DIM: Color = (140, 146, 158)
BASE: Color = (76, 146, 255)  # base world (gravity 0)
SHIFT: Color = (255, 146, 38)  # shifted world
SWITCH: Color = (255, 96, 0)  # a switch of the physics: vertical lines, "just switched" marker
THRESH: Color = (235, 72, 72)  # detector threshold mu + kappa * sigma
BOUNDARY: Color = (255, 222, 60)  # boundary event ticks
EMPTY: Color = (38, 42, 50)  # an empty buffer slot
ATTN: Color = (255, 255, 255)


def track_color(name: str) -> Color:
    return SCREEN_TRACK_COLORS.get(name, (180, 180, 180))


class Fonts:
    """Pygame's default font at a few sizes, with a cache of rendered strings (bounded, cleared
    when full): rendering text is the costliest part of a redraw, and most labels repeat from
    frame to frame."""

    def __init__(self, sizes: Sequence[int] = (14, 16, 20, 26)) -> None:
        if not pygame.font.get_init():
            pygame.font.init()
        self._fonts = {s: pygame.font.Font(None, s) for s in sizes}
        self._cache: dict[tuple[str, int, Color], pygame.Surface] = {}

    def render(self, text: str, size: int = 16, color: Color = TEXT) -> pygame.Surface:
        key = (text, size, color)
        surf = self._cache.get(key)
        if surf is None:
            if len(self._cache) > 2000:
                self._cache.clear()
            if size not in self._fonts:
                self._fonts[size] = pygame.font.Font(None, size)
            surf = self._fonts[size].render(text, True, color)
            self._cache[key] = surf
        return surf

    def blit(self, surf: pygame.Surface, text: str, pos: tuple[int, int], size: int = 16,
             color: Color = TEXT, anchor: str = "topleft") -> pygame.Rect:  # fmt: skip
        """Draws ``text`` with its ``anchor`` (a ``pygame.Rect`` position) at ``pos``."""
        img = self.render(text, size, color)
        rect = img.get_rect(**{anchor: pos})
        surf.blit(img, rect)
        return rect


@dataclass
class Series:
    """One line of a strip chart: ``values`` at ``steps`` (NaN values are gaps)."""

    steps: np.ndarray
    values: np.ndarray
    color: Color
    label: str = ""
    width: int = 2


@dataclass
class Chart:
    """A scrolling strip chart's contents; ``draw_chart`` renders it."""

    title: str
    series: list[Series]
    x_range: tuple[float, float]
    y_range: tuple[float, float] | None = None  # None: fit the visible data
    y_floor: float | None = None  # fitted range never goes below / above these
    y_ceil: float | None = None
    y_cap: float | None = None  # the fitted top never exceeds this (higher values are clipped)
    ref_lines: list[tuple[float, Color]] = field(default_factory=list)  # horizontal
    events: list[tuple[float, Color]] = field(default_factory=list)  # vertical lines at steps
    ticks: np.ndarray | None = None  # steps of boundary events, drawn at the chart's bottom
    value_text: str = ""  # shown at the top right (current value)
    note: str = ""  # shown at the bottom left inside the plot


def _fit_range(chart: Chart) -> tuple[float, float]:
    if chart.y_range is not None:
        return chart.y_range
    vals = [s.values[np.isfinite(s.values)] for s in chart.series]
    vals += [np.array([y for y, _ in chart.ref_lines], np.float64)]
    flat = np.concatenate(vals)
    lo, hi = (float(flat.min()), float(flat.max())) if flat.size else (0.0, 1.0)
    if chart.y_floor is not None:
        lo = min(lo, chart.y_floor)
    if chart.y_ceil is not None:
        hi = max(hi, chart.y_ceil)
    if chart.y_cap is not None:
        hi = min(hi, chart.y_cap)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    pad = 0.08 * (hi - lo)
    # a floor the data respects stays the axis' bottom (no "-0.08" below a 0 floor)
    floor_held = chart.y_floor is not None and lo >= chart.y_floor
    return (lo if floor_held else lo - pad), hi + pad


def _fmt(v: float) -> str:
    """A y axis label: no decimals from 100 on, 3 below 1 (but 0), else 2."""
    a = abs(v)
    return num(v, 0 if a >= 100 else 2 if a >= 1 or a == 0 else 3)


def draw_chart(surf: pygame.Surface, rect: pygame.Rect, chart: Chart, fonts: Fonts) -> None:
    """A strip chart: title, y labels, reference lines, events, ticks and the series."""
    pygame.draw.rect(surf, PANEL, rect)
    fonts.blit(surf, chart.title, (rect.left + 4, rect.top + 2), 14, DIM)
    if chart.value_text:
        fonts.blit(surf, chart.value_text, (rect.right - 4, rect.top + 2), 14, TEXT, "topright")
    plot = pygame.Rect(rect.left + 34, rect.top + 16, rect.width - 38, rect.height - 20)
    if plot.width < 8 or plot.height < 8:
        return
    pygame.draw.rect(surf, BG, plot)
    if not chart.series:
        fonts.blit(surf, "n/a", plot.center, 16, GRID, "center")
        return
    lo, hi = _fit_range(chart)
    x0, x1 = chart.x_range
    xspan = max(x1 - x0, 1e-9)

    def xs(steps: np.ndarray) -> np.ndarray:
        return plot.left + (np.asarray(steps, np.float64) - x0) / xspan * (plot.width - 1)

    def ys(values: np.ndarray) -> np.ndarray:
        scaled = (np.asarray(values, np.float64) - lo) / (hi - lo)
        return plot.bottom - 1 - scaled * (plot.height - 1)

    fonts.blit(surf, _fmt(hi), (plot.left - 3, plot.top), 14, DIM, "topright")
    fonts.blit(surf, _fmt(lo), (plot.left - 3, plot.bottom), 14, DIM, "bottomright")
    for y, color in chart.ref_lines:
        if lo <= y <= hi:
            py = int(ys(np.array([y]))[0])
            for px in range(plot.left, plot.right, 6):  # dashed
                pygame.draw.line(surf, color, (px, py), (min(px + 3, plot.right - 1), py))
    for step, color in chart.events:
        if x0 <= step <= x1:
            px = int(xs(np.array([step]))[0])
            pygame.draw.line(surf, color, (px, plot.top), (px, plot.bottom - 1), 2)
    if chart.ticks is not None and len(chart.ticks):
        t = np.asarray(chart.ticks)
        for px in xs(t[(t >= x0) & (t <= x1)]).astype(int).tolist():
            pygame.draw.line(surf, BOUNDARY, (px, plot.bottom - 7), (px, plot.bottom - 1), 2)
    clip = surf.get_clip()
    surf.set_clip(plot)
    for s in chart.series:
        _draw_series(surf, xs(s.steps), ys(np.clip(s.values, lo, hi)), s.color, s.width)
    surf.set_clip(clip)
    if chart.note:
        fonts.blit(surf, chart.note, (plot.left + 4, plot.bottom - 2), 14, TEXT, "bottomleft")
    # legend, top-left inside the plot, only for multi-series charts
    labelled = [s for s in chart.series if s.label]
    x = plot.left + 4
    for s in labelled if len(labelled) > 1 else []:
        r = fonts.blit(surf, s.label, (x, plot.top + 2), 14, s.color)
        x = r.right + 8


def _draw_series(surf: pygame.Surface, px: np.ndarray, py: np.ndarray, color: Color,
                 w: int) -> None:  # fmt: skip
    finite = np.isfinite(py)
    if not finite.any():
        return
    # split at NaN gaps; each run of finite points is one polyline
    idx = np.flatnonzero(finite)
    breaks = np.flatnonzero(np.diff(idx) > 1) + 1
    for run in np.split(idx, breaks):
        pts = list(zip(px[run].astype(int).tolist(), py[run].astype(int).tolist(), strict=True))
        if len(pts) == 1:
            surf.set_at(pts[0], color)
        else:
            pygame.draw.lines(surf, color, False, pts, w)


def draw_arrow(surf: pygame.Surface, center: tuple[int, int], length: float, angle_deg: float,
               color: Color, width: int = 3) -> None:  # fmt: skip
    """An arrow of ``length`` px centred on ``center``, pointing at ``angle_deg`` (image coords)."""
    a = math.radians(angle_deg)
    dx, dy = math.cos(a) * length / 2, math.sin(a) * length / 2
    tail = (center[0] - dx, center[1] - dy)
    tip = (center[0] + dx, center[1] + dy)
    pygame.draw.line(surf, color, tail, tip, width)
    head = max(5.0, min(12.0, length * 0.35))
    for side in (150.0, -150.0):
        b = a + math.radians(side)
        end = (tip[0] + math.cos(b) * head, tip[1] + math.sin(b) * head)
        pygame.draw.line(surf, color, tip, end, width)


def frame_surface(frame: np.ndarray, size: int, smooth: bool = False) -> pygame.Surface:
    """A ``(64, 64)`` uint8 frame as a grey ``size`` x ``size`` surface (nearest scaling;
    ``smooth``: averaged, which keeps thin strokes in a tile smaller than the frame)."""
    rgb = np.repeat(np.asarray(frame, np.uint8).T[:, :, None], 3, axis=2)  # (W, H, 3)
    return _scaled(pygame.surfarray.make_surface(rgb), size, smooth)


def overlay_surface(pred: np.ndarray, true: np.ndarray, size: int) -> pygame.Surface:
    """A decoded frame in magenta over the true one in green (``model.overlay``: white where
    they agree), both ``(64, 64)`` uint8, as a ``size`` x ``size`` surface (averaged scaling)."""
    rgb = (model.overlay(np.asarray(pred, np.float64), np.asarray(true, np.float64)) * 255.0)
    surf = pygame.surfarray.make_surface(rgb.round().astype(np.uint8).transpose(1, 0, 2))
    return _scaled(surf, size, True)


def _scaled(surf: pygame.Surface, size: int, smooth: bool) -> pygame.Surface:
    if surf.get_size() == (size, size):
        return surf
    return (pygame.transform.smoothscale if smooth else pygame.transform.scale)(surf, (size, size))


def draw_buffer(surf: pygame.Surface, rect: pygame.Rect, worlds: np.ndarray,
                attention: np.ndarray | None, capacity: int) -> None:  # fmt: skip
    """One cell per buffer slot (oldest first, row-major), coloured by world of origin.

    The attention weight the current query puts on an entry is the white square inside its cell
    (area proportional to weight / max weight). Empty slots are dark.
    """
    capacity = max(capacity, len(worlds), 1)
    cols = max(1, math.ceil(math.sqrt(capacity * rect.width / max(rect.height, 1))))
    rows = math.ceil(capacity / cols)
    cell = max(2, min(rect.width // cols, rect.height // max(rows, 1)))
    ox = rect.left + (rect.width - cols * cell) // 2
    wmax = float(np.nanmax(attention)) if attention is not None and len(attention) else 0.0
    for i in range(capacity):
        r, c = divmod(i, cols)
        cr = pygame.Rect(ox + c * cell, rect.top + r * cell, cell - 1, cell - 1)
        if i >= len(worlds):
            pygame.draw.rect(surf, EMPTY, cr)
            continue
        pygame.draw.rect(surf, SHIFT if int(worlds[i]) else BASE, cr)
        if wmax > 0 and attention is not None and i < len(attention):
            frac = float(attention[i]) / wmax
            side = int(round((cell - 1) * math.sqrt(max(frac, 0.0)) * 0.85))
            if side >= 1:
                ar = pygame.Rect(0, 0, side, side)
                ar.center = cr.center
                pygame.draw.rect(surf, ATTN, ar)
