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

``open_stacked`` opens the loops on the blocks of one shared env (``env.blocks``): each seed's
worlds are its own, stepped and rendered with all the others' at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import env
from agent import StreamSource
from agent.stacked import StackedLearner
from env.blocks import SharedWorlds
from runners.cli import CliError
from runners.online.config import RunConfig
from runners.online.feeds import world_device
from runners.online.loop import OnlineLoop, StepResult
from runners.online.parts import resolve_device
from runners.online.rundir import RunFolder, StopRequest


class StackedLoops:
    """S ``OnlineLoop`` s (``loops``: configs equal but for the seed, worlds protocol, no
    stream latent cache) stepped together by one ``StackedLearner`` (``captured``: its step as
    CUDA graphs)."""

    def __init__(self, loops: Sequence[OnlineLoop], captured: bool = False) -> None:
        if not loops:
            raise CliError("stacked runs need at least one run")
        cfgs = [loop.learner.cfg for loop in loops]
        steps = {loop.step_count for loop in loops}
        if len(steps) != 1:
            raise CliError(f"stacked runs resume at one step, these are at {sorted(steps)}")
        try:
            self.learner = StackedLearner(cfgs, loops[0].device, captured)
        except ValueError as err:
            raise CliError(f"cannot stack these runs: {err}") from None
        self.loops = list(loops)
        sources = [loop.feed for loop in loops]
        if not any(src.started for src in sources):  # fresh runs: their worlds start together
            StreamSource.start_together(sources)
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
        """One step of every run: each loop's switch, then each loop's batch, the stacked update,
        then each loop's recording, evaluation and checkpoint."""
        for loop in self.loops:  # every run's switch before any world steps (a shared env
            loop.switch_due()  # steps all of them at the first run's next batch)
        batches = [loop.feed.next() for loop in self.loops]
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


def open_stacked(cfgs: Sequence[RunConfig], folders: Sequence[RunFolder], *, resume: bool,
                 stop: StopRequest | None = None, log: Any = print) -> StackedLoops:
    """The runs of ``cfgs`` in ``folders`` (fresh, or resumed from their checkpoints), their
    worlds the blocks of one shared env, stepped together by one ``StackedLoops``."""
    cfg = cfgs[0]
    n = len(cfgs) * cfg.agent.batch_size
    device = world_device(resolve_device(cfg.device))
    shared = SharedWorlds(env.MovingMNISTVectorEnv(n, max_episode_steps=None, device=device),
                          len(cfgs))  # fmt: skip
    loops = [OnlineLoop.open(c, f, resume=resume, stop=stop, log=log, vec_env=blk)
             for c, f, blk in zip(cfgs, folders, shared.blocks, strict=True)]  # fmt: skip
    return StackedLoops(loops, captured=cfg.capture)
