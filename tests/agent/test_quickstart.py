"""The README quickstart (docs/agent_quickstart.py) runs end to end on a tiny budget."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "agent_quickstart.py"


def test_quickstart_tiny(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("agent_quickstart", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(
        [
            "--steps",
            "12",
            "--tracks",
            "ACE",
            "--n-train",
            "32",
            "--n-eval",
            "16",
            "--checkpoints",
            str(tmp_path),
        ]
    )
    assert [(r["track"], r["source"]) for r in rows] == [
        (t, s) for t in "ACE" for s in ("dataset", "stream")
    ]
    assert all(r["steps"] == 12 and math.isfinite(r["d_shift50"]) for r in rows)
    assert len(list(tmp_path.glob("*.pt"))) == 6
