"""Online training with mid-stream physics switches: ``python -m runners.train_online``.

The agent lives in parallel Moving MNIST streams and learns per step. By default (the worlds
protocol) each stream lives in its own world drawn from a training family, redrawn every episode;
at 2/3 of the run every stream moves to a held-out world and, in ``memory`` mode, the weights
freeze, so only experience (each stream's memory and its modulation) can adapt the predictor.
``--protocol paper`` runs the paper's instead: one base world (gravity 0) and a mid-stream
switch (the gravity by default; its direction, restitution and friction too). The run folder keeps the resolved config, the
per-step metrics and evaluations (``run.zarr``), checkpoints, figures and a summary.

    python -m runners.train_online                         # the default story, about 3 min on a 2-core CPU
    python -m runners.train_online --track B --switch 3000:0.5 --switch 6000:0 --steps 9000
    python -m runners.train_online --switch 3000:gravity=0.5,direction=45,friction=0.01
    python -m runners.train_online --resume runs/<name>    # continue a stopped run

The command line is generated from ``RunConfig`` (``runners.online.config``): every field of it,
the learner's included, is an option; ``--help`` lists them; see docs/train_online.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from runners.cli import ensure_output_dir, run_main
from runners.online.command import TrainCommand, parse_command, resume_config
from runners.online.config import resolve
from runners.online.job import PROG, set_threads, train
from runners.online.parts import resolve_device
from runners.online.rundir import StopRequest, existing_run_folder, new_run_folder


def parse(argv: Sequence[str]) -> TrainCommand:
    """The command line, generated from ``RunConfig`` (``--help`` lists every field)."""
    return parse_command(argv, prog=f"python -m runners.{PROG}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    folder = None
    if args.resume:
        folder = existing_run_folder(args.resume)  # held by this process from here on
        cfg = resume_config(folder.read_config(), argv, prog=f"python -m runners.{PROG}")
        cfg.save(folder.config)
    else:
        cfg = resolve(args.run)  # --config FILE, the options, --set
    set_threads(resolve_device(cfg.device))  # a bad --device fails before any folder exists
    with StopRequest() as stop:
        if folder is None:
            out = cfg.output
            ensure_output_dir(out.out, "--out")
            folder = new_run_folder(out.out, out.name, cfg.agent.track, cfg.agent.seed)
        with folder:  # released at the end (the OS releases it on any exit)
            return train(cfg, folder, stop, resume=bool(args.resume))


if __name__ == "__main__":
    run_main(main, f"python -m runners.{PROG}")
