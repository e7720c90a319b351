"""The run's summary as printed and as summary.md (runners.online.summary): one model of its
sections, rendered twice. The printed table is the one README.md and docs/train_online.md quote,
and summary.md shows the same sections with the same numbers."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

from runners.online.summary import format_markdown, format_table, sections

ROOT = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"-?\d+\.\d+")


def default_run() -> dict[str, Any]:
    """A summary holding the numbers of the measured default run (docs/train_online.md)."""
    end = {"step": 3000, "d_base": 0.573, "d_shift_50": 0.659, "d_shift_0": 0.698}
    since = [(0, 25, 0.730), (25, 50, 0.712), (50, 100, 0.733), (100, 200, 0.704),
             (200, 500, 0.718), (500, 1000, 0.727), (1000, 1500, 0.735)]
    floor = [(0, 25, 0.763), (25, 50, 0.749), (50, 100, 0.773), (100, 200, 0.739),
             (200, 500, 0.749), (500, 1000, 0.753), (1000, 1500, 0.760)]
    oracle = [(0, 25, 0.681), (25, 50, 0.654), (50, 100, 0.663), (100, 200, 0.639),
              (200, 500, 0.660), (500, 1000, 0.669), (1000, 1500, 0.676)]

    def rows(bins: list[tuple[int, int, float]]) -> list[dict[str, Any]]:
        return [{"from": a, "to": b, "mean": m} for a, b, m in bins]

    curve = [(0, 0.698), (1, 0.702), (5, 0.691), (10, 0.676), (25, 0.664), (50, 0.659)]
    held = {
        "ns": [0, 1, 5, 10, 25, 50], "horizons": [2, 4, 8],
        "families": {
            "interp": {"own": [0.577, 0.625, 0.616, 0.603, 0.577, 0.570],
                       "same": [0.577, 0.631, 0.572, 0.568, 0.566, 0.564],
                       "wrong": [0.577, 0.664, 0.637, 0.635, 0.636, 0.633]},
            "extrap": {"own": [0.773, 0.754, 0.743, 0.730, 0.718, 0.717],
                       "same": [0.773, 0.761, 0.719, 0.715, 0.711, 0.707],
                       "wrong": [0.773, 0.846, 0.837, 0.838, 0.843, 0.848]}},
        "probes": {"online": {"position": 0.876, "centroid": 0.933, "velocity": 0.011,
                              "position_px": 2.982, "velocity_px": 2.455},
                   "target": {"position": 0.876, "centroid": 0.934, "velocity": 0.010,
                              "position_px": 2.984, "velocity_px": 2.455},
                   "context": {"position": 0.881, "centroid": 0.933, "velocity": 0.630,
                               "position_px": 2.914, "velocity_px": 1.493},
                   "context_mlp": {"position": 0.951, "centroid": 0.963, "velocity": 0.678,
                                   "position_px": 1.880, "velocity_px": 1.392}},
    }
    return {
        "protocol": "worlds", "track": "C", "head": "C", "preset": "cpu", "source": "stream", "seed": 0,
        "after_switch": "memory", "switches": [{"step": 3000, "physics": {"gravity": 0.3}}],
        "steps": 4500, "steps_done": 4500, "stopped": None, "wall_time_s": 310.7,
        "steps_per_s": 14.5, "headline_n": 50, "end_of_base": end, "end": dict(end),
        "boundary_events_before_switch": 0, "boundary_events_after_switch": 13,
        "buffer": {"size": 64, "capacity": 64, "scope": "group", "shift_world": 64,
                   "base_world": 0},
        "stream_error": {"end_of_base": 0.615, "end": 0.737, "window": 100,
                         "since_switch": rows(since),
                         "heads": {"A": {"end_of_base": 0.633, "since_switch": rows(floor)},
                                   "oracle": {"end_of_base": 0.552, "since_switch": rows(oracle)}}},
        "best": {"d_shift": None, "step": None, "min_sigma": 0.2},
        "adaptation_curve": [{"n": n, "d_shift": d} for n, d in curve],
        "held_out": held,
    }


def with_every_section() -> dict[str, Any]:
    """The default run's summary with the gravity probe, the reference check and perfect
    physics added (numbers made up, negative ones among them)."""
    s = default_run()
    row = {"direction_deg": 93.7, "direction_cos": -0.086, "strength_r2": 0.135,
           "identified": 0.25, "chance": 0.125}
    s["held_out"]["gravity_probe"] = {"n": 50, "worlds": 8, "e_agg": {"train": row, "held_out": row},
                                      "entries": {"interp": {**row, "strength_r2": -0.62}}}
    s["held_out"]["reference"] = {f: {"d": [0.559, 0.587, 0.683, 0.61],
                                      "d_target_ref": [16.034, 0.597, 0.675, 0.615],
                                      "d_future_online": [0.198, 0.107, 0.064, 0.123]}
                                  for f in ("interp", "extrap")}
    s["held_out"]["perfect_physics"] = {"horizons": [2, 4, 8], "families": {
        "pooled": {"blind": [0.316, 0.514, 0.868, 0.566], "told_mean": [0.362, 0.36, 0.392, 0.371]}}}
    return s


def test_the_printed_table_is_the_one_the_docs_quote() -> None:
    """The top table, the stream error since the switch, the adaptation curve, the held-out
    worlds and the probes of the default run print as docs/train_online.md shows them, and the
    held-out block as README.md does."""
    text = format_table(default_run())
    assert text.endswith("context_mlp        0.951        0.963        0.678        1.880        1.392")
    assert text in (ROOT / "docs" / "train_online.md").read_text()
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("held-out worlds at the end, D^n"):]
    held = "\n".join(block.splitlines()[:7])
    assert held.startswith("held-out worlds at the end, D^n (n = 0 1 5 10 25 50):") and held in text


def test_text_and_markdown_render_the_same_sections_with_the_same_numbers() -> None:
    s = with_every_section()
    text, md = format_table(s), format_markdown(s)
    tables = sections(s)
    assert len(tables) == 8  # top, since the switch, curve, D^n, probes, gravity, reference, physics
    at_text, at_md = -1, -1
    for t in tables:
        lines, md_lines = "\n".join(t.text()), "\n".join(t.markdown())
        assert NUMBER.findall(lines) == NUMBER.findall(md_lines), t.caption
        # each where the other renderer has it, in the same order
        assert text.index(lines) > at_text and md.index(md_lines) > at_md, t.caption
        at_text, at_md = text.index(lines), md.index(md_lines)
    assert "16.034" in text and "| interp | D against the EMA target's zbar_t | 16.034 |" in md
    assert "  entries: the same entries" in text and "\nEntries: the same entries" in md
    assert "held_out" not in text and "| e_agg | train | 93.7 deg | -0.086 |" in md


def test_the_paper_protocol_prints_its_curve_and_writes_it() -> None:
    """Under the paper protocol the adaptation curve is printed and in summary.md, as under the
    worlds protocol; without a switch there is no since-the-switch section in either."""
    s = copy.deepcopy(default_run())
    s.update(protocol="paper", held_out=None)
    s["buffer"]["scope"] = "global"
    text, md = format_table(s), format_markdown(s)
    assert "D_shift^n at the end (shift test, n memories): n=0 0.698, n=1 0.702" in text
    assert "D_shift^n at the end (shift test, n memories):" in md
    assert "| D_shift^n | 0.698 | 0.702 |" in md
    assert "buffer at the end (shift / base / capacity)" in text
    s.update(switches=[], end_of_base=None)
    s["stream_error"]["since_switch"] = []
    text, md = format_table(s), format_markdown(s)
    assert "since the switch" not in text and "since the switch" not in md
    assert "; no switch; after the switch" in md
