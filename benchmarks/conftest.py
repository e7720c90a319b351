"""Shared settings and helpers of the throughput suites (``pytest benchmarks --benchmark-only``).

Every benchmark gets the same ``extra_info`` keys (steps_per_s, device, device_name, precision,
torch_threads, batch_size, track, source, ...) so ``benchmarks/make_table.py`` can turn the
``--benchmark-json`` output into the tables of docs/throughput.md. Learner figures are reported as a ratio to
the paper-faithful reference step (``benchmarks/paper_reference.py``) measured in the same run.

Options:
  --device {auto,cpu,cuda}     where to run (auto: cuda when available, else cpu)
  --bench-precision {all,fp32,bf16}
  --bench-tracks A,B,C,D,E     learner tracks to measure
  --bench-steps N              training steps per timed round (default 10)
  --bench-rounds N             timed rounds (default 5); steps/s uses the median round
  --bench-warmup N             untimed warmup rounds (default 2): first-step cost
  --bench-stat {median,min}    round statistic behind steps_per_s and the ratios (min: the best
                               round, steadier on a machine shared with other work)
  --bench-threads N            torch intra-op threads for the whole session (default: torch's)
  --bench-paired               re-measure the reference right before each learner benchmark
                               (ratios from adjacent measurements; slower, for noisy machines)

pytest-benchmark's own --benchmark-timer is honoured everywhere (the reference measurement too):
on a machine shared with other work, `--bench-threads 1 --benchmark-timer time.process_time`
times the CPU this process got rather than the wall clock (an estimate of the quiet machine).
"""

from __future__ import annotations

import importlib
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from benchmarks.paper_reference import (
    TRACKS as REFERENCE_TRACKS,
)
from benchmarks.paper_reference import (
    RefConfig,
    ReferenceTrainer,
    SequenceSampler,
    random_sequences,
)

ALL_TRACKS = ("A", "B", "C", "D", "E")
PRECISIONS = ("fp32", "bf16")
N_SEQUENCES = 256  # sequences of the in-memory dataset the dataset source samples from


def pytest_addoption(parser: pytest.Parser) -> None:
    add = parser.getgroup("epm-jepa benchmarks").addoption
    add("--device", default="auto", choices=("auto", "cpu", "cuda"),
        help="device of the learner benchmarks (auto: cuda when available)")
    add("--bench-precision", default="all", choices=("all", *PRECISIONS),
        help="precision(s) of the learner benchmarks")
    add("--bench-tracks", default=",".join(ALL_TRACKS),
        help="comma-separated learner tracks (default A,B,C,D,E)")
    add("--bench-steps", type=int, default=10, help="steps per timed round")
    add("--bench-rounds", type=int, default=5, help="timed rounds")
    add("--bench-warmup", type=int, default=2, help="untimed warmup rounds")
    add("--bench-stat", default="median", choices=("median", "min"),
        help="round statistic behind steps/s and ratios")
    add("--bench-threads", type=int, default=None,
        help="torch intra-op threads (default: torch's own choice)")
    add("--bench-paired", action="store_true",
        help="measure the reference right before each learner benchmark")
    add("--bench-set", action="append", default=[], metavar="FIELD=VALUE",
        help="end to end: a train_online field for the loop, as a --grid point gives it "
        "(memory_read=all: --memory-read all); repeatable")
    add("--bench-preset", default="paper", choices=("cpu", "gpu", "paper"),
        help="end to end: the loop's run preset (train_online --preset)")
    add("--bench-seeds", default="1,8",
        help="stacked seeds: comma-separated seed counts (benchmarks/test_stacked_speed.py)")
    add("--bench-capture", action="store_true",
        help="end to end: the loop's update as CUDA graphs (train_online --capture; add "
        "--bench-set stream_cache=false)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--device", default="auto") == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda: no CUDA device is available to torch")
    threads = config.getoption("--bench-threads", default=None)
    if threads is not None:
        if threads < 1:
            raise pytest.UsageError("--bench-threads must be >= 1")
        torch.set_num_threads(threads)


# ------------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class BenchSettings:
    device: torch.device
    precisions: tuple[str, ...]
    tracks: tuple[str, ...]
    steps: int
    rounds: int
    warmup: int
    stat: str = "median"
    paired: bool = False
    timer: Callable[[], float] = time.perf_counter
    timer_name: str = "time.perf_counter"
    sets: tuple[str, ...] = ()  # --bench-set FIELD=VALUE: train_online fields of the loop
    capture: bool = False  # --bench-capture: train_online --capture
    preset: str = "paper"  # --bench-preset: train_online --preset of the loop

    def set_args(self) -> list[str]:
        """``sets`` as train_online's options (``stream_cache=false``: ``--no-stream-cache``)."""
        from runners.studies.grid import option_tokens

        out: list[str] = []
        for item in self.sets:
            key, eq, value = item.partition("=")
            if not eq:
                raise pytest.UsageError(f"--bench-set {item!r}: expected FIELD=VALUE")
            out += option_tokens(key, value, "--bench-set")
        return out


@pytest.fixture(scope="session")
def bench(pytestconfig: pytest.Config) -> BenchSettings:
    """The suite's resolved options."""
    want = pytestconfig.getoption("--device")  # cuda without a GPU: refused in pytest_configure
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    prec = pytestconfig.getoption("--bench-precision")
    tracks = tuple(t.strip().upper() for t in pytestconfig.getoption("--bench-tracks").split(","))
    unknown = [t for t in tracks if t not in ALL_TRACKS]
    if unknown:
        raise pytest.UsageError(f"--bench-tracks: unknown track(s) {unknown}")
    steps, rounds, warmup = (
        pytestconfig.getoption(f"--bench-{k}") for k in ("steps", "rounds", "warmup")
    )
    if steps < 1 or rounds < 1 or warmup < 0:
        raise pytest.UsageError("--bench-steps and --bench-rounds must be >= 1, warmup >= 0")
    timer_name = str(pytestconfig.getoption("benchmark_timer", default="time.perf_counter"))
    return BenchSettings(
        torch.device(want),
        PRECISIONS if prec == "all" else (prec,),
        tracks,
        steps,
        rounds,
        warmup,
        pytestconfig.getoption("--bench-stat"),
        pytestconfig.getoption("--bench-paired"),
        _load_timer(timer_name),
        timer_name,
        tuple(pytestconfig.getoption("--bench-set")),
        bool(pytestconfig.getoption("--bench-capture")),
        preset=pytestconfig.getoption("--bench-preset"),
    )


def _load_timer(name: str) -> Callable[[], float]:
    """The callable behind a --benchmark-timer name such as "time.process_time"."""
    module, _, attr = name.rpartition(".")
    if module == "pep418":
        module = "time"
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise pytest.UsageError(f"--benchmark-timer {name}: {e}") from None


def skip_unless_selected(
    bench: BenchSettings, track: str | None = None, precision: str | None = None
) -> None:
    """Skip a parametrised case that --bench-tracks / --bench-precision leave out."""
    if track is not None and track not in bench.tracks:
        pytest.skip(f"track {track} not in --bench-tracks")
    if precision is not None and precision not in bench.precisions:
        pytest.skip(f"precision {precision} not in --bench-precision")


# ----------------------------------------------------------------------------- device details
def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU model from /proc/cpuinfo (platform's fallback elsewhere)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def cpu_features() -> str:
    """The SIMD features that matter for fp32 / bf16 speed on this CPU (Linux only)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    keep = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
                    return " ".join(k for k in keep if k in flags)
    except OSError:
        pass
    return ""


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (the learner does no per-step host sync by design)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@pytest.fixture(scope="session")
def common_info(bench: BenchSettings) -> dict:
    """extra_info keys every benchmark carries."""
    return {
        "device": bench.device.type,
        "device_name": device_name(bench.device),
        "cpu_features": cpu_features(),
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "torch_version": torch.__version__,
        "stat": bench.stat,
        "timer": bench.timer_name,
        "rounds": bench.rounds,
        "warmup_rounds": bench.warmup,
    }


@pytest.fixture(autouse=True)
def _common_extra_info(request: pytest.FixtureRequest):
    """Add the common keys (and a default steps_per_s) to every benchmark's extra_info."""
    if "benchmark" not in request.fixturenames:
        yield
        return
    bm = request.getfixturevalue("benchmark")
    info = request.getfixturevalue("common_info")
    yield
    for key, value in info.items():
        bm.extra_info.setdefault(key, value)
    bm.extra_info.setdefault("loadavg_1m", round(os.getloadavg()[0], 2))
    stats = getattr(bm, "stats", None)
    if stats is not None and "steps_per_s" not in bm.extra_info and stats.stats.median > 0:
        bm.extra_info["steps_per_s"] = 1.0 / stats.stats.median  # one call = one step


# ------------------------------------------------------------------------------------ timing
def _round_fn(step: Callable[[], object], steps: int, device: torch.device) -> Callable[[], None]:
    def one_round() -> None:
        for _ in range(steps):
            step()
        synchronize(device)  # the end of the timed block waits for the device

    return one_round


def _pick(times: list[float], stat: str) -> float:
    return min(times) if stat == "min" else statistics.median(times)


def measure_rate(step: Callable[[], object], bench: BenchSettings) -> float:
    """steps/s of `step` timed by hand, the same protocol as `timed_rate`."""
    one_round = _round_fn(step, bench.steps, bench.device)
    for _ in range(bench.warmup):
        one_round()
    times = []
    for _ in range(bench.rounds):
        t0 = bench.timer()
        one_round()
        times.append(bench.timer() - t0)
    return bench.steps / _pick(times, bench.stat)


def timed_rate(benchmark, step: Callable[[], object], bench: BenchSettings) -> float | None:
    """Time `step` with pytest-benchmark (pedantic: warmup rounds, then rounds of
    --bench-steps steps ending in a device sync). Returns steps/s from the median (or best,
    --bench-stat min) round and records both, or None when benchmarking is disabled."""
    benchmark.pedantic(
        _round_fn(step, bench.steps, bench.device),
        rounds=bench.rounds,
        warmup_rounds=bench.warmup,
        iterations=1,
    )
    stats = getattr(benchmark, "stats", None)
    if stats is None:
        return None
    st = stats.stats
    benchmark.extra_info["steps_per_s_median"] = round(bench.steps / st.median, 4)
    benchmark.extra_info["steps_per_s_best"] = round(bench.steps / st.min, 4)
    return bench.steps / (st.min if bench.stat == "min" else st.median)


def record(benchmark, **info) -> None:
    """Put a benchmark's figures into its extra_info (floats rounded for the JSON)."""
    for key, value in info.items():
        benchmark.extra_info[key] = round(value, 4) if isinstance(value, float) else value


# ------------------------------------------------------------------------------------- data
@pytest.fixture(scope="session")
def base_sequences() -> tuple[np.ndarray, str]:
    """An in-memory base-world dataset (N, 21, 1, 64, 64) uint8 and where it came from:
    env.generate_sequences when the env package provides it, random frames otherwise."""
    try:
        import env

        out = env.generate_sequences(N_SEQUENCES, seed=0, gravity=0.0, split="train")
        return np.ascontiguousarray(out["frames"]), "env.generate_sequences"
    except (ImportError, AttributeError):
        return random_sequences(N_SEQUENCES), "random uint8"


# ---------------------------------------------------------------------------- steady state
def find_buffer(learner):
    """The learner's experience buffer (an object with push/size), or None (track A...)."""
    for path in ("buffer", "memory.buffer", "memory", "mem.buffer"):
        obj = learner
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if obj is not None and hasattr(obj, "push") and hasattr(obj, "size"):
            return obj
    return None


def prefill(learner, n: int, seed: int = 0) -> int:
    """Fill the learner's buffer with n random latent pairs (the steady state of a run);
    returns the buffer size afterwards (0 when the learner has no buffer)."""
    buf = find_buffer(learner)
    if buf is None:
        return 0
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        pair = torch.randn(2, buf.latent_dim, generator=g).to(buf.device)
        buf.push(pair, 0, i, True)
    return int(buf.size)


# -------------------------------------------------------------------------------- reference
def make_reference_step(
    track: str, bench: BenchSettings, frames: np.ndarray
) -> tuple[ReferenceTrainer, Callable[[], object]]:
    """The paper-faithful step for `track` in the steady state of a run: a full buffer and a
    detector past its warmup (see `ReferenceTrainer.prime_detector`)."""
    trainer = ReferenceTrainer(RefConfig(track=track), device=bench.device)
    trainer.prefill(trainer.cfg.buffer_capacity)
    sampler = SequenceSampler(frames, trainer.cfg.batch_size, seed=0)
    trainer.prime_detector(sampler.next())
    return trainer, lambda: trainer.train_step(sampler.next())


def reference_track_for(track: str) -> str:
    """The reference a learner track is compared with (D and E have none: track C's)."""
    return track if track in REFERENCE_TRACKS else "C"


class ReferenceRates:
    """Session cache of the reference step's steps/s per track (measured once per run)."""

    def __init__(self, bench: BenchSettings, frames: np.ndarray):
        self.bench = bench
        self.frames = frames
        self.rates: dict[str, float] = {}

    def set(self, track: str, rate: float) -> None:
        self.rates[track] = rate

    def get(self, track: str, fresh: bool = False) -> float:
        """The rate of `track`'s reference; measured now if not yet (or if `fresh`)."""
        ref = reference_track_for(track)
        if fresh or ref not in self.rates:
            _, step = make_reference_step(ref, self.bench, self.frames)
            self.rates[ref] = measure_rate(step, self.bench)
        return self.rates[ref]


@pytest.fixture(scope="session")
def reference_rates(bench: BenchSettings, base_sequences) -> ReferenceRates:
    return ReferenceRates(bench, base_sequences[0])
