"""End to end: steps/s of what users run, `python -m runners.train_online`'s loop
(`OnlineLoop.step()`: env or store, source, learner, memory, metric blocks appended to
`run.zarr`), at the paper preset (``--bench-preset`` for another), against the paper-faithful reference step
(`benchmarks/paper_reference.py`) timed in the same rounds of the same process.

    pytest benchmarks/test_end_to_end.py --benchmark-only --bench-threads 1 --benchmark-json e2e.json
    python -m benchmarks.make_table e2e.json --kinds e2e

Threads: ``--bench-threads 1`` is what ``train_online`` runs by default (one torch thread);
``--bench-threads 2`` spreads each op over two cores on both sides. Without the option, torch's
default (all cores).

Cases: the paper protocol from the live stream and from a stored dataset (`--source dataset`),
and the worlds protocol (the default protocol; stream only), tracks A and C, fp32 and bf16. The
`precision` column marks the one the run picks by default on this device (from `--device`).

Pairing: every timed round of the loop is preceded by a round of the reference (pytest-benchmark's
`setup`), so both see the same machine at the same moment; `x reference` is the ratio of their
median (or, `--bench-stat min`, best) rounds. A round is a whole number of metric blocks
(`log_every` steps), so the block flush counts at its true rate. Evaluations and checkpoints are
periodic, not per step, and stay outside the rounds (docs/throughput.md's whole-run wall times count them).

Steady state, as the reference's (a full buffer): the paper protocol's global buffer is filled
with random pairs; the worlds protocol's per-stream memories are grown by `buffer_capacity`
untimed steps of the stream itself (they fill over each episode and empty at the next).
"""

from __future__ import annotations

import math
import statistics

import pytest

from agent import preferred_precision
from benchmarks.conftest import (
    BenchSettings,
    make_reference_step,
    prefill,
    record,
    skip_unless_selected,
    synchronize,
)
from runners.online.command import build_config
from runners.online.loop import OnlineLoop
from runners.online.rundir import RunFolder

CASES = (("paper", "stream"), ("paper", "dataset"), ("worlds", "stream"))
TRACKS = ("A", "C")
PRECISIONS = ("fp32", "bf16")
NEVER = 10**9  # a step the benchmark never reaches (no evaluation / checkpoint inside it)


@pytest.fixture(scope="session")
def paper_store(tmp_path_factory) -> str:
    """A small paper dataset store (the dataset source samples its base train split)."""
    from env import PaperDatasetConfig, write_dataset

    path = tmp_path_factory.mktemp("e2e") / "paper.zarr"
    write_dataset(path, PaperDatasetConfig(seed=0, base_sequences=320, shift_sequences=40))
    return str(path)


def make_loop(
    tmp_path,
    bench: BenchSettings,
    protocol: str,
    source: str,
    track: str,
    precision: str,
    data: str | None,
) -> OnlineLoop:
    own = (["--eval-worlds", "2", "--eval-world-seqs", "4", "--base-worlds", "1",
            "--base-world-seqs", "4"] if protocol == "worlds" else
           ["--source", source, "--data", str(data), "--set", "eval_shift_train=8",
            "--set", "eval_base_test=8"])
    cfg = build_config([
        "--protocol", protocol, "--steps", str(NEVER), "--no-switch", "--preset", bench.preset,
        "--track", track, "--precision", precision, "--device", bench.device.type,
        "--eval-every", str(NEVER), "--checkpoint-every", str(NEVER), "--set", "eval_shift_test=8",
        *own, *bench.set_args(),
        *(["--capture"] if bench.capture else []),
    ])
    root = tmp_path / f"run-{protocol}-{source}-{track}-{precision}"
    root.mkdir()
    folder = RunFolder(root)
    folder.make()
    return OnlineLoop.open(cfg, folder, log=lambda msg: None)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("track", TRACKS)
@pytest.mark.parametrize(("protocol", "source"), CASES, ids=[f"{p}-{s}" for p, s in CASES])
def test_train_online_loop(
    benchmark, bench: BenchSettings, base_sequences, paper_store: str, tmp_path,
    protocol: str, source: str, track: str, precision: str,
) -> None:  # fmt: skip
    skip_unless_selected(bench, track, precision)
    data = paper_store if source == "dataset" else None
    loop = make_loop(tmp_path, bench, protocol, source, track, precision, data)
    cfg = loop.cfg.agent
    if protocol == "paper":
        prefill(loop.learner, cfg.buffer_capacity)
    else:  # per-stream / group memories: grown by the stream itself (a smoke run: one block)
        grow = track != "A" and not getattr(benchmark, "disabled", False)
        for _ in range(cfg.buffer_capacity if grow else loop.cfg.schedule.log_every):
            loop.step()
    _, ref_step = make_reference_step(track, bench, base_sequences[0])

    block = loop.cfg.schedule.log_every
    steps = block * max(1, math.ceil(bench.steps / block))  # whole metric blocks per round
    ref_times: list[float] = []

    def reference_round() -> None:  # untimed by pytest-benchmark: timed here, before each round
        t0 = bench.timer()
        for _ in range(steps):
            ref_step()
        synchronize(bench.device)
        ref_times.append(bench.timer() - t0)

    def loop_round() -> None:
        for _ in range(steps):
            loop.step()
        synchronize(bench.device)

    benchmark.pedantic(
        loop_round, setup=reference_round, rounds=bench.rounds, warmup_rounds=bench.warmup,
        iterations=1,
    )  # fmt: skip
    loop.close()
    stats = getattr(benchmark, "stats", None)
    rate = ref_rate = None
    if stats is not None:  # None under --benchmark-disable (a smoke run: nothing to read)
        pick = min if bench.stat == "min" else statistics.median
        rate = steps / pick(stats.stats.data)
        ref_rate = steps / pick(ref_times[-bench.rounds :])
    record(
        benchmark, kind="e2e", label=f"`train_online` loop, {protocol} protocol",
        protocol=protocol, track=track, source=source, precision=precision,
        default_precision=precision == preferred_precision(bench.device.type),
        batch_size=cfg.batch_size, steps_per_s=rate, reference_steps_per_s=ref_rate,
        reference_track=track,
        ratio_to_reference=(rate / ref_rate) if rate and ref_rate else None,
        steps_per_round=steps, log_every=block, stream_cache=cfg.stream_cache,
        memory_scope=cfg.memory_scope, group_size=cfg.group_size, bench_set=list(bench.sets),
        capture=bench.capture, preset=bench.preset,
    )  # fmt: skip
