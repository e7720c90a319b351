"""Stacked seeds: seed-steps/s of `agent.stacked.StackedLearner.update` (S seeds of the worlds
protocol's learner trained as one) against S plain `Learner.update`s one after another, in the
same process, on batches drawn beforehand from each seed's own stream (the learner alone: the
worlds' feed is not in the timing).

    pytest benchmarks/test_stacked_speed.py --benchmark-only --bench-seeds 1,8 --bench-preset cpu
    pytest benchmarks/test_stacked_speed.py --benchmark-only --device cuda --bench-seeds 1,16,64

A round is ``--bench-steps`` updates of all S seeds; seed-steps/s = S x updates/s. The learner
is `train_online --protocol worlds --preset P`'s (its precision the device's default), track
C unless ``--bench-tracks`` names others.
"""

from __future__ import annotations

import pytest

from agent import Learner, StreamSource
from agent.speed import Speed
from agent.stacked import StackedLearner
from benchmarks.conftest import BenchSettings, record, skip_unless_selected, timed_rate
from runners.online.command import build_config

BATCHES = 8  # distinct batches per seed, cycled (the learner's time does not depend on them)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per seed count of --bench-seeds."""
    if "seeds" in metafunc.fixturenames:
        raw = metafunc.config.getoption("--bench-seeds")
        try:
            counts = [int(x) for x in raw.split(",")]
        except ValueError:
            raise pytest.UsageError(f"--bench-seeds: comma-separated counts, got {raw!r}") from None
        if any(n < 1 for n in counts):
            raise pytest.UsageError(f"--bench-seeds: counts must be >= 1, got {raw!r}")
        metafunc.parametrize("seeds", counts)


def seed_batches(cfg, device, n: int) -> list:
    import env

    vec = env.MovingMNISTVectorEnv(cfg.batch_size, max_episode_steps=None)
    sched = env.WorldSchedule(vec, "train", episode_steps=(100, 400), seed=cfg.seed,
                              group_size=cfg.group_size)  # fmt: skip
    source = StreamSource(sched, cfg, device=device, seed=cfg.seed)
    return [source.next() for _ in range(n)]


@pytest.mark.parametrize("track", ["A", "C"])
@pytest.mark.parametrize("mode", ["stacked", "one by one"])
def test_stacked_seeds(
    benchmark, bench: BenchSettings, track: str, mode: str, seeds: int
) -> None:
    skip_unless_selected(bench, track)
    base = build_config(["--protocol", "worlds", "--preset", bench.preset, "--track", track,
                         "--device", bench.device.type, "--set", "stream_cache=false"])  # fmt: skip
    cfgs = [base.agent.replace(seed=s) for s in range(seeds)]
    data = [seed_batches(c, bench.device, BATCHES) for c in cfgs]
    turn = iter(range(10**12))
    if mode == "stacked":
        learner = StackedLearner(cfgs, bench.device)

        def step() -> None:
            i = next(turn) % BATCHES
            learner.update([d[i] for d in data])
    else:
        learners = [Learner(c, bench.device, speed=Speed()) for c in cfgs]

        def step() -> None:
            i = next(turn) % BATCHES
            for one, d in zip(learners, data, strict=True):
                one.update(d[i])

    rate = timed_rate(benchmark, step, bench)
    record(
        benchmark,
        kind="stacked",
        mode=mode,
        track=track,
        seeds=seeds,
        preset=bench.preset,
        precision=cfgs[0].precision,
        batch_size=cfgs[0].batch_size,
        updates_per_s=rate,
        seed_steps_per_s=None if rate is None else rate * seeds,
    )
    if rate is not None:
        print(f"\n{mode}, track {track}, {seeds} seeds, {bench.preset} preset: "
              f"{rate * seeds:,.0f} seed-steps/s ({rate:,.1f} updates/s)")  # fmt: skip
