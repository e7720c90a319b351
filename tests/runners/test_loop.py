"""The online loop in process (tiny preset): parts passed in, schedules, an exact cut-and-resume;
the run folder's lock (one writer, released on SIGKILL) and a sweep's claim on a point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from runners.cli import CliError
from runners.online.command import build_config
from runners.online.config import RunConfig
from runners.online.loop import Cadence, Every, OnlineLoop
from runners.online.parts import build_run_parts
from runners.online.recorder import Recorder
from runners.online.rundir import RunFolder, StopRequest
from runners.studies import backends
from tests.runners.cli_helpers import assert_events_are_the_store, assert_same_checkpoint

ROOT = Path(__file__).resolve().parents[2]
# A short worlds-protocol run's own options (a switch into a held-out world at step 30).
WORLDS = ["--switch", "30:gravity=0.3,direction=45", "--eval-world-seqs", "4", "--eval-worlds", "2",
          "--base-world-seqs", "4", "--base-worlds", "2", "--episode-steps", "21", "40",
          "--final-ns", "0", "5"]  # fmt: skip


def tiny_argv(*argv: str, protocol: str = "paper") -> list[str]:
    """The command line of ``tiny_config``."""
    paper = ["--set", "eval_shift_train=32", "--set", "eval_base_test=16"] if protocol == "paper" else []
    own = any(a in ("--switch", "--no-switch") for a in argv)  # argv's replace the default one
    return [
        "--protocol", protocol, "--preset", "tiny", "--steps", "60",
        *([] if own else ["--switch", "30:0.5"]), "--eval-every", "20", "--checkpoint-every",
        "20", "--set", "log_every=5", "--set", "eval_shift_test=16", "--device", "cpu", *paper, *argv,
    ]  # fmt: skip


def tiny_config(*argv: str, protocol: str = "paper") -> RunConfig:
    return build_config(tiny_argv(*argv, protocol=protocol))


def open_loop(root: Path, cfg: RunConfig, *, resume: bool = False) -> OnlineLoop:
    folder = RunFolder(root).hold()
    folder.make()
    return OnlineLoop.open(cfg, folder, resume=resume, stop=StopRequest(folder.pause), log=lambda _: None)


def store_arrays(root: Path) -> dict[str, np.ndarray]:
    rec = Recorder(root, read_only=True)
    ev = rec.read_eval()
    return {**{f"m:{k}": v for k, v in rec.read_metrics().items()}, **{f"e:{k}": v for k, v in ev.items()}}


def assert_same_records(
    one: Path, other: Path, *, checkpoint: bool = False
) -> dict[str, np.ndarray]:
    """Two 60-step runs' stores hold exactly the same metrics and evaluations; the first's.
    ``checkpoint``: their final ``latest.pt`` too, bit for bit (the weights, optimizer and
    memory, which the metrics, float32 means, may not show to the last bit)."""
    a, b = store_arrays(one), store_arrays(other)
    assert sorted(a) == sorted(b) and len(a["m:step"]) == 60
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    if checkpoint:
        assert_same_checkpoint(one, other)
    return a


def test_schedule_decides_periodic_work() -> None:
    cfg = tiny_config()
    sch = Cadence.from_config(cfg)
    assert sch.evaluate == Every(20, frozenset({30, 60}))
    assert sch.checkpoint == Every(20, frozenset({60}))
    d = sch.due(30)  # the switch: evaluate before it applies, flush first
    assert (d.flush, d.evaluate, d.checkpoint) == (True, True, False)
    d = sch.due(7)
    assert (d.flush, d.evaluate, d.checkpoint) == (False, False, False)
    d = sch.due(40)
    assert (d.flush, d.evaluate, d.checkpoint) == (True, True, True)


#: The worlds run settled at step 9 (0.3 of its 30 steps of base training), each step from
#: then to the switch fitting two minibatches of its reservoir (``test_settle_run``).
SETTLED = [*WORLDS, "--settle", "0.3", "--fit-updates", "2", "--set", "fit_batch=8",
           "--set", "fit_worlds=2"]  # fmt: skip


def own_options(run: str) -> list[str]:
    """The options of the 60-step runs (switch at step 30): of each protocol, and ``settled``."""
    return {"paper": [], "worlds": WORLDS, "settled": SETTLED}[run]


def protocol_of(run: str) -> str:
    return "paper" if run == "paper" else "worlds"


@pytest.fixture(scope="module")
def one_go(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``one_go(protocol)``: the folder of the 60-step run of ``tiny_config(*own_options(
    protocol))`` done in one go, in this process (run once per module): what every cut,
    resumed or otherwise changed run of that config must record."""
    done: dict[str, Path] = {}

    def run(protocol: str) -> Path:
        if protocol not in done:
            root = tmp_path_factory.mktemp(f"one-go-{protocol}") / "run"
            cfg = tiny_config(*own_options(protocol), protocol=protocol_of(protocol))
            loop = open_loop(root, cfg)
            assert loop.vec_env.device is None  # on a CPU the world stays numpy
            for _ in loop.steps():
                pass
            loop.close()
            loop.folder.release()
            done[protocol] = root
        return done[protocol]

    return run


@pytest.mark.parametrize(("protocol", "at"), [
    ("paper", 25), ("paper", 45), ("worlds", 25), ("worlds", 45), ("settled", 20),
], ids=["paper-before-switch", "paper-after-switch", "worlds-before-switch",
        "worlds-after-switch", "settled-fitting"])  # fmt: skip
def test_cut_and_resume_equals_one_go(
    tmp_path: Path, protocol: str, at: int, one_go: Callable[[str], Path]
) -> None:
    """A run stopped at step 25 or 45 (before or after the switch at 30, which freezes the
    weights; a settled run at 20, while it fits its reservoir) and resumed (through the same
    factories) records exactly the metrics and evaluations of the same run done in one go (the
    worlds protocol: its world schedule, per-stream memories and the switch into a held-out
    world included), and ends with the same checkpoint, bit for bit."""
    cfg = tiny_config(*own_options(protocol), protocol=protocol_of(protocol))
    cut = open_loop(tmp_path / "cut", cfg)
    for res in cut.steps():
        if res.step == at:
            cut.stop.request("test")
    assert cut.step_count == at
    cut.checkpoint()  # what train_online does on a stop
    cut.folder.release()
    again = open_loop(tmp_path / "cut", cfg, resume=True)
    assert again.step_count == at and again.physics == cut.physics
    assert again.gravity == (0.0 if at < 30 else cut.gravity)
    assert again.learner.weights_frozen == (at >= 30)  # memory mode from the switch on
    for _ in again.steps():
        pass
    again.close()
    assert again.learner.weights_frozen

    a = assert_same_records(one_go(protocol), tmp_path / "cut", checkpoint=True)
    assert np.array_equal(a["m:step"], np.arange(60))
    # The world's physics are recorded per step (NaN while the worlds protocol's streams each
    # live in their own training world).
    g = a["m:physics/gravity"]
    if protocol == "paper":
        assert g[29] == 0.0 and g[30] == 0.5
        assert set(np.unique(a["m:physics/gravity_direction"])) == {90.0}
    else:
        if protocol == "settled":
            assert again.learner.reservoir.seen > cut.learner.reservoir.seen > 0
            assert np.isfinite(a["m:loss/pred"][9:30]).all()  # the fit updates' mean
        assert np.isnan(g[:30]).all() and (g[30:] == np.float32(0.3)).all()
        assert (a["m:physics/gravity_direction"][30:] == 45.0).all()
        feed = again.feed
        assert feed.schedule.held.all()  # every stream stays in the held-out world
        assert all(p == again.physics for p in feed.stream_physics())


@pytest.mark.parametrize("protocol", ["paper", "worlds"])
def test_a_run_with_its_world_on_the_device_is_the_same_run(
    tmp_path: Path, protocol: str, monkeypatch: pytest.MonkeyPatch, one_go: Callable[[str], Path]
) -> None:
    """The streams' worlds stepped and rendered as tensors (``env.device``, what a GPU run
    uses), here on the CPU, cut at step 25 and resumed: exactly the numpy world's run."""
    import torch

    from runners.online import feeds

    over = own_options(protocol)
    monkeypatch.setattr(feeds, "world_device", lambda device: torch.device(device))
    cut = open_loop(tmp_path / "device", tiny_config(*over, protocol=protocol))
    assert cut.vec_env.device == torch.device("cpu")
    for res in cut.steps():
        if res.step == 25:
            cut.stop.request("test")
    cut.checkpoint()
    cut.folder.release()
    again = open_loop(tmp_path / "device", tiny_config(*over, protocol=protocol), resume=True)
    for _ in again.steps():
        pass
    again.close()
    assert_same_records(one_go(protocol), tmp_path / "device")


def test_a_run_with_a_captured_step_is_the_same_run_off_a_gpu(tmp_path: Path) -> None:
    """--capture (agent.capture) runs its step eagerly on a CPU: the run records exactly what
    the plain step's does."""
    over = [*WORLDS, "--no-stream-cache"]
    for name, extra in (("plain", []), ("captured", ["--capture"])):
        loop = open_loop(tmp_path / name, tiny_config(*over, *extra, protocol="worlds"))
        assert (loop.learner.captured is not None) == bool(extra)
        for _ in loop.steps():
            pass
        loop.close()
    assert_same_records(tmp_path / "plain", tmp_path / "captured")


@pytest.mark.gpu
@pytest.mark.parametrize("extra", [[], ["--capture", "--no-stream-cache"]],
                         ids=["plain", "captured"])  # fmt: skip
def test_on_a_gpu_the_loop_waits_for_the_device_only_at_its_metric_blocks(
    tmp_path: Path, extra: list[str], no_device_syncs
) -> None:
    """A worlds run on a GPU (the world on the device, the floor and ceiling beside the
    track): the steps between metric blocks make no synchronising call; the block reads the
    metrics back once."""
    cfg = tiny_config(*WORLDS, "--device", "cuda", "--eval-every", "1000", "--checkpoint-every",
                      "1000", "--set", "log_every=10", *extra, protocol="worlds")  # fmt: skip
    loop = open_loop(tmp_path / "run", cfg)
    assert loop.vec_env.device is not None and loop.vec_env.device.type == "cuda"
    for _ in range(10):  # the first block: optimizer state, warm-up, capture
        loop.step()
    for block in (1, 2):
        with no_device_syncs(f"steps {10 * block + 1}-{10 * block + 9} of a worlds run"):
            for _ in range(9):
                loop.step()
        assert loop.step().block  # the 10th: the block flushed
    loop.close()


def test_parts_are_passed_in(tmp_path: Path) -> None:
    """The loop drives the parts it is given (here one built by hand, with a spy feed)."""
    cfg = tiny_config("--steps", "10", "--no-switch", "--eval-every", "100",
                      "--checkpoint-every", "100")
    folder = RunFolder(tmp_path / "r").hold()
    folder.make()
    parts = build_run_parts(cfg, folder)
    calls = []
    inner = parts.feed.next
    parts.feed.next = lambda: calls.append(1) or inner()  # type: ignore[method-assign]
    loop = OnlineLoop(cfg, folder, parts, log=lambda _: None)
    results = [loop.step() for _ in range(3)]
    assert len(calls) == 3 and [r.step for r in results] == [1, 2, 3]
    assert loop.learner is parts.learner and loop.recorder is parts.recorder


@pytest.mark.parametrize("protocol", ["paper", "worlds"])
def test_recorded_frames_are_the_envs_newest_frames(tmp_path: Path, protocol: str) -> None:
    """run.zarr's frames are each stream's newest frame, the one the env rendered at that step
    beside the recorded positions (the worlds default reads three past frames a sample)."""
    cfg = tiny_config("--steps", "12", "--no-switch", "--eval-every", "100",
                      "--checkpoint-every", "100", "--record-frames", "1", protocol=protocol)
    loop = open_loop(tmp_path / "r", cfg)
    loop.vec_env.render_mode = "rgb_array"  # Gymnasium's: render() returns the frames
    rendered, positions = [], []
    for _ in range(12):
        loop.step()
        rendered.append(loop.vec_env.render()[..., 0])  # (N, 64, 64): the env's own frame now
        positions.append(loop.vec_env.get_state()["scenes"]["positions"])
    loop.flush()
    g = Recorder(tmp_path / "r", read_only=True).root["frames"]
    np.testing.assert_array_equal(g["step"][:], np.arange(12))
    np.testing.assert_array_equal(g["frames"][:, :, 0], np.stack(rendered))
    np.testing.assert_allclose(g["positions"][:], np.stack(positions), rtol=1e-6)


# -- one writer per run folder -----------------------------------------------------------------


def _cli(*args: str, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "TORCH_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    return subprocess.Popen(
        [sys.executable, "-m", "runners.train_online", *args], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw,  # type: ignore[arg-type]
    )


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*")) if p.is_file() and p.name != RunFolder.LOCK
    }


def test_second_process_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    folder.make()
    folder.config.write_text("{}")
    folder.latest.write_bytes(b"not read")
    folder.hold()  # this process writes the folder
    before = _listing(folder.root)
    proc = _cli("--resume", str(folder.root))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(folder.root) in lines[0] and "in use" in lines[0]
    assert _listing(folder.root) == before
    with pytest.raises(CliError, match="in use"):
        RunFolder(folder.root).hold()  # a second holder in this process is refused too
    folder.release()
    RunFolder(folder.root).hold().release()


def test_lock_is_released_when_the_holder_is_killed(
    tmp_path: Path, one_go: Callable[[str], Path]
) -> None:
    """A run killed outright (SIGKILL) after its first checkpoint: the OS releases the folder's
    lock, and ``--resume`` continues it from the checkpoint (the steps after it lost and
    recorded again) to exactly what the run done in one go records, its TensorBoard events
    included (each step once)."""
    # The worlds run of one_go (--steps does not change it: in memory mode the learner's
    # schedule ends at the switch), alone, with no end in sight.
    argv = [*tiny_argv(*WORLDS, protocol="worlds"), "--no-bounds", "--out", str(tmp_path),
            "--name", "run"]  # fmt: skip
    proc = _cli(*argv, "--steps", "100000")
    root = tmp_path / "run"
    deadline = time.monotonic() + 120
    while not (root / RunFolder.CONFIG).exists():  # config.json: the folder is held by now
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    with pytest.raises(CliError, match="in use"):
        RunFolder(root).hold()
    while not RunFolder(root).latest.exists():  # the first checkpoint (step 20)
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    RunFolder(root).hold().release()  # the OS released the lock with the process
    resumed = _cli("--resume", str(root), "--steps", "60")
    out, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err
    assert "resuming at step 20 of 60" in out or "resuming at step 40 of 60" in out, out
    assert_same_records(one_go("worlds"), root, checkpoint=True)
    assert_events_are_the_store(root)


def test_a_claimed_point_is_not_run_twice(tmp_path: Path) -> None:
    """Two sweeps on one output folder: the point another sweep holds is reported busy."""
    spec = backends.RunSpec(name="p", run_dir=str(tmp_path / "p"), args=("--preset", "tiny"))
    claim = RunFolder(spec.run_dir).claim()
    assert claim is not None
    (res,) = backends.execute(spec)
    assert res.action == "busy" and not (tmp_path / "p").exists()
    claim.release()


@pytest.mark.parametrize("protocol", ["paper", "worlds"])
def test_after_the_freeze_only_what_can_change_is_evaluated(tmp_path: Path, protocol: str) -> None:
    """Memory mode freezes the weights at the switch (30). The worlds protocol's evaluation
    reads only the weights, so it is taken at the switch and never again; the paper's reads the
    live buffer, so it goes on (every 20 steps and at the end)."""
    over: list[str] = []
    if protocol == "worlds":
        over = WORLDS
    loop = open_loop(tmp_path / "run", tiny_config(*over, protocol=protocol))
    evaluated = [res.step for res in loop.steps() if res.evaluation is not None]
    loop.close()
    rows = Recorder(tmp_path / "run", read_only=True).read_eval()["step"].tolist()
    assert rows == evaluated
    assert evaluated == ([20, 30] if protocol == "worlds" else [20, 30, 40, 60])


@pytest.mark.parametrize("how, reason, code", [
    (signal.SIGINT, "Ctrl-C", 130), (signal.SIGTERM, "SIGTERM", 143), ("pause", "PAUSE file", 75),
])  # fmt: skip
def test_a_stop_request_names_its_cause_and_a_nonzero_exit_status(
    tmp_path: Path, how: object, reason: str, code: int
) -> None:
    """Ctrl-C, SIGTERM and a PAUSE file stop a run with a reason and an exit status a script
    can tell from a finished run's 0 (a shell's 128 + signal; 75 for a PAUSE file)."""
    pause = tmp_path / "PAUSE"
    before = signal.getsignal(signal.SIGINT)  # (ignored where a shell started the tests in the background)
    with StopRequest(pause) as stop:
        assert not stop.requested
        if how == "pause":
            pause.touch()
        else:
            os.kill(os.getpid(), how)  # handled here: the flag, no exception
        assert stop.requested and stop.reason == reason and stop.exit_code == code
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored
