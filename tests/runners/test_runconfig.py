"""RunConfig: nested concerns, the command line generated from them (tyro), the token layers
(--config FILE, then the options), validation as one line, physics switches, --resume rules and a
CLI smoke run."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import zarr

import env
from runners.cli import CliError
from runners.online.command import (
    FIELDS,
    SET_ONLY,
    TrainCommand,
    build_config,
    config_from_dict,
    given_options,
    parse_command,
    resume_config,
)
from runners.online.config import Output, Paper, RunConfig, Schedule, Worlds, resolve
from runners.online.switch import PHYSICS_NAMES, Switch
from runners.studies.grid import option_tokens

ROOT = Path(__file__).resolve().parents[2]


def build(*argv: str) -> RunConfig:
    """The paper protocol's config (these tests exercise its switches and base gravity; the
    worlds protocol has its own tests in test_worlds_protocol.py) unless ``argv`` names one."""
    return build_config(list(argv) if "--protocol" in argv else ["--protocol", "paper", *argv])


def g(step: int, gravity: float) -> Switch:
    return Switch(step, (("gravity", gravity),))


# -- the concerns and the layers -------------------------------------------------------------
def test_defaults_tell_the_story() -> None:
    cfg = build_config([])
    assert isinstance(cfg.protocol, Worlds)
    assert cfg.agent.track == "C" and cfg.protocol.episode_steps == Worlds().episode_steps
    s = cfg.schedule
    assert s.after_switch == "memory" and s.steps == 4500
    assert s.switches == (Switch(3000, (("gravity", 0.75), ("gravity_direction", 90.0))),)
    assert build("--protocol", "paper").schedule.switches == (g(3000, 0.5),)
    # Memory mode: the LR / tau schedules end at the first switch (weights freeze there).
    assert cfg.agent.total_steps == 3000


def test_options_reach_their_concern() -> None:
    cfg = build(
        "--track", "B", "--steps", "500", "--switch", "300:0.5", "--switch", "100:0.25",
        "--after-switch", "continual", "--seed", "3", "--lr", "1e-3", "--kappa", "2.5",
        "--eval-every", "50", "--set", "episode_length=null", "--set", "stagger=false", "--eval-ns", "0", "5",
    )
    s, p = cfg.schedule, cfg.protocol
    assert isinstance(p, Paper) and p.episode_length is None and p.stagger is False
    assert s.switches == (g(100, 0.25), g(300, 0.5))  # sorted
    assert cfg.agent.track == "B" and cfg.agent.seed == 3
    assert cfg.agent.lr == 1e-3 and cfg.agent.kappa == 2.5
    assert s.eval_every == 50
    assert s.eval_ns == (0, 5, 50)  # headline_n joins the periodic evaluations
    assert cfg.agent.total_steps == 500  # continual: the schedule spans the run
    assert cfg.physics_at(99).gravity == 0.0 and cfg.physics_at(100).gravity == 0.25
    assert cfg.physics_at(400).gravity == 0.5


def test_every_field_is_an_option_and_a_grid_point_gives_the_same_option() -> None:
    a = build("--eval-ns", "0", "7", "--set", "stagger=false", "--set", "episode_length=null",
              "--base-gravity", "0.1", "--horizons", "5", "10", "--oracle", "--set", "latent_dim=32")
    point = {"eval_ns": "0,7", "stagger": "false", "episode_length": "none",
             "base_gravity": "0.1", "horizons": "5,10", "oracle": "true", "latent_dim": "32"}
    b = build(*[t for k, v in point.items() for t in option_tokens(k, v)])
    assert a.to_dict() == b.to_dict()
    assert a.agent.oracle and a.agent.latent_dim == 32 and a.agent.horizons == (5, 10)
    # Every field of every concern is set under its own name (an option, or --set NAME=VALUE).
    names = {f.name for c in (Worlds, Paper, Schedule, Output) for f in dataclasses.fields(c)}
    names |= {f.name for f in dataclasses.fields(type(a.agent))} | {"preset", "device"}
    assert names - {"switches"} <= set(FIELDS)


def test_the_defaults_follow_protocol_preset_track_and_device() -> None:
    from agent import preferred_precision

    assert build("--track", "B").agent.kappa == 2.0  # the track's default, under any preset
    assert build("--preset", "paper").agent.latent_dim == 64
    assert build_config([]).agent.horizons == (2, 4, 8)  # the worlds protocol's learner
    assert build().agent.horizons == (5, 10, 20)
    assert build().agent.precision == preferred_precision("cpu")
    assert build("--precision", "fp32").agent.precision == "fp32"
    # Set anywhere, they still choose the defaults of the rest.
    assert build("--track", "B").agent.kappa == 2.0
    # The worlds protocol's fast EMA target; the paper keeps its own.
    assert (build_config([]).agent.tau_base, build_config([]).agent.tau_end) == (0.98, 0.99)
    assert (build().agent.tau_base, build().agent.tau_end) == (0.996, 0.9999)


def test_one_parse_then_defaults_then_the_file_then_the_options(tmp_path: Path) -> None:
    """The choosing options, from the file or the command line, choose the defaults; the file's
    values are set over them and the command line's over those, in one pass after the parse."""
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"preset": "paper", "track": "B", "lr": 0.002, "steps": 90}))
    cfg = build_config(["--config", str(f), "--track", "D", "--steps", "120"])
    assert cfg.preset == "paper" and cfg.agent.latent_dim == 64  # the file's preset chose
    assert cfg.agent.track == "D" and cfg.agent.kappa == build("--track", "D").agent.kappa
    assert cfg.agent.lr == 0.002 and cfg.schedule.steps == 120  # file over defaults, line over file
    assert given_options(["--no-stagger", "--lr=0.1", "--steps", "5", "--lr", "2"]) == [
        "stagger", "lr", "steps"]


def test_the_retired_study_preset_is_refused_in_one_line() -> None:
    """The study preset (a map encoder, a conv predictor) was retired (archive, "The study
    preset (retired)"): on the command line, and in a saved config.json (refused before anything
    is built), each is one CliError line."""
    with pytest.raises(CliError, match="--preset"):
        build_config(["--preset", "study"])
    saved = build_config(["--preset", "tiny"]).to_dict()
    study = {**saved, "preset": "study",
             "agent": {**saved["agent"], "encoder": "map", "predictor": "conv"}}  # fmt: skip
    with pytest.raises(CliError, match=r"^unknown field 'encoder' in config.json$"):
        config_from_dict(study)
    with pytest.raises(CliError, match=r"^--preset expects Literal\[.*\], got 'study' \(in config"):
        config_from_dict({**saved, "preset": "study"})
    with pytest.raises(CliError, match=r"^unknown field 'predictor' in config.json$"):
        config_from_dict({**saved, "agent": {**saved["agent"], "predictor": "conv"}})


def test_the_gpu_preset_is_the_cpu_learner_fed_512_windows_a_step() -> None:
    cpu, gpu = build_config([]), build_config(["--preset", "gpu"])
    assert (gpu.agent.batch_size, cpu.agent.batch_size) == (512, 64)
    assert (gpu.schedule.steps, gpu.schedule.eval_every) == (6_000, 1_000)
    assert cpu.schedule.eval_every == 250 and gpu.agent.total_steps == 4_000
    assert gpu.agent.stream_cache is False and cpu.agent.stream_cache is True
    same = {"predictor_blocks", "hidden_dim", "lr", "lambda_reg", "latent_dim", "encoder_channels"}
    assert all(getattr(gpu.agent, f) == getattr(cpu.agent, f) for f in same)
    assert gpu.agent.predictor_blocks == 2
    opts = ["--preset", "gpu", "--eval-every", "50", "--batch-size", "128"]
    assert (build_config(opts).schedule.eval_every, build_config(opts).agent.batch_size) == (50, 128)
    assert build_config(["--preset", "gpu", "--steps", "300"]).schedule.steps == 300


def test_default_switch_follows_steps() -> None:
    cfg = build("--steps", "90")
    assert cfg.schedule.switches == (g(60, 0.5),) and cfg.agent.total_steps == 60
    assert build("--steps", "90", "--no-switch").schedule.switches == ()
    assert build("--steps", "90", "--set", "total_steps=500").agent.total_steps == 500


def test_order_config_file_then_options(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"protocol": {"kind": "paper"}, "schedule": {"steps": 400},
                             "switches": ["200:0.3"], "agent": {"lr": 5e-4, "seed": 5}}))
    cfg = build_config(["--config", str(f)])
    assert isinstance(cfg.protocol, Paper)
    assert (cfg.schedule.steps, cfg.agent.seed, cfg.schedule.switches, cfg.agent.lr) == (
        400, 5, (g(200, 0.3),), 5e-4)
    cfg = build_config(["--config", str(f), "--steps", "600", "--switch", "100:0.2"])
    assert cfg.schedule.steps == 600 and cfg.agent.seed == 5
    assert cfg.schedule.switches == (g(100, 0.2),)  # the command line's replace the file's
    cfg = build_config(["--steps", "800", "--config", str(f)])
    assert cfg.schedule.steps == 800 and cfg.agent.lr == 5e-4  # the options win, wherever
    assert build_config(["--config", str(f), "--no-switch"]).schedule.switches == ()
    flat_file = tmp_path / "flat.json"  # flat, by field name, works as well
    flat_file.write_text(json.dumps({"protocol": "paper", "steps": 400, "lr": 5e-4}))
    assert build_config(["--config", str(flat_file)]).agent.lr == 5e-4


def test_saved_config_round_trips(tmp_path: Path) -> None:
    cfg = build("--steps", "300", "--lambda-reg", "0.2", "--horizons", "5", "10", "20",
                "--switch", "100:gravity=0.5,direction=45,restitution=0.9,friction=0.01")
    cfg.save(tmp_path / "config.json")
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["protocol"]["kind"] == "paper" and saved["agent"]["lambda_reg"] == 0.2
    assert saved["schedule"]["switches"] == [{"step": 100, "physics": {
        "gravity": 0.5, "gravity_direction": 45.0, "restitution": 0.9, "friction": 0.01}}]
    back = config_from_dict(saved)
    assert back == cfg and back.to_dict() == cfg.to_dict()
    # A run's config.json as --config is that run's config, its derived values included.
    again = build_config(["--config", str(tmp_path / "config.json"), "--steps", "900"])
    assert again.agent.lambda_reg == 0.2 and again.agent.horizons == (5, 10, 20)
    assert again.schedule.steps == 900 and again.schedule.switches == cfg.schedule.switches
    assert again.agent.total_steps == cfg.agent.total_steps == 100


def test_a_config_json_of_another_version_is_refused_in_one_line(tmp_path: Path) -> None:
    """A run's config.json carries the project's version; one of another version (or none: an
    earlier one) is refused naming it, as --config too; a hand-written flat file without one
    is read as this version's."""
    from agent.config import VERSION

    new = build("--steps", "300", "--switch", "100:0.5", "--lambda-reg", "0.2")
    saved = new.to_dict()
    assert next(iter(saved)) == "version" and saved["version"] == VERSION
    assert config_from_dict(saved) == new
    for found, said in ((1, "version 1"), (None, "a version before 2")):
        old = {k: v for k, v in saved.items() if k != "version"}
        old.update({} if found is None else {"version": found})
        with pytest.raises(CliError, match=f"^config.json was written by {said} of this project"):
            config_from_dict(old)
        (tmp_path / "config.json").write_text(json.dumps({**old, "version": found or 1}))
        with pytest.raises(CliError, match=f"^--config {tmp_path}/config.json was written by "
                           "version 1 of"):
            build("--config", str(tmp_path / "config.json"))
    (tmp_path / "flat.json").write_text(json.dumps({"lambda_reg": 0.3, "steps": 300}))
    assert build("--config", str(tmp_path / "flat.json")).agent.lambda_reg == 0.3


def test_resolve_is_idempotent_and_builds_from_objects() -> None:
    cfg = resolve(RunConfig(protocol=Paper(), schedule=Schedule(steps=90, switches=(g(30, 0.4),))))
    assert cfg.schedule.switches == (g(30, 0.4),) and cfg.agent.total_steps == 30
    assert resolve(dataclasses.replace(cfg)) == cfg


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
        (["--nosuch", "1"], "unknown option"),
        (["--lr", "-1"], "lr"),
        (["--steps", "abc"], "--steps expects INT: .*'abc'"),
        (["--track", "Q"], "track: expected one of"),
        (["--protocol", "worlds", "--base-gravity", "0.1"], "--base-gravity belongs to --protocol paper"),
        (["--train-family", "train"], "--train-family belongs to --protocol worlds"),
        (["--lr", "-1"], r"^lr: must be > 0 \(got -1.0\)$"),
        (["--base-gravity", "nan"], "base_gravity: gravity must be finite"),
        (["--steps", "x"], "--steps expects INT: .*'x'"),
        (["--track", "Q"], "--track: expected one of 'A', 'B', 'C', 'D', 'E', got 'Q'"),
        (["--no-such-option"], "unknown option"),
        (["--steps"], "--steps needs a value"),
        (["--source", "dataset"], "needs --data"),
        (["--source", "dataset", "--data", "x.zarr", "--switch", "10:direction=0"],
         "changes gravity_direction"),
        (["--steps", "0"], "steps must be at least 1"),
        (["--config", "/no/such/file.json"], "cannot read --config"),
        (["--protocol", "worlds", "--capture", "--no-stream-cache"], "has no reservoir to fit"),
        (["--protocol", "worlds", "--capture", "--no-stream-cache", "--settle", "None",
          "--set", "encoder_lr_scale=0.3"], "one rate; add --set encoder_lr_scale=1"),
        (["--protocol", "worlds", "--capture", "--no-stream-cache", "--settle", "None",
          "--set", "encoder_batch=32"], "add --set encoder_batch=null"),
        (["--protocol", "worlds", "--set", "encoder_batch=5"], "positive divisor of batch_size=64"),
    ],
)
def test_bad_input_is_one_clear_error(argv: list[str], message: str) -> None:
    with pytest.raises(CliError, match=message) as err:
        build(*argv)
    assert "\n" not in str(err.value)


def test_bad_config_file_values_name_the_field(tmp_path: Path) -> None:
    for data, message in (
        ({"schedule": {"steps": "abc"}}, "--steps expects int, got 'abc'"),
        ({"nosuch": 1}, "unknown field 'nosuch' in --config"),
        ({"agent": {"horizons": [2, "x"]}}, r"--horizons expects tuple\[int, ...\], got \(2, 'x'\)"),
        ({"schedule": {"switches": ["10:x"]}}, "switches: switch '10:x': gravity must be a number"),
        ({"schedule": {"switches": [[10, 0.5]]}}, r"switches: cannot read switch \[10, 0.5\]"),
        ({"agent": {"lr": "x"}}, "--lr expects float"),
        ({"protocol": {"kind": "paper"}, "train_family": "train"}, "belongs to --protocol worlds"),
    ):
        f = tmp_path / "bad.json"
        f.write_text(json.dumps(data))
        with pytest.raises(CliError, match=message) as err:
            build_config(["--config", str(f)])
        assert "\n" not in str(err.value)
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(CliError, match="expected a JSON object"):
        build_config(["--config", str(tmp_path / "list.json")])


# -- the command line ------------------------------------------------------------------------
OPTIONS = ("--protocol", "--track", "--seed", "--steps", "--switch", "--no-switch",
           "--after-switch", "--preset", "--config", "--device", "--precision",
           "--eval-every", "--checkpoint-every", "--record-frames", "--out", "--name", "--resume",
           "--lr", "--hidden-dim", "--oracle", "--train-family", "--train-gravity", "--train-arcs",
           "--base-gravity", "--data", "--residency", "--group-size", "--bounds", "--memory-read",
           "--set")


def test_help_shows_every_option_grouped_by_concern(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        parse_command(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for opt in OPTIONS:
        assert opt in text, opt
    for group in ("agent options", "schedule options", "output options"):
        assert group in text, group
    assert "STEP:PHYSICS" in text and "restitution" in text  # the switch syntax
    listed = set(re.findall(r"^[│ ] {0,2}(?:-h, )?(--[a-z0-9-]+)", text, flags=re.M))
    assert len(listed) <= 60, len(listed)  # issue 74's target: at most 60 options in --help
    for name in FIELDS:  # every field: its own option, or named by --set's help
        option = "--" + name.replace("_", "-")
        assert (option in listed) != (name in SET_ONLY), name
    flat_help = " ".join(text.replace("│", " ").split())
    assert all(name in flat_help for name in SET_ONLY)
    with pytest.raises(SystemExit):
        parse_command(["--protocol", "paper", "--help"])
    assert "--base-gravity" in capsys.readouterr().out  # the chosen protocol's own options
    assert TrainCommand.__doc__


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "MPLBACKEND": "Agg", "TORCH_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "runners.train_online", *args], cwd=ROOT, env=environ,
        capture_output=True, text=True, timeout=timeout,
    )


def test_bad_values_exit_2_with_one_line(tmp_path: Path) -> None:
    for args, message in (
        (["--steps", "x"], "--steps expects INT: invalid literal for int() with base 10: 'x'"),
        (["--switch", "20:friction=2"], "friction must be in [0, 1), got 2.0"),
        (["--bogus"], "unknown option(s): --bogus"),
        (["--train-gravity", "0.1", "0.7"], "world families train and extrap overlap"),
        (["--set", "interp_arcs=[-30, 30]"], "world families train and interp overlap"),
    ):
        res = cli("--preset", "tiny", "--out", str(tmp_path / "runs"), *args)
        assert res.returncode == 2, res
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("python -m runners.train_online: error: ")
        assert message in lines[0]
    assert not (tmp_path / "runs").exists()


def test_dry_run_prints_the_resolved_config_and_writes_nothing(tmp_path: Path) -> None:
    """--dry-run prints every field as config.json would hold it, --set's values and the
    preset's included, and exits 0 without a run folder."""
    res = cli("--preset", "tiny", "--set", "exp_dim=24", "--set", "vary_memory=false",
              "--steps", "60", "--out", str(tmp_path / "runs"), "--dry-run")
    assert res.returncode == 0, res.stderr
    printed = json.loads(res.stdout)
    expected = build_config(["--protocol", "worlds", "--preset", "tiny", "--set", "exp_dim=24",
                             "--set", "vary_memory=false", "--steps", "60",
                             "--out", str(tmp_path / "runs")]).to_dict()
    assert printed == json.loads(json.dumps(expected))
    assert printed["agent"]["exp_dim"] == 24 and printed["agent"]["vary_memory"] is False
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
    for form in (sw.to_json(), str(sw)):
        assert Switch.from_json(form) == sw
    for form in ([3000, 0.5], {"step": 3000, "gravity": 0.5}, {"step": 3000, "physics": 0.5}):
        with pytest.raises(ValueError, match="^cannot read switch"):  # not config.json's form
            Switch.from_json(form)
    with pytest.raises(ValueError, match="friction must be in"):
        Switch.parse("3000:friction=1")
    with pytest.raises(ValueError, match="expected STEP:GRAVITY"):
        Switch.parse("3000")


def test_physics_at_applies_every_switch_up_to_the_step() -> None:
    cfg = build("--steps", "100", "--base-gravity", "0.1",
                "--switch", "30:gravity=0.5,direction=45", "--switch", "60:restitution=0.8")
    assert cfg.physics_at(29) == env.PhysicsParams(gravity=0.1)
    assert cfg.physics_at(30) == env.PhysicsParams(gravity=0.5, gravity_direction=45.0)
    assert cfg.physics_at(99) == env.PhysicsParams(0.5, 45.0, 0.8, 0.0)  # the rest carries over
    assert cfg.first_switch == 30 and cfg.shift_physics == cfg.physics_at(30)
    assert cfg.base_physics == env.PhysicsParams(gravity=0.1)
    none = build("--no-switch")
    assert none.shift_physics.gravity == 0.5 and none.physics_at(10**6) == env.PhysicsParams()


# -- resume ----------------------------------------------------------------------------------
def test_resume_changes_only_what_may_change() -> None:
    saved = build("--steps", "300", "--switch", "100:0.5", "--preset", "tiny").to_dict()
    total = saved["agent"]["total_steps"]
    cfg = resume_config(saved, ["--resume", "x", "--steps", "600", "--eval-every", "50"])
    assert cfg.schedule.steps == 600 and cfg.schedule.eval_every == 50
    assert cfg.agent.total_steps == total  # the agent stays as it began
    assert resume_config(saved, ["--resume", "x", "--track", "C"]) == config_from_dict(saved)
    assert resume_config(saved, ["--resume", "x", "--no-switch"]).schedule.switches == ()
    for argv, option in ((["--track", "B"], "--track"), (["--lr", "0.5"], "--lr"),
                         (["--protocol", "worlds"], "--protocol"), (["--set", "stagger=false"], "--set stagger")):
        with pytest.raises(CliError, match=f"cannot change {option}.* on --resume"):
            resume_config(saved, ["--resume", "x", *argv])
    with pytest.raises(CliError, match="--config cannot be used with --resume"):
        resume_config(saved, ["--resume", "x", "--config", "c.json"])


# -- a real run ------------------------------------------------------------------------------
def test_multi_physics_switch_run_records_the_physics_per_step(tmp_path: Path) -> None:
    res = cli("--protocol", "paper", "--preset", "tiny", "--steps", "30",
              "--switch", "20:gravity=0.5,direction=45",
              "--out", str(tmp_path), "--name", "run", "--eval-every", "20",
              "--set", "eval_shift_train=16", "--set", "eval_shift_test=8", "--set", "eval_base_test=8", "--final-ns", "0", "10")
    assert res.returncode == 0, res.stderr
    m = zarr.open_group(str(tmp_path / "run" / "run.zarr"), mode="r")["metrics"]
    assert list(m["step"][:]) == list(range(30))
    assert list(m["physics/gravity"][:]) == [0.0] * 20 + [0.5] * 10
    assert list(m["physics/gravity_direction"][:]) == [90.0] * 20 + [45.0] * 10
    assert list(m["physics/restitution"][:]) == [1.0] * 30
    assert list(m["physics/friction"][:]) == [0.0] * 30
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["schedule"]["switches"] == [{"step": 20, "physics": {"gravity": 0.5, "gravity_direction": 45.0}}]
    assert "g -> 0.5, direction -> 45 at step 20" in (tmp_path / "run" / "summary.md").read_text()


def test_precision_defaults_to_the_devices_fast_precision(tmp_path: Path) -> None:
    """The default precision is agent.preferred_precision of the run's device, saved resolved;
    an explicit precision is kept."""
    from agent import preferred_precision

    cfg = build_config([])
    assert cfg.agent.precision == preferred_precision("cpu")
    assert build_config(["--precision", "fp32"]).agent.precision == "fp32"
    cfg.save(tmp_path / "config.json")
    assert json.loads((tmp_path / "config.json").read_text())["agent"]["precision"] == cfg.agent.precision


@pytest.mark.parametrize("preset", ["cpu", "paper"])
def test_on_a_gpu_the_evaluations_encode_larger_chunks(preset: str) -> None:
    """--device cuda: the preset's eval_batch_size x GPU_EVAL_SCALE (resolved without a GPU);
    an explicit one is kept."""
    from runners.online.config import GPU_EVAL_SCALE

    cpu = build_config(["--preset", preset, "--device", "cpu"]).agent.eval_batch_size
    gpu = build_config(["--preset", preset, "--device", "cuda"]).agent.eval_batch_size
    assert gpu == GPU_EVAL_SCALE * cpu
    assert build_config(["--device", "cuda", "--set", "eval_batch_size=100"]).agent.eval_batch_size == 100


@pytest.mark.bf16
def test_an_explicit_bf16_is_kept() -> None:
    assert build_config(["--precision", "bf16"]).agent.precision == "bf16"


def test_bf16_on_a_cpu_without_it_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU whose oneDNN has no bf16 kernels (an AVX2-only x86-64): fp32 by default, and
    ``--precision bf16`` refused with one line, exit 2, before anything is written."""
    import torch

    from agent import AgentConfig, Learner, preferred_precision

    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert preferred_precision("cpu") == "fp32"
    assert build_config(["--device", "cpu"]).agent.precision == "fp32"
    with pytest.raises(CliError, match="^--precision bf16: this CPU has no bf16 kernels"):
        build_config(["--device", "cpu", "--precision", "bf16"])
    with pytest.raises(ValueError, match="^precision: bf16 cannot run here"):
        Learner(AgentConfig.of_size("tiny", precision="bf16"))


def test_a_removed_option_in_a_config_is_refused_naming_it() -> None:
    from runners.online.command import config_from_dict

    saved = build_config(["--preset", "tiny"]).to_dict()
    used = {**saved, "agent": {**saved["agent"], "freeze_weights_at": None}}
    with pytest.raises(CliError, match="^unknown field 'freeze_weights_at' in config.json$"):
        config_from_dict(used)
