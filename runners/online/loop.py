"""The online loop: env -> source -> learner, scheduled switches, recording, evaluation, checkpoints.

``OnlineLoop`` is shared by ``train_online`` and the visualizer: ``step()`` advances exactly one
learner update and returns a ``StepResult``; ``steps()`` is the generator a runner iterates; the
caller decides what to draw or print. Parts are built by the small factories below, from the
resolved ``RunConfig``; nothing here reads a module-level hyperparameter.

Per step (``step()``):
  1. switch: before step S of a scheduled switch the world's gravity changes
     (``vec_env.set_gravity``); at the first switch, ``memory`` mode freezes the weights
     (``learner.freeze_weights()``): from then on only experience changes the predictions.
  2. update: ``source.next()`` -> ``learner.update(batch)`` -> ``StepMetrics`` (device tensors).
  3. record: metrics are kept on the device and stacked once per block (one host sync per block),
     then appended to ``run.zarr``; every N-th frame batch too with ``record_frames``.
  4. evaluate every ``eval_every`` steps, at each switch (before it applies) and at the end.
  5. checkpoint ``latest.pt`` every ``checkpoint_every`` steps (atomic), ``best.pt`` on a new
     lowest D_shift^50.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from runners.cli import CliError
from runners.online.config import RunConfig
from runners.online.recorder import Recorder, RecorderError
from runners.online.rundir import RunPaths, StopRequest

# -- factories ---------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    """auto -> cuda when available else cpu; cuda without a GPU -> CliError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise CliError("--device cuda: no CUDA GPU is available here (use --device cpu or auto)")
    return torch.device(name)


def make_vec_env(cfg: RunConfig, n_streams: int) -> Any:
    """The B parallel streams of the base world (long episodes, staggered phases)."""
    import env

    kwargs: dict[str, Any] = {"gravity": cfg.gravity_at(0), "max_episode_steps": cfg.episode_length}
    return env.MovingMNISTVectorEnv(n_streams, **kwargs)


def make_learner(cfg: RunConfig, device: torch.device) -> Any:
    from agent import Learner

    return Learner(cfg.agent, device=device)


def open_store(path: str) -> Any:
    """``env.open_dataset`` with every failure turned into one line."""
    import env

    p = Path(path)
    if not p.exists():
        raise CliError(f"--data {path}: no such file or folder")
    try:
        return env.open_dataset(path)
    except Exception as err:  # the reader's own message names what is wrong
        raise CliError(f"--data {path}: cannot read it as a make_dataset store ({err})") from None


def split_view(store: Any, world: str, split: str, path: str) -> Any:
    """``store.split(world, split)``, a missing split as one line."""
    try:
        return store.split(world, split)
    except Exception as err:
        raise CliError(f"--data {path}: the store has no usable {world}/{split} split ({err})") from None


def split_frames(store: Any, world: str, split: str, path: str, limit: int | None = None) -> Any:
    """``(N, 21, 1, 64, 64)`` frames of one split (lazy zarr array unless ``limit``)."""
    frames = split_view(store, world, split, path).frames
    if limit is not None:
        return np.asarray(frames[: min(limit, frames.shape[0])])
    return frames


def make_source(cfg: RunConfig, device: torch.device, world: int, vec_env: Any = None,
                store: Any = None) -> Any:
    """Stream source over ``vec_env``, or a dataset source over the store's base/shift train."""
    from agent import DatasetSource, StreamSource

    if cfg.source == "stream":
        src = StreamSource(vec_env, cfg.agent, device, seed=cfg.seed)
        src.start()
        if cfg.stagger and cfg.episode_length:
            stagger(vec_env, cfg.episode_length)
        return src
    frames = split_frames(store, "shift" if world else "base", "train", str(cfg.data))
    return DatasetSource(frames, cfg.agent, device, world=world, seed=cfg.seed + world)


def stagger(vec_env: Any, episode_length: int) -> None:
    """Spread the streams' episode phases evenly over ``episode_length`` so their resets (and
    the windows a reset masks) do not all fall on the same steps. Stream i's first episode is
    shortened by ``i * L / B`` steps (through the env's documented state dict)."""
    state = vec_env.get_state()
    n = vec_env.num_envs
    offset = (np.arange(n) * episode_length) // n
    elapsed = np.asarray(state["elapsed"], np.int64)
    state["elapsed"] = np.minimum(elapsed + offset, episode_length - 1)
    vec_env.set_state(state)


def make_eval_data(cfg: RunConfig, store: Any = None) -> Any:
    """Evaluation splits: from ``--data`` when given, else generated in memory, deterministically
    with ``env.generate_sequences`` (the generator of ``make_dataset``): shift train/test at the
    first switch's gravity, base test at the base gravity; test splits show unseen digits."""
    from agent import EvalData

    if store is not None:
        path = str(cfg.data)
        return EvalData(
            shift_train=split_frames(store, "shift", "train", path, cfg.eval_shift_train),
            shift_test=split_frames(store, "shift", "test", path, cfg.eval_shift_test),
            base_test=split_frames(store, "base", "test", path, cfg.eval_base_test),
        )
    import env

    seed = cfg.seed + cfg.eval_seed_offset
    g = cfg.shift_gravity

    def gen(n: int, s: int, gravity: float, split: str) -> np.ndarray:
        return env.generate_sequences(n, seed=s, gravity=gravity, split=split)["frames"]

    return EvalData(
        shift_train=gen(cfg.eval_shift_train, seed, g, "train"),
        shift_test=gen(cfg.eval_shift_test, seed + 1, g, "test"),
        base_test=gen(cfg.eval_base_test, seed + 2, cfg.base_gravity, "test"),
    )


# -- records -----------------------------------------------------------------------------------


@dataclass
class EvalRecord:
    """One evaluation: D_shift^n for each n of ``ns``, D_base, sigma_embed, excluded samples."""

    step: int
    ns: list[int]
    d_shift: list[float]
    d_shift_per_h: list[list[float]]
    d_base: float
    d_base_per_h: list[float]
    sigma_embed: float
    excluded: int
    horizons: list[int]

    def d(self, n: int) -> float:
        return self.d_shift[self.ns.index(n)] if n in self.ns else math.nan

    @classmethod
    def from_results(cls, step: int, results: list[Any], horizons: list[int]) -> EvalRecord:
        first = results[0]  # the smallest n (0 by default): D_base with the training memory
        return cls(
            step=step,
            ns=[int(r.n) for r in results],
            d_shift=[float(r.d_shift) for r in results],
            d_shift_per_h=[[float(x) for x in _seq(r.d_shift_per_h)] for r in results],
            d_base=float(first.d_base),
            d_base_per_h=[float(x) for x in _seq(first.d_base_per_h)],
            sigma_embed=float(first.sigma_embed),
            excluded=int(first.excluded),
            horizons=horizons,
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _seq(x: Any) -> list[float]:
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().tolist()
    if isinstance(x, dict):
        return [float(v) for v in x.values()]
    return [float(v) for v in np.asarray(x).ravel()]


@dataclass
class StepResult:
    """What one ``OnlineLoop.step()`` did. ``metrics`` holds device tensors (no host sync)."""

    step: int  # learner steps done after this one
    metrics: Any  # agent.StepMetrics
    gravity: float
    switched: bool = False  # a switch applied before this step
    block: dict[str, np.ndarray] | None = None  # the flushed block (host arrays), if one was
    evaluation: EvalRecord | None = None
    checkpointed: bool = False


@dataclass
class LiveStats:
    """Host-side figures for a progress bar, updated once per flushed block."""

    window: int
    first_switch: int | None
    last: dict[str, float] = field(default_factory=dict)
    boundaries_before: int = 0
    boundaries_after: int = 0
    recent_error: deque[float] = field(default_factory=deque)
    phase_start: int = 0

    def update(self, steps: np.ndarray, block: dict[str, np.ndarray], phase_starts: list[int]) -> None:
        for i, s in enumerate(steps):
            s = int(s)
            if s in phase_starts:
                self.recent_error.clear()
                self.phase_start = s
            b = block.get("memory/boundary")
            if b is not None and b[i] > 0.5:
                if self.first_switch is not None and s >= self.first_switch:
                    self.boundaries_after += 1
                else:
                    self.boundaries_before += 1
            e = block.get("stream/norm_error")
            if e is not None and np.isfinite(e[i]):
                self.recent_error.append(float(e[i]))
                while len(self.recent_error) > self.window:
                    self.recent_error.popleft()
        self.last = {k: float(v[-1]) for k, v in block.items() if len(v)}

    @property
    def rolling_error(self) -> float:
        return float(np.mean(self.recent_error)) if self.recent_error else math.nan


# -- the loop ----------------------------------------------------------------------------------


class OnlineLoop:
    """One online run in a run folder. Build, then iterate ``steps()`` (or call ``step()``)."""

    def __init__(
        self,
        cfg: RunConfig,
        paths: RunPaths,
        *,
        resume: bool = False,
        stop: StopRequest | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.cfg = cfg
        self.paths = paths
        self.log = log
        self.stop = stop or StopRequest(paths.pause)
        self.device = resolve_device(cfg.device)
        self.store = open_store(cfg.data) if cfg.data else None
        if self.store is not None and cfg.source == "dataset":
            self._check_dataset_switches()
        self.switch_at = {int(s): float(g) for s, g in cfg.switches or ()}
        self.phase_starts = sorted(self.switch_at)
        self.learner = make_learner(cfg, self.device)
        self.vec_env = (
            make_vec_env(cfg, cfg.agent.batch_size) if cfg.source == "stream" else None
        )
        self.source = make_source(cfg, self.device, 0, self.vec_env, self.store)
        self.eval_data = make_eval_data(cfg, self.store)
        self.recorder = Recorder(paths.root)
        self.live = LiveStats(cfg.rolling_window, cfg.first_switch)
        self.pending: list[Any] = []
        self.pending_gravity: list[float] = []
        self.best = math.inf
        self.best_step = -1
        self.elapsed = 0.0  # wall seconds of earlier sessions (resume)
        self.evals: list[EvalRecord] = []
        self._t0 = time.perf_counter()
        self.gravity = cfg.gravity_at(0)
        if resume:
            self._restore()
        else:
            cfg.save(paths.config)

    # -- properties ------------------------------------------------------------------------
    @property
    def step_count(self) -> int:
        return int(self.learner.step)

    @property
    def done(self) -> bool:
        return self.step_count >= self.cfg.steps

    @property
    def wall_time(self) -> float:
        return self.elapsed + time.perf_counter() - self._t0

    @property
    def frozen(self) -> bool:
        fs = self.cfg.first_switch
        return self.cfg.after_switch == "memory" and fs is not None and self.step_count >= fs

    # -- one step --------------------------------------------------------------------------
    def step(self) -> StepResult:
        """Advance one learner update (with the switch, recording, evaluation and checkpoint
        that fall on it) and return what happened."""
        s = self.step_count
        switched = False
        if s in self.switch_at:
            self._apply_world(s)
            switched = True
        batch = self.source.next()
        metrics = self.learner.update(batch)
        self.pending.append(metrics)
        self.pending_gravity.append(self.gravity)
        if self.cfg.record_frames and s % self.cfg.record_frames == 0:
            self._record_frames(s, batch)
        s1 = s + 1
        result = StepResult(step=s1, metrics=metrics, gravity=self.gravity, switched=switched)
        eval_due = s1 % self.cfg.eval_every == 0 or s1 in self.switch_at or s1 == self.cfg.steps
        ckpt_due = s1 % self.cfg.checkpoint_every == 0 or s1 == self.cfg.steps
        if s1 % self.cfg.log_every == 0 or eval_due or ckpt_due or s1 in self.switch_at:
            result.block = self.flush()
        if eval_due:
            result.evaluation = self.evaluate()
        if ckpt_due:
            self.checkpoint()
            result.checkpointed = True
        return result

    def steps(self) -> Iterator[StepResult]:
        """Step until the run is done or a stop is requested (Ctrl-C, SIGTERM, PAUSE file)."""
        while not self.done and not self.stop.requested:
            yield self.step()

    # -- parts of a step -------------------------------------------------------------------
    def _apply_world(self, s: int) -> None:
        """Set the world of step ``s``: gravity, data source, and memory mode's frozen weights."""
        g = self.cfg.gravity_at(s)
        self.gravity = g
        world = 0 if g == self.cfg.base_gravity else 1
        if self.vec_env is not None:
            self.vec_env.set_gravity(g)
            if hasattr(self.source, "set_world"):
                self.source.set_world(world)
        elif self.cfg.source == "dataset":
            self.source = make_source(self.cfg, self.device, world, store=self.store)
        if self.frozen:
            self.learner.freeze_weights()

    def flush(self) -> dict[str, np.ndarray]:
        """Stack the pending metrics (one host sync) and append them to run.zarr."""
        if not self.pending:
            return {}
        from agent.metrics import stack

        block = stack(self.pending)
        n = len(self.pending)
        first = self.step_count - n
        steps = np.arange(first, first + n, dtype=np.int64)
        block["world/gravity"] = np.asarray(self.pending_gravity, np.float32)
        self.recorder.append_metrics(steps, block)
        self.live.update(steps, block, self.phase_starts)
        self.pending.clear()
        self.pending_gravity.clear()
        return block

    def _record_frames(self, s: int, batch: Any) -> None:
        k = len(self.cfg.agent.horizons)
        frames = batch.frames[:, k]  # (B, 1, 64, 64): the newest frame of each stream
        frames = frames.cpu().numpy() if isinstance(frames, torch.Tensor) else np.asarray(frames)
        pos = vel = None
        if self.vec_env is not None:
            state = self._env_state()
            if state is not None:
                pos, vel = state.get("positions"), state.get("velocities")
        self.recorder.append_frames(s, frames, pos, vel, np.full(frames.shape[0], self.gravity))

    def _env_state(self) -> dict[str, Any] | None:
        try:
            st = self.vec_env.get_state()
        except Exception:
            return None
        world = st.get("world", st) if isinstance(st, dict) else None
        return world if isinstance(world, dict) else None

    def adaptation(self, ns: tuple[int, ...]) -> list[Any]:
        """``agent.adaptation_curve`` on the run's evaluation splits (weights and memory untouched)."""
        from agent import adaptation_curve

        return list(adaptation_curve(self.learner, self.eval_data, ns=tuple(sorted(set(ns)))))

    def evaluate(self, ns: tuple[int, ...] | None = None, *, record: bool = True) -> EvalRecord:
        """D_shift^n for n in ``ns`` (default: eval_ns), D_base, sigma_embed; recorded in zarr."""
        results = self.adaptation(tuple(ns or self.cfg.eval_ns))
        rec = EvalRecord.from_results(self.step_count, results, list(self.cfg.agent.horizons))
        if record:
            self.recorder.append_eval(
                rec.step, rec.ns, rec.d_shift, rec.d_shift_per_h, rec.d_base, rec.d_base_per_h,
                rec.sigma_embed, rec.excluded, rec.horizons,
            )
            self.evals.append(rec)
            head = rec.d(self.cfg.headline_n)
            if math.isfinite(head) and head < self.best:
                self.best, self.best_step = head, rec.step
                self._save(self.paths.best)
        return rec

    # -- checkpoints -----------------------------------------------------------------------
    def _extra(self) -> dict[str, Any]:
        return {
            "run_step": self.step_count,
            "best": self.best,
            "best_step": self.best_step,
            "elapsed": self.wall_time,
            "gravity": self.gravity,
            "frozen": self.frozen,
        }

    def _save(self, path: Path) -> None:
        from agent.checkpoint import save_checkpoint

        save_checkpoint(path, self.learner, source=self.source, extra=self._extra())

    def checkpoint(self) -> None:
        """Flush metrics, then write latest.pt atomically (metrics never lag the checkpoint)."""
        self.flush()
        self._save(self.paths.latest)

    def _restore(self) -> None:
        from agent.checkpoint import CheckpointError, load_checkpoint

        s_world = None
        try:
            # The source's world must match the checkpoint's step before its state is loaded.
            probe = load_checkpoint(self.paths.latest, map_location="cpu")
            s_world = int(probe.get("run_step", 0))
        except CheckpointError as err:
            raise CliError(f"cannot resume from {self.paths.latest}: {err}") from None
        if self.cfg.source == "dataset" and self.cfg.gravity_at(max(s_world - 1, 0)) != self.cfg.base_gravity:
            self.source = make_source(self.cfg, self.device, 1, store=self.store)
        try:
            extra = load_checkpoint(
                self.paths.latest, learner=self.learner, source=self.source, map_location=self.device
            )
        except CheckpointError as err:
            raise CliError(f"cannot resume from {self.paths.latest}: {err}") from None
        s = self.step_count
        try:
            self.recorder.truncate(s)
        except RecorderError as err:
            raise CliError(f"cannot resume {self.paths.root}: {err}") from None
        self.best = float(extra.get("best", math.inf))
        self.best_step = int(extra.get("best_step", -1))
        self.elapsed = float(extra.get("elapsed", 0.0))
        # The world of the last step done (a switch at s applies when step s runs).
        self.gravity = self.cfg.gravity_at(max(s - 1, 0)) if s else self.cfg.gravity_at(0)
        if self.vec_env is not None and hasattr(self.vec_env, "physics"):
            # The env's restored state holds its physics (a visualizer may have changed it).
            self.gravity = float(self.vec_env.physics(0).gravity)
        if self.frozen or (self.cfg.first_switch is not None and s > self.cfg.first_switch
                           and self.cfg.after_switch == "memory"):
            self.learner.freeze_weights()
        m = self.recorder.read_metrics()
        if s:
            self.live.update(m["step"], {k: v for k, v in m.items() if k != "step"}, self.phase_starts)
        ev = self.recorder.read_eval()
        for i in range(len(ev.get("step", []))):
            self.evals.append(EvalRecord(
                step=int(ev["step"][i]), ns=[int(n) for n in ev["ns"]],
                d_shift=[float(x) for x in ev["d_shift"][i]],
                d_shift_per_h=ev["d_shift_per_h"][i].tolist(), d_base=float(ev["d_base"][i]),
                d_base_per_h=ev["d_base_per_h"][i].tolist(),
                sigma_embed=float(ev["sigma_embed"][i]), excluded=int(ev["excluded"][i]),
                horizons=[int(h) for h in ev["horizons"]],
            ))
        if self.paths.pause.exists():
            self.paths.pause.unlink()
            self.log(f"removed {self.paths.pause} (it stopped the previous session)")

    def _check_dataset_switches(self) -> None:
        g_shift = split_view(self.store, "shift", "train", str(self.cfg.data)).gravity
        g_base = split_view(self.store, "base", "train", str(self.cfg.data)).gravity
        if g_base != self.cfg.base_gravity:
            raise CliError(
                f"--source dataset: the store's base world has gravity {g_base:g}, "
                f"the run's base gravity is {self.cfg.base_gravity:g}"
            )
        for _, g in self.cfg.switches or ():
            if g not in (g_base, g_shift):
                raise CliError(
                    f"--source dataset: the store holds gravity {g_base:g} and {g_shift:g}; "
                    f"a switch to {g:g} needs the stream source"
                )

    def close(self) -> None:
        """Flush what is pending (no checkpoint)."""
        self.flush()
