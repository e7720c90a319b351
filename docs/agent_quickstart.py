"""Quickstart for the agent package: every track, both sources, evaluate, checkpoint, resume.

    python docs/agent_quickstart.py                       # tiny preset, 300 steps each (~minutes)
    python docs/agent_quickstart.py --preset paper --steps 300

For each track A-E and each source (stored sequences, live vector env) it trains ``--steps``
updates in two halves with a checkpoint in between (the second half runs on a freshly built
learner and source restored from the checkpoint), then evaluates D_shift^50 on a held-out
shift-world test set. Data are generated in memory with ``env.generate_sequences``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

import env
from agent import (
    AgentConfig,
    DatasetSource,
    EvalData,
    Learner,
    StreamSource,
    columns,
    evaluate,
    load_checkpoint,
    read_checkpoint_config,
    save_checkpoint,
)


def make_data(n_train: int, n_eval: int, seed: int) -> tuple[np.ndarray, EvalData]:
    """Base-world training sequences and the evaluation sets (gravity 0 vs 0.5)."""

    def gen(n: int, gravity: float, split: str, s: int) -> np.ndarray:
        return env.generate_sequences(n, seed=s, gravity=gravity, split=split)["frames"]

    base_train = gen(n_train, 0.0, "train", seed)
    data = EvalData(
        shift_train=gen(n_eval, 0.5, "train", seed + 1),
        shift_test=gen(n_eval, 0.5, "test", seed + 2),
        base_test=gen(n_eval, 0.0, "test", seed + 3),
    )
    return base_train, data


def make_source(kind: str, cfg: AgentConfig, base_train: np.ndarray, seed: int):
    """A dataset source over the base training set, or a live stream of base-world envs."""
    if kind == "dataset":
        return DatasetSource(base_train, cfg, seed=seed)
    venv = env.MovingMNISTVectorEnv(cfg.batch_size, gravity=0.0, max_episode_steps=200)
    return StreamSource(venv, cfg, seed=seed, base_gravity=0.0)


def train_resume_evaluate(
    track: str,
    kind: str,
    args: argparse.Namespace,
    base_train: np.ndarray,
    data: EvalData,
    ckpt_dir: Path,
) -> dict:
    # A stream pushes the input's own pair to memory (the paper's newest pair would be the
    # samples' own targets); the paper's dataset protocol keeps its pair.
    cfg = AgentConfig.of_size(
        args.preset, track=track, total_steps=args.steps, precision=args.precision,
        push_pair="input" if kind == "stream" else "newest",
    )  # fmt: skip
    learner, source = Learner(cfg), make_source(kind, cfg, base_train, args.seed)
    half = args.steps // 2
    t0 = time.perf_counter()
    records = [learner.update(source.next()) for _ in range(half)]
    path = save_checkpoint(
        ckpt_dir / f"{track}-{kind}.pt", learner, source, extra={"track": track, "source": kind}
    )

    # Resume: a new learner and source, built from the checkpoint's config.
    learner = Learner(read_checkpoint_config(path))
    source = make_source(kind, learner.cfg, base_train, seed=12345)  # state comes from the file
    load_checkpoint(path, learner, source)
    records += [learner.update(source.next()) for _ in range(args.steps - half)]
    elapsed = time.perf_counter() - t0
    metrics = columns(records)  # one host sync for the whole run
    result = evaluate(learner, data, n=50)
    return {
        "track": track,
        "source": kind,
        "steps": learner.step,
        "steps_per_s": args.steps / elapsed,
        "loss": float(metrics["loss/total"][-20:].mean()),
        "boundaries": int(metrics["memory/boundary"].sum()),
        "valid_frac": float(metrics["stream/valid_frac"].mean()),
        "d_shift50": result.d_shift,
        "d_base": result.d_base,
        "sigma_embed": result.sigma_embed,
    }


def main(argv: Sequence[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=["tiny", "paper"])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--tracks", default="ABCDE")
    parser.add_argument("--sources", default="dataset,stream")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--n-train", type=int, default=512)
    parser.add_argument("--n-eval", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--checkpoints",
        type=Path,
        default=None,
        help="folder for the checkpoints (default: a temporary folder)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    base_train, data = make_data(args.n_train, args.n_eval, args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt_dir = args.checkpoints or Path(tmp)
        print(
            f"{'track':5} {'source':8} {'steps/s':>8} {'loss':>8} {'bounds':>6} "
            f"{'valid':>6} {'D_shift50':>9} {'D_base':>7} {'sigma':>6}"
        )
        for track in args.tracks:
            for kind in args.sources.split(","):
                r = train_resume_evaluate(track, kind, args, base_train, data, ckpt_dir)
                rows.append(r)
                print(
                    f"{track:5} {kind:8} {r['steps_per_s']:8.1f} {r['loss']:8.4f} "
                    f"{r['boundaries']:6d} {r['valid_frac']:6.2f} {r['d_shift50']:9.4f} "
                    f"{r['d_base']:7.4f} {r['sigma_embed']:6.3f}",
                    flush=True,
                )
    return rows


if __name__ == "__main__":
    main()
