"""Stacked seeds: seed-steps/s of S seeds of the worlds protocol's learner trained as one
(`agent.stacked.StackedLearner`, fed by one `StreamSource` over the seeds' blocks of one shared
env: `env.blocks`) against the same S seeds one after another in the same process (S plain
`Learner`s, S lone envs and sources). Both include their worlds' feed; on a GPU the worlds live
on the device.

    pytest benchmarks/test_stacked_speed.py --benchmark-only --bench-seeds 1,8 --bench-preset cpu
    pytest benchmarks/test_stacked_speed.py --benchmark-only --device cuda --bench-seeds 1,16,64

A round is ``--bench-steps`` steps of all S seeds; seed-steps/s = S x steps/s. The learner is
`train_online --protocol worlds --preset P`'s (its precision the device's default), with the
stream latent cache off (the stack recomputes, as a captured step does), track C unless
``--bench-tracks`` names others; ``--bench-capture``: both from CUDA graphs (``agent.capture``).
"""

from __future__ import annotations

import pytest

import env
from agent import Learner, StreamSource
from agent.stacked import StackedLearner
from benchmarks.conftest import BenchSettings, record, skip_unless_selected, timed_rate
from env.blocks import SharedWorlds
from runners.online.command import build_config


def schedule(vec, cfg) -> env.WorldSchedule:
    return env.WorldSchedule(vec, "train", episode_steps=(100, 400), seed=cfg.seed,
                             group_size=cfg.group_size)  # fmt: skip


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


@pytest.mark.parametrize("track", ["A", "C"])
@pytest.mark.parametrize("mode", ["stacked", "one by one"])
def test_stacked_seeds(
    benchmark, bench: BenchSettings, track: str, mode: str, seeds: int
) -> None:
    skip_unless_selected(bench, track)
    base = build_config(["--protocol", "worlds", "--preset", bench.preset, "--track", track,
                         "--device", bench.device.type, "--no-stream-cache"])  # fmt: skip
    cfgs = [base.agent.replace(seed=s) for s in range(seeds)]
    world = bench.device if bench.device.type == "cuda" else None  # numpy on a CPU
    b = cfgs[0].batch_size
    if mode == "stacked":
        shared = SharedWorlds(env.MovingMNISTVectorEnv(seeds * b, max_episode_steps=None,
                                                       device=world), seeds)  # fmt: skip
        blocks = [StreamSource(schedule(blk, c), c, bench.device, seed=c.seed)
                  for blk, c in zip(shared.blocks, cfgs, strict=True)]  # fmt: skip
        StreamSource.start_together(blocks)  # the blocks step together
        learner = StackedLearner(cfgs, bench.device, bench.capture)

        def step() -> None:
            learner.update([src.next() for src in blocks])
    else:
        sources = [StreamSource(schedule(env.MovingMNISTVectorEnv(b, max_episode_steps=None,
                                                                  device=world), c),
                                c, bench.device, seed=c.seed) for c in cfgs]  # fmt: skip
        learners = [Learner(c, bench.device, captured=bench.capture) for c in cfgs]

        def step() -> None:
            for one, src in zip(learners, sources, strict=True):
                one.update(src.next())

    rate = timed_rate(benchmark, step, bench)
    record(
        benchmark,
        kind="stacked",
        label=f"{seeds} seeds of the worlds learner, {mode} ({bench.preset} preset)",
        steps_per_s=None if rate is None else rate * seeds,  # make_table's rate column
        unit="seed-steps/s",
        mode=mode,
        track=track,
        seeds=seeds,
        preset=bench.preset,
        precision=cfgs[0].precision,
        batch_size=cfgs[0].batch_size,
        updates_per_s=rate,
        seed_steps_per_s=None if rate is None else rate * seeds,
        capture=bench.capture,
    )
    if rate is not None:
        how = " (captured)" * bench.capture
        print(f"\n{mode}{how}, track {track}, {seeds} seeds, "
              f"{bench.preset} preset: "
              f"{rate * seeds:,.0f} seed-steps/s ({rate:,.1f} updates/s)")  # fmt: skip
