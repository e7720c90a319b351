"""Online training with mid-stream physics switches: ``python -m runners.train_online``.

The agent lives in parallel Moving MNIST streams and learns per step. By default (the worlds
protocol) each stream lives in its own world drawn from a training family, redrawn every episode;
at 2/3 of the run every stream moves to a held-out world and, in ``memory`` mode, the weights
freeze, so only experience (each stream's memory and its modulation) can adapt the predictor.
``--protocol paper`` runs the paper's instead: one base world (gravity 0) and a mid-stream
switch (the gravity by default; its direction, restitution and friction too). The run folder keeps the resolved config, the
per-step metrics and evaluations (``run.zarr``), checkpoints, figures and a summary.

    python -m runners.train_online                         # the default story, about 5 min on a 2-core CPU
    python -m runners.train_online --track B --switch 3000:0.5 --switch 6000:0 --steps 9000
    python -m runners.train_online --switch 3000:gravity=0.5,direction=45,friction=0.01
    python -m runners.train_online --resume runs/<name>    # continue a stopped run

The command line is generated from ``RunConfig`` (``runners.online.config``): every field of it,
the learner's included, is an option; ``--help`` lists them; see docs/train_online.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from runners.cli import CliError, ensure_output_dir, run_main
from runners.online.command import TRAIN_PROG, TrainCommand, parse_command, resume_config
from runners.online.config import RunConfig, check_stacked, resolve
from runners.online.rundir import RunFolder, StopRequest, existing_run_folder, new_run_folder


def parse(argv: Sequence[str]) -> TrainCommand:
    """The command line, generated from ``RunConfig`` (``--help`` lists every field)."""
    return parse_command(argv, prog=TRAIN_PROG)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)  # torch and the training code load after it: --help and errors are quick
    from runners.online.job import train, train_stacked
    from runners.online.parts import resolve_device, set_threads

    prog = TRAIN_PROG
    folders: list[RunFolder] = []
    if args.resume:
        if args.stack_seeds:
            raise CliError("--stack-seeds cannot be given with --resume: the runs stacked "
                           f"together are listed in the run folder's {STACK_FILE}")  # fmt: skip
        folder = existing_run_folder(args.resume)  # held by this process from here on
        folders = [folder] + [existing_run_folder(p) for p in stacked_with(folder)]
        cfgs = [resume_config(f.read_config(), argv, prog=prog) for f in folders]
    else:
        cfgs = stacked_configs(resolve(args.run), args.stack_seeds)  # --config, then the options
    if args.dry_run:
        print("\n".join(json.dumps(c.to_dict(), indent=2) for c in cfgs))
        return 0
    for f, c in zip(folders, cfgs, strict=False):  # a resumed run's, its changes included
        c.save(f.config)
    set_threads(resolve_device(cfgs[0].device))  # a bad --device fails before any folder exists
    with StopRequest() as stop, contextlib.ExitStack() as held:
        if not folders:
            out = cfgs[0].output
            ensure_output_dir(out.out, "--out")
            for c in cfgs:
                folders.append(new_run_folder(out.out, c.output.name, c.agent.track, c.agent.seed))
                held.enter_context(folders[-1])
            if len(folders) > 1:
                names = [f.root.name for f in folders]
                for f in folders:
                    (f.root / STACK_FILE).write_text(json.dumps({"runs": names}, indent=2) + "\n")
        else:
            for f in folders:
                held.enter_context(f)  # released at the end (the OS releases it on any exit)
        if len(folders) > 1:
            return train_stacked(cfgs, folders, stop, resume=bool(args.resume))
        return train(cfgs[0], folders[0], stop, resume=bool(args.resume))


#: In each run folder of a stacked set: the set's folder names, in stack order.
STACK_FILE = "stack.json"


def stacked_configs(cfg: RunConfig, seeds: Sequence[int]) -> list[RunConfig]:
    """``cfg`` and, for each of ``seeds``, ``cfg`` with that seed; with a --name NAME, every
    seed's run folder (``cfg``'s too) is NAME-s<SEED>."""
    if not seeds:
        return [cfg]
    all_seeds = [cfg.agent.seed, *seeds]
    if len(set(all_seeds)) != len(all_seeds):
        raise CliError(f"--stack-seeds: every seed once, --seed {cfg.agent.seed} included; got "
                       f"{' '.join(map(str, all_seeds))}")  # fmt: skip
    check_stacked(cfg)
    name = cfg.output.name
    out = []
    for s in all_seeds:
        output = dataclasses.replace(cfg.output, name=None if name is None else f"{name}-s{s}")
        out.append(dataclasses.replace(cfg, agent=cfg.agent.replace(seed=s), output=output))
    return out


def stacked_with(folder: RunFolder) -> list[Path]:
    """The other run folders stacked with ``folder`` (its ``STACK_FILE``; none without one)."""
    path = folder.root / STACK_FILE
    if not path.exists():
        return []
    try:
        names = json.loads(path.read_text())["runs"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CliError(f"--resume {folder.root}: damaged {STACK_FILE} ({err})") from None
    return [folder.root.parent / n for n in names if n != folder.root.name]


if __name__ == "__main__":
    run_main(main, TRAIN_PROG)
