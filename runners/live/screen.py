"""The window's layout: a ``Snapshot`` becomes one 1280x720 frame.

```
+--------------------------------------------------------------------------------------------+
| header: step, steps/s, phase, gravity, mode, PAUSED / REC                                  |
+----------------------+---------------------------------------------------------------------+
| stream tiles (2x2)   | track A            | track C            | ...  (one column per track) |
| (worlds: an arrow    |  surprisal + thr.  |  surprisal + thr.  |                             |
|  per stream)         |  rolling error     |  rolling error     |                             |
| gravity arrow        |  buffer fill/shift |  buffer fill/shift |                             |
| switch marker        |  generated |scale| |  generated |scale| |                             |
| error, all tracks    |  buffer cells      |  buffer cells      |                             |
+----------------------+--------------------+--------------------+-----------------------------+
| true future: a row   | A's prediction,    | C's prediction,    |  (the band: the same rows   |
| per horizon, a tile  | decoded (magenta)  | decoded, over the  |   and tiles in every panel) |
| per shown stream     | over the truth     | truth              |                             |
+----------------------+--------------------+--------------------+-----------------------------+
| keys                                                                                       |
+--------------------------------------------------------------------------------------------+
```
All tracks share the x axis (the last ``History.window`` steps), so their curves line up.
Under the worlds protocol (``WorldView.streams`` set) each stream tile carries its own world's
arrow (direction and length from its gravity, blue for a training-family world, orange for any
other) and the panel below shows the target world that G holds every stream in. The band along
the bottom (``Screen._predictions``) shows what each track predicts for the shown streams, its
predicted latents decoded (``live.predictions``), under its column.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pygame

from runners.live import draw, model
from runners.live.draw import Chart, Fonts, Series
from runners.live.model import Predictions, Snapshot, TrackView, world_label
from runners.style import num, pct

SIZE = (1280, 720)
HEADER_H = 34
FOOTER_H = 22
LEFT_W = 292
GAP = 8
#: the predictions band along the bottom: its height, a row title's and a row label's width
PRED_H = 164
PRED_TITLE_H = 17
PRED_LABEL_W = 30
#: a track column's memory cells panel, and the left column's world panel below the streams
BUFFER_H = 100
WORLD_PANEL_H = 92
#: the all-tracks error chart's least height (the stream tiles shrink to leave it)
ERROR_CHART_MIN_H = 124
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
        self.pred_rects: list[pygame.Rect] = []  # the predictions band's panels (tests read it)
        # each panel's tiles, made again only for new predictions or a new tile size
        self._tiles: dict[str, tuple[Predictions, int, list[list[pygame.Surface]]]] = {}

    # ----------------------------------------------------------------- whole frame
    def draw(self, snap: Snapshot) -> None:
        s = self.surface
        s.fill(draw.BG)
        w, h = s.get_size()
        self._header(pygame.Rect(0, 0, w, HEADER_H), snap)
        body = pygame.Rect(GAP, HEADER_H + GAP, w - 2 * GAP, h - HEADER_H - FOOTER_H - 2 * GAP)
        upper = body.height - PRED_H - GAP
        left = pygame.Rect(body.left, body.top, LEFT_W, upper)
        self._world(left, snap)
        tracks = pygame.Rect(left.right + GAP, body.top, body.right - left.right - GAP, upper)
        self._tracks(tracks, snap)
        band = pygame.Rect(body.left, body.bottom - PRED_H, body.width, PRED_H)
        self._predictions(band, tracks, snap)
        keys = WORLDS_KEYS_HELP if snap.world.worlds else KEYS_HELP
        self.fonts.blit(s, keys, (GAP, h - FOOTER_H // 2), 16, draw.DIM, "midleft")

    # ----------------------------------------------------------------- header
    def _header(self, rect: pygame.Rect, snap: Snapshot) -> None:
        s, f = self.surface, self.fonts
        pygame.draw.rect(s, draw.PANEL, rect)
        wv = snap.world
        phase_color = draw.SHIFT if wv.shifted else draw.BASE
        x, y = rect.left + GAP, rect.centery
        items: list[tuple[str, draw.Color]] = [
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
        free = rect.height - 22 - 8 - WORLD_PANEL_H - 6 - ERROR_CHART_MIN_H
        tile = min((rect.width - 12 - 4) // 2, free // 2)
        left = rect.left + (rect.width - 2 * tile - 4) // 2  # the tiles centred
        top = rect.top + 22
        last_switch = wv.switches[-1] if wv.switches else None
        since = snap.step - last_switch[0] if last_switch else None
        just = since is not None and 0 <= since < SWITCH_MARK_STEPS
        for i in range(min(len(wv.frames), 4)):
            r, c = divmod(i, 2)
            tr = pygame.Rect(left + c * (tile + 4), top + r * (tile + 4), tile, tile)
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
        gr = pygame.Rect(rect.left + 6, top + 2 * (tile + 4) + 4, rect.width - 12, WORLD_PANEL_H)
        self._world_panel(gr, snap, last_switch, just)
        self._error_chart(rect, gr, snap)

    def _error_chart(self, rect: pygame.Rect, above: pygame.Rect, snap: Snapshot) -> None:
        """All tracks' rolling error on one chart: the comparison the experiment is about (worlds
        protocol: each track's current value in the legend; the rolling restarts at a switch)."""
        height = rect.bottom - above.bottom - 12
        cr = pygame.Rect(rect.left + 6, above.bottom + 6, rect.width - 12, height)
        worlds = snap.world.worlds
        series = []
        n = len(snap.tracks)
        for i, t in enumerate(snap.tracks):
            st, v = t.history.view(model.ROLLING_ERROR)
            if worlds:  # earlier tracks drawn wider: equal errors still show every track's line
                role = BOUND_ROLES.get(t.name, "")
                label = f"{t.name}{role} {num(t.history.last(model.ROLLING_ERROR), 2)}"
                width = 2 + 2 * (n - 1 - i)
            else:
                label, width = t.name, 2
            series.append(Series(st, v, draw.track_color(t.name), label, width))
        title = "rolling stream error, all tracks" + (" (from each switch)" if worlds else "")
        chart = _chart(snap, title, series, y_floor=0.0, y_cap=ERROR_CAP,
                       ref_lines=[(1.0, draw.GRID)])
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
        label = f.render(world_label(gravity, direction), 14, color)
        box = label.get_rect(bottomleft=(tile.left + 3, tile.bottom - 2)).inflate(4, 2)
        pygame.draw.rect(s, draw.BG, box)
        s.blit(label, label.get_rect(center=box.center))

    def _world_panel(self, gr: pygame.Rect, snap: Snapshot, last_switch: tuple[int, float] | None,
                     just: bool) -> None:  # fmt: skip
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
            f.blit(s, f"held: {world_label(g, d)}", (tx, gr.top + 6), 20, color)
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
    def _tracks(self, rect: pygame.Rect, snap: Snapshot) -> None:
        """One column a track: its title bar, its charts and its memory buffer."""
        s, f = self.surface, self.fonts
        charts_top, buffer_h = rect.top + 24, BUFFER_H
        n_charts = 4 if any(t.generates for t in snap.tracks) else 3  # a LoRA chart where any
        chart_h = (rect.height - 24 - buffer_h - n_charts * 4) // n_charts
        self.chart_rect = pygame.Rect(rect.left, charts_top, rect.width, n_charts * (chart_h + 4))
        names = _world_names(snap)
        for t, col in zip(snap.tracks, _columns(rect, len(snap.tracks)), strict=False):
            self._track_title(col, t, snap.step)
            y = charts_top
            for chart in self._track_charts(t, snap, n_charts, names):
                draw.draw_chart(s, pygame.Rect(col.left, y, col.width, chart_h), chart, f)
                y += chart_h + 4
            br = pygame.Rect(col.left, col.bottom - buffer_h, col.width, buffer_h)
            self._track_buffer(br, t, names)

    def _track_title(self, col: pygame.Rect, t: TrackView, step: int) -> None:
        """Draws a track column's title bar: its colour, its name and whether it learns (a head
        before the settle: from which step it fits)."""
        s, f = self.surface, self.fonts
        title = pygame.Rect(col.left, col.top, col.width, 20)
        pygame.draw.rect(s, draw.PANEL, title)
        color = draw.track_color(t.name)
        pygame.draw.rect(s, color, (title.left, title.top, 6, title.height))
        state = "frozen (memory only)" if t.frozen else "learning"
        if step < t.starts:  # a head before the settle (agent.heads): nothing to show yet
            state = f"a head: fits from step {t.starts}"
        f.blit(s, f"track {t.name}", (title.left + 12, title.centery), 20, color, "midleft")
        f.blit(s, state, (title.right - 6, title.centery), 16, draw.DIM, "midright")

    @staticmethod
    def _track_charts(t: TrackView, snap: Snapshot, n_charts: int,
                      names: tuple[str, str]) -> list[Chart]:  # fmt: skip
        """A track column's charts, top to bottom (the LoRA one last, when ``n_charts`` is 4)."""
        h = t.history
        st, surprisal = h.view(model.SURPRISAL)
        keys = (model.THRESHOLD, model.BOUNDARY, model.ROLLING_ERROR, model.BUFFER_SIZE,
                model.SHIFT_SHARE)
        thr, boundary, err, size, share = (h.view(key)[1] for key in keys)
        n_events = int(np.nansum(boundary > 0.5)) if len(boundary) else 0
        fill = "memory fill (mean of memories)" if snap.world.worlds else "buffer fill"
        charts = [
            _chart(snap, "surprisal, mu + k*sigma, boundaries",
                   [Series(st, surprisal, draw.TEXT, "s_t"),
                    Series(st, thr, draw.THRESH, "thr", 1)],
                   y_floor=0.0, ticks=st[np.nan_to_num(boundary) > 0.5],
                   value_text=f"{h.last(model.SURPRISAL):.3f}  ({n_events} events)"),
            _chart(snap, "rolling normalised error (1 = no change)",
                   [Series(st, err, draw.track_color(t.name), "err")],
                   y_floor=0.0, y_ceil=1.1, y_cap=ERROR_CAP, ref_lines=[(1.0, draw.GRID)],
                   value_text=f"{h.last(model.ROLLING_ERROR):.3f}",
                   note=_wrong_text(t.wrong_world)),
            _chart(snap, f"{fill}, {names[1]}-world share",
                   [Series(st, size / max(t.capacity, 1), draw.BASE, "fill"),
                    Series(st, share, draw.SHIFT, names[1])],
                   y_range=(-0.05, 1.05),
                   value_text=f"{num(h.last(model.BUFFER_SIZE), 0)}/{t.capacity}  {names[1]} "
                   f"{pct(h.last(model.SHIFT_SHARE))}"),
        ]  # fmt: skip
        if n_charts == 4:  # the scales its e_agg generates (``agent.tracks``), if it does
            _, delta = h.view(model.DELTA_ABS)
            gen = t.generates
            title = f"|{gen}|" if gen else "generated |scale|: n/a for this track"
            series = [Series(st, delta, draw.track_color(t.name), "|d|")] if gen else []
            value = f"{h.last(model.DELTA_ABS):.4f}" if gen else ""
            charts.append(_chart(snap, title, series, y_floor=0.0, value_text=value))
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
        left = max(br.left + 160, r.right + 10)
        f.blit(s, f"{names[1]} {shift}", (left, br.top + 2), 14, draw.SHIFT)
        if t.attention is not None and len(t.attention):
            p = np.clip(np.asarray(t.attention, np.float64), 1e-12, None)
            ent = float(-(p * np.log(p)).sum())
            f.blit(s, f"attn H {ent:.2f}", (br.right - 4, br.top + 2), 14, draw.ATTN, "topright")
        elif n:
            f.blit(s, "attn n/a", (br.right - 4, br.top + 2), 14, draw.DIM, "topright")
        grid = pygame.Rect(br.left + 4, br.top + 18, br.width - 8, br.height - 22)
        draw.draw_buffer(s, grid, t.buffer_worlds, t.attention, t.capacity)

    # ----------------------------------------------------------------- predictions band
    def _predictions(self, band: pygame.Rect, tracks: pygame.Rect, snap: Snapshot) -> None:
        """The bottom band: the shown streams' true future at each horizon in grey (under the
        streams, left) and under each track's column its prediction of it, decoded, in magenta
        over the true future in green; a row per horizon, a tile per shown stream in the
        streams' order, the same rows and tiles in every panel."""
        first = next((t.predictions for t in snap.tracks if t.predictions is not None), None)
        n, k = (4, 3) if first is None else first.true.shape[:2]  # streams, horizons
        left = pygame.Rect(band.left, band.top, LEFT_W, band.height)
        cols = _columns(pygame.Rect(tracks.left, band.top, tracks.width, band.height),
                        len(snap.tracks))  # fmt: skip
        fit_h = (band.height - PRED_TITLE_H - 2) // k - 2
        fit_w = min(r.width - PRED_LABEL_W - 4 for r in (left, *cols)) // n - 2
        tile = max(8, min(fit_h, fit_w))
        self.pred_rects = [left, *cols]
        self._pred_panel(left, "", "true future (all tracks)", first, tile)
        for t, col in zip(snap.tracks, cols, strict=False):
            self._pred_panel(col, t.name, "predicted (magenta), true (green)",
                             t.predictions, tile)  # fmt: skip

    def _pred_panel(self, rect: pygame.Rect, track: str, title: str, pred: Predictions | None,
                    tile: int) -> None:  # fmt: skip
        """One panel of the band (``track`` "": the true future alone)."""
        s, f = self.surface, self.fonts
        pygame.draw.rect(s, draw.PANEL, rect)
        r = f.blit(s, title, (rect.left + 4, rect.top + 2), 14, draw.DIM)
        if pred is None:
            f.blit(s, "n/a", rect.center, 16, draw.GRID, "center")
            return
        loss = f.render(f"decoder loss {num(pred.loss, 3)}", 14, draw.DIM)
        if track and r.right + 8 + loss.get_width() <= rect.right - 4:  # where there is room
            s.blit(loss, loss.get_rect(topright=(rect.right - 4, rect.top + 2)))
        rows = self._pred_tiles(track, pred, tile)
        x = rect.left + (rect.width - PRED_LABEL_W - len(rows[0]) * (tile + 2)) // 2  # centred
        for j, (h, row) in enumerate(zip(pred.horizons, rows, strict=True)):
            y = rect.top + PRED_TITLE_H + j * (tile + 2)
            f.blit(s, f"+{h}", (x + PRED_LABEL_W - 6, y + tile // 2), 14, draw.DIM, "midright")
            for i, surf in enumerate(row):
                s.blit(surf, (x + PRED_LABEL_W + i * (tile + 2), y))

    def _pred_tiles(self, track: str, pred: Predictions,
                    tile: int) -> list[list[pygame.Surface]]:  # fmt: skip
        """A panel's tiles by horizon, then stream (``track`` "": the true future in grey)."""
        cached = self._tiles.get(track)
        if cached is not None and cached[0] is pred and cached[1] == tile:
            return cached[2]
        n, k = pred.true.shape[:2]
        if track:
            rows = [[draw.overlay_surface(pred.decoded[i, j], pred.true[i, j], tile)
                     for i in range(n)] for j in range(k)]  # fmt: skip
        else:
            rows = [[draw.frame_surface(pred.true[i, j], tile, smooth=True) for i in range(n)]
                    for j in range(k)]  # fmt: skip
        self._tiles[track] = (pred, tile, rows)
        return rows


def _columns(rect: pygame.Rect, n: int) -> list[pygame.Rect]:
    """``rect`` split into ``n`` columns (at least one) a ``GAP`` apart: the tracks'."""
    n = max(n, 1)
    width = (rect.width - (n - 1) * GAP) // n
    return [pygame.Rect(rect.left + i * (width + GAP), rect.top, width, rect.height)
            for i in range(n)]  # fmt: skip


def _world_names(snap: Snapshot) -> tuple[str, str]:
    """The names of the world tags 0 and 1: the base world (worlds protocol: the training
    worlds) and the other."""
    return ("train", "switch") if snap.world.worlds else ("base", "shift")


def _chart(snap: Snapshot, title: str, series: list[Series], **kw: Any) -> Chart:
    """A chart of the view: every chart shares the x axis (the last ``History.window`` steps, so
    the tracks' curves line up) and marks each switch with a vertical line."""
    window = max((t.history.window for t in snap.tracks), default=600)
    hi = max(snap.step, 1)
    x_range = float(max(hi - window, 0)), float(max(hi, window))
    events = [(float(st), draw.SWITCH) for st, _ in snap.world.switches]
    return Chart(title, series, x_range, events=events, **kw)


def _wrong_text(wrong: tuple[float, float] | None) -> str:
    """Peer against another world's memory on the last batch: "memory: peer 0.712 | other
    world 0.745"."""
    if wrong is None:
        return ""
    return f"memory: peer {num(wrong[0])} | other world {num(wrong[1])}"
