"""figures/predictions.png: what each learner predicts on held-out worlds, drawn as frames.

For a few sequences of each held-out family (``runners.online.pixels``' strips, written beside
the checkpoint of each run's held-out report), a mosaic per family: a column for the input
frame, then one per horizon, for each sequence; a row for the true frames, the true future
through the decoder, and each learner's prediction through its own decoder (the floor, the
chosen track with each memory source, the ceiling) at the report's memory size n.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from runners.live.model import overlay
from runners.online.plots import plt
from runners.online.rundir import RunFolder
from runners.style import save_figure

#: The rows, in order: (the run they come from, the strip's key, the label).
ROWS = (("main", "true", "true frames"), ("main", "decoded_true", "true future, decoded"),
        ("floor", "own", "floor (track A)"), ("main", "own", "{track}, own memory"),
        ("main", "same", "{track}, peer memory"), ("main", "wrong", "{track}, wrong-world memory"),
        ("ceiling", "own", "ceiling (oracle)"))  # fmt: skip
GAP = 6  # px between tiles' blocks


def load_strips(path: Path) -> dict[str, np.ndarray] | None:
    """The strips an .npz holds (None: there is none)."""
    if not path.is_file():
        return None
    with np.load(path) as z:
        return dict(z)


def run_strips(run: RunFolder) -> dict[str, np.ndarray] | None:
    """The strips of a run's held-out report at its end (beside ``checkpoints/latest.pt``)."""
    return load_strips(RunFolder.strips_path(run.latest))


def split_strips(strips: dict[str, np.ndarray] | None) -> dict[str, dict[str, np.ndarray] | None]:
    """The strips of a run whose floor and ceiling are heads on its latent (``agent.heads``;
    theirs under ``heads/<name>/``) by ``prediction_figure``'s run names: ``main``, ``floor``,
    ``ceiling``."""
    if strips is None:
        return {"main": None}
    out: dict[str, dict[str, np.ndarray] | None] = {"main": {}}
    for key, value in strips.items():
        if key.startswith("heads/"):
            _, name, rest = key.split("/", 2)
            out.setdefault(HEAD_RUNS.get(name, name), {})[rest] = value
        else:
            out["main"][key] = value
    return out


#: The heads that ``prediction_figure`` draws, by the run names of its rows.
HEAD_RUNS = {"A": "floor", "oracle": "ceiling"}


def _mosaic(tiles: list[list[np.ndarray | None]], seqs: int, cols: int) -> np.ndarray:
    """Rows of RGB tiles (each 64 x 64 x 3 in [0, 1], or None: blank) as one image on white, a
    gap between sequences."""
    side = 64
    width = seqs * cols * side + (seqs - 1) * GAP
    out = np.ones((len(tiles) * side + (len(tiles) - 1) * 2, width, 3))
    for r, row in enumerate(tiles):
        for c, tile in enumerate(row):
            if tile is not None:
                x = (c // cols) * (cols * side + GAP) + (c % cols) * side
                out[r * (side + 2):r * (side + 2) + side, x:x + side] = tile
    return out


def _rows(found: dict[str, dict[str, np.ndarray] | None], fam: str, track: str
          ) -> tuple[list[str], list[list[np.ndarray | None]]]:  # fmt: skip
    """A family's row labels and tiles: the input and true frames in grey, then each learner's
    decoded prediction over the true future."""
    own = found["main"] or {}
    true, inputs = own[f"{fam}/true"], own[f"{fam}/input"]
    labels, tiles = [], []
    for run, key, label in ROWS:
        strip = (found.get(run) or {}).get(f"{fam}/{key}")
        if strip is None:
            continue
        labels.append(label.format(track=f"track {track}"))
        if key == "true":
            grey = [np.repeat(x[..., None] / 255.0, 3, -1) for x in (inputs, true)]
            tiles.append([t for s in range(len(true)) for t in (grey[0][s], *grey[1][s])])
        else:
            tiles.append([t for s in range(len(true))
                          for t in (None, *(overlay(p, q) for p, q in zip(strip[s], true[s], strict=True)))])
    return labels, tiles


def prediction_figure(path: Path, found: dict[str, dict[str, np.ndarray] | None],
                      track: str) -> Path | None:  # fmt: skip
    """Write the figure of the strips ``found`` by run (``main``, and where there are
    ``floor`` and ``ceiling``) to ``path``; None where ``main`` has none."""
    own = found.get("main")
    if own is None:
        return None
    families = list(dict.fromkeys(k.split("/")[0] for k in own if "/" in k))
    seqs, k = own[f"{families[0]}/true"].shape[:2]
    size = (2.4 + 0.95 * seqs * (k + 1), 1.2 + 0.75 * len(ROWS) * len(families))
    fig, axes = plt.subplots(len(families), 1, figsize=size, squeeze=False)
    for ax, fam in zip(axes[:, 0], families, strict=True):
        labels, tiles = _rows(found, fam, track)
        ax.imshow(_mosaic(tiles, seqs, k + 1), interpolation="nearest")
        ax.set_yticks([r * 66 + 32 for r in range(len(labels))], labels, fontsize=9)
        heads = ["input", *(f"+{h}" for h in own["horizons"])]
        ax.set_xticks([(c // (k + 1)) * ((k + 1) * 64 + GAP) + (c % (k + 1)) * 64 + 32
                       for c in range(seqs * (k + 1))], heads * seqs, fontsize=8)
        ax.tick_params(length=0)
        ax.set_title(f"{fam} worlds (held out; the family's strongest gravity), {seqs} sequences:\n"
                     "each decoded prediction (magenta) over the true future (green; white where "
                     "they agree)", fontsize=10)
    return save_figure(fig, path)
