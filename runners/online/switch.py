"""Physics switches of an online run: ``Switch(step, physics)``.

Before ``step`` the physics parameters a switch names change: ``--switch 3000:0.5`` sets the
gravity, ``--switch 3000:gravity=0.5,direction=45,restitution=0.9,friction=0.01`` several at
once. Values are validated by the env's own ``PhysicsParams``; a switch is written to
``config.json`` as ``{"step": S, "physics": {...}}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import tyro

if TYPE_CHECKING:  # env is imported on first use: it pulls in gymnasium
    from env import PhysicsParams

# -- switches --------------------------------------------------------------------------------
# = env.PHYSICS_FIELDS (checked in the tests; not imported here so that reading a config does
# not import the env).
PHYSICS_NAMES = ("gravity", "gravity_direction", "restitution", "friction")
PHYSICS_ALIASES = {"direction": "gravity_direction"}
_SHORT_NAMES = {"gravity": "g", "gravity_direction": "direction"}
SWITCH_SYNTAX = "STEP:GRAVITY or STEP:NAME=VALUE,... (e.g. 3000:0.5, 3000:gravity=0.5,direction=45)"


def check_physics(params: Mapping[str, Any]) -> dict[str, float]:
    """Validate physics parameters exactly as the env does (``env.PhysicsParams``); return them as
    floats under their canonical names (``direction`` -> ``gravity_direction``), in the env's
    order. ``ValueError`` naming the parameter on an unknown name or a bad value."""
    from env.physics import PhysicsParams

    named = {PHYSICS_ALIASES.get(str(k).strip(), str(k).strip()): v for k, v in params.items()}
    if not named:
        raise ValueError("a switch must set at least one physics parameter")
    checked = PhysicsParams().replace(**named)  # the env's validation: names, finiteness, ranges
    return {n: getattr(checked, n) for n in PHYSICS_NAMES if n in named}


def _as_step(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"STEP must be an integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"STEP must be an integer, got {value!r}") from None


@dataclass(frozen=True, order=True)
class Switch:
    """A scheduled physics switch: before step ``step`` the physics parameters in ``physics``
    (``(name, value)`` pairs, canonical names in the env's order) change; the others keep their
    values. In config.json: ``{"step": 3000, "physics": {"gravity": 0.5}}``."""

    step: int
    physics: tuple[tuple[str, float], ...]

    @classmethod
    def make(cls, step: Any, physics: Mapping[str, Any]) -> Switch:
        """A validated switch (``ValueError`` naming the parameter)."""
        return cls(_as_step(step), tuple(check_physics(physics).items()))

    @classmethod
    def parse(cls, text: str) -> Switch:
        """``"3000:0.5"`` (gravity) or ``"3000:gravity=0.5,direction=45,friction=0.01"``."""
        text = str(text).strip()
        step, sep, spec = text.partition(":")
        if not sep or not spec.strip():
            raise ValueError(f"malformed switch {text!r}: expected {SWITCH_SYNTAX}")
        params: dict[str, str] = {}
        if "=" not in spec:
            params["gravity"] = spec.strip()
        else:
            for item in spec.split(","):
                name, eq, value = item.partition("=")
                name = PHYSICS_ALIASES.get(name.strip(), name.strip())
                if not eq or not name or not value.strip():
                    raise ValueError(f"malformed switch {text!r}: expected NAME=VALUE, got {item!r}")
                if name in params:
                    raise ValueError(f"switch {text!r}: {name} is given twice")
                params[name] = value.strip()
        try:
            return cls.make(step, params)
        except ValueError as err:
            raise ValueError(f"switch {text!r}: {err}") from None

    @classmethod
    def from_json(cls, obj: Any) -> Switch:
        """A switch as config.json writes it, ``{"step": S, "physics": {...}}``, or as the
        command line does, ``"S:..."``."""
        if isinstance(obj, Switch):
            return obj
        if isinstance(obj, str):
            return cls.parse(obj)
        if isinstance(obj, Mapping) and set(obj) == {"step", "physics"} and isinstance(
                obj["physics"], Mapping):
            return cls.make(obj["step"], obj["physics"])
        raise ValueError(f"cannot read switch {obj!r}: expected {{\"step\": S, \"physics\": "
                         f"{{...}}}} or \"{SWITCH_SYNTAX.split(' or ')[0]}\"")

    @property
    def params(self) -> dict[str, float]:
        """``{name: value}`` of the parameters this switch sets."""
        return dict(self.physics)

    def label(self, arrow: str = " -> ") -> str:
        """``"g -> 0.5"``, ``"g -> 0.5, direction -> 45"`` (for plots and summaries)."""
        return ", ".join(f"{_SHORT_NAMES.get(n, n)}{arrow}{v:g}" for n, v in self.physics)

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "physics": self.params}

    def __str__(self) -> str:  # the command-line syntax (exact: floats as repr)
        if len(self.physics) == 1 and self.physics[0][0] == "gravity":
            return f"{self.step}:{self.physics[0][1]!r}"
        return f"{self.step}:" + ",".join(f"{n}={v!r}" for n, v in self.physics)


def physics_label(p: PhysicsParams) -> str:
    """``"g = 0.5"``, plus every other parameter that is not the env's default
    (``"g = 0.5, direction = 45, friction = 0.01"``)."""
    from env.physics import PhysicsParams

    default = PhysicsParams()
    return ", ".join([f"g = {p.gravity:g}", *(f"{_SHORT_NAMES.get(n, n)} = {getattr(p, n):g}"
                                               for n in PHYSICS_NAMES[1:]
                                               if getattr(p, n) != getattr(default, n))])


def switches_from_json(items: Iterable[Any] | None) -> tuple[Switch, ...]:
    """Switches as written in a config.json / summary.json (``Switch.from_json``), sorted by
    step. ``ValueError`` on a bad one."""
    return tuple(sorted(Switch.from_json(s) for s in items or ()))


def _switch_from_cli(tokens: list[str]) -> Switch:
    """A ``--switch`` value; tyro reports its error as the option's: ``switch '10:x': ...`` ->
    ``--switch '10:x': ...``."""
    (text,) = tokens
    try:
        return Switch.parse(text)
    except ValueError as err:
        raise ValueError(str(err).replace("switch ", "--switch ", 1)) from None


SwitchArg = Annotated[Switch, tyro.constructors.PrimitiveConstructorSpec(
    nargs=1, metavar="STEP:PHYSICS", instance_from_str=_switch_from_cli,
    is_instance=lambda x: isinstance(x, Switch), str_from_instance=lambda x: [str(x)])]


