"""The run in TensorBoard: its event stream beside ``run.zarr``, for ``tensorboard --logdir runs``.

The events live in the run folder itself (``events.out.tfevents.*``), so TensorBoard names a run
by its folder. A step is the number of
learner updates done: the metrics of run.zarr's row i are at step i + 1, an evaluation at the
steps it saw (docs/train_online.md#tensorboard):

- every per-step metric of run.zarr under its own name (``loss/total``, ``memory/surprisal``,
  ``stream/norm_error``, ``physics/gravity`` ...), at every step (a value that is not finite,
  e.g. a window across an episode reset, is left out);
- at every evaluation ``eval/D_shift^n`` for each n, ``eval/D_base`` and the spreads;
- at the end (``write_ending``, once the run is complete): the adaptation curve, the held-out
  worlds' D^n per family and memory, the bounds, the digits' position errors in pixels, the
  summary as text and every figure as an image.

``Events`` writes the run's steps with the library's ``SummaryWriter`` (one event a step holds all
of its metrics: a scalar event each would cost 2% of a run's time). A resume opens it with
``purge_step`` one past the checkpoint's step, so TensorBoard's readers drop what an earlier
session wrote after its last checkpoint (a run killed between two checkpoints), and a checkpoint
flushes it first: the stream goes on with no step lost and none repeated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from runners.online.evaluation import EvalRecord

#: The file-name suffix of the run's ending's event file (one, rewritten at each ending).
ENDING = ".ending"


class Events:
    """The event stream of the run in ``root`` (opened at the first write, or at a resume's
    step by ``open``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._writer: Any = None

    def open(self, step: int) -> None:
        """Start writing at ``step`` (a resume: the checkpoint's step; what an earlier session
        wrote after it is purged)."""
        from torch.utils.tensorboard import SummaryWriter

        self.close()
        self._writer = SummaryWriter(str(self.root), purge_step=step + 1 if step else None)

    @property
    def writer(self) -> Any:
        if self._writer is None:
            self.open(0)
        return self._writer

    def metrics(self, steps: np.ndarray, block: Mapping[str, np.ndarray]) -> None:
        """A block of run.zarr's metrics (``steps``: their rows), one event a step."""
        out = self.writer.file_writer
        for j, row in enumerate(np.asarray(steps).tolist()):
            out.add_summary(_summary({k: v[j] for k, v in block.items()}), row + 1)

    def evaluation(self, rec: EvalRecord) -> None:
        """One evaluation's D_shift^n, D_base and spreads at its step."""
        values = {f"eval/D_shift^{n}": d for n, d in zip(rec.ns, rec.d_shift, strict=True)}
        values.update({"eval/D_base": rec.d_base, "eval/sigma_embed": rec.sigma_embed,
                       "eval/sigma_z": rec.sigma_z, "eval/sigma_target": rec.sigma_target})
        self.writer.file_writer.add_summary(_summary(values), rec.step)

    def flush(self) -> None:
        """Everything written so far on disk (before a checkpoint)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _summary(values: Mapping[str, Any]) -> Any:
    """One ``Summary`` of the finite ``values``."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Summary(value=[Summary.Value(tag=k, simple_value=float(v))
                          for k, v in values.items() if math.isfinite(float(v))])  # fmt: skip


# -- the ending ----------------------------------------------------------------------------------
def ending_scalars(s: Mapping[str, Any]) -> dict[str, float]:
    """A finished run's summary as ``{tag: value}``: ``end/D_shift^n`` of the adaptation curve,
    ``held_out/D^n/<family>/<memory>`` (n the headline), ``bounds/D^n/<family>/<row>`` and
    ``bounds/share/<family>/<memory>`` (the share of the floor-to-ceiling gap), and
    ``pixels/h<K>/<family>/<row>`` (the digits' position error at the largest horizon, px)."""
    out: dict[str, float] = {}
    n = s["headline_n"]
    for row in s.get("adaptation_curve") or ():
        out[f"end/D_shift^{row['n']}"] = row["d_shift"]
    held, b = s.get("held_out") or {}, s.get("bounds") or {}
    if held and n in held["ns"]:
        j = held["ns"].index(n)
        for fam, memories in held["families"].items():
            out.update({f"held_out/D^{n}/{fam}/{m}": d[j] for m, d in memories.items()})
    if b:
        rows = {"floor": b["floor"], "ceiling": b["ceiling"], **b["memories"]}
        for name, row in rows.items():
            out.update({f"bounds/D^{n}/{fam}/{name}": d for fam, d in row["d"].items()})
            out.update({f"bounds/share/{fam}/{name}": v for fam, v in row.get("share", {}).items()})
    px = b.get("pixels") or _pixel_rows(held.get("pixels"))
    if px:
        k = len(px["horizons"]) - 1  # per horizon, then their mean
        for label, fams in px["rows"].items():
            out.update({f"pixels/h{px['horizons'][k]}/{fam}/{label}": v[k]
                        for fam, v in fams.items()})  # fmt: skip
    return {tag(k): float(v) for k, v in out.items() if v is not None}


def tag(name: str) -> str:
    """A TensorBoard tag of a name made of report labels: each run of characters other than
    letters, digits and ``_ . / ^ -`` one ``_`` ("pixels/h8/pooled/ceiling (oracle)" ->
    "pixels/h8/pooled/ceiling_oracle"), so the tag is one word in a shell and in a regex filter."""
    return "/".join(re.sub(r"[^\w.^-]+", "_", part).strip("_") for part in name.split("/"))


def _pixel_rows(px: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A run's own pixel report in the bounds' shape: {"horizons", "rows": {source: {family:
    per horizon, then the mean}}}."""
    if not px:
        return None
    rows: dict[str, dict[str, list[float]]] = {}
    for fam, sources in px["families"].items():
        for name, v in sources.items():
            rows.setdefault(name, {})[fam] = v
    return {"horizons": px["horizons"], "rows": rows}


def write_ending(root: Path, s: Mapping[str, Any], markdown: str) -> None:
    """A finished run's ending at its last step, in an event file of its own that replaces the
    one an earlier ending wrote (a resumed run that ends again): ``ending_scalars``, the summary
    (``markdown``) as text and each of ``figures/*.png`` as an image."""
    from matplotlib.image import imread
    from torch.utils.tensorboard import SummaryWriter

    root = Path(root)
    for old in root.glob(f"events.out.tfevents.*{ENDING}"):
        old.unlink()
    step = int(s["steps_done"])
    writer = SummaryWriter(str(root), filename_suffix=ENDING)
    try:
        writer.file_writer.add_summary(_summary(ending_scalars(s)), step)
        writer.add_text("summary", markdown, step)
        for png in sorted((root / "figures").glob("*.png")):
            image = imread(png)[..., :3]  # RGB(A) floats in [0, 1]
            writer.add_image(f"figures/{png.stem}", image, step, dataformats="HWC")
    finally:
        writer.close()
