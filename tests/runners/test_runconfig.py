"""RunConfig: the command line generated from it (tyro), the layers (defaults, --config, options,
--set), validation as one line, physics switches, --resume rules and a CLI smoke run."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zarr

import env
from runners.cli import CliError
from runners.online.command import (
    apply_resume,
    apply_sets,
    build_config,
    config_from_dict,
    parse_command,
    resume_changes,
)
from runners.online.config import RUN_FIELDS, RunConfig, resolve
from runners.online.switch import PHYSICS_NAMES, Switch

ROOT = Path(__file__).resolve().parents[2]


def build(*argv: str) -> RunConfig:
    """The paper protocol's config (these tests exercise its switches and base gravity; the
    worlds protocol has its own tests in test_worlds_protocol.py) unless ``argv`` names one."""
    return build_config(list(argv) if "--protocol" in argv else ["--protocol", "paper", *argv])


def g(step: int, gravity: float) -> Switch:
    return Switch(step, (("gravity", gravity),))


# -- layers ----------------------------------------------------------------------------------
def test_defaults_tell_the_story() -> None:
    cfg = build_config([])
    assert cfg.protocol == "worlds"
    assert cfg.track == "C" and cfg.source == "stream" and cfg.after_switch == "memory"
    assert cfg.switches == (Switch(3000, (("gravity", 0.3), ("gravity_direction", 45.0))),)
    assert cfg.steps == 4500
    assert build("--protocol", "paper").switches == (g(3000, 0.5),)
    # Memory mode: the LR / tau schedules end at the first switch (weights freeze there).
    assert cfg.agent.total_steps == 3000
    assert cfg.agent.track == "C" and cfg.agent.seed == cfg.seed


def test_options_and_overrides_reach_both_configs() -> None:
    cfg = build(
        "--track", "B", "--steps", "500", "--switch", "300:0.5", "--switch", "100:0.25",
        "--after-switch", "continual", "--seed", "3", "--set", "lr=1e-3", "kappa=2.5",
        "--set", "eval_every=50", "episode_length=none", "stagger=false", "eval_ns=0,5",
    )
    assert cfg.switches == (g(100, 0.25), g(300, 0.5))  # sorted
    assert cfg.agent.track == "B" and cfg.agent.seed == 3
    assert cfg.agent.lr == 1e-3 and cfg.agent.kappa == 2.5
    assert cfg.agent_overrides == {"lr": 1e-3, "kappa": 2.5}  # typed
    assert cfg.eval_every == 50 and cfg.episode_length is None and cfg.stagger is False
    assert cfg.eval_ns == (0, 5, 50)  # headline_n joins the periodic evaluations
    assert cfg.agent.total_steps == 500  # continual: the schedule spans the run
    assert cfg.gravity_at(99) == 0.0 and cfg.gravity_at(100) == 0.25 and cfg.gravity_at(400) == 0.5


def test_every_field_is_an_option_and_set_types_like_it() -> None:
    a = build("--eval-ns", "0", "7", "--no-stagger", "--episode-length", "None", "--base-gravity", "0.1")
    b = build("--set", "eval_ns=0,7", "stagger=false", "episode_length=none", "base_gravity=0.1")
    assert a.to_dict() == b.to_dict()
    assert build("--set", "horizons=5,10,20", "freeze_ema_at=none").agent_overrides == {
        "horizons": (5, 10, 20), "freeze_ema_at": None}
    assert build("--set", "agent.lr=2e-3").agent.lr == 2e-3  # the agent. prefix is accepted


def test_default_switch_follows_steps() -> None:
    cfg = build("--steps", "90")
    assert cfg.switches == (g(60, 0.5),) and cfg.agent.total_steps == 60
    assert build("--steps", "90", "--no-switch").switches == ()


def test_resolution_order_defaults_config_options_set(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"steps": 400, "seed": 5, "switches": ["200:0.3"], "agent": {"lr": 5e-4}}))
    cfg = build("--config", str(f))
    assert (cfg.steps, cfg.seed, cfg.switches, cfg.agent.lr) == (400, 5, (g(200, 0.3),), 5e-4)
    cfg = build("--config", str(f), "--steps", "600", "--switch", "100:0.2")
    assert cfg.steps == 600 and cfg.seed == 5 and cfg.switches == (g(100, 0.2),)
    cfg = build("--set", "steps=800", "--config", str(f), "--steps", "600")  # --set is last
    assert cfg.steps == 800 and cfg.agent.lr == 5e-4
    assert build("--config", str(f), "--no-switch").switches == ()


def test_saved_config_round_trips(tmp_path: Path) -> None:
    cfg = build("--steps", "300", "--set", "lambda_reg=0.2", "horizons=5,10,20",
                "--switch", "100:gravity=0.5,direction=45,restitution=0.9,friction=0.01")
    cfg.save(tmp_path / "config.json")
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["switches"] == [{"step": 100, "physics": {
        "gravity": 0.5, "gravity_direction": 45.0, "restitution": 0.9, "friction": 0.01}}]
    back = config_from_dict(saved)
    assert back.to_dict() == cfg.to_dict()
    # A run's config.json as --config: its explicit overrides count, derived values are redone.
    again = build("--config", str(tmp_path / "config.json"), "--steps", "900")
    assert again.agent.lambda_reg == 0.2 and again.agent.horizons == (5, 10, 20)
    assert again.steps == 900 and again.switches == cfg.switches
    assert again.agent.total_steps == 100 and again.name is None


def test_old_config_json_still_loads(tmp_path: Path) -> None:
    """Runs written before switch records: [[step, gravity]] switches, overrides as text."""
    old = build("--steps", "300", "--switch", "100:0.5").to_dict()
    old["switches"] = [[100, 0.5]]
    old["agent_overrides"] = {"lambda_reg": "0.2"}
    cfg = config_from_dict(old)
    assert cfg.switches == (g(100, 0.5),) and cfg.agent_overrides == {"lambda_reg": 0.2}
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert build("--config", str(tmp_path / "config.json")).agent.lambda_reg == 0.2


def test_typed_layers_for_other_runners() -> None:
    """The visualizer and the sweep build configs as objects: replace + --set + resolve."""
    cfg = dataclasses.replace(RunConfig(), track="A", steps=90, switches=(g(30, 0.4),))
    cfg = resolve(apply_sets(cfg, ["kappa=3", "switches=20:0.5 40:gravity=0"]))
    assert cfg.switches == (g(20, 0.5), g(40, 0.0)) and cfg.agent.kappa == 3.0
    assert resolve(RunConfig(steps=90, switches=((30, 0.5),))).switches == (g(30, 0.5),)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--switch", "abc"], "malformed --switch 'abc': expected STEP:GRAVITY"),
        (["--switch", "10:x"], "gravity must be a number, got 'x'"),
        (["--switch", "10:friction=2"], r"friction must be in \[0, 1\)"),
        (["--switch", "10:gravity=0.5,restitution=-1"], "restitution must be >= 0"),
        (["--switch", "10:direction=nan"], "gravity_direction must be finite"),
        (["--switch", "10:wind=3"], "unknown physics parameter 'wind'"),
        (["--switch", "10:gravity=1,gravity=2"], "gravity is given twice"),
        (["--switch", "x:0.5"], "STEP must be an integer"),
        (["--steps", "100", "--switch", "100:0.5"], "outside the run"),
        (["--steps", "100", "--switch", "500:0.5"], "outside the run"),
        (["--switch", "50:0.5", "--switch", "50:0.2"], "two switches at the same step"),
        (["--set", "nosuch=1"], "unknown field 'nosuch'"),
        (["--set", "lr"], "malformed --set"),
        (["--set"], "--set needs at least one"),
        (["--set", "lr=-1"], "lr"),
        (["--set", "steps=abc"], "steps: expected an integer, got 'abc'"),
        (["--set", "track=Q"], "track: expected one of"),
        (["--set", "base_gravity=nan"], "base_gravity: gravity must be finite"),
        (["--steps", "x"], "--steps: expected an integer, got 'x'"),
        (["--track", "Q"], "--track: expected one of 'A', 'B', 'C', 'D', 'E', got 'Q'"),
        (["--no-such-option"], "unknown option"),
        (["--steps"], "--steps needs a value"),
        (["--source", "dataset"], "needs --data"),
        (["--source", "dataset", "--data", "x.zarr", "--switch", "10:direction=0"],
         "changes gravity_direction"),
        (["--steps", "0"], "steps must be at least 1"),
        (["--config", "/no/such/file.json"], "cannot read --config"),
    ],
)
def test_bad_input_is_one_clear_error(argv: list[str], message: str) -> None:
    with pytest.raises(CliError, match=message) as err:
        build(*argv)
    assert "\n" not in str(err.value)


def test_bad_config_file_values_name_the_field(tmp_path: Path) -> None:
    for data, message in (
        ({"steps": "abc"}, "steps: expected an integer"),
        ({"nosuch": 1}, "unknown field 'nosuch'"),
        ({"switches": [[10, "x"]]}, "switches: gravity must be a number"),
        ({"agent": {"lr": "x"}}, "lr: expected a number"),
    ):
        f = tmp_path / "bad.json"
        f.write_text(json.dumps(data))
        with pytest.raises(CliError, match=message):
            build("--config", str(f))


# -- the command line ------------------------------------------------------------------------
OPTIONS = ("--track", "--seed", "--steps", "--switch", "--no-switch", "--after-switch", "--source",
           "--data", "--preset", "--config", "--set", "--device", "--precision", "--eval-every",
           "--checkpoint-every", "--record-frames", "--out", "--name", "--resume")


def test_help_mentions_every_option_and_field(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        parse_command(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for opt in OPTIONS:
        assert opt in text, opt
    for name in RUN_FIELDS - {"switches"}:
        assert "--" + name.replace("_", "-") in text, name
    assert "STEP:PHYSICS" in text and "restitution" in text  # the switch syntax


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "MPLBACKEND": "Agg", "TORCH_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "runners.train_online", *args], cwd=ROOT, env=environ,
        capture_output=True, text=True, timeout=timeout,
    )


def test_bad_values_exit_2_with_one_line(tmp_path: Path) -> None:
    for args, message in (
        (["--steps", "x"], "--steps: expected an integer, got 'x'"),
        (["--switch", "20:friction=2"], "friction must be in [0, 1), got 2.0"),
        (["--bogus"], "unknown option(s): --bogus"),
    ):
        res = cli("--preset", "tiny", "--out", str(tmp_path / "runs"), *args)
        assert res.returncode == 2, res
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("python -m runners.train_online: error: ")
        assert message in lines[0]
    assert not (tmp_path / "runs").exists()


# -- switches and physics --------------------------------------------------------------------
def test_switch_parse_and_json() -> None:
    assert PHYSICS_NAMES == env.PHYSICS_FIELDS
    assert Switch.parse("3000:0.5") == g(3000, 0.5)
    sw = Switch.parse("3000:friction=0.01, direction=45,gravity=0.5")
    assert sw.step == 3000 and sw.physics == (
        ("gravity", 0.5), ("gravity_direction", 45.0), ("friction", 0.01))  # env order
    assert Switch.parse("3000:gravity_direction=45") == Switch.parse("3000:direction=45")
    assert sw.label() == "g -> 0.5, direction -> 45, friction -> 0.01"
    for form in (sw.to_json(), str(sw), [3000, sw.params]):
        assert Switch.from_json(form) == sw
    assert Switch.from_json([3000, 0.5]) == Switch.from_json({"step": 3000, "gravity": 0.5})
    with pytest.raises(ValueError, match="friction must be in"):
        Switch.parse("3000:friction=1")
    with pytest.raises(ValueError, match="expected STEP:GRAVITY"):
        Switch.parse("3000")


def test_physics_at_applies_every_switch_up_to_the_step() -> None:
    cfg = build("--steps", "100", "--set", "base_gravity=0.1",
                "--switch", "30:gravity=0.5,direction=45", "--switch", "60:restitution=0.8")
    assert cfg.physics_at(29) == env.PhysicsParams(gravity=0.1)
    assert cfg.physics_at(30) == env.PhysicsParams(gravity=0.5, gravity_direction=45.0)
    assert cfg.physics_at(99) == env.PhysicsParams(0.5, 45.0, 0.8, 0.0)  # the rest carries over
    assert cfg.gravity_at(60) == 0.5 and cfg.shift_gravity == 0.5 and cfg.first_switch == 30
    assert cfg.shift_physics == cfg.physics_at(30)
    assert cfg.base_physics == env.PhysicsParams(gravity=0.1)
    none = build("--no-switch")
    assert none.shift_gravity == 0.5 and none.physics_at(10**6) == env.PhysicsParams()


# -- resume ----------------------------------------------------------------------------------
def test_resume_changes_only_what_may_change() -> None:
    saved = build("--steps", "300", "--switch", "100:0.5", "--preset", "tiny")
    total = saved.agent.total_steps
    ch = resume_changes(saved, ["--resume", "x", "--steps", "600", "--eval-every", "50"])
    assert ch == {"steps": 600, "eval_every": 50}
    cfg = apply_resume(saved, ch)
    assert cfg.steps == 600 and cfg.agent.total_steps == total  # the agent stays as it began
    assert resume_changes(saved, ["--resume", "x", "--track", "C"]) == {}  # the run's own value
    assert resume_changes(saved, ["--resume", "x", "--no-switch"]) == {"switches": ()}
    with pytest.raises(CliError, match="cannot change --track on --resume"):
        apply_resume(saved, resume_changes(saved, ["--resume", "x", "--track", "B"]))
    with pytest.raises(CliError, match="--config and --set cannot be used with --resume"):
        resume_changes(saved, ["--resume", "x", "--set", "lr=1"])


# -- a real run ------------------------------------------------------------------------------
def test_multi_physics_switch_run_records_the_physics_per_step(tmp_path: Path) -> None:
    res = cli("--protocol", "paper", "--preset", "tiny", "--steps", "30",
              "--switch", "20:gravity=0.5,direction=45",
              "--out", str(tmp_path), "--name", "run", "--eval-every", "20",
              "--set", "eval_shift_train=16", "eval_shift_test=8", "eval_base_test=8",
              "final_ns=0,10")
    assert res.returncode == 0, res.stderr
    m = zarr.open_group(str(tmp_path / "run" / "run.zarr"), mode="r")["metrics"]
    assert list(m["step"][:]) == list(range(30))
    assert list(m["world/gravity"][:]) == [0.0] * 20 + [0.5] * 10
    assert list(m["world/gravity_direction"][:]) == [90.0] * 20 + [45.0] * 10
    assert list(m["world/restitution"][:]) == [1.0] * 30
    assert list(m["world/friction"][:]) == [0.0] * 30
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["switches"] == [{"step": 20, "physics": {"gravity": 0.5, "gravity_direction": 45.0}}]
    assert "g -> 0.5, direction -> 45 at step 20" in (tmp_path / "run" / "summary.md").read_text()


def test_precision_auto_resolves_to_the_devices_fast_precision(tmp_path: Path) -> None:
    """--precision auto (the default) is agent.preferred_precision of the run's device, saved
    resolved; an explicit precision is kept."""
    from agent import preferred_precision

    cfg = build_config([])
    assert cfg.precision == preferred_precision("cpu") and cfg.agent.precision == cfg.precision
    assert build_config(["--precision", "fp32"]).agent.precision == "fp32"
    assert build_config(["--precision", "bf16"]).agent.precision == "bf16"
    cfg.save(tmp_path / "config.json")
    assert json.loads((tmp_path / "config.json").read_text())["precision"] == cfg.precision
