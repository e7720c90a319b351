"""The online loop: parts passed in, one step at a time, periodic work decided in one place.

``OnlineLoop(cfg, folder, parts)`` drives the parts that ``runners.online.parts.build_run_parts``
makes (learner, world + source, recorder, evaluator); ``OnlineLoop.open`` builds them and, on a
resume, loads the checkpoint into them: one construction path for both. ``train_online`` and the
visualizer share it: ``step()`` advances exactly one learner update and returns a
``StepResult``; ``steps()`` is the generator a runner iterates; the caller decides what to draw
or print.

Per step (``step()``):
  1. switch: before step S of a scheduled switch the world's physics change
     (``feed.enter``); at the first switch, ``memory`` mode freezes the weights
     (``learner.freeze_weights()``): from then on only experience changes the predictions.
  2. update: ``feed.next()`` -> ``learner.update(batch)`` -> ``StepMetrics`` (device tensors).
  3. record: metrics stay on the device until a flush stacks them (one host sync per block) and
     appends them to ``run.zarr`` with the world's physics of each step, and to the run's
     TensorBoard events (``runners.online.events``); every N-th frame batch too with
     ``record_frames``.
  4. periodic work (``Cadence``): flush every ``log_every`` steps; evaluate every
     ``eval_every`` steps, at each switch (before it applies) and at the end, but only what can
     change: once the weights are frozen, an evaluation that reads only the weights (the worlds
     protocol's) is taken once, at the switch; checkpoint
     ``latest.pt`` every ``checkpoint_every`` steps and at the end (atomic), ``best.pt`` on a
     new lowest D_shift^n. A flush comes before every evaluation and checkpoint, so the metrics
     on disk never lag a checkpoint.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import env
from agent import Batch, Learner, StepMetrics
from agent.checkpoint import CheckpointError, apply_checkpoint, read_checkpoint, save_checkpoint
from agent.objective import columns, head_columns
from runners.cli import CliError
from runners.online.config import RunConfig
from runners.online.evaluation import CurveEvaluator, EvalRecord
from runners.online.parts import RunParts, build_run_parts
from runners.online.recorder import Recorder, RecorderError
from runners.online.rundir import RunFolder, StopRequest

# -- schedules ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Every:
    """Due after every ``n``-th step and after the steps in ``at`` (counts of steps done)."""

    n: int
    at: frozenset[int] = frozenset()

    def __call__(self, done: int) -> bool:
        return done % self.n == 0 or done in self.at


@dataclass(frozen=True)
class Due:
    flush: bool
    evaluate: bool
    checkpoint: bool


@dataclass(frozen=True)
class Cadence:
    """The loop's periodic work, from the config: what is due once ``done`` steps are done."""

    flush: Every
    evaluate: Every
    checkpoint: Every

    @classmethod
    def from_config(cls, cfg: RunConfig) -> Cadence:
        switches = frozenset(sw.step for sw in cfg.schedule.switches or ())
        end = frozenset({cfg.schedule.steps})
        return cls(flush=Every(cfg.schedule.log_every, switches | end),
                   evaluate=Every(cfg.schedule.eval_every, switches | end),
                   checkpoint=Every(cfg.schedule.checkpoint_every, end))

    def due(self, done: int) -> Due:
        evaluate, checkpoint = self.evaluate(done), self.checkpoint(done)
        return Due(self.flush(done) or evaluate or checkpoint, evaluate, checkpoint)


# -- records -----------------------------------------------------------------------------------


@dataclass
class StepResult:
    """What one ``OnlineLoop.step()`` did. ``metrics`` holds device tensors (no host sync)."""

    step: int  # learner steps done after this one
    metrics: StepMetrics
    physics: env.PhysicsParams  # the world's physics during this step
    switched: bool = False  # a switch applied before this step
    block: dict[str, np.ndarray] | None = None  # the flushed block (host arrays), if one was
    evaluation: EvalRecord | None = None
    checkpointed: bool = False


#: The per-step columns of run.zarr's metrics the summary reads, kept on the host by the loop,
#: with every head's metrics (``agent.objective.head_metric_name``: under ``HEADS_PREFIX``).
SUMMARY_COLUMNS = ("stream/norm_error", "stream/valid_frac")
HEADS_PREFIX = "heads/"


@dataclass
class RunRecords:
    """What the loop has recorded, on the host, updated once per flushed block: the progress
    bar's figures and what the summary reads (``SUMMARY_COLUMNS`` per step, the boundary events
    before and after the first switch, each metric's last value). A resume reads them back from
    run.zarr once (``OnlineLoop.restore``), so they always cover the whole run."""

    window: int
    first_switch: int | None
    steps: int = 0  # steps recorded
    last: dict[str, float] = field(default_factory=dict)
    boundaries_before: int = 0
    boundaries_after: int = 0
    recent_error: deque[float] = field(default_factory=deque)
    blocks: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def update(self, steps: np.ndarray, block: dict[str, np.ndarray], phase_starts: list[int]) -> None:
        b, e = block.get("memory/boundary"), block.get("stream/norm_error")
        for i, s in enumerate(map(int, steps)):
            if s in phase_starts:  # the rolling error restarts in each phase
                self.recent_error.clear()
            if b is not None and b[i] > 0.5:
                if self.first_switch is not None and s >= self.first_switch:
                    self.boundaries_after += 1
                else:
                    self.boundaries_before += 1
            if e is not None and np.isfinite(e[i]):
                self.recent_error.append(float(e[i]))
                while len(self.recent_error) > self.window:
                    self.recent_error.popleft()
        for name in block:
            if name in SUMMARY_COLUMNS or name.startswith(HEADS_PREFIX):
                self.blocks.setdefault(name, []).append(np.asarray(block[name], np.float64))
        self.steps += len(steps)
        self.last = {k: float(v[-1]) for k, v in block.items() if len(v)}

    def column(self, name: str) -> np.ndarray | None:
        """(steps,) float64 of a ``SUMMARY_COLUMNS`` metric or a head's stream error, every step
        recorded so far."""
        parts = self.blocks.get(name)
        return np.concatenate(parts) if parts else None

    @property
    def rolling_error(self) -> float:
        return float(np.mean(self.recent_error)) if self.recent_error else math.nan


# -- the loop ----------------------------------------------------------------------------------


def _dynamics(p: env.PhysicsParams) -> tuple[tuple[float, float], float, float]:
    return p.acceleration, p.restitution, p.friction


class OnlineLoop:
    """One online run in a run folder, driving the parts it is given."""

    def __init__(self, cfg: RunConfig, folder: RunFolder, parts: RunParts, *,
                 stop: StopRequest | None = None, log: Callable[[str], None] = print) -> None:
        self.cfg = cfg
        self.folder = folder
        self.device = parts.device
        self.learner: Learner = parts.learner
        self.feed = parts.feed
        self.vec_env: env.MovingMNISTVectorEnv | None = parts.feed.vec_env  # None: stored data
        self.recorder: Recorder = parts.recorder
        self.events = parts.events
        self.evaluator: CurveEvaluator = parts.evaluator
        self.stop = stop or StopRequest(folder.pause)
        self.log = log
        self.cadence = Cadence.from_config(cfg)
        self.switch_at = {sw.step: sw for sw in cfg.schedule.switches or ()}
        self.phase_starts = sorted(self.switch_at)
        self.records = RunRecords(cfg.schedule.rolling_window, cfg.first_switch)
        self.physics = self.cfg.physics_at(0)
        self.pending: list[StepMetrics] = []
        self.pending_heads: list[dict[str, Any]] = []  # each step's ``learner.head_metrics``
        self.pending_physics: list[env.PhysicsParams] = []
        self.best, self.best_step = math.inf, -1  # the lowest D_shift^n yet, and its step
        self.elapsed = 0.0  # wall seconds of earlier sessions (resume)
        self.saved_step: int | None = None  # the step latest.pt holds (None: none written yet)
        self.evals: list[EvalRecord] = []
        self._t0 = time.perf_counter()
        # Called before the loop reads its learner's state (evaluation, checkpoint): a stacked
        # run (``runners.online.stacked``) loads the seed's state from the stack there.
        self.sync_learner: Callable[[], None] = lambda: None
        # The live view's state (its tracks, G's target, its switches), kept in every checkpoint
        # beside the loop's as ``extra["view"]``: ``view_state`` gives it, a resume reads it back
        # into ``view`` (``runners.visualize``).
        self.view_state: Callable[[], dict[str, Any]] = dict
        self.view: dict[str, Any] = {}

    @classmethod
    def open(cls, cfg: RunConfig, folder: RunFolder, *, resume: bool = False,
             stop: StopRequest | None = None, log: Callable[[str], None] = print,
             vec_env: Any = None) -> OnlineLoop:
        """Build the parts (``build_run_parts``; ``vec_env``: the worlds protocol's env, given)
        and the loop: a fresh run saves its config, a resume loads ``checkpoints/latest.pt``
        into the same freshly built parts."""
        parts = build_run_parts(cfg, folder, vec_env)
        loop = cls(cfg, folder, parts, stop=stop, log=log)
        if resume:
            loop.restore()
        else:
            cfg.save(folder.config)
        return loop

    # -- properties ------------------------------------------------------------------------
    @property
    def gravity(self) -> float:
        return self.physics.gravity

    @property
    def step_count(self) -> int:
        return int(self.learner.step)

    @property
    def done(self) -> bool:
        return self.step_count >= self.cfg.schedule.steps

    @property
    def wall_time(self) -> float:
        return self.elapsed + time.perf_counter() - self._t0

    @property
    def frozen(self) -> bool:
        fs = self.cfg.first_switch
        return self.cfg.schedule.after_switch == "memory" and fs is not None and self.step_count >= fs

    def shift_tag(self, physics: env.PhysicsParams) -> int:
        """0 in the base world's physics, else 1 (compared as acceleration, restitution and
        friction: zero gravity in any direction is the same world)."""
        return int(_dynamics(physics) != _dynamics(self.cfg.physics_at(-1)))

    # -- one step --------------------------------------------------------------------------
    def step(self) -> StepResult:
        """Advance one learner update (with the switch, recording, evaluation and checkpoint
        that fall on it) and return what happened."""
        batch = self.prepare()
        return self.complete(batch, self.learner.update(batch))

    def prepare(self) -> Batch:
        """A step's first half: the switch that falls on it, then the world's next batch (the
        learner updates on it next: ``step``, or a stacked learner's update of many loops)."""
        self.switch_due()
        return self.feed.next()

    def switch_due(self) -> None:
        """The switch that falls on this step, if any (from the next frame on)."""
        s = self.step_count
        if s in self.switch_at:
            self.enter(self.cfg.physics_at(s))
            if self.frozen:
                self.freeze()

    def freeze(self) -> None:
        """Freeze the learner's weights (``memory`` mode) and tell the evaluator they are final
        (the held-out report's pixel decoder starts fitting on them)."""
        self.learner.freeze_weights()
        self.evaluator.weights_final(self.learner)

    def complete(self, batch: Batch, metrics: StepMetrics) -> StepResult:
        """A step's second half, once the learner has updated on ``batch`` with ``metrics``:
        recording, evaluation and checkpoint that fall on it."""
        s = self.step_count - 1
        self.pending.append(metrics)
        self.pending_heads.append(self.learner.head_metrics)
        self.pending_physics.append(self.physics)
        if self.cfg.output.record_frames and s % self.cfg.output.record_frames == 0:
            self._record_frames(s, batch)
        result = StepResult(step=s + 1, metrics=metrics, physics=self.physics,
                            switched=s in self.switch_at)
        due = self.cadence.due(s + 1)
        if due.flush:
            result.block = self.flush()
        if due.evaluate and self.evaluation_can_change():
            result.evaluation = self.evaluate()
        if due.checkpoint:
            self.checkpoint()
            result.checkpointed = True
        return result

    def steps(self) -> Iterator[StepResult]:
        """Step until the run is done or a stop is requested (Ctrl-C, SIGTERM, PAUSE file)."""
        while not self.done and not self.stop.requested:
            yield self.step()

    def enter(self, physics: env.PhysicsParams) -> None:
        """Switch the world to ``physics`` from the next step on (scheduled or interactive)."""
        self.feed.enter(physics, self.shift_tag(physics))
        self.physics = physics

    # -- periodic work ---------------------------------------------------------------------
    def flush(self) -> dict[str, np.ndarray]:
        """Stack the pending metrics (one host sync) and append them to run.zarr."""
        if not self.pending:
            return {}
        block = columns(self.pending) | head_columns(self.pending_heads, list(self.learner.heads))
        steps = np.arange(self.step_count - len(self.pending), self.step_count, dtype=np.int64)
        # NaN where the streams live in many worlds (no one world's physics to record).
        one = self.cfg.protocol.one_world(steps, self.cfg.first_switch)
        for name in env.PhysicsParams().as_dict():
            values = np.asarray([getattr(p, name) for p in self.pending_physics], np.float32)
            block[f"physics/{name}"] = np.where(one, values, np.float32(np.nan))
        self.recorder.append_metrics(steps, block)
        self.events.metrics(steps, block)
        self.records.update(steps, block, self.phase_starts)
        self.pending.clear()
        self.pending_heads.clear()
        self.pending_physics.clear()
        return block

    def _record_frames(self, s: int, batch: Batch) -> None:
        # The batch's frames: P past (the last the input), then the K targets, the newest last.
        newest = self.cfg.agent.past_frames + self.cfg.agent.n_horizons - 1
        frames = batch.frames[:, newest].cpu().numpy()  # (B, 1, 64, 64): each stream's newest
        pos = vel = None
        if self.vec_env is not None:
            state = self.vec_env.get_state()["scenes"]
            pos, vel = state.get("positions"), state.get("velocities")
        self.recorder.append_frames(s, frames, pos, vel, np.full(frames.shape[0], self.gravity))

    def evaluation_can_change(self) -> bool:
        """False once the weights are frozen and evaluated, when the evaluation reads nothing
        else of the learner (``CurveEvaluator.reads_memory``): it would repeat itself."""
        if not self.frozen or self.evaluator.reads_memory or not self.evals:
            return True
        return self.evals[-1].step < (self.cfg.first_switch or 0)

    def evaluate(self) -> EvalRecord:
        """The periodic evaluation (D_shift^n for n in eval_ns, D_base, sigma_embed, sigma_z,
        sigma_target), recorded in run.zarr; a new lowest D_shift^{headline_n} (sigma_embed at
        least best_min_sigma) is saved as best.pt."""
        self.sync_learner()
        rec = self.evaluator(self.learner)
        self.recorder.append_eval(**vars(rec))
        self.events.evaluation(rec)
        self.evals.append(rec.as_recorded())  # what a resume reads back (EvalRecord.rows)
        head = rec.d(self.cfg.schedule.headline_n)
        guard = self.cfg.schedule.best_min_sigma or 0.0  # the collapse guard (resolved by the config)
        eligible = guard <= 0.0 or rec.sigma_embed >= guard
        if math.isfinite(head) and head < self.best and eligible:
            self.best, self.best_step = head, rec.step
            self._save(self.folder.best)
        return rec

    def checkpoint(self) -> None:
        """Flush metrics, then write latest.pt atomically (metrics and events never lag the
        checkpoint)."""
        self.flush()
        self.events.flush()
        self.sync_learner()
        self._save(self.folder.latest)
        self.saved_step = self.step_count

    def _save(self, path: Any) -> None:
        extra = {"run_step": self.step_count, "best": self.best, "best_step": self.best_step,
                 "elapsed": self.wall_time, "gravity": self.gravity,
                 "physics": self.physics.as_dict(), "frozen": self.frozen,
                 "view": self.view_state()}
        save_checkpoint(path, self.learner, source=self.feed, extra=extra)

    # -- resume ----------------------------------------------------------------------------
    def restore(self) -> None:
        """Load ``latest.pt`` into the parts and cut run.zarr and the events back to its step."""
        latest = self.folder.latest
        try:
            # The dataset world's split must match the checkpoint's step before its source
            # state is loaded (a switch at s applies when step s runs).
            payload = read_checkpoint(latest, map_location=self.device)
            saved = payload.get("extra")
            s = int(saved.get("run_step", 0)) if isinstance(saved, dict) else 0
            if s:
                self.enter(self.cfg.physics_at(s - 1))
            extra = apply_checkpoint(payload, latest, learner=self.learner, source=self.feed)
        except CheckpointError as err:
            raise CliError(f"cannot resume: {err}") from None
        s = self.step_count
        try:
            self.recorder.truncate(s)
        except RecorderError as err:
            raise CliError(f"cannot resume {self.folder.root}: {err}") from None
        self.events.open(s)
        self.best, self.best_step = float(extra.get("best", math.inf)), int(extra.get("best_step", -1))
        self.elapsed = float(extra.get("elapsed", 0.0))
        self.view = extra["view"] if isinstance(extra.get("view"), dict) else {}
        self.saved_step = s
        try:
            physics = self.cfg.protocol.resumed_physics(extra.get("physics"), self.vec_env)
        except (TypeError, ValueError) as err:
            raise CliError(f"cannot resume: {latest}: damaged physics ({err})") from None
        if physics is not None:
            self.physics = physics
        if self.frozen:
            self.freeze()
        if s:
            m = self.recorder.read_metrics()
            self.records.update(m["step"], {k: v for k, v in m.items() if k != "step"}, self.phase_starts)
        self.evals = EvalRecord.rows(self.recorder.read_eval())
        if self.folder.pause.exists():
            self.folder.pause.unlink()
            self.log(f"removed {self.folder.pause} (it stopped the previous session)")

    def close(self) -> None:
        """Flush what is pending (no checkpoint), close the events and stop the evaluator's
        work on the final weights."""
        self.flush()
        self.events.close()
        self.evaluator.close()
