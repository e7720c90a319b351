"""Where a `train_online` loop step's time goes: the whole step, the world's feed alone and the
learner's update alone, each timed back to back (the device synchronised around each timing,
so on a GPU they are the device's own time where it is the bottleneck), then, with
``--profile``, torch.profiler's top operations by host and by device time.

    python -m benchmarks.profile_loop --device cuda --preset paper --protocol paper --capture
    python -m benchmarks.profile_loop --preset cpu --protocol worlds --profile   # on a CPU

The loop is `OnlineLoop` as `train_online` builds it (no evaluations or checkpoints inside the
timings; metric blocks flush every ``log_every`` steps as in a run), warmed up first (optimizer
state, the captured step's warm-up and capture). docs/throughput.md#on-a-gpu-one-nvidia-h100
gives its figures on an H100.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from runners.online.command import build_config
from runners.online.loop import OnlineLoop
from runners.online.rundir import RunFolder

NEVER = 10**9  # a step the loop never reaches (no evaluation, checkpoint or switch inside it)


def build_loop(args: argparse.Namespace, root: Path) -> OnlineLoop:
    own = (["--eval-worlds", "2", "--eval-world-seqs", "4", "--base-worlds", "1",
            "--base-world-seqs", "4"] if args.protocol == "worlds" else
           ["--set", "eval_shift_train=8", "--set", "eval_base_test=8"])  # fmt: skip
    cfg = build_config([
        "--protocol", args.protocol, "--preset", args.preset, "--track", args.track,
        "--device", args.device, "--steps", str(NEVER), "--no-switch", "--eval-every", str(NEVER),
        "--checkpoint-every", str(NEVER), "--set", "eval_shift_test=8", *own,
        *(["--capture", "--no-stream-cache"] if args.capture else []),
    ])  # fmt: skip
    folder = RunFolder(root / "run")
    folder.make()
    return OnlineLoop.open(cfg, folder, log=lambda msg: None)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def per_call_ms(fn: Callable[[], object], n: int, device: torch.device) -> float:
    """Milliseconds per call of ``fn`` over ``n`` calls back to back."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / n * 1e3


def profile_steps(loop: OnlineLoop, device: torch.device, n: int = 100) -> None:
    """torch.profiler's top operations over ``n`` loop steps, by host (and device) time."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(n):
            loop.step()
        sync(device)
    table = prof.key_averages()
    print(table.table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=50))
    if device.type == "cuda":
        print(table.table(sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=50))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="paper", choices=("tiny", "cpu", "gpu", "paper"))
    p.add_argument("--protocol", default="paper", choices=("paper", "worlds"))
    p.add_argument("--track", default="C", choices=("A", "B", "C", "D", "E"))
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--capture", action="store_true", help="the update from CUDA graphs "
                   "(train_online --capture, with stream_cache=false)")  # fmt: skip
    p.add_argument("--steps", type=int, default=400, help="steps per timing (default 400)")
    p.add_argument("--warmup", type=int, default=300, help="untimed steps first (default 300)")
    p.add_argument("--profile", action="store_true", help="torch.profiler tables of 100 steps")
    args = p.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: torch sees no CUDA device", file=sys.stderr)
        return 2
    if args.steps < 1 or args.warmup < 0:
        print("error: --steps must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        loop = build_loop(args, Path(tmp))
        device = loop.learner.device
        for _ in range(args.warmup):
            loop.step()
        step = per_call_ms(loop.step, args.steps, device)
        feed = per_call_ms(loop.feed.next, args.steps, device)
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
        print(f"{args.preset} preset, {args.protocol} protocol, track {args.track}, "
              f"{'captured' if args.capture else 'plain'} step, {name}:")  # fmt: skip
        print(f"  loop step     {step:8.3f} ms  ({1e3 / step:,.0f} steps/s)")
        print(f"  feed alone    {feed:8.3f} ms")
        if args.profile:
            profile_steps(loop, device)
        # Last: updates outside the loop leave its metric records behind (nothing is kept).
        batch = loop.feed.next()
        update = per_call_ms(lambda: loop.learner.update(batch), args.steps, device)
        print(f"  update alone  {update:8.3f} ms  (one batch again and again)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
