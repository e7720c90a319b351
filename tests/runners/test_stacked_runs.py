"""runners.online.stacked.StackedLoops: two seeds' runs trained as one stack write what each
run alone writes (metrics and evaluations to rounding), cut and resumed too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runners.cli import CliError
from runners.online.rundir import RunFolder
from runners.online.stacked import StackedLoops, open_stacked
from tests.runners.test_loop import WORLDS, open_loop, store_arrays, tiny_config

SEEDS = (3, 4)


def config(seed: int):
    return tiny_config(*WORLDS, "--seed", str(seed), "--precision", "fp32", "--no-stream-cache",
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


def held(root: Path) -> RunFolder:
    folder = RunFolder(root).hold()
    folder.make()
    return folder


def test_stacked_runs_on_one_shared_env_cut_and_resumed_are_the_runs_alone(tmp_path: Path) -> None:
    """``open_stacked`` (the seeds' worlds the blocks of one env, as train_online runs them),
    cut at step 25 and resumed: each run's records are its lone run's."""
    for s in SEEDS:
        alone = open_loop(tmp_path / f"alone-{s}", config(s))
        for _ in alone.steps():
            pass
        alone.close()
    cfgs = [config(s) for s in SEEDS]
    folders = [held(tmp_path / f"cut-{s}") for s in SEEDS]
    stack = open_stacked(cfgs, folders, resume=False, log=lambda _: None)
    while stack.loops[0].step_count < 25:
        stack.step()
    for loop in stack.loops:
        loop.checkpoint()
        loop.folder.release()
    folders = [held(tmp_path / f"cut-{s}") for s in SEEDS]
    stack = open_stacked(cfgs, folders, resume=True, log=lambda _: None)
    while not stack.done:
        stack.step()
    for loop in stack.loops:
        loop.close()
    for s in SEEDS:
        assert_close_records(tmp_path / f"alone-{s}", tmp_path / f"cut-{s}")


def test_runs_that_cannot_stack_are_refused(tmp_path: Path) -> None:
    cached = [open_loop(tmp_path / f"c{s}", tiny_config(*WORLDS, "--seed", str(s),
                                                        protocol="worlds")) for s in SEEDS]  # fmt: skip
    with pytest.raises(CliError, match="stream_cache=false"):
        StackedLoops(cached)
    other = open_loop(tmp_path / "lr", tiny_config(*WORLDS, "--seed", "9", "--precision", "fp32",
                      "--no-stream-cache", "--lr", "0.1", protocol="worlds"))  # fmt: skip
    with pytest.raises(CliError, match="but for the seed"):
        StackedLoops([open_loop(tmp_path / "a", config(1)), other])


def cli_args(out: Path, *extra: str) -> list[str]:
    return ["--protocol", "worlds", "--preset", "tiny", "--steps", "60", "--eval-every", "20",
            "--checkpoint-every", "20", "--set", "log_every=5", "--set", "eval_shift_test=16",
            "--device", "cpu", "--precision", "fp32", "--no-bounds", "--no-stream-cache",
            *WORLDS, "--out", str(out), *extra]  # fmt: skip


def test_train_online_stacks_seeds_into_their_own_run_folders(tmp_path: Path) -> None:
    """``train_online --stack-seeds``: each seed's folder holds its lone run's records and a
    finished summary; ``--resume`` of any of the folders continues the whole set."""
    import json

    from runners import train_online

    for s in SEEDS:
        assert train_online.main(cli_args(tmp_path / "alone", "--seed", str(s), "--name", f"r-s{s}")) == 0
    argv = cli_args(tmp_path / "stacked", "--seed", str(SEEDS[0]), "--name", "r",
                    "--stack-seeds", *map(str, SEEDS[1:]))  # fmt: skip
    assert train_online.main(argv) == 0
    names = {s: f"r-s{s}" for s in SEEDS}
    for s, name in names.items():
        root = tmp_path / "stacked" / name
        assert json.loads((root / "summary.json").read_text())["stopped"] is None
        assert json.loads((root / "stack.json").read_text()) == {"runs": list(names.values())}
        assert_close_records(tmp_path / "alone" / f"r-s{s}", root)
    # Resumed from the second folder with more steps: both runs go on together.
    assert train_online.main(["--resume", str(tmp_path / "stacked" / names[SEEDS[1]]),
                              "--steps", "70"]) == 0  # fmt: skip
    for name in names.values():
        m = store_arrays(tmp_path / "stacked" / name)["m:step"]
        np.testing.assert_array_equal(m, np.arange(70))
    with pytest.raises(CliError, match="--no-stream-cache"):
        train_online.main([*cli_args(tmp_path / "x", "--stack-seeds", "9"), "--stream-cache"])  # fmt: skip
    with pytest.raises(CliError, match="every seed once"):
        train_online.main(cli_args(tmp_path / "x", "--seed", "2", "--stack-seeds", "2"))
