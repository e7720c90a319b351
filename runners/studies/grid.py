"""Grid expansion for sweeps: ``track=A,B,C seed=42,43 lambda_reg=0.05,0.1`` -> run points, each
named from its point alone (so the same point is always the same run folder, what makes a sweep
resumable), each field passed to ``train_online`` as its option (docs/reproduce.md, "study sweep").
"""

from __future__ import annotations

import itertools
import json
import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runners.cli import CliError

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: What a run name writes as "-" (``1e-3`` and ``0.05`` stay as they are).
_UNSAFE = re.compile(r"[^A-Za-z0-9.+-]")


@dataclass(frozen=True)
class Point:
    """One configuration of a sweep: ordered ``(field, value)`` pairs (values kept as text)."""

    items: tuple[tuple[str, str], ...]
    prefix: str = ""

    @property
    def params(self) -> dict[str, str]:
        """The point as a dict, in grid order."""
        return dict(self.items)

    @property
    def name(self) -> str:
        """Stable, readable, filesystem-safe run name, e.g. ``track-C_seed-42_lambda_reg-0.05``."""
        body = "_".join(f"{k}-{_UNSAFE.sub('-', v) or 'empty'}" for k, v in self.items) or "default"
        return f"{self.prefix}{body}"

    def train_args(self) -> list[str]:
        """The ``train_online`` arguments for this point (before any sweep-wide arguments)."""
        return [token for key, value in self.items for token in option_tokens(key, value)]


def option_tokens(name: str, value: str, where: str = "--grid") -> list[str]:
    """The ``train_online`` options that set field ``name`` to the text ``value`` of a grid point
    (``stream_cache=false``: ``--no-stream-cache``; ``eval_ns=0,7``: ``--eval-ns 0 7``;
    ``switches=100:0.5;200:0``: two ``--switch``; ``none`` for an optional field or no switch; a
    field without an option of its own, ``command.SET_ONLY``: ``vary_memory=false``:
    ``--set vary_memory=false``, ``interp_gravity=0.1,0.2``: ``--set interp_gravity=[0.1, 0.2]``)."""
    from runners.online.command import SET_ONLY, option_type
    from runners.online.switch import Switch

    text = value.strip().lower()
    if name in ("switches", "switch"):
        if text == "none":
            return ["--no-switch"]
        try:
            items = [str(Switch.from_json(v)) for v in value.replace(";", " ").split()]
        except ValueError as err:
            raise CliError(f"switches: {err} (in {where})") from None
        return [t for s in items for t in ("--switch", s)]
    name = name.replace("-", "_")
    hint, option = option_type(name), "--" + name.replace("_", "-")
    if hint is None:
        raise CliError(f"unknown field {name!r} in {where}")
    args = typing.get_args(hint)
    if type(None) in args and text in ("none", "null"):
        return ["--set", f"{name}=null"] if name in SET_ONLY else [option, "None"]
    base = next((a for a in args if a is not type(None)), hint) if type(None) in args else hint
    flags = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
    if base is bool and text not in flags:
        raise CliError(f"{name}: expected true or false, got {value!r} (in {where})")
    items = value.replace(",", " ").split()
    if name in SET_ONLY:  # no option of its own: --set NAME=VALUE, the value as JSON
        if base is bool:
            return ["--set", f"{name}={json.dumps(flags[text])}"]
        if typing.get_origin(base) is tuple:
            return ["--set", f"{name}={json.dumps([_json_item(v) for v in items])}"]
        return ["--set", f"{name}={value}"]
    if base is bool:
        return [option if flags[text] else "--no-" + option[2:]]
    if typing.get_origin(base) is tuple:
        return [option, *items]
    return [option, value]


def _json_item(text: str) -> Any:
    """A grid value's item as JSON reads it (a bare word: text)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_grid(specs: Iterable[str]) -> dict[str, list[str]]:
    """Parse ``["track=A,B", "seed=42,43"]`` into ``{"track": ["A", "B"], "seed": ["42", "43"]}``;
    ``CliError`` (one line) on a malformed item, an empty value, a repeated field or value."""
    grid: dict[str, list[str]] = {}
    for spec in specs:
        key, sep, raw = spec.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            raise CliError(f"bad --grid item {spec!r}: expected FIELD=V1,V2,... (e.g. seed=42,43)")
        values = [v.strip() for v in raw.split(",")]
        if not raw.strip() or any(not v for v in values):
            raise CliError(f"bad --grid item {spec!r}: empty value")
        if key in grid:
            raise CliError(f"--grid field {key!r} given twice")
        if len(set(values)) != len(values):
            raise CliError(f"--grid field {key!r} repeats a value: {raw}")
        grid[key] = values
    return grid


def expand(grid: Mapping[str, Sequence[str]], *, prefix: str = "") -> list[Point]:
    """Cartesian product of the grid, first field varying slowest (``itertools.product`` order),
    ``prefix`` before every run name (e.g. ``"lambda_"``); an empty grid: one point, named
    ``prefix + "default"``."""
    keys = list(grid)
    points = [Point(tuple(zip(keys, combo, strict=True)), prefix=prefix)
              for combo in itertools.product(*(grid[k] for k in keys))]
    names = [p.name for p in points]
    if len(set(names)) != len(names):
        raise CliError("two grid points map to the same run name; use distinct values")
    return points
