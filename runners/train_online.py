"""Online training with mid-stream physics switches: ``python -m runners.train_online``.

The agent lives in a stream of parallel Moving MNIST worlds and learns per step in the base world
(gravity 0); the gravity switches mid-stream and, in ``memory`` mode, only experience (the buffer
and its modulation) can adapt the frozen predictor. The run folder keeps the resolved config, the
per-step metrics and evaluations (``run.zarr``), checkpoints, figures and a summary.

    python -m runners.train_online                         # the default story, ~5 min on a CPU
    python -m runners.train_online --track B --switch 3000:0.5 --switch 6000:0 --steps 9000
    python -m runners.train_online --resume runs/<name>    # continue a stopped run

See docs/train_online.md for every option.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
from tqdm import tqdm

from runners.cli import CliError, run_main
from runners.online.config import (
    RunConfig,
    add_run_arguments,
    apply_resume_options,
    build_config,
    describe,
    load_run_config,
)
from runners.online.loop import OnlineLoop, StepResult, resolve_device
from runners.online.plots import make_figures
from runners.online.rundir import RunPaths, StopRequest, existing_run_dir, new_run_dir
from runners.online.summary import build_summary, curve_report, format_table, write_summary

PROG = "train_online"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"python -m runners.{PROG}",
        description="Online EPM-JEPA training with mid-stream gravity switches "
        "(defaults: track C, stream source, g 0 -> 0.5 at 2/3 of the run, memory mode).",
    )
    add_run_arguments(p)
    return p.parse_args(argv)


def set_threads(device: torch.device) -> None:
    """One intra-op thread on CPU unless TORCH_NUM_THREADS says otherwise: the models are small,
    and on a shared CPU more threads spin against each other (measured 20x slower under load)."""
    if device.type == "cpu":
        torch.set_num_threads(int(os.environ.get("TORCH_NUM_THREADS", "1")))


def postfix(loop: OnlineLoop, rate: float) -> dict[str, str]:
    live = loop.live
    last = live.last
    return {
        "loss": f"{last.get('loss/total', float('nan')):.3f}",
        "pred": f"{last.get('loss/pred', float('nan')):.3f}",
        "s": f"{last.get('memory/surprisal', float('nan')):.3f}",
        "events": f"{live.boundaries_before}+{live.boundaries_after}",
        "buf": f"{int(last.get('memory/buffer_size', 0))}"
        f"({100 * last.get('memory/shift_share', 0.0):.0f}%shift)",
        "err": f"{live.rolling_error:.3f}",
        "g": f"{loop.gravity:g}",
        "it/s": f"{rate:.1f}",
    }


def run(loop: OnlineLoop, cfg: RunConfig, stop: StopRequest) -> str | None:
    """Iterate the loop under a progress bar; returns the stop reason (None when complete)."""
    start = loop.step_count
    bar = tqdm(
        total=cfg.steps,
        initial=start,
        desc="step",
        unit="step",
        dynamic_ncols=True,
        file=sys.stdout,
        mininterval=0.5 if sys.stdout.isatty() else 15.0,  # a log file: a line per 15 s
    )
    t0, n0 = time.perf_counter(), start
    res: StepResult
    try:
        for res in loop.steps():
            if res.block is not None:
                bar.update(res.step - bar.n)
                now = time.perf_counter()
                rate = (res.step - n0) / max(now - t0, 1e-9)
                bar.set_postfix(postfix(loop, rate), refresh=False)
            if res.switched:
                mode = "weights frozen (memory mode)" if loop.frozen else "weights keep learning"
                tqdm.write(f"step {res.step - 1}: gravity -> {res.gravity:g}; {mode}")
            if res.evaluation is not None:
                e = res.evaluation
                tqdm.write(
                    f"step {e.step}: D_base {e.d_base:.3f}  D_shift^{cfg.headline_n} "
                    f"{e.d(cfg.headline_n):.3f}  D_shift^0 {e.d(0):.3f}  sigma_embed "
                    f"{e.sigma_embed:.3f}"
                )
        bar.update(loop.step_count - bar.n)
    finally:
        bar.close()
    return stop.reason if not loop.done else None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.resume:
        paths = existing_run_dir(args.resume)
        cfg = apply_resume_options(load_run_config(paths.root), args)
        cfg.save(paths.config)
    else:
        cfg = build_config(args)
        paths = None
    set_threads(resolve_device(cfg.device))  # a bad --device fails before any folder exists
    stop = StopRequest()
    with stop:
        if paths is None:
            paths = new_run_dir(cfg.out, cfg.name, cfg.track, cfg.seed)
        stop.pause_file = paths.pause
        try:
            loop = OnlineLoop(cfg, paths, resume=bool(args.resume), stop=stop, log=print)
        except CliError:
            if not args.resume and not (paths.latest.exists()):
                _remove_empty_run(paths)
            raise
        print(f"{PROG}: {describe(cfg)}")
        print(f"{PROG}: run folder {paths.root} ({loop.device}, {cfg.agent.batch_size} streams)")
        if args.resume:
            if loop.step_count > cfg.steps:
                raise CliError(
                    f"--steps {cfg.steps} is below the {loop.step_count} steps this run has done"
                )
            print(f"{PROG}: resuming at step {loop.step_count} of {cfg.steps}")
        reason = run(loop, cfg, stop)
        if reason is None and loop.step_count >= cfg.steps:
            final = finish(loop, cfg, paths)
            print(format_table(final))
            print(f"run folder: {paths.root}")
            return 0
        # Stopped early: the checkpoint holds everything; the metrics match it exactly.
        loop.checkpoint()
        summarise(loop, cfg, paths, final_curve=None, stopped=reason)
        print(
            f"{PROG}: stopped by {reason} at step {loop.step_count} of {cfg.steps} "
            f"(checkpoint written). Continue with:\n"
            f"  python -m runners.{PROG} --resume {paths.root}"
        )
        return 0


def finish(loop: OnlineLoop, cfg: RunConfig, paths: RunPaths) -> dict[str, Any]:
    """The adaptation curve at the end, figures and the summary."""
    rep = curve_report(
        loop.adaptation(cfg.final_ns), step=loop.step_count, checkpoint=str(paths.latest),
        data=cfg.data or "generated in memory (env.generate_sequences)",
        horizons=list(cfg.agent.horizons),
    )
    (paths.checkpoints / "latest.eval.json").write_text(json.dumps(rep, indent=2) + "\n")
    return summarise(loop, cfg, paths, final_curve=rep["curve"], stopped=None)


def summarise(
    loop: OnlineLoop,
    cfg: RunConfig,
    paths: RunPaths,
    *,
    final_curve: list[dict[str, Any]] | None,
    stopped: str | None,
) -> dict[str, Any]:
    """Figures, summary.json and summary.md from the run folder (complete or stopped)."""
    make_figures(paths.root)
    s = build_summary(
        paths.root, cfg, wall_time=loop.wall_time, final_curve=final_curve,
        best=(loop.best, loop.best_step), stopped=stopped,
    )
    write_summary(paths.root, s)
    return s


def _remove_empty_run(paths: RunPaths) -> None:
    """A run that failed before its first step leaves no folder behind."""
    import shutil

    if paths.root.exists() and not paths.latest.exists():
        shutil.rmtree(paths.root, ignore_errors=True)


if __name__ == "__main__":
    run_main(main, f"python -m runners.{PROG}")
