"""What a protocol reads of a run's configuration: ``Run``, a structural type.

``runners.online.config.RunConfig`` is one. The protocols name this type, not the config's
class, so the config (which holds a protocol) and the protocols do not import each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agent import AgentConfig
    from env import PhysicsParams
    from runners.online.switch import Switch


class Schedule(Protocol):
    """The schedule's values a protocol reads or sets (``runners.online.config.Schedule``)."""

    eval_ns: tuple[int, ...]
    final_ns: tuple[int, ...] | None
    eval_shift_test: int
    switches: tuple[Switch, ...] | None


class Run(Protocol):
    """A run's configuration as a protocol sees it (``runners.online.config.RunConfig``)."""

    agent: AgentConfig
    schedule: Schedule
    protocol: Any  # the protocol itself (the one being asked)

    @property
    def base_physics(self) -> PhysicsParams: ...

    @property
    def shift_physics(self) -> PhysicsParams: ...

    def physics_at(self, step: int) -> PhysicsParams: ...
