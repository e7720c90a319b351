"""The probes' ceiling (``probes.ceiling``): the readers give what they say, the probes read the
move from exact positions far better than from noisy ones, the same numbers every time, and the
command prints its table (with a run's latents beside) or refuses bad input in one line."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agent import AgentConfig, Learner, save_checkpoint
from agent.config import TINY
from probes.ceiling import Reader, ceiling, sequences
from probes.digits import ProbeSet


@pytest.fixture(scope="module")
def sets() -> tuple[list[ProbeSet], list[ProbeSet]]:
    return sequences("train", 8, 12, 40, [3, 0]), sequences("extrap", 2, 12, 40, [3, 1])


def test_readers_render_round_add_noise_and_sort(sets) -> None:
    pos = sets[0][0].positions  # (12, 40, 2 digits, 2)
    rng = np.random.default_rng(0)
    assert np.array_equal(Reader(rendered=False).read(pos, rng), pos.reshape(12, 40, 4))
    drawn = Reader().read(pos, rng)
    assert np.array_equal(drawn, np.clip(np.rint(pos), 0, 36).reshape(12, 40, 4))
    assert np.abs(drawn - pos.reshape(12, 40, 4)).max() <= 0.5 + 1e-6  # the digits stay inside
    noisy = Reader(sigma=2.0).read(pos, np.random.default_rng(1))
    assert abs(np.std(noisy - drawn) - 2.0) < 0.1
    s = Reader(sorted=True).read(pos, rng).reshape(12, 40, 2, 2)
    assert np.all(np.diff(s, axis=2) >= 0)  # each frame's x, then y, in order
    assert np.array_equal(np.sort(s, axis=2), np.sort(drawn.reshape(12, 40, 2, 2), axis=2))


def test_the_move_is_read_from_exact_positions_not_from_noisy_ones(sets) -> None:
    fit, test = sets
    exact = ceiling(Reader(rendered=False), fit, test, context=2)
    noisy = ceiling(Reader(sigma=2.0), fit, test, context=2)
    assert exact["context_mlp"]["velocity"] > 0.8 > noisy["context_mlp"]["velocity"]
    assert exact["context_mlp"]["velocity_px"] < 0.5 * noisy["context_mlp"]["velocity_px"]
    assert ceiling(Reader(sigma=2.0), fit, test, context=2) == noisy  # deterministic


CMD = [sys.executable, "-m", "probes.ceiling", "--contexts", "2", "--sigmas", "1",
       "--fit-worlds", "3", "--test-worlds", "1", "--seqs", "4"]  # fmt: skip


def test_command_prints_a_row_per_reader_and_the_runs_latents(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "c.pt", Learner(AgentConfig(**TINY, context_frames=2)))
    out = subprocess.run([*CMD, "--checkpoint", str(path)], capture_output=True, text=True,
                         timeout=300, check=True).stdout  # fmt: skip
    rows = [line.split("|")[2].strip() for line in out.splitlines() if line.startswith("| 2 |")]
    assert rows == ["exact", "rendered + 1 px", "rendered + 1 px, sorted", "the run's latents"]


@pytest.mark.parametrize("bad", [["--contexts", "x"], ["--checkpoint", "no/such.pt"]])
def test_command_refuses_bad_input_in_one_line(bad: list[str]) -> None:
    out = subprocess.run([*CMD[:3], *bad], capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert ("no/such.pt" in out.stderr) == ("no/such.pt" in bad)
