"""benchmarks.make_table: the markdown tables the README and docs paste."""

from __future__ import annotations

from benchmarks.make_table import e2e_table


def test_e2e_table_is_exact_markdown() -> None:
    row = {"protocol": "paper", "track": "C", "source": "stream", "device": "cpu",
           "precision": "bf16", "default": True, "threads": 1, "rate": 52.34,
           "ref_rate": 15.71, "ratio": 3.3317}  # fmt: skip
    missing = {**row, "default": False, "precision": "fp32", "rate": 1234.0, "ref_rate": None,
               "ratio": None}  # fmt: skip
    assert e2e_table([row, missing]).splitlines() == [
        "| train_online loop | track | source | device | precision | threads | steps/s "
        "| reference steps/s | x reference |",
        "|---|---|---|---|---|---|--:|--:|--:|",
        "| paper protocol | C | stream | cpu | bf16 (default) | 1 | 52.3 | 15.7 | **3.33x** |",
        "| paper protocol | C | stream | cpu | fp32 | 1 | 1,234 | - | - |",
    ]
