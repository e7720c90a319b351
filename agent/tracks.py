"""The tracks, each one object: what it is, whether it reads memory, what its memory generates,
its defaults (the paper's Table 5). Code asks a track these things; it never compares letters
(the modulator each builds: ``agent.modulators.build_modulator``).

- A: no memory pathway (the floor); its boundary detector still runs, with C's kappa, so the
  two boundary traces are comparable.
- B: e_agg added to the predictor's input (residual injection);
- C: e_agg generates a per-sample LoRA delta of the predictor's weights;
- D: e_agg generates FiLM scales and shifts; E: a hypernetwork code. D and E are untuned: they
  start from C's lr and kappa.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

Letter = Literal["A", "B", "C", "D", "E"]


@dataclass(frozen=True)
class Track:
    """One track of the paper (Table 5's defaults)."""

    letter: str
    what: str  # what the track does with memory, in a few words
    reads_memory: bool  # False: no experience pathway (no e_agg; the oracle has nothing to feed)
    generates: str  # what e_agg generates, as the run's plots name it ("" where nothing is)
    lr: float
    kappa: float

    @property
    def defaults(self) -> dict[str, float]:
        """The config fields whose defaults differ between tracks."""
        return {"lr": self.lr, "kappa": self.kappa}


TRACKS: dict[str, Track] = {
    "A": Track("A", "no memory (the floor)", False, "", 3e-3, 1.5),
    "B": Track("B", "residual injection into the input", True, "", 2e-3, 2.0),
    "C": Track("C", "a LoRA delta of the weights", True, "LoRA delta scales", 3e-3, 1.5),
    "D": Track("D", "FiLM of the hidden units", True, "FiLM scales", 3e-3, 1.5),
    "E": Track("E", "a hypernetwork code", True, "hypernetwork code", 3e-3, 1.5),
}
assert tuple(TRACKS) == get_args(Letter)

#: The floor: the learner without memory.
FLOOR = "A"
#: The memory track a bound or a view uses where the run's own track reads no memory.
MEMORY_DEFAULT = "C"


def track(letter: str) -> Track:
    """The track of ``letter`` (ValueError naming the choices for any other)."""
    if letter not in TRACKS:
        raise ValueError(f"track: unknown track {letter!r}, expected one of {', '.join(TRACKS)}")
    return TRACKS[letter]


def reads_memory(letter: str) -> bool:
    """Whether the track of ``letter`` has a memory pathway."""
    return track(letter).reads_memory


def ceiling_track(letters: Iterable[str]) -> str:
    """The track whose oracle is the ceiling of ``letters`` (a run's track, a view's tracks):
    the first that reads memory, else ``MEMORY_DEFAULT`` (the oracle of a floor run)."""
    return next((t for t in letters if reads_memory(t)), MEMORY_DEFAULT)


#: The oracle as a head's name (``agent.heads``): the ceiling, beside the tracks' letters.
ORACLE = "oracle"
#: What a head (``AgentConfig.heads``) may be: a track, or the oracle.
HeadName = Literal["A", "B", "C", "D", "E", "oracle"]
assert get_args(HeadName) == (*get_args(Letter), ORACLE)


def head_label(name: str) -> str:
    """A head by its name, as tables and figures say it: "track A" (the floor), ..., "oracle"
    (the ceiling)."""
    if name == ORACLE:
        return "oracle (the ceiling)"
    return f"track {name}" + (" (the floor)" if name == FLOOR else "")


#: The paper's question: experience added to the predictor's input (B) against experience
#: rewriting its weights (C); its delta is (D_B - D_C) / D_B.
INPUT = "B"
WEIGHTS = "C"
