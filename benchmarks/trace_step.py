"""Which of the project's files one training step goes through (docs/architecture.md, "One step,
from the command to the loss").

    python -m benchmarks.trace_step                  # the default run's learner (cpu preset)
    python -m benchmarks.trace_step --preset tiny    # any train_online options

Runs ``train_online`` without its bounds up to one step past the first few (in a temporary
folder, cut after that step) and prints, for that step: the calls on the stack when the loss is computed (``agent.objective``), from
``train_online.main`` down, with their files; then every project file whose code that step runs,
with its number of calls (Python's ``sys.setprofile``).
"""

from __future__ import annotations

import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
#: The step traced (the first ones build caches and warm up).
TRACED_STEP = 10


class Traced(Exception):
    """Raised after the traced step: the run stops there."""


def trace(argv: Sequence[str]) -> tuple[list[str], Counter[str]]:
    """(the calls on the stack at the loss, ``file: function`` from ``train_online.main`` down;
    the project files the traced step runs code of, with their numbers of calls)."""
    import agent.objective as objective
    import runners.online.loop as loop
    from runners import train_online

    files: Counter[str] = Counter()
    chain: list[str] = []
    count = 0

    def profile(frame: Any, event: str, _arg: Any) -> None:
        path = Path(frame.f_code.co_filename)
        if event == "call" and path.is_relative_to(ROOT) and path != HERE:
            files[path.relative_to(ROOT).as_posix()] += 1
            if frame.f_code is objective.compute_loss.__code__ and not chain:
                ours = [f"{Path(f.filename).relative_to(ROOT).as_posix()}: {f.name}"
                        for f in traceback.extract_stack(frame)
                        if Path(f.filename).is_relative_to(ROOT) and Path(f.filename) != HERE]
                chain.extend(ours[ours.index("runners/train_online.py: main"):])

    step = loop.OnlineLoop.step

    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        if count != TRACED_STEP:
            return step(self, *args, **kwargs)
        sys.setprofile(profile)
        try:
            step(self, *args, **kwargs)
        finally:
            sys.setprofile(None)
        raise Traced  # the run is cut here: its folder is a temporary one

    loop.OnlineLoop.step = traced  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as out:
        try:
            train_online.main([*argv, "--steps", str(TRACED_STEP + 2), "--no-bounds", "--out", out])
        except Traced:
            pass
        finally:
            loop.OnlineLoop.step = step  # type: ignore[method-assign]
    return chain, files


def main(argv: Sequence[str] | None = None) -> int:
    chain, files = trace(sys.argv[1:] if argv is None else argv)
    print(f"\nstep {TRACED_STEP}: from the command to the loss, through "
          f"{len({c.split(':')[0] for c in chain})} files:")
    print("\n".join(f"  {c}" for c in chain))
    print(f"the code it runs lives in {len(files)} files:")
    print("\n".join(f"  {f} ({n} calls)" for f, n in sorted(files.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
