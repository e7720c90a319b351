"""Running the commands as a user does, in a subprocess (shared by the command-line tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: A tiny run of the paper protocol with evaluations and checkpoints every 20 steps on small
#: evaluation splits (the worlds protocol has its own in test_worlds_protocol.py).
TINY = ["--protocol", "paper", "--preset", "tiny", "--eval-every", "20", "--checkpoint-every", "20",
        "--set", "eval_shift_train=32", "eval_shift_test=16", "eval_base_test=16"]


def cli(module: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``python -m runners.<module> ARGS`` from the repository root: one torch thread, no display."""
    env = {**os.environ, "MPLBACKEND": "Agg", "TORCH_NUM_THREADS": "1",
           "SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"}
    return subprocess.run(
        [sys.executable, "-m", f"runners.{module}", *args], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=timeout,
    )
