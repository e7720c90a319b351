"""Typed values from text and JSON, with tyro (``runners.cli.parse``): the typing of
``--config`` / ``--set`` values and of ``AgentConfig`` overrides, by the same parser as the
command-line options."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any, get_args

import tyro

from agent.config import AgentConfig
from runners.cli import CliError, parse

#: ``--flag VALUE`` for booleans: ``--set``/``--config`` values are always given.
FLAGS_OFF = (tyro.conf.FlagConversionOff,)

# -- typing values from --config (JSON) and --set (text) -------------------------------------
@functools.cache
def field_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def value_kind(hint: Any) -> tuple[str, bool]:
    """("seq" | "bool" | "str" | "other", optional) of a field's type."""
    args = get_args(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint)
    if origin is tuple:
        return "seq", optional
    if hint is bool:
        return "bool", optional
    if hint is str:
        return "str", optional
    return "other", optional


def text_tokens(text: str, hint: Any) -> list[str]:
    """``--set`` text -> the option's tokens (``0,10,50`` -> ``0 10 50``; none -> None)."""
    kind, optional = value_kind(hint)
    low = text.strip().lower()
    if optional and (low in ("none", "null") or (kind == "str" and not low)):
        return ["None"]
    if kind == "seq":
        return text.replace(",", " ").split()
    if kind == "bool":
        return [{"true": "True", "1": "True", "yes": "True", "false": "False", "0": "False",
                 "no": "False"}.get(low, text)]
    return [text]


def json_tokens(value: Any, hint: Any) -> list[str]:
    """A JSON value -> the option's tokens (exact: floats as repr)."""
    if isinstance(value, str):
        return text_tokens(value, hint)
    if value is None:
        return ["None"]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in json_tokens(v, Any)]
    if isinstance(value, bool):
        return [str(value)]
    if isinstance(value, float):
        return [repr(value)]
    if isinstance(value, int):
        return [str(value)]
    return [json.dumps(value)]


def typed(cls: type, default: Any, items: Mapping[str, list[str]], where: str) -> Any:
    """``default`` with ``items`` (field -> option tokens) parsed by tyro from ``cls``'s fields."""

    def args(names: Iterable[str]) -> list[str]:
        out: list[str] = []
        for name in names:
            out += [f"--{name.replace('_', '-')}", *items[name]]
        return out

    try:
        return parse(cls, args(items), default=default, config=FLAGS_OFF)
    except CliError as err:
        for name in items:  # name the field at fault
            try:
                parse(cls, args([name]), default=default, config=FLAGS_OFF)
            except CliError as one:
                detail = re.sub(r"^--[\w.-]+:? ", "", str(one))
                raise CliError(f"{name}: {detail} (in {where})") from None
        raise CliError(f"{err} (in {where})") from None


@functools.cache
def agent_fields() -> type:
    """AgentConfig's fields as a plain dataclass (same types and defaults, no validation): tyro
    types the agent overrides with it; ``AgentConfig`` validates them when the agent is built."""
    cls = AgentConfig
    hints = typing.get_type_hints(cls)
    return dataclasses.make_dataclass(
        "AgentFields",
        [(f.name, hints[f.name], field(default=f.default)) for f in dataclasses.fields(cls)],
    )


def agent_field_names() -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(AgentConfig))


def typed_agent(items: Mapping[str, list[str]], where: str) -> dict[str, Any]:
    if not items:
        return {}
    cls = agent_fields()
    parsed = typed(cls, cls(), items, where)
    return {k: getattr(parsed, k) for k in items}


def agent_values(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """AgentConfig field values from JSON or text (``"1e-3"``, ``[5, 10]``, ``"5,10"``), typed."""
    fields = agent_field_names()
    for k in values:
        if k not in fields:
            raise CliError(f"unknown field {k!r} in {where} (not an AgentConfig field)")
    hints = field_hints(agent_fields())
    return typed_agent({k: json_tokens(v, hints[k]) for k, v in values.items()}, where)


