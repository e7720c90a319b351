"""RunConfig: layers (defaults, --config, options, --set), validation, derived agent values."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from runners.cli import CliError
from runners.online.config import (
    RunConfig,
    add_run_arguments,
    build_config,
    config_from_dict,
    parse_switch,
)


def build(*argv: str) -> RunConfig:
    p = argparse.ArgumentParser()
    add_run_arguments(p)
    return build_config(p.parse_args(list(argv)))


def test_defaults_tell_the_story() -> None:
    cfg = build()
    assert cfg.track == "C" and cfg.source == "stream" and cfg.after_switch == "memory"
    assert len(cfg.switches) == 1 and cfg.switches[0][1] == 0.5
    assert 0 < cfg.switches[0][0] < cfg.steps
    # Memory mode: the LR / tau schedules end at the first switch (weights freeze there).
    assert cfg.agent.total_steps == cfg.switches[0][0]
    assert cfg.agent.track == "C" and cfg.agent.seed == cfg.seed


def test_options_and_overrides_reach_both_configs() -> None:
    cfg = build(
        "--track", "B", "--steps", "500", "--switch", "300:0.5", "--switch", "100:0.25",
        "--after-switch", "continual", "--seed", "3", "--set", "lr=1e-3", "kappa=2.5",
        "--set", "eval_every=50", "episode_length=none",
    )
    assert cfg.switches == ((100, 0.25), (300, 0.5))  # sorted
    assert cfg.agent.track == "B" and cfg.agent.seed == 3
    assert cfg.agent.lr == 1e-3 and cfg.agent.kappa == 2.5
    assert cfg.eval_every == 50 and cfg.episode_length is None
    assert cfg.agent.total_steps == 500  # continual: the schedule spans the run
    assert cfg.gravity_at(99) == 0.0 and cfg.gravity_at(100) == 0.25 and cfg.gravity_at(400) == 0.5


def test_default_switch_follows_steps() -> None:
    cfg = build("--steps", "90")
    assert cfg.switches == ((60, 0.5),)
    assert build("--steps", "90", "--no-switch").switches == ()


def test_config_file_then_options(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"steps": 400, "switches": ["200:0.3"], "agent": {"lr": 5e-4}}))
    cfg = build("--config", str(f), "--steps", "600")
    assert cfg.steps == 600 and cfg.switches == ((200, 0.3),) and cfg.agent.lr == 5e-4


def test_saved_config_round_trips(tmp_path: Path) -> None:
    cfg = build("--steps", "300", "--set", "lambda_reg=0.2")
    cfg.save(tmp_path / "config.json")
    back = config_from_dict(json.loads((tmp_path / "config.json").read_text()))
    assert back.to_dict() == cfg.to_dict()
    # A run's config.json as --config: its explicit overrides count, derived values are redone.
    again = build("--config", str(tmp_path / "config.json"), "--steps", "900")
    assert again.agent.lambda_reg == 0.2 and again.agent.total_steps == again.switches[0][0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--switch", "abc"], "malformed --switch"),
        (["--switch", "10:x"], "malformed --switch"),
        (["--steps", "100", "--switch", "100:0.5"], "outside the run"),
        (["--steps", "100", "--switch", "500:0.5"], "outside the run"),
        (["--set", "nosuch=1"], "unknown field 'nosuch'"),
        (["--set", "lr"], "malformed --set"),
        (["--set", "lr=-1"], "lr"),
        (["--set", "steps=abc"], "steps: expected an integer"),
        (["--source", "dataset"], "needs --data"),
        (["--steps", "0"], "steps must be at least 1"),
    ],
)
def test_bad_input_is_one_clear_error(argv: list[str], message: str) -> None:
    with pytest.raises(CliError, match=message):
        build(*argv)


def test_parse_switch() -> None:
    assert parse_switch("3000:0.5") == (3000, 0.5)
    with pytest.raises(CliError):
        parse_switch("3000")
