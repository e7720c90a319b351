"""Stacked runs: S runs of one configuration but for the seed, in S run folders, trained as one.

Each seed's run is an ``OnlineLoop`` of its own (its folder, world feed, recorder, evaluator,
checkpoints): what it writes is what the run alone writes, to rounding. What they share is the
learner's work: ``agent.stacked.StackedLearner`` updates all S at once, each on its loop's batch
(``OnlineLoop.prepare``), and each loop records its own metrics (``OnlineLoop.complete``).
Each loop keeps a lone ``Learner`` of its config that does not train: before the loop reads its
learner (an evaluation, a checkpoint, the end of the run) it is loaded with the seed's state from
the stack (``OnlineLoop.sync_learner``), so evaluations, checkpoints and reports are the lone
run's code on the seed's own state. A resumed set of runs loads their checkpoints into the
stack (they are written in lockstep, so they hold one step).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.stacked import StackedLearner
from runners.cli import CliError
from runners.online.loop import OnlineLoop, StepResult


class StackedLoops:
    """S ``OnlineLoop`` s (``loops``: configs equal but for the seed, worlds protocol, no
    stream latent cache) stepped together by one ``StackedLearner``."""

    def __init__(self, loops: Sequence[OnlineLoop], captured: bool = False) -> None:
        if not loops:
            raise CliError("stacked runs need at least one run")
        cfgs = [loop.learner.cfg for loop in loops]
        steps = {loop.step_count for loop in loops}
        if len(steps) != 1:
            raise CliError(f"stacked runs resume at one step, these are at {sorted(steps)}")
        try:
            self.learner = StackedLearner(cfgs, loops[0].device, captured=captured)
        except ValueError as err:
            raise CliError(f"cannot stack these runs: {err}") from None
        self.loops = list(loops)
        self.learner.load_state_dicts([loop.learner.state_dict() for loop in loops])
        self._states: list[dict[str, Any]] | None = None  # the seeds' states at this step
        for k, loop in enumerate(self.loops):
            loop.sync_learner = self._syncer(k)

    def _syncer(self, k: int) -> Any:
        def sync() -> None:
            if self._states is None:
                self._states = self.learner.state_dicts()
            self.loops[k].learner.load_state_dict(self._states[k])

        return sync

    def sync(self) -> None:
        """Load every loop's learner with its seed's state (before the runs' endings read them)."""
        for loop in self.loops:
            loop.sync_learner()

    @property
    def done(self) -> bool:
        return self.loops[0].done

    def step(self) -> list[StepResult]:
        """One step of every run: each loop's switch and batch, the stacked update, then each
        loop's recording, evaluation and checkpoint."""
        batches = [loop.prepare() for loop in self.loops]
        frozen = {loop.learner.weights_frozen for loop in self.loops}
        if len(frozen) != 1:
            raise RuntimeError("stacked runs freeze their weights together")
        if frozen.pop():
            self.learner.freeze_weights()
        else:
            self.learner.unfreeze_weights()
        metrics = self.learner.update(batches)
        self._states = None
        results = []
        for loop, batch, m in zip(self.loops, batches, metrics, strict=True):
            loop.learner.step += 1  # the lone learner counts the step the stack took for it
            results.append(loop.complete(batch, m))
        return results
