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

A run of the worlds protocol (``train_online``'s default) is evaluated as it evaluates itself:
D_shift^n on the switch world with each sequence's own n transitions as memory, D_base^n on
training-family worlds, and the held-out worlds' curves (own, same-world and wrong-world memory),
the probes of the digits' positions and moves from the latents (held-out R^2 and px), the
reference check (D against the EMA target's own "no change") and perfect physics in the latent
(the env's simulator branched from each test sequence, ``probes.perfect_physics``), printed and
in the JSON's ``held_out``; memory sizes default to 0 1 5 10 25 50.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import tyro

from runners.cli import CliError, ensure_output_dir, parse, run_main
from runners.online.bounds import interval_table
from runners.online.command import config_from_dict
from runners.online.config import Device, Paper, RunConfig, Schedule, Worlds, resolve
from runners.online.evaluation import WorldsEvaluator, world_probe_report
from runners.online.parts import resolve_device, set_threads
from runners.online.protocols import PROTOCOLS
from runners.online.rundir import RunFolder
from runners.online.summary import (
    curve_report,
    format_curve,
    held_out_tables,
    tables_text,
    world_probe_table,
)

if TYPE_CHECKING:
    from agent import AgentConfig, Learner

PROG = "evaluate"


@dataclass
class Evaluate:
    """Adaptation curve D_shift^n (per horizon), D_base, sigma_embed of a checkpoint."""

    path: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="RUN_DIR_OR_CHECKPOINT")]
    """a run folder (uses checkpoints/<--checkpoint>.pt) or a .pt file"""
    checkpoint: Literal["latest", "best"] = "latest"
    """which checkpoint of a run folder"""
    data: Annotated[str | None, tyro.conf.arg(metavar="PATH.zarr")] = None
    """evaluate on a make_dataset store"""
    n: Annotated[tuple[int, ...] | None, tyro.conf.arg(metavar="N [N ...]")] = None
    """memory sizes (default 0 10 25 50 100 256; a worlds-protocol run: 0 1 5 10 25 50)"""
    target_reference: bool = False
    """also D_shift^50 against the EMA target's own 'no change' and the gap between the online and EMA latents of the input frames (paper protocol; see agent.target_reference): a frozen EMA target lowers D through that gap"""
    world_probe: bool = False
    """worlds protocol: also the world probe, D of two predictors (the learner's shape: 2 residual blocks of 256, the world in each by adaLN-Zero) fit offline on the frozen EMA-target latents of training-family worlds, one also told the world's physics, on the held-out worlds: what knowing the world is worth on these latents (docs/definitions.md#the-world-probe; about two minutes on a CPU)"""
    probe_worlds: int = 400
    """--world-probe: training-family worlds to fit on (96 sequences each)"""
    probe_steps: int = 1000
    """--world-probe: AdamW steps of each predictor (minibatches of 256, a one-cycle rate to 2e-3)"""
    probe_window: Literal["first", "input"] = "first"
    """--world-probe: each sequence's window starts at its first frame, or ends its context at the held-out evaluation's input frame (where D^n and perfect physics are measured)"""
    eval_worlds: int | None = None
    """worlds protocol: held-out worlds a family (default: the run's, 8), e.g. 24 for paired intervals about a third narrower at three times the report's cost (docs/results.md#one-latent-every-head)"""
    eval_world_seqs: int | None = None
    """worlds protocol: test sequences a held-out world (default: the run's, 96)"""
    predictions: Annotated[str | None, tyro.conf.arg(metavar="PNG")] = None
    """worlds protocol: also draw the decoded predictions into PNG (the figure of a run's figures/predictions.png: a few sequences of each held-out family, true and decoded; the floor's and the ceiling's rows from the run folder's bounds, as they ended; docs/definitions.md#the-pixel-decoder)"""
    device: Device = "auto"
    """where the learner runs"""
    out: Annotated[str | None, tyro.conf.arg(metavar="FILE.json")] = None
    """where to write the JSON (default: <checkpoint>.eval.json next to the checkpoint)"""


def format_reference(ref: dict) -> str:
    """The --target-reference lines."""
    return (
        f"D_shift^{ref['n']}: {ref['d_shift']:.4f} (reference: the online latent of the input "
        f"frame), {ref['d_shift_target_ref']:.4f} (reference: its EMA target latent)\n"
        f"  error ||zbar_k - zhat|| {ref['error']:.3f}; reference distances ||zbar_k - z|| "
        f"{ref['ref_online']:.3f}, ||zbar_k - zbar|| {ref['ref_target']:.3f}\n"
        f"  online - EMA latent gap of the input frames {ref['latent_gap']:.3f} "
        f"(EMA latent norm {ref['latent_norm']:.3f})"
    )


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


def run_config(ckpt: Path, folder: RunFolder | None) -> RunConfig:
    """The config to evaluate ``ckpt`` under: its run folder's, or (a checkpoint on its own) the
    default one of its protocol; its ``agent`` is the checkpoint's."""
    from agent import CheckpointError, read_checkpoint_config

    try:
        agent_cfg = read_checkpoint_config(ckpt)
    except CheckpointError as err:
        raise CliError(str(err)) from None
    if folder is not None:
        cfg = config_from_dict(folder.read_config())
    else:  # a checkpoint on its own: the default evaluation sizes, the checkpoint's seed; a
        # memory per world says the worlds protocol
        worlds = agent_cfg.memory_scope == "group"
        protocol = Worlds() if worlds else Paper()
        cfg = resolve(RunConfig(protocol=protocol, schedule=Schedule(switches=())))
    cfg.agent = agent_cfg
    return cfg


def check_options(args: Evaluate, cfg: RunConfig) -> None:
    """Refuses (``CliError``) the options that do not fit the run's protocol (each protocol
    names its own: ``evaluate_options``) or agent; applies the held-out worlds' sizes."""
    for kind, protocol in PROTOCOLS.items():
        for name in set(protocol.evaluate_options) - set(cfg.protocol.evaluate_options):
            if getattr(args, name) not in (None, False):
                raise CliError(f"--{name.replace('_', '-')}: a {kind}-protocol run only")
    if args.predictions and not cfg.schedule.decoder_steps:
        raise CliError("--predictions: a run with a pixel decoder (--decoder-steps > 0) only")
    if args.probe_worlds < 1 or args.probe_steps < 1:
        raise CliError("--probe-worlds and --probe-steps must be at least 1")
    if args.target_reference and cfg.agent.context_frames != 1:
        raise CliError("--target-reference: a run of one context frame only")
    sizes = {"eval_worlds": args.eval_worlds, "eval_world_seqs": args.eval_world_seqs}
    if any(v is not None for v in sizes.values()):
        cfg.protocol = dataclasses.replace(
            cfg.protocol, **{k: v for k, v in sizes.items() if v is not None})
        cfg.protocol.check(cfg.schedule.switches)  # one line naming a bad size


def world_probe(
    args: Evaluate,
    learner: Learner,
    evaluator: WorldsEvaluator,
    agent_cfg: AgentConfig,
    ns: tuple[int, ...],
) -> dict:
    """The --world-probe report of ``learner`` on the evaluator's held-out worlds."""
    from agent.evaluation import input_index
    from probes.world import ProbeConfig

    start = 0 if args.probe_window == "first" else (
        input_index(agent_cfg, max(ns)) - agent_cfg.context_frames + 1)
    probe_cfg = ProbeConfig(steps=args.probe_steps, start=start)
    return world_probe_report(
        learner, evaluator.sets.held_out, worlds=args.probe_worlds, cfg=probe_cfg,
        family=next(iter(evaluator.sets.families.values())))  # the training family


def predictions(png: Path, strips: Path, folder: RunFolder | None, track: str) -> None:
    """--predictions: the figure of ``strips`` (its heads' rows with them), with the run
    folder's bounds' rows where they are runs of their own."""
    from runners.online.strips import load_strips, prediction_figure, run_strips, split_strips

    found = split_strips(load_strips(strips))
    if folder is not None:
        for name in ("floor", "ceiling"):
            found.setdefault(name, run_strips(RunFolder(folder.root / name)))
    prediction_figure(png, found, track)
    print(f"written: {png}")


def print_report(args: Evaluate, rep: dict, ckpt: Path, cfg: RunConfig, step: int) -> None:
    """Prints the report: the curve, then what the protocol and the options added to it."""
    print(f"{ckpt} (track {cfg.agent.track}, step {step}); data: {rep['data']}")
    print(format_curve(rep))
    if "held_out" in rep:
        print("\n" + tables_text(held_out_tables(rep["held_out"], f"at step {step}")))
        iv = rep["held_out"].get("intervals")  # (its families in order, then pooled)
        if iv:
            print("\n" + tables_text([interval_table(iv, list(iv["margin"]))]))
    if args.target_reference:
        print(format_reference(rep["target_reference"]))
    if args.world_probe:
        print("\n" + tables_text([world_probe_table(rep["world_probe"])]))


def write_json(out: Path, rep: dict) -> None:
    """Writes the report to ``out`` as JSON (``CliError`` if it cannot) and says so."""
    try:
        out.write_text(json.dumps(rep, indent=2) + "\n")
    except OSError as err:
        raise CliError(f"cannot write {out}: {err.strerror or err}") from None
    print(f"written: {out}")


def main(argv: Sequence[str] | None = None) -> int:
    """Evaluates a checkpoint, prints the report and writes it as JSON; the exit status."""
    args = parse(Evaluate, argv, f"python -m runners.{PROG}")
    if args.n is not None and (not args.n or any(n < 0 for n in args.n)):
        raise CliError("--n: one or more memory sizes, each >= 0")
    ckpt, folder = locate(args.path, args.checkpoint)
    out = Path(args.out) if args.out else RunFolder.curve_path(ckpt)
    ensure_output_dir(out.parent, "the folder of --out" if args.out else "the checkpoint's folder")
    if args.predictions:  # before any work: nothing is written when the figure cannot be
        ensure_output_dir(Path(args.predictions).parent, "the folder of --predictions")
    device = resolve_device(args.device)
    set_threads(device)

    from agent import CheckpointError, Learner, load_checkpoint, target_reference

    cfg = run_config(ckpt, folder)
    agent_cfg = cfg.agent
    ns = tuple(sorted(set(args.n if args.n is not None else cfg.protocol.final_ns)))
    check_options(args, cfg)
    evaluator = cfg.protocol.evaluator(cfg, cfg.protocol.for_evaluation(cfg, args.data, ns))

    learner = Learner(agent_cfg, device=device)
    try:
        extra = load_checkpoint(ckpt, learner=learner, map_location=device)
    except CheckpointError as err:
        raise CliError(str(err)) from None
    rep = curve_report(
        evaluator.curve(learner, ns), step=int(learner.step), checkpoint=str(ckpt),
        data=args.data or "generated in memory (env.generate_sequences)",
        horizons=list(agent_cfg.horizons),
    )
    strips = out.with_name(out.name.removesuffix(".json").removesuffix(".eval") + ".strips.npz")
    if (held := evaluator.report(learner, ns, strips)) is not None:  # worlds: the held-out report
        rep["held_out"] = held
    if args.predictions:  # (the held-out report drew them)
        predictions(Path(args.predictions), strips, folder, agent_cfg.track)
    if args.world_probe:
        rep["world_probe"] = world_probe(args, learner, evaluator, agent_cfg, ns)
    if args.target_reference:
        ref = target_reference(learner, evaluator.data, n=50)  # type: ignore[attr-defined]
        rep["target_reference"] = dataclasses.asdict(ref)
    rep["run_step"] = extra.get("run_step", learner.step) if isinstance(extra, dict) else None
    print_report(args, rep, ckpt, cfg, learner.step)
    write_json(out, rep)
    return 0


if __name__ == "__main__":
    run_main(main, f"python -m runners.{PROG}")
