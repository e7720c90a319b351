"""End to end: steps/s of the online loop (`runners.online.loop.OnlineLoop.step()`: env, source,
learner, memory, metric recording into run.zarr) and its ratio to learner-only `update()` on the
same config, measured right before it in the same test.

    pytest benchmarks/test_loop_speed.py --benchmark-only

Evaluation and checkpoints are pushed out of the timed window (they are periodic costs, not the
per-step rate; their cost is measured separately by the default run's wall time). Each timed
round is a whole number of metric blocks (`log_every` steps), so the block flush (one host sync
and one zarr append) is counted at its true rate. `paper` is the paper's config (batch 64);
`tiny` is train_online's default preset.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from agent import Learner, StreamSource
from benchmarks.conftest import (
    BenchSettings,
    ReferenceRates,
    measure_rate,
    record,
    skip_unless_selected,
    timed_rate,
)
from env import MovingMNISTVectorEnv
from runners.online.config import RunConfig, resolve
from runners.online.loop import OnlineLoop
from runners.online.rundir import RunFolder

PRESETS = ("paper", "tiny")
PRECISIONS = ("fp32", "bf16")
NEVER = 10**9  # a step the benchmark never reaches (no evaluation / checkpoint inside it)


def make_loop(tmp_path, bench: BenchSettings, preset: str, precision: str, track: str = "C"):
    cfg = RunConfig(
        protocol="paper",  # the learner-only rate below drives the same single-world stream
        steps=NEVER,
        switches=(),
        preset=preset,
        track=track,
        precision=precision,
        device=bench.device.type,
        eval_every=NEVER,
        checkpoint_every=NEVER,
        eval_shift_train=8,
        eval_shift_test=8,
        eval_base_test=8,
        source="stream",
    )
    cfg = resolve(cfg)
    root = tmp_path / f"run-{preset}-{precision}"
    root.mkdir()
    folder = RunFolder(root)
    folder.make()
    return OnlineLoop.open(cfg, folder, log=lambda msg: None), cfg


def learner_only_rate(cfg, bench: BenchSettings, steps: int) -> float:
    """`learner.update(stream.next())` on the loop's own agent config, same timing protocol."""
    learner = Learner(cfg.agent, device=bench.device)
    vec = MovingMNISTVectorEnv(
        cfg.agent.batch_size, gravity=cfg.base_gravity, max_episode_steps=cfg.episode_length
    )
    src = StreamSource(vec, cfg.agent, bench.device)
    return measure_rate(lambda: learner.update(src.next()), replace(bench, steps=steps))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("preset", PRESETS)
def test_online_loop(
    benchmark,
    bench: BenchSettings,
    reference_rates: ReferenceRates,
    tmp_path,
    preset: str,
    precision: str,
) -> None:
    skip_unless_selected(bench, "C", precision)
    loop, cfg = make_loop(tmp_path, bench, preset, precision)
    block = cfg.log_every
    steps = block * max(1, math.ceil(bench.steps / block))  # whole metric blocks per round
    learner_rate = learner_only_rate(cfg, bench, steps)
    rate = timed_rate(benchmark, loop.step, replace(bench, steps=steps))
    ref = reference_rates.get("C") if rate is not None and preset == "paper" else None
    loop.close()
    record(
        benchmark,
        kind="loop",
        label=f"`train_online` loop ({preset})",
        track="C",
        source="stream",
        precision=precision,
        batch_size=cfg.agent.batch_size,
        preset=preset,
        steps_per_s=rate,
        learner_only_steps_per_s=learner_rate,
        ratio_to_learner=(rate / learner_rate) if rate else None,
        ratio_to_reference=(rate / ref) if rate and ref else None,
        reference_track="C",
        steps_per_round=steps,
        log_every=block,
    )
