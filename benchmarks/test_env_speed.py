"""Env throughput: the 64-env vector env (frames/s, target >= 150,000 on one core), a single
env through ``gymnasium.make`` (steps/s), and the vector env with its worlds on the suite's
device (``env.device``: what a GPU run streams from; frames/s, nothing read back per step).

    python -m pytest benchmarks/test_env_speed.py --benchmark-only [--device cuda]

The numpy ones run pinned to one CPU core (where the OS allows it) with one numpy/torch thread:
rendering is numpy, and the figure is meant to be comparable across machines per core.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

import env  # noqa: F401  (registers MovingMNIST-v0)
from benchmarks.conftest import BenchSettings, synchronize

NUM_ENVS = 64
VECTOR_STEPS = 200
SINGLE_STEPS = 2000
TARGET_FRAMES_PER_S = 150_000


@pytest.fixture
def one_core() -> Iterator[int]:
    """Pin this process to one core and torch to one thread for the benchmark; restore after."""
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if affinity:
        os.sched_setaffinity(0, {min(affinity)})
    try:
        import torch

        torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)
    except ImportError:  # torch is not needed by the env
        torch, torch_threads = None, 0
    try:
        yield 1
    finally:
        if affinity:
            os.sched_setaffinity(0, affinity)
        if torch is not None:
            torch.set_num_threads(torch_threads)


def test_vector_env_frames_per_s(benchmark, one_core):
    envs = gym.make_vec("MovingMNIST-v0", num_envs=NUM_ENVS)  # default: 21-frame episodes
    envs.reset(seed=0)
    actions = np.zeros(NUM_ENVS, dtype=np.int64)

    def run() -> None:
        for _ in range(VECTOR_STEPS):
            envs.step(actions)

    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    if benchmark.stats is None:  # --benchmark-disable: run once as a smoke test, time nothing
        return
    best, median = benchmark.stats.stats.min, benchmark.stats.stats.median
    frames_per_s = NUM_ENVS * VECTOR_STEPS / best
    benchmark.extra_info.update(
        {
            "frames_per_s": round(frames_per_s),
            "frames_per_s_median": round(NUM_ENVS * VECTOR_STEPS / median),
            "steps_per_s": round(VECTOR_STEPS / best, 1),  # vector steps (64 frames each)
            "num_envs": NUM_ENVS,
            "threads": one_core,
            "torch_threads": one_core,
        }
    )
    print(f"\nvector env: {frames_per_s:,.0f} frames/s ({NUM_ENVS} envs, best round, 1 core)")
    assert frames_per_s >= TARGET_FRAMES_PER_S


def test_single_env_steps_per_s(benchmark, one_core):
    e = gym.make("MovingMNIST-v0")  # with Gymnasium's default wrappers, as a user gets it
    e.reset(seed=0)

    def run() -> None:
        truncated = False
        for _ in range(SINGLE_STEPS):
            if truncated:
                e.reset()
            _, _, _, truncated, _ = e.step(0)

    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    if benchmark.stats is None:  # --benchmark-disable
        return
    steps_per_s = SINGLE_STEPS / benchmark.stats.stats.min
    benchmark.extra_info.update(
        {
            "steps_per_s": round(steps_per_s),
            "steps_per_s_median": round(SINGLE_STEPS / benchmark.stats.stats.median),
            "frames_per_s": round(steps_per_s),
            "threads": one_core,
            "torch_threads": one_core,
        }
    )
    print(f"\nsingle env via gymnasium.make: {steps_per_s:,.0f} steps/s (1 core)")


def test_vector_env_on_the_device_frames_per_s(benchmark, bench: BenchSettings):
    """The 64 worlds stepped and rendered as tensors on ``--device`` (on a CPU: torch's kernels
    on the CPU's threads, slower than numpy there; the runs use it on a GPU only)."""
    envs = env.MovingMNISTVectorEnv(NUM_ENVS, max_episode_steps=20, device=bench.device)
    envs.reset(seed=0)

    def run() -> None:
        for _ in range(VECTOR_STEPS):
            envs.step()
        synchronize(bench.device)

    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    if benchmark.stats is None:  # --benchmark-disable
        return
    frames_per_s = NUM_ENVS * VECTOR_STEPS / benchmark.stats.stats.min
    benchmark.extra_info.update({
        "frames_per_s": round(frames_per_s),
        "frames_per_s_median": round(NUM_ENVS * VECTOR_STEPS / benchmark.stats.stats.median),
        "steps_per_s": round(VECTOR_STEPS / benchmark.stats.stats.min, 1),
        "num_envs": NUM_ENVS,
    })  # fmt: skip
    print(f"\nvector env on {bench.device}: {frames_per_s:,.0f} frames/s ({NUM_ENVS} envs)")
