"""The protocols: the world a run's streams live in, one module each.

A protocol is the dataclass of its options (``--protocol NAME`` picks it; its fields are
options), and everything that differs between protocols is asked of it, never its name: its
learner on top of the preset (``learner``), its default switch, final curve and collapse guard,
its checks, where its streams live (``where``, ``phase_label``), its feed and its evaluator
(and evaluate's options and store: ``evaluate_options``, ``for_evaluation``), the heads that
bound its runs (``bound_heads``), whether its seeds stack (``stacks``), and whether its streams
live in many worlds at once (``many_worlds``). A third protocol is one new module here, in
``PROTOCOLS``.
"""

from runners.online.protocols.paper import Paper, Source
from runners.online.protocols.worlds import FAMILY_NAMES, Worlds

Protocol = Worlds | Paper
PROTOCOLS: dict[str, type[Worlds] | type[Paper]] = {"worlds": Worlds, "paper": Paper}

__all__ = ["FAMILY_NAMES", "PROTOCOLS", "Paper", "Protocol", "Source", "Worlds"]
