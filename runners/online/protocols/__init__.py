"""The protocols: the world a run's streams live in, one module each.

A protocol is the dataclass of its options (``--protocol NAME`` picks it; its fields are
options), and everything that differs between protocols is asked of it, never its name: its
learner on top of the preset (``learner``), its default switch, final curve and collapse guard,
its checks, where its streams live (``where``, ``phase_label``, ``one_world``), its feed and
its evaluator (and evaluate's options and store: ``evaluate_options``, ``for_evaluation``), the
view's options (``view_options``), the physics a resumed run goes on in (``resumed_physics``),
the heads that bound its runs (``bound_heads``) and whether its seeds stack (``stacks``). A
third protocol is one new module here, in ``PROTOCOLS``, and its live controls in
``runners.live.controls.CONTROLS``.
"""

from runners.online.protocols.paper import Paper, Source
from runners.online.protocols.worlds import FAMILY_NAMES, Worlds

Protocol = Worlds | Paper
PROTOCOLS: dict[str, type[Worlds] | type[Paper]] = {"worlds": Worlds, "paper": Paper}

__all__ = ["FAMILY_NAMES", "PROTOCOLS", "Paper", "Protocol", "Source", "Worlds"]
