"""Running the commands as a user does, in a subprocess (shared by the command-line tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: A tiny run of the paper protocol with evaluations and checkpoints every 20 steps on small
#: evaluation splits.
TINY = ["--protocol", "paper", "--preset", "tiny", "--eval-every", "20", "--checkpoint-every", "20",
        "--eval-shift-train", "32", "--eval-shift-test", "16", "--eval-base-test", "16"]
#: The same for the worlds protocol (the default): short episodes, few held-out worlds.
TINY_WORLDS = ["--preset", "tiny", "--eval-every", "20", "--checkpoint-every", "20", "--no-bounds",
               "--eval-shift-test", "8", "--eval-world-seqs", "4", "--eval-worlds", "2", "--episode-steps", "21", "40"]  # fmt: skip


def cli(
    module: str, *args: str, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m runners.<module> ARGS`` from the repository root: one torch thread, no display
    (``env``: more environment variables)."""
    env = {**os.environ, "MPLBACKEND": "Agg", "TORCH_NUM_THREADS": "1",
           "SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", f"runners.{module}", *args], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=timeout,
    )
