"""``python -m benchmarks.profile_loop``: a tiny loop timed and profiled, and bad options refused."""

from __future__ import annotations

import pytest
import torch

from benchmarks import profile_loop


def test_a_tiny_loop_is_timed_and_profiled(capsys: pytest.CaptureFixture[str]) -> None:
    rc = profile_loop.main(["--preset", "tiny", "--protocol", "worlds", "--device", "cpu",
                            "--steps", "3", "--warmup", "2", "--profile"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "tiny preset, worlds protocol, track C, plain step, CPU:" in out
    for line in ("loop step", "feed alone", "update alone", "Self CPU time total"):
        assert line in out


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--warmup", "-1"]])
def test_bad_counts_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert profile_loop.main(["--preset", "tiny", "--device", "cpu", *argv]) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_cuda_without_a_gpu_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert profile_loop.main(["--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
