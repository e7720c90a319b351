"""runners.online.stacked.StackedLoops: two seeds' runs trained as one stack write what each
run alone writes (metrics and evaluations to rounding), cut and resumed too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runners.cli import CliError
from runners.online.stacked import StackedLoops
from tests.runners.test_loop import WORLDS, open_loop, store_arrays, tiny_config

SEEDS = (3, 4)


def config(seed: int):
    return tiny_config(*WORLDS, "--seed", str(seed), "--precision", "fp32", "--set", "stream_cache=false",
                       protocol="worlds")  # fmt: skip


def assert_close_records(one: Path, other: Path) -> None:
    a, b = store_arrays(one), store_arrays(other)
    assert sorted(a) == sorted(b) and len(a["m:step"]) == 60
    for k in a:
        if a[k].dtype.kind in "fc":
            np.testing.assert_allclose(b[k], a[k], rtol=1e-4, atol=1e-5, err_msg=k)
        else:
            np.testing.assert_array_equal(b[k], a[k], err_msg=k)


def test_stacked_runs_write_what_each_run_alone_writes(tmp_path: Path) -> None:
    for s in SEEDS:
        alone = open_loop(tmp_path / f"alone-{s}", config(s))
        for _ in alone.steps():
            pass
        alone.close()
    loops = [open_loop(tmp_path / f"stacked-{s}", config(s)) for s in SEEDS]
    stack = StackedLoops(loops)
    while not stack.done:
        stack.step()
    stack.sync()
    for loop in loops:
        loop.close()
    for s in SEEDS:
        assert_close_records(tmp_path / f"alone-{s}", tmp_path / f"stacked-{s}")


def test_stacked_runs_cut_and_resumed_go_on_as_uncut(tmp_path: Path) -> None:
    loops = [open_loop(tmp_path / f"whole-{s}", config(s)) for s in SEEDS]
    stack = StackedLoops(loops)
    while not stack.done:
        stack.step()
    for loop in loops:
        loop.close()
    cut = [open_loop(tmp_path / f"cut-{s}", config(s)) for s in SEEDS]
    stack = StackedLoops(cut)
    while cut[0].step_count < 25:
        stack.step()
    for loop in cut:
        loop.checkpoint()
        loop.folder.release()
    again = [open_loop(tmp_path / f"cut-{s}", config(s), resume=True) for s in SEEDS]
    stack = StackedLoops(again)
    while not stack.done:
        stack.step()
    for loop in again:
        loop.close()
    for s in SEEDS:
        assert_close_records(tmp_path / f"whole-{s}", tmp_path / f"cut-{s}")


def test_runs_that_cannot_stack_are_refused(tmp_path: Path) -> None:
    cached = [open_loop(tmp_path / f"c{s}", tiny_config(*WORLDS, "--seed", str(s),
                                                        protocol="worlds")) for s in SEEDS]  # fmt: skip
    with pytest.raises(CliError, match="stream_cache=false"):
        StackedLoops(cached)
    other = open_loop(tmp_path / "lr", tiny_config(*WORLDS, "--seed", "9", "--precision", "fp32",
                      "--set", "stream_cache=false", "lr=0.1", protocol="worlds"))  # fmt: skip
    with pytest.raises(CliError, match="but for the seed"):
        StackedLoops([open_loop(tmp_path / "a", config(1)), other])
