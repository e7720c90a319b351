"""The window's layout: a ``Snapshot`` becomes one 1280x720 frame.

```
+--------------------------------------------------------------------------------------------+
| header: step, steps/s, phase, gravity, mode, PAUSED / REC                                  |
+----------------------+---------------------------------------------------------------------+
| stream tiles (2x2)   | track A            | track C            | ...  (one column per track) |
| (worlds: an arrow    |                    |                    |                             |
|  per stream)         |                    |                    |                             |
| gravity arrow        |  surprisal + thr.  |  surprisal + thr.  |                             |
| switch marker        |  rolling error     |  rolling error     |                             |
| error, all tracks    |  buffer fill/shift |  buffer fill/shift |                             |
|                      |  generated |scale| |  generated |scale| |                             |
|                      |  buffer cells      |  buffer cells      |                             |
+----------------------+---------------------------------------------------------------------+
| keys                                                                                       |
+--------------------------------------------------------------------------------------------+
```
All tracks share the x axis (the last ``History.window`` steps), so their curves line up.
Under the worlds protocol (``WorldView.streams`` set) each stream tile carries its own world's
arrow (direction and length from its gravity, blue for a training-family world, orange for any
other) and the panel below shows the target world that G holds every stream in.
"""

from __future__ import annotations

import math

import numpy as np
import pygame

from runners.live import draw
from runners.live.draw import Chart, Fonts, Series
from runners.live.model import (
    BOUNDARY,
    BUFFER_SIZE,
    DELTA_ABS,
    ROLLING_ERROR,
    SHIFT_SHARE,
    SURPRISAL,
    THRESHOLD,
    Snapshot,
    TrackView,
)

SIZE = (1280, 720)
HEADER_H = 34
FOOTER_H = 22
LEFT_W = 292
GAP = 8
#: steps during which the "physics just switched" marker stays on
SWITCH_MARK_STEPS = 150
#: the error charts' top: above 2x "no change" the value does not matter, the shape below does
ERROR_CAP = 2.0
#: What the floor and the ceiling are called in the error chart's legend (worlds protocol).
BOUND_ROLES = {"A": " floor", "oracle": " ceiling"}
KEYS_HELP = (
    "G gravity on/off   Up/Down strength   Left/Right direction   F freeze/unfreeze weights   "
    "Space pause   S screenshot   R record frames   Q quit (checkpoint)"
)
WORLDS_KEYS_HELP = (
    "G hold all streams in the target world / back to training worlds   Up/Down Left/Right "
    "target strength, direction   F freeze/unfreeze   Space pause   S screenshot   R record   "
    "Q quit"
)
#: a stream tile's own arrow (worlds protocol): the radius of its disc, and the gravity drawn
#: at the disc's full length (the strongest held-out worlds, family extrap, reach 0.8)
STREAM_ARROW_RADIUS = 22
STREAM_ARROW_FULL_G = 0.8
#: the length of the panel's big arrow: this many px plus ``BIG_ARROW_PER_G`` per unit of gravity
BIG_ARROW_MIN = 20
BIG_ARROW_PER_G = 60


class Screen:
    """Draws snapshots onto a surface of ``SIZE`` (the window, or an off-screen surface)."""

    def __init__(self, surface: pygame.Surface, fonts: Fonts | None = None) -> None:
        self.surface = surface
        self.fonts = fonts or Fonts()
        self.chart_rect: pygame.Rect | None = None  # union of the track charts (tests read it)

    # ----------------------------------------------------------------- whole frame
    def draw(self, snap: Snapshot) -> None:
        s = self.surface
        s.fill(draw.BG)
        w, h = s.get_size()
        self._header(pygame.Rect(0, 0, w, HEADER_H), snap)
        body = pygame.Rect(GAP, HEADER_H + GAP, w - 2 * GAP, h - HEADER_H - FOOTER_H - 2 * GAP)
        left = pygame.Rect(body.left, body.top, LEFT_W, body.height)
        self._world(left, snap)
        tracks = pygame.Rect(left.right + GAP, body.top, body.right - left.right - GAP, body.height)
        self._tracks(tracks, snap)
        keys = WORLDS_KEYS_HELP if snap.world.worlds else KEYS_HELP
        self.fonts.blit(s, keys, (GAP, h - FOOTER_H // 2), 16, draw.DIM, "midleft")

    # ----------------------------------------------------------------- header
    def _header(self, rect: pygame.Rect, snap: Snapshot) -> None:
        s, f = self.surface, self.fonts
        pygame.draw.rect(s, draw.PANEL, rect)
        wv = snap.world
        phase_color = draw.SHIFT if wv.shifted else draw.BASE
        x = rect.left + GAP
        y = rect.centery
        items: list[tuple[str, tuple[int, int, int]]] = [
            ("EPM-JEPA live", draw.TEXT),
            (f"step {snap.step:,}", draw.TEXT),
            (f"{snap.steps_per_s:6.1f} steps/s", draw.TEXT),
            (f"phase: {wv.phase}", phase_color),
        ]
        if not wv.worlds or wv.held:
            items.append((f"g = {wv.gravity:.2f} @ {wv.direction:.0f}deg", phase_color))
        elif wv.target is not None:
            fam = f" ({wv.target_family})" if wv.target_family else ""
            g, d = wv.target
            items.append((f"G -> g {g:.2f} @ {d:.0f}deg{fam}", draw.SHIFT))
        items.append((f"mode: {snap.mode}", draw.TEXT))
        frozen = [t.name for t in snap.tracks if t.frozen]
        which = "all" if len(frozen) == len(snap.tracks) else " ".join(frozen)
        items.append((f"weights frozen: {which}" if frozen else "weights learning", draw.DIM))
        for text, color in items:
            r = f.blit(s, text, (x, y), 20, color, "midleft")
            x = r.right + 22
        right = rect.right - GAP
        if snap.recording:
            r = f.blit(s, "REC", (right, y), 20, draw.THRESH, "midright")
            pygame.draw.circle(s, draw.THRESH, (r.left - 10, y), 6)
            right = r.left - 26
        if snap.paused:
            r = f.blit(s, "PAUSED", (right, y), 20, draw.BOUNDARY, "midright")
            right = r.left - 16
        if snap.message:
            f.blit(s, snap.message, (right, y), 16, draw.DIM, "midright")

    # ----------------------------------------------------------------- left column
    def _world(self, rect: pygame.Rect, snap: Snapshot) -> None:
        s, f = self.surface, self.fonts
        wv = snap.world
        pygame.draw.rect(s, draw.PANEL, rect)
        if wv.worlds:
            title = "streams, all in one world" if wv.held else "streams in their training worlds"
            title += " (all tracks)"
        else:
            title = "stream (identical for all tracks)"
        f.blit(s, title, (rect.left + 6, rect.top + 4), 16, draw.DIM)
        n = min(len(wv.frames), 4)
        tile = (rect.width - 12 - 4) // 2
        top = rect.top + 22
        last_switch = wv.switches[-1] if wv.switches else None
        since = snap.step - last_switch[0] if last_switch else None
        just = since is not None and 0 <= since < SWITCH_MARK_STEPS
        for i in range(n):
            r, c = divmod(i, 2)
            tr = pygame.Rect(rect.left + 6 + c * (tile + 4), top + r * (tile + 4), tile, tile)
            s.blit(draw.frame_surface(wv.frames[i], tile), tr)
            if wv.worlds:
                if i < len(wv.streams):
                    fam = wv.stream_families[i] if i < len(wv.stream_families) else ""
                    self._stream_arrow(tr, *wv.streams[i], fam)
            elif wv.gravity > 0:
                draw.draw_arrow(s, (tr.right - 16, tr.top + 16), 22, wv.direction, draw.SHIFT, 2)
            if just:
                pygame.draw.rect(s, draw.SWITCH, tr, 3)
        # gravity arrow (worlds: the held or target world) and the switch marker
        gr = pygame.Rect(rect.left + 6, top + 2 * (tile + 4) + 4, rect.width - 12, 92)
        self._world_panel(gr, snap, last_switch, just)
        self._error_chart(rect, gr, snap)

    def _error_chart(self, rect: pygame.Rect, above: pygame.Rect, snap: Snapshot) -> None:
        """All tracks' rolling error on one chart: the comparison the experiment is about (worlds
        protocol: each track's current value in the legend; the rolling restarts at a switch)."""
        cr = pygame.Rect(
            rect.left + 6, above.bottom + 6, rect.width - 12, rect.bottom - above.bottom - 12
        )
        worlds = snap.world.worlds
        series = []
        n = len(snap.tracks)
        for i, t in enumerate(snap.tracks):
            st, v = t.history.view(ROLLING_ERROR)
            if worlds:  # earlier tracks drawn wider: equal errors still show every track's line
                role = BOUND_ROLES.get(t.name, "")
                label = f"{t.name}{role} {_fmt2(t.history.last(ROLLING_ERROR))}"
                width = 2 + 2 * (n - 1 - i)
            else:
                label, width = t.name, 2
            series.append(Series(st, v, draw.track_color(t.name), label, width))
        chart = Chart(
            "rolling stream error, all tracks" + (" (from each switch)" if worlds else ""),
            series,
            self._x_range(snap),
            y_floor=0.0,
            y_cap=ERROR_CAP,
            ref_lines=[(1.0, draw.GRID)],
            events=self._events(snap),
        )
        draw.draw_chart(self.surface, cr, chart, self.fonts)

    def _stream_arrow(self, tile: pygame.Rect, gravity: float, direction: float, fam: str) -> None:
        """One stream's own world on its tile (worlds protocol): an arrow on a dark disc in the
        top-right corner, its length growing with gravity, and the world's numbers below."""
        s, f = self.surface, self.fonts
        r = STREAM_ARROW_RADIUS
        center = (tile.right - r - 3, tile.top + r + 3)
        pygame.draw.circle(s, draw.BG, center, r)
        color = draw.BASE if fam == "train" else draw.SHIFT if fam else draw.TEXT
        pygame.draw.circle(s, color, center, r, 1)
        if gravity > 1e-9:
            length = 14 + (2 * r - 18) * min(gravity / STREAM_ARROW_FULL_G, 1.0)
            draw.draw_arrow(s, center, length, direction, color, 3)
        else:
            pygame.draw.circle(s, color, center, 3)
        label = f.render(f"g {gravity:.2f} @ {direction:.0f} deg", 14, color)
        box = label.get_rect(bottomleft=(tile.left + 3, tile.bottom - 2)).inflate(4, 2)
        pygame.draw.rect(s, draw.BG, box)
        s.blit(label, label.get_rect(center=box.center))

    def _world_panel(
        self, gr: pygame.Rect, snap: Snapshot, last_switch: tuple[int, float] | None, just: bool
    ) -> None:
        """The world below the tiles (paper protocol: the one gravity of every stream; worlds
        protocol: the held world, or the target G holds the streams in), the last switch and the
        switch marker."""
        s, f = self.surface, self.fonts
        wv = snap.world
        pygame.draw.rect(s, draw.BG, gr)
        center = (gr.left + 46, gr.centery)
        pygame.draw.circle(s, draw.GRID, center, 40, 1)
        tx = gr.left + 98
        if not wv.worlds:
            g, d, width = wv.gravity, wv.direction, 4
            color = draw.SHIFT if wv.shifted else draw.BASE
            f.blit(s, f"gravity {g:.2f} px/frame^2", (tx, gr.top + 6), 20, color)
            f.blit(s, f"direction {d:.0f} deg", (tx, gr.top + 28), 16, draw.DIM)
        elif wv.held:
            g, d, color, width = wv.gravity, wv.direction, draw.SHIFT, 4
            f.blit(s, f"held: g {g:.2f} @ {d:.0f} deg", (tx, gr.top + 6), 20, color)
            f.blit(s, f"family {wv.family or '?'}; G: back", (tx, gr.top + 28), 16, draw.DIM)
        else:
            g, d = wv.target if wv.target is not None else (0.0, 0.0)
            color, width = draw.DIM, 2
            f.blit(s, "training worlds", (tx, gr.top + 6), 20, draw.BASE)
            fam = f" ({wv.target_family})" if wv.target_family else ""
            f.blit(s, f"G -> {g:.2f} @ {d:.0f} deg{fam}", (tx, gr.top + 28), 16, draw.SHIFT)
        if g > 1e-9:
            length = BIG_ARROW_MIN + BIG_ARROW_PER_G * min(g, 1.0)
            draw.draw_arrow(s, center, length, d, color, width)
        else:
            pygame.draw.circle(s, color, center, 5)
        if last_switch is not None:
            step, to = last_switch
            back = wv.worlds and abs(to - wv.base_gravity) <= 1e-9
            label = f"switch @ {step:,} -> " + ("training" if back else f"g {to:.2f}")
            f.blit(s, label, (tx, gr.top + 48), 16, draw.SWITCH if just else draw.DIM)
        if just:
            f.blit(s, "PHYSICS JUST SWITCHED", (tx, gr.top + 68), 20, draw.SWITCH)

    # ----------------------------------------------------------------- track columns
    @staticmethod
    def _x_range(snap: Snapshot) -> tuple[float, float]:
        window = max((t.history.window for t in snap.tracks), default=600)
        hi = max(snap.step, 1)
        return float(max(hi - window, 0)), float(max(hi, window))

    @staticmethod
    def _events(snap: Snapshot) -> list[tuple[float, tuple[int, int, int]]]:
        return [(float(st), draw.SWITCH) for st, _ in snap.world.switches]

    def _tracks(self, rect: pygame.Rect, snap: Snapshot) -> None:
        n = max(len(snap.tracks), 1)
        col_w = (rect.width - (n - 1) * GAP) // n
        any_lora = any(t.generates for t in snap.tracks)
        charts_top = rect.top + 24
        buffer_h = 176
        n_charts = 4 if any_lora else 3
        chart_h = (rect.height - 24 - buffer_h - n_charts * 4) // n_charts
        self.chart_rect = pygame.Rect(rect.left, charts_top, rect.width, n_charts * (chart_h + 4))
        for i, t in enumerate(snap.tracks):
            col = pygame.Rect(rect.left + i * (col_w + GAP), rect.top, col_w, rect.height)
            self._track(col, t, snap, chart_h, n_charts, buffer_h)

    def _track(
        self,
        col: pygame.Rect,
        t: TrackView,
        snap: Snapshot,
        chart_h: int,
        n_charts: int,
        buffer_h: int,
    ) -> None:
        """Draws one track's column: its title bar, its charts and its memory buffer."""
        s, f = self.surface, self.fonts
        self._track_title(col, t)
        names = _world_names(snap)
        y = col.top + 24
        for chart in self._track_charts(t, snap, n_charts, names):
            draw.draw_chart(s, pygame.Rect(col.left, y, col.width, chart_h), chart, f)
            y += chart_h + 4
        # the buffer itself
        br = pygame.Rect(col.left, col.bottom - buffer_h, col.width, buffer_h)
        self._track_buffer(br, t, names)

    def _track_title(self, col: pygame.Rect, t: TrackView) -> None:
        """Draws a track column's title bar: its colour, its name and whether it learns."""
        s, f = self.surface, self.fonts
        title = pygame.Rect(col.left, col.top, col.width, 20)
        pygame.draw.rect(s, draw.PANEL, title)
        pygame.draw.rect(s, draw.track_color(t.name), (title.left, title.top, 6, title.height))
        state = "frozen (memory only)" if t.frozen else "learning"
        color = draw.track_color(t.name)
        f.blit(s, f"track {t.name}", (title.left + 12, title.centery), 20, color, "midleft")
        f.blit(s, state, (title.right - 6, title.centery), 16, draw.DIM, "midright")

    @staticmethod
    def _track_charts(
        t: TrackView, snap: Snapshot, n_charts: int, names: tuple[str, str]
    ) -> list[Chart]:
        """A track column's charts, top to bottom (the LoRA one last, when ``n_charts`` is 4)."""
        h = t.history
        x_range = Screen._x_range(snap)
        events = Screen._events(snap)
        st, surprisal = h.view(SURPRISAL)
        _, thr = h.view(THRESHOLD)
        _, boundary = h.view(BOUNDARY)
        _, err = h.view(ROLLING_ERROR)
        _, size = h.view(BUFFER_SIZE)
        _, share = h.view(SHIFT_SHARE)
        ticks = st[np.nan_to_num(boundary) > 0.5]
        n_events = int(np.nansum(boundary > 0.5)) if len(boundary) else 0
        fill_title = (
            "memory fill (mean of memories), switch-world share"
            if snap.world.worlds
            else "buffer fill, shift-world share"
        )
        charts = [
            Chart(
                "surprisal, mu + k*sigma, boundaries",
                [Series(st, surprisal, draw.TEXT, "s_t"), Series(st, thr, draw.THRESH, "thr", 1)],
                x_range,
                y_floor=0.0,
                events=events,
                ticks=ticks,
                value_text=f"{h.last(SURPRISAL):.3f}  ({n_events} events)",
            ),
            Chart(
                "rolling normalised error (1 = no change)",
                [Series(st, err, draw.track_color(t.name), "err")],
                x_range,
                y_floor=0.0,
                y_ceil=1.1,
                y_cap=ERROR_CAP,
                ref_lines=[(1.0, draw.GRID)],
                events=events,
                value_text=f"{h.last(ROLLING_ERROR):.3f}",
                note=_wrong_text(t.wrong_world),
            ),
            Chart(
                fill_title,
                [
                    Series(st, size / max(t.capacity, 1), draw.BASE, "fill"),
                    Series(st, share, draw.SHIFT, names[1]),
                ],
                x_range,
                y_range=(-0.05, 1.05),
                events=events,
                value_text=f"{_int(h.last(BUFFER_SIZE))}/{t.capacity}  {names[1]} "
                f"{_pct(h.last(SHIFT_SHARE))}",
            ),
        ]
        if n_charts == 4:
            charts.append(_delta_chart(t, st, x_range, events))
        return charts

    def _track_buffer(self, br: pygame.Rect, t: TrackView, names: tuple[str, str]) -> None:
        """Draws a track's memory buffer in ``br``: its counts per world, the attention's
        entropy and one cell per entry."""
        s, f = self.surface, self.fonts
        pygame.draw.rect(s, draw.PANEL, br)
        n = len(t.buffer_worlds)
        shift = int(np.sum(t.buffer_worlds > 0)) if n else 0
        r = f.blit(s, f"{t.buffer_title} {n}/{t.capacity}", (br.left + 4, br.top + 2), 14, draw.DIM)
        left = max(br.left + 100, r.right + 10)
        r = f.blit(s, f"{names[0]} {n - shift}", (left, br.top + 2), 14, draw.BASE)
        f.blit(
            s, f"{names[1]} {shift}", (max(br.left + 160, r.right + 10), br.top + 2), 14, draw.SHIFT
        )
        if t.attention is not None and len(t.attention):
            p = np.clip(np.asarray(t.attention, np.float64), 1e-12, None)
            ent = float(-(p * np.log(p)).sum())
            f.blit(s, f"attn H {ent:.2f}", (br.right - 4, br.top + 2), 14, draw.ATTN, "topright")
        elif n:
            f.blit(s, "attn n/a", (br.right - 4, br.top + 2), 14, draw.DIM, "topright")
        grid = pygame.Rect(br.left + 4, br.top + 18, br.width - 8, br.height - 22)
        draw.draw_buffer(s, grid, t.buffer_worlds, t.attention, t.capacity)


def _world_names(snap: Snapshot) -> tuple[str, str]:
    """The names of the world tags 0 and 1: the base world (worlds protocol: the training
    worlds) and the other."""
    return ("train", "switch") if snap.world.worlds else ("base", "shift")


def _delta_chart(
    t: TrackView,
    st: np.ndarray,
    x_range: tuple[float, float],
    events: list[tuple[float, tuple[int, int, int]]],
) -> Chart:
    """The chart of the scales a track's e_agg generates (the LoRA delta's, FiLM's, the
    hypernetwork code's: ``agent.tracks``), empty and saying so for a track that generates none."""
    h = t.history
    _, delta = h.view(DELTA_ABS)
    return Chart(
        f"|{t.generates}|" if t.generates else "generated |scale|: n/a for this track",
        [Series(st, delta, draw.track_color(t.name), "|d|")] if t.generates else [],
        x_range,
        y_floor=0.0,
        events=events,
        value_text=f"{h.last(DELTA_ABS):.4f}" if t.generates else "",
    )


def _wrong_text(wrong: tuple[float, float] | None) -> str:
    """Peer against another world's memory on the last batch: "memory: peer 0.712 | other
    world 0.745"."""
    if wrong is None:
        return ""
    return f"memory: peer {_fmt3(wrong[0])} | other world {_fmt3(wrong[1])}"


def _int(v: float) -> str:
    return str(int(v)) if math.isfinite(v) else "-"


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%" if math.isfinite(v) else "-"


def _fmt3(v: float) -> str:
    return f"{v:.3f}" if math.isfinite(v) else "-"


def _fmt2(v: float) -> str:
    return f"{v:.2f}" if math.isfinite(v) else "-"
