"""``python -m benchmarks.trace_step``: the path of one step from the command to the loss."""

from __future__ import annotations

from benchmarks import trace_step


def test_one_step_reaches_the_loss_through_six_files() -> None:
    chain, files = trace_step.trace(["--preset", "tiny", "--eval-world-seqs", "4", "--eval-worlds",
                                     "2", "--base-world-seqs", "4", "--base-worlds", "2",
                                     "--episode-steps", "21", "40", "--eval-every", "100"])
    assert chain[0] == "runners/train_online.py: main"
    assert chain[-1] == "agent/objective.py: compute_loss"
    assert len({c.split(":")[0] for c in chain}) == 6  # docs/architecture.md: at most 12
    assert {"env/physics.py", "agent/step.py", "runners/online/loop.py"} <= set(files)
    assert all(n > 0 for n in files.values())
