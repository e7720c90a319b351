"""runners.cli.parse: every command's options from its dataclass (tyro); bad input is one line
``<prog>: error: <message>`` and exit status 2, ``--help`` lists the options and exits 0."""

from __future__ import annotations

import importlib
import subprocess
import sys
from dataclasses import dataclass

import pytest
from cli_helpers import ROOT, cli

from runners.cli import CliError, parse, run_main


@pytest.mark.parametrize(
    ("module", "argv", "message"),
    [
        ("make_dataset", [], "--out is required"),
        ("make_dataset", ["--out", "x.zarr", "--seed", "q"], "--seed expects INT: invalid literal for int() with base 10: 'q'"),
        # the nested env.PaperDatasetConfig's own validation, on the parsed values
        ("make_dataset", ["--out", "x.zarr", "--seed", "-1"], "seed must be a non-negative integer"),
        ("make_dataset", ["--out", "x.zarr", "--base-sequences", "2"], "base_sequences must be"),
        ("evaluate", [], "RUN_DIR_OR_CHECKPOINT is required"),
        ("evaluate", ["run", "--device", "gpu"], "--device: expected one of 'auto', 'cpu', 'cuda'"),
        ("evaluate", ["run", "--n"], "--n: one or more memory sizes"),
        ("visualize", ["--protocol", "foo"], "--protocol: expected one of"),
        ("visualize", ["--switch", "10:x"], "--switch '10:x': gravity must be a number"),
        ("visualize", ["--no-such-option"], "unknown option(s): --no-such-option"),
        ("study", [], "KIND: expected one of 'worlds', 'paper', 'sweep'"),
        ("study", ["repro"], "KIND: expected one of 'worlds', 'paper', 'sweep', got 'repro'"),
        ("study", ["sweep", "--backend", "foo"], "--backend: expected one of 'local', 'ray', got 'foo'"),
        ("study", ["sweep", "--workers", "x"], "--workers expects INT: no type matching INT"),
        ("study", ["sweep", "--grid"], "--grid needs at least one value"),
        ("study", ["paper", "--seeds"], "--seeds needs at least one value"),
        ("study", ["paper", "--freeze-steps", "1"], "--freeze-steps"),
        ("study", ["worlds", "--oracle-track", "A"], "--oracle-track: expected one of"),
        ("study", ["worlds", "--tracks", "F"], "--tracks: expected one of 'A', 'B', 'C', 'D', 'E'"),
        ("train_online", ["--capture"], "--capture: the step cannot run the stream latent cache"),
        ("train_online", ["--protocol", "paper", "--stack-seeds", "1"],
         "--stack-seeds: stacked seeds run the worlds protocol"),
    ],
)
def test_bad_command_line_is_one_line_exit_2(monkeypatch, capsys, module, argv, message):
    mod = importlib.import_module(f"runners.{module}")
    prog = f"python -m runners.{module}"
    monkeypatch.setattr(sys, "argv", [prog, *argv])
    with pytest.raises(SystemExit) as info:
        run_main(mod.main, prog)
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert err.startswith(f"{prog}: error: ") and err.count("\n") == 1, err
    assert message in err and "Traceback" not in err and "╭" not in err


@pytest.mark.parametrize(
    ("module", "option"),
    [("make_dataset", "--shift-gravity"), ("evaluate", "--target-reference"),
     ("visualize", "--from RUN_DIR"), ("study sweep", "--in-process"),
     ("study paper", "--ablations"), ("study worlds", "--oracle-track")],
)
def test_help_lists_the_options_and_exits_0(module, option):
    res = cli(*module.split(), "--help")
    assert res.returncode == 0, res.stderr
    assert option in res.stdout and "--out" in res.stdout


def test_the_studys_help_lists_its_kinds_and_exits_0():
    res = cli("study", "--help")
    assert res.returncode == 0, res.stderr
    assert all(f"\n  {kind} " in res.stdout for kind in ("worlds", "paper", "sweep"))
    assert "gravity" not in res.stdout  # removed in issue 74: a kind no more


def test_help_read_in_part_is_no_error():
    """``--help | head``: the reader closes the pipe (here before the command writes: it starts
    up for seconds); the command exits 0, saying nothing."""
    proc = subprocess.Popen([sys.executable, "-m", "runners.train_online", "--help"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr is not None and proc.stderr.read() == b""


def test_bad_option_in_a_subprocess_is_one_line():
    res = cli("study", "paper", "--steps", "many")
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        "python -m runners.study paper: error: --steps expects INT: invalid literal for int() "
        "with base 10: 'many'"]


@dataclass
class _Options:
    seeds: tuple[int, ...] = (1, 2)
    dry_run: bool = False


def test_parse_passes_unknown_options_on_in_order():
    opts, extra = parse(_Options, ["--preset", "tiny", "--dry-run", "--eval-ns", "1", "2",
                                   "--seeds", "3"], "p", unknown=True)
    assert opts == _Options(seeds=(3,), dry_run=True)
    assert extra == ["--preset", "tiny", "--eval-ns", "1", "2"]
    assert parse(_Options, ["--", "--steps", "5"], "p", unknown=True)[1] == ["--steps", "5"]
    with pytest.raises(CliError, match="unknown option"):
        parse(_Options, ["--steps", "5"], "p")
    with pytest.raises(CliError, match=r"unknown option\(s\): yes"):  # a flag takes no value
        parse(_Options, ["--dry-run", "yes"], "p")


def test_the_progress_bar_into_a_log_is_lines_without_carriage_returns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Into a file or a pipe (not a terminal) each refresh of train_online's bar is a line of
    its own: a log holds no carriage returns."""
    from runners.online.job import progress_bar

    bar = progress_bar(50, 10)
    for _ in range(40):
        bar.update(1)
    bar.close()
    out = capsys.readouterr().out
    assert "\r" not in out and out.endswith("\n")
    lines = out.splitlines()
    assert lines[0].startswith("step:  20%") and lines[-1].startswith("step: 100%")
