"""The adaptation curve of a checkpoint: ``python -m runners.evaluate RUN_DIR_OR_CHECKPOINT``.

For each n, n shift-world transitions are pushed into a copy of the checkpoint's memory and the
frozen learner is scored on the shift test split (D_shift^n, per horizon and overall) and the base
test split (D_base); sigma_embed and the excluded samples are reported too. Printed as a table and
written as JSON next to the checkpoint (``checkpoints/latest.eval.json``).

    python -m runners.evaluate runs/my-run                       # its latest checkpoint
    python -m runners.evaluate runs/my-run/checkpoints/best.pt --n 0 50
    python -m runners.evaluate runs/my-run --data data/paper.zarr

Without ``--data`` the evaluation splits are generated in memory, deterministically, with
``env.generate_sequences`` (the generator of ``make_dataset``) and the sizes and seed of the run's
config; with ``--data`` the store's shift train/test and base test splits are used whole.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from runners.cli import CliError, ensure_output_dir, run_main
from runners.online.command import config_from_dict
from runners.online.config import RunConfig, resolve
from runners.online.job import set_threads
from runners.online.parts import make_eval_data, open_store, resolve_device
from runners.online.rundir import RunFolder
from runners.online.summary import curve_report, format_curve

PROG = "evaluate"
CURVE = (0, 10, 25, 50, 100, 256)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"python -m runners.{PROG}",
        description="Adaptation curve D_shift^n (per horizon), D_base, sigma_embed of a checkpoint.",
    )
    p.add_argument("path", metavar="RUN_DIR_OR_CHECKPOINT",
                   help="a run folder (uses checkpoints/<--checkpoint>.pt) or a .pt file")
    p.add_argument("--checkpoint", choices=("latest", "best"), default="latest",
                   help="which checkpoint of a run folder (default latest)")
    p.add_argument("--data", metavar="PATH.zarr", help="evaluate on a make_dataset store")
    p.add_argument("--n", type=int, nargs="+", default=list(CURVE), metavar="N",
                   help=f"memory sizes (default {' '.join(map(str, CURVE))})")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--out", metavar="FILE.json", help="where to write the JSON "
                   "(default: <checkpoint>.eval.json next to the checkpoint)")
    return p.parse_args(argv)


def locate(path: str, which: str) -> tuple[Path, RunFolder | None]:
    """(checkpoint file, its run folder or None)."""
    p = Path(path)
    if p.is_dir():
        folder = RunFolder(p)
        ckpt = folder.checkpoint(which)
        if not ckpt.is_file():
            raise CliError(
                f"{p}: no {ckpt.relative_to(p)} (not a run folder, or no checkpoint yet)"
            )
        return ckpt, folder
    if p.is_file():
        folder = RunFolder(p.parent.parent)
        return p, folder if folder.is_run() else None
    raise CliError(f"{p}: no such run folder or checkpoint file")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if any(n < 0 for n in args.n):
        raise CliError("--n: memory sizes must be >= 0")
    ns = tuple(sorted(set(args.n)))
    ckpt, folder = locate(args.path, args.checkpoint)
    out = Path(args.out) if args.out else RunFolder.curve_path(ckpt)
    ensure_output_dir(out.parent, "the folder of --out" if args.out else "the checkpoint's folder")
    device = resolve_device(args.device)
    set_threads(device)

    from agent import (
        CheckpointError,
        Learner,
        adaptation_curve,
        load_checkpoint,
        read_checkpoint_config,
    )

    try:
        agent_cfg = read_checkpoint_config(ckpt)
    except CheckpointError as err:
        raise CliError(str(err)) from None
    if folder is not None:
        cfg = config_from_dict(folder.read_config())
    else:  # a checkpoint on its own: the default evaluation sizes, the checkpoint's seed
        cfg = RunConfig(track=agent_cfg.track, seed=agent_cfg.seed, switches=())
        cfg = resolve(cfg, build_agent=False)
    cfg.agent = agent_cfg
    store = None
    if args.data:
        store = open_store(args.data)
        cfg.data = args.data
        cfg.eval_shift_train = cfg.eval_shift_test = cfg.eval_base_test = 10**9  # whole splits
    data = make_eval_data(cfg, store)

    learner = Learner(agent_cfg, device=device)
    try:
        extra = load_checkpoint(ckpt, learner=learner, map_location=device)
    except CheckpointError as err:
        raise CliError(str(err)) from None
    results = adaptation_curve(learner, data, ns=ns)
    rep = curve_report(
        list(results), step=int(learner.step), checkpoint=str(ckpt),
        data=args.data or "generated in memory (env.generate_sequences)",
        horizons=list(agent_cfg.horizons),
    )
    rep["run_step"] = extra.get("run_step", learner.step) if isinstance(extra, dict) else None
    print(f"{ckpt} (track {agent_cfg.track}, step {learner.step}); data: {rep['data']}")
    print(format_curve(rep))
    try:
        out.write_text(json.dumps(rep, indent=2) + "\n")
    except OSError as err:
        raise CliError(f"cannot write {out}: {err.strerror or err}") from None
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    run_main(main, f"python -m runners.{PROG}")
