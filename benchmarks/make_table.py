"""Turn pytest-benchmark JSON into the Markdown throughput tables of docs/throughput.md.

    pytest benchmarks --benchmark-only --benchmark-json bench.json
    python -m benchmarks.make_table bench.json            # or: python benchmarks/make_table.py
    python -m benchmarks.make_table bench.json --kinds e2e   # the headline table only

The end-to-end rows (``test_end_to_end.py``: the train_online loop against the reference step
timed in the same rounds) come first, as their own table: what users run. Then the rest:

Columns: what was measured, track, source, device, precision, threads, batch, steps/s, the ratio
to the paper-faithful reference step of the same run and, for the loop, its share of the
learner-only rate. Several JSON files (e.g. one CPU run and one
GPU run) give one table. Rows without a ratio (env, reference D/E) show a dash.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

KIND_ORDER = {"e2e": -1, "reference": 0, "learner": 1, "loop": 2, "stacked": 3, "env": 4}
KIND_LABEL = {
    "e2e": "`train_online` loop",
    "reference": "paper-faithful reference step",
    "learner": "`Learner.update()`",
    "loop": "`train_online` loop",
    "env": "env",
}


def _rate(bench: dict) -> float | None:
    info = bench.get("extra_info", {})
    if info.get("steps_per_s") is not None:
        return float(info["steps_per_s"])
    median = (bench.get("stats") or {}).get("median")
    return 1.0 / median if median else None


def _kind(bench: dict) -> str:
    info = bench.get("extra_info", {})
    if "kind" in info:
        return str(info["kind"])
    return "env" if "env" in bench.get("fullname", "") else "other"


def rows(data: dict) -> list[dict]:
    """One row per benchmark of a pytest-benchmark JSON document."""
    out = []
    for b in data.get("benchmarks", []):
        info = b.get("extra_info", {})
        kind = _kind(b)
        ratio = info.get("ratio_to_reference")
        out.append(
            {
                "kind": kind,
                "what": info.get("label")
                or (
                    f"{KIND_LABEL['env']}: `{b.get('name', '?')}`"
                    if kind == "env"
                    else KIND_LABEL.get(kind, f"`{b.get('name', '?')}`")
                ),
                "track": info.get("track", ""),
                "source": info.get("source", ""),
                "device": info.get("device_name") or info.get("device", ""),
                "precision": info.get("precision", ""),
                "threads": info.get("torch_threads", ""),
                "batch": info.get("batch_size", ""),
                "rate": _rate(b),
                "unit": info.get("unit", "steps/s"),
                "frames": info.get("frames_per_s"),
                "ratio": None if ratio is None else float(ratio),
                "ratio_learner": info.get("ratio_to_learner"),
                "ref_track": info.get("reference_track", ""),
                "ref_rate": info.get("reference_steps_per_s"),
                "protocol": info.get("protocol", ""),
                "default": info.get("default_precision"),
                "name": b.get("name", ""),
            }
        )
    out.sort(
        key=lambda r: (
            r["device"],
            KIND_ORDER.get(r["kind"], 9),
            str(r["track"]),
            str(r["source"]),
            str(r["precision"]),
            r["name"],
        )
    )
    return out


def _fmt_rate(rate: float | None) -> str:
    if rate is None:
        return "-"
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.1f}"


def _markdown(header: list[str], numeric: int, rows: list[list[str]]) -> str:
    """A markdown table; its last ``numeric`` columns right-aligned."""
    align = "|" + "|".join(["---"] * (len(header) - numeric) + ["--:"] * numeric) + "|"
    lines = [f"| {' | '.join(cells)} |" for cells in [header, *rows]]
    return "\n".join([lines[0], align, *lines[1:]])


def e2e_table(all_rows: list[dict]) -> str:
    """The headline: each end-to-end row with the reference's rate of the same rounds."""
    header = ["train_online loop", "track", "source", "device", "precision", "threads",
              "steps/s", "reference steps/s", "x reference"]
    rows = []
    for r in all_rows:
        ratio = "-" if r["ratio"] is None else f"**{r['ratio']:.2f}x**"
        prec = f"{r['precision']} (default)" if r["default"] else r["precision"]
        ref = "-" if r["ref_rate"] is None else _fmt_rate(float(r["ref_rate"]))
        rows.append([f"{r['protocol']} protocol", r["track"], r["source"], r["device"], prec,
                     str(r["threads"]), _fmt_rate(r["rate"]), ref, ratio])
    return _markdown(header, 3, rows)


def table(all_rows: list[dict]) -> str:
    header = ["measured", "track", "source", "device", "precision", "threads", "batch", "rate",
              "x reference", "x learner-only"]
    rows = []
    for r in all_rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        if r["ratio"] is not None and r["ref_track"] and r["ref_track"] != r["track"]:
            ratio += f" (vs {r['ref_track']})"
        rate = _fmt_rate(r["rate"])
        if r["unit"] != "steps/s":
            rate += f" {r['unit']}"
        if r["frames"] is not None and r["rate"] and abs(r["frames"] - r["rate"]) > 1:
            rate += f" ({_fmt_rate(float(r['frames']))} frames/s)"
        vs_learner = "-" if r["ratio_learner"] is None else f"{100 * r['ratio_learner']:.0f}%"
        rows.append([r["what"], r["track"], r["source"], r["device"], r["precision"],
                     str(r["threads"]), str(r["batch"]), rate, ratio, vs_learner])
    return _markdown(header, 3, rows)


def caption(data_list: list[dict]) -> str:
    parts = []
    for data in data_list:
        mi = data.get("machine_info", {})
        ci = data.get("commit_info", {})
        when = data.get("datetime", "")[:19]
        cpu = (mi.get("cpu") or {}).get("brand_raw", "")
        commit = (ci.get("id") or "")[:10]
        dirty = " (dirty)" if ci.get("dirty") else ""
        parts.append(
            f"{when} on {mi.get('node', '?')} ({cpu}), python {mi.get('python_version', '?')},"
            f" commit {commit or '?'}{dirty}"
        )
    infos = [b.get("extra_info", {}) for d in data_list for b in d.get("benchmarks", [])]
    stats = sorted({str(i.get("stat", "median")) for i in infos})
    timers = sorted({str(i.get("timer", "time.perf_counter")) for i in infos})
    return (
        f"Rates are steps/s ({'/'.join(stats)} of timed rounds, warmup excluded, timer "
        f"{'/'.join(timers)}); `x reference` is the ratio to the paper-faithful reference step "
        "measured in the same run. Measured " + "; ".join(parts) + "."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "json", nargs="+", type=Path, help="pytest-benchmark --benchmark-json files"
    )
    parser.add_argument("--no-caption", action="store_true", help="print the table only")
    parser.add_argument(
        "--kinds",
        default=None,
        help="comma-separated kinds to include: e2e, reference, learner, loop, env, stacked "
        "(default all)",
    )
    args = parser.parse_args(argv)
    docs = []
    for path in args.json:
        try:
            docs.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as e:
            print(f"make_table: cannot read {path}: {e}", file=sys.stderr)
            return 2
    all_rows = [r for d in docs for r in rows(d)]
    if args.kinds:
        kinds = {k.strip() for k in args.kinds.split(",")}
        all_rows = [r for r in all_rows if r["kind"] in kinds]
    if not all_rows:
        print("make_table: no benchmarks in the input", file=sys.stderr)
        return 2
    e2e = [r for r in all_rows if r["kind"] == "e2e"]
    rest = [r for r in all_rows if r["kind"] != "e2e"]
    print("\n\n".join(t for t in (e2e and e2e_table(e2e), rest and table(rest)) if t))
    if not args.no_caption:
        print()
        print(caption(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
