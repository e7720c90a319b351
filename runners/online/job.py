"""The main job around the loop: a held run folder, a progress bar, a clean stop, the ending.

``train(cfg, folder, resume=...)`` is what ``python -m runners.train_online`` runs once it has
parsed its config: open the loop (``OnlineLoop.open``), iterate it under a tqdm bar that prints
every switch and evaluation, and finish with the adaptation curve, the figures and the summary,
or, when stopped (Ctrl-C, SIGTERM, a PAUSE file), with a checkpoint and a summary marked
``stopped``.
"""

from __future__ import annotations

import io
import json
import math
import shutil
import sys
import time
from typing import Any, TextIO

from tqdm import tqdm

from runners.cli import CliError, os_error_message
from runners.online import bounds
from runners.online.config import RunConfig, describe, precision_note
from runners.online.events import write_ending
from runners.online.loop import OnlineLoop
from runners.online.plots import bounds_figure, make_figures
from runners.online.rundir import RunFolder, StopRequest
from runners.online.strips import prediction_figure, run_strips, split_strips
from runners.online.summary import (
    build_summary,
    curve_report,
    format_markdown,
    format_table,
    write_summary,
)
from runners.online.switch import physics_label

PROG = "train_online"


def postfix(loop: OnlineLoop, rate: float) -> dict[str, str]:
    """The progress bar's figures: the last losses, surprisal and memory, the rolling error."""
    live, last = loop.records, loop.records.last
    loss, pred, s = (last.get(k, math.nan) for k in ("loss/total", "loss/pred", "memory/surprisal"))
    return {"loss": f"{loss:.3f}", "pred": f"{pred:.3f}", "s": f"{s:.3f}",
            "events": f"{live.boundaries_before}+{live.boundaries_after}",
            "buf": f"{int(last.get('memory/buffer_size', 0))}"
                   f"({100 * last.get('memory/shift_share', 0.0):.0f}%shift)",
            "err": f"{live.rolling_error:.3f}", "g": f"{loop.gravity:g}", "it/s": f"{rate:.1f}"}


def iterate(loop: OnlineLoop) -> str | None:
    """Iterate the loop under a progress bar; returns the stop reason (None when complete)."""
    cfg = loop.cfg
    bar = progress_bar(cfg.schedule.steps, loop.step_count)
    t0, n0 = time.perf_counter(), loop.step_count
    try:
        for res in loop.steps():
            if res.block is not None:
                bar.update(res.step - bar.n)
                rate = (res.step - n0) / max(time.perf_counter() - t0, 1e-9)
                bar.set_postfix(postfix(loop, rate), refresh=False)
            if res.switched:
                mode = "weights frozen (memory mode)" if loop.frozen else "weights keep learning"
                tqdm.write(f"step {res.step - 1}: physics -> {physics_label(res.physics)}; {mode}")
            if (e := res.evaluation) is not None:
                n = cfg.schedule.headline_n
                tqdm.write(f"step {e.step}: D_base {e.d_base:.3f}  D_shift^{n} {e.d(n):.3f}  "
                           f"D_shift^0 {e.d(0):.3f}  sigma_embed {e.sigma_embed:.3f}  "
                           f"sigma_z/target {e.sigma_z:.3f}/{e.sigma_target:.3f}")
        bar.update(loop.step_count - bar.n)
    finally:
        bar.close()
    return loop.stop.reason if not loop.done else None


class Lines(io.TextIOBase):
    """tqdm's output into a file or a pipe: each refresh a line of its own, no carriage
    returns (a terminal's bar redraws itself; a log keeps lines)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, text: str) -> int:
        line = text.replace("\r", "").strip("\n")
        if line.strip():
            self.out.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.out.flush()


def progress_bar(steps: int, done: int) -> tqdm:
    """The progress bar of ``done`` of ``steps`` steps on stdout (to a log file or a pipe, a
    line per 15 s)."""
    tty = sys.stdout.isatty()
    return tqdm(total=steps, initial=done, desc="step", unit="step", dynamic_ncols=True,
                file=sys.stdout if tty else Lines(sys.stdout), mininterval=0.5 if tty else 15.0)


def train(cfg: RunConfig, folder: RunFolder, stop: StopRequest, *, resume: bool) -> int:
    """Run (or continue) the online run in ``folder`` (held by this process) to its end or to a
    stop request; at its end, with its floor and ceiling as heads on its latent
    (``agent.heads``), the bounds (``runners.online.bounds``). 0 at its end; stopped,
    ``StopRequest.exit_code`` (continued with ``--resume``)."""
    s = run(cfg, folder, stop, resume=resume)
    if s is None:
        return stop.exit_code
    if (b := bounds.from_heads(s, cfg.schedule.headline_n)) is not None:
        s["bounds"] = b  # the floor and the ceiling fit as heads on the run's latent
        bounds_figure(folder, s)
    elif cfg.bounds and s.get("held_out"):  # a held-out report, no heads to place it between
        print(f"{PROG}: no floor or ceiling: they fit as heads on a settled latent (--settle)")
    end(folder.root, s)  # once, complete: the run folder is finished from here on
    return 0


def end(root: Any, s: dict[str, Any]) -> None:
    """Write a finished run's summary, and its ending in TensorBoard, and print it."""
    write_ending(root, s, format_markdown(s))
    write_summary(root, s)
    print(format_table(s))
    print(f"run folder: {root}")


def stopped(loops: list[OnlineLoop], reason: str | None, written: str) -> None:
    """Runs stopped early: a checkpoint of each (the metrics match it exactly), a summary marked
    ``stopped``, and how to continue them (``--resume`` on the first)."""
    for loop in loops:
        loop.checkpoint()
        loop.close()
        write_summary(loop.folder.root, summarise(loop, final_curve=None, stopped=reason))
    first = loops[0]
    print(f"{PROG}: stopped by {reason} at step {first.step_count} of {first.cfg.schedule.steps} "
          f"({written} written). Continue with:\n"
          f"  python -m runners.{PROG} --resume {first.folder.root}")


def run(cfg: RunConfig, folder: RunFolder, stop: StopRequest, *, resume: bool
        ) -> dict[str, Any] | None:  # fmt: skip
    """Run (or continue) one run to its end (its summary, for the caller to write) or to a stop
    request (None: a checkpoint and a summary marked stopped are written)."""
    stop.pause_file = folder.pause
    try:
        loop = OnlineLoop.open(cfg, folder, resume=resume, stop=stop, log=print)
    except CliError:
        if not resume:
            remove_empty_run(folder)
        raise
    print(f"{PROG}: {describe(cfg)}")
    print(f"{PROG}: {precision_note(cfg)}")
    print(f"{PROG}: run folder {folder.root} ({loop.device}, {cfg.agent.batch_size} streams)")
    if resume:
        if loop.step_count > cfg.schedule.steps:
            raise CliError(f"--steps {cfg.schedule.steps} is below the {loop.step_count} steps this run has done")
        if loop.step_count == cfg.schedule.steps:
            print(f"{PROG}: the run had finished its {cfg.schedule.steps} steps: its ending again "
                  "(a larger --steps trains on)")
        else:
            print(f"{PROG}: resuming at step {loop.step_count} of {cfg.schedule.steps}")
    try:
        reason = iterate(loop)
    except OSError as err:  # a full or vanished disk mid-run: say what survived
        kept = (f"{folder.latest} (step {loop.saved_step}) is intact: free space and continue "
                f"with python -m runners.{PROG} --resume {folder.root}"
                if loop.saved_step is not None
                else "no checkpoint was written yet: free space and start again")
        raise CliError(f"{os_error_message(err)}; {kept}") from None
    if reason is None and loop.step_count >= cfg.schedule.steps:
        return finish(loop)
    stopped([loop], reason, "checkpoint")
    return None


def train_stacked(cfgs: list[RunConfig], folders: list[RunFolder], stop: StopRequest, *,
                  resume: bool) -> int:  # fmt: skip
    """Run (or continue) S runs of one configuration but for the seed, each in its folder,
    trained as one stacked learner (``runners.online.stacked``); each run's ending (curve,
    figures, summary) as a lone run's. A stop request checkpoints every run (continue with
    ``--resume`` on the first)."""
    from runners.online.stacked import open_stacked

    stop.pause_file = folders[0].pause
    stack = open_stacked(cfgs, folders, resume=resume, stop=stop, log=print)
    loops = stack.loops
    seeds = " ".join(str(c.agent.seed) for c in cfgs)
    print(f"{PROG}: seeds {seeds} stacked: {describe(cfgs[0])}")
    print(f"{PROG}: {precision_note(cfgs[0])}")
    for loop in loops:
        print(f"{PROG}: run folder {loop.folder.root} (seed {loop.cfg.agent.seed})")
    steps = cfgs[0].schedule.steps
    if any(loop.step_count > steps for loop in loops):
        raise CliError(f"--steps {steps} is below the {loops[0].step_count} steps these runs have done")
    bar = progress_bar(steps, loops[0].step_count)
    try:
        while not stack.done and not stop.requested:
            results = stack.step()
            if results[0].block is not None:
                bar.update(results[0].step - bar.n)
        bar.update(loops[0].step_count - bar.n)
    finally:
        bar.close()
    if not stack.done:
        stopped(loops, stop.reason, "checkpoints")
        return stop.exit_code
    stack.sync()
    for loop in loops:
        end(loop.folder.root, finish(loop))
    return 0


def finish(loop: OnlineLoop) -> dict[str, Any]:
    """The adaptation curve at the end (read back when an earlier session of this run already
    computed it at this step), figures and the summary."""
    cfg, folder = loop.cfg, loop.folder
    path = RunFolder.curve_path(folder.latest)
    rep = folder.read_json(path)
    if rep is None or rep.get("step") != loop.step_count:
        rep = curve_report(
            loop.evaluator.curve(loop.learner, cfg.schedule.final_ns), step=loop.step_count,
            checkpoint=str(folder.latest),
            data=cfg.protocol.data or "generated in memory (env.generate_sequences)",
            horizons=list(cfg.agent.horizons))
        held = loop.evaluator.report(loop.learner, cfg.schedule.final_ns,
                                     RunFolder.strips_path(folder.latest))
        if held is not None:  # worlds: the held-out worlds' D^n per memory
            rep["held_out"] = held
        path.write_text(json.dumps(rep, indent=2) + "\n")
    s = summarise(loop, final_curve=rep["curve"], stopped=None, held_out=rep.get("held_out"))
    loop.close()
    prediction_figure(folder.figures / "predictions.png", split_strips(run_strips(folder)),
                      cfg.agent.track)  # its own rows and its heads' (bounds as runs: ``train``)
    return s


def summarise(loop: OnlineLoop, *, final_curve: list[dict[str, Any]] | None,
              stopped: str | None, held_out: dict[str, Any] | None = None) -> dict[str, Any]:
    """The figures (from run.zarr) and the summary (from the loop's records) of a run, complete
    or stopped."""
    make_figures(loop.folder.root)
    return build_summary(loop.folder.root, loop.cfg, loop.records, loop.evals,
                         wall_time=loop.wall_time, final_curve=final_curve,
                         best=(loop.best, loop.best_step), stopped=stopped, held_out=held_out)


def remove_empty_run(folder: RunFolder) -> None:
    """A run that failed before its first checkpoint leaves no folder behind."""
    if folder.root.exists() and not folder.latest.exists():
        folder.release()
        shutil.rmtree(folder.root, ignore_errors=True)
