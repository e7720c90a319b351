"""The floor and the ceiling beside the chosen track: what memory is measured against.

A run of the worlds protocol that settles fits, by default (``--bounds``), two more heads on its
one latent (``agent.heads``; ``Worlds.bound_heads``), scored on the same windows:

- the **floor**: track A, the same predictor without a memory pathway;
- the **ceiling**: the chosen track's modulation fed the true physics of each sample's world in
  place of e_agg (the oracle; track C's when the chosen track is A).

The main summary then gains ``bounds`` (``from_heads``): the three heads' held-out D^n, and how
far the memory moved the chosen track from the floor towards the ceiling,
``(D_A - D_memory) / (D_A - D_oracle)`` (docs/definitions.md#the-share-of-the-oracle-gap), per
family and per horizon, for each memory source; its first line says it for the headline: n
transitions from other sequences of the same world (the peer memory).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from runners.style import MEMORY_LABELS, Table, pct, times

#: The memory source of the headline (agent.evaluation: ``same``, the peer memory).
HEADLINE_MEMORY = "same"

#: The name of the held-out families' mean, in every summary, report and study.
POOLED = "pooled"


def from_heads(s: dict[str, Any], n: int) -> dict[str, Any] | None:
    """The bounds section of a run whose floor and ceiling are heads on its latent
    (``agent.heads``): ``bounds_report`` of its held-out report and its heads' (the run itself
    where it is the floor or the ceiling); None without both."""
    held = s.get("held_out") or {}
    every = {**(held.get("heads") or {}), s["head"]: held}
    if "A" not in every or "oracle" not in every:
        return None
    where = f"{s['run_dir']} (head %s)"
    return bounds_report(s, {"held_out": every["A"], "run_dir": where % "A"},
                         {"held_out": every["oracle"], "run_dir": where % "oracle"}, n)


def _family_d(held: dict[str, Any], memory: str, j: int) -> dict[str, float]:
    """{family: D^n} at the j-th n, and ``pooled`` (the families' mean)."""
    out = {fam: float(mems[memory][j]) for fam, mems in held["families"].items() if memory in mems}
    if out:
        out[POOLED] = float(np.mean(list(out.values())))
    return out


def _family_d_per_h(held: dict[str, Any], memory: str, j: int) -> dict[str, list[float]]:
    """{family: D^n per horizon} at the j-th n (mean over the family's worlds), and pooled."""
    rows: dict[str, list[list[float]]] = {}
    for w in held["worlds"]:
        if w["memory"] == memory:
            rows.setdefault(w["family"], []).append(w["d_per_h"][j])
    out = {fam: np.mean(np.asarray(r, np.float64), axis=0).tolist() for fam, r in rows.items()}
    if out:
        out[POOLED] = np.mean(np.asarray(list(out.values())), axis=0).tolist()
    return out


def share(floor: float, memory: float, ceiling: float,
          missing: float | None = None) -> float | None:
    """The share of the oracle gap closed, (floor - memory) / (floor - ceiling); ``missing``
    (None in a JSON summary, NaN in a study's arrays) when the ceiling is not below the floor
    (there is no gap to close) or a number is not finite."""
    gap = floor - ceiling
    if not (math.isfinite(gap) and math.isfinite(memory)) or gap <= 0:
        return missing
    return (floor - memory) / gap


def bounds_report(main: dict[str, Any], floor: dict[str, Any], ceiling: dict[str, Any],
                  n: int) -> dict[str, Any]:  # fmt: skip
    """The bounds section of the main summary from the three runs' summaries (their held-out
    reports) at memory size n: D per family (and pooled) and per horizon for the floor, the
    ceiling and each of the chosen track's memory sources, and the share of the oracle gap each
    closed."""
    held, held_a, held_o = main["held_out"], floor["held_out"], ceiling["held_out"]
    j = held["ns"].index(n)
    d_a, d_o = _family_d(held_a, "own", 0), _family_d(held_o, "own", 0)  # neither reads memory
    h_a, h_o = _family_d_per_h(held_a, "own", 0), _family_d_per_h(held_o, "own", 0)
    memories = {}
    for mem in held["memories"]:
        d, h = _family_d(held, mem, j), _family_d_per_h(held, mem, j)
        memories[mem] = {
            "d": d, "d_per_h": h, "share": {f: share(d_a[f], d[f], d_o[f]) for f in d},
            "share_per_h": {f: [share(a, m, o) for a, m, o in zip(h_a[f], h[f], h_o[f], strict=True)]
                            for f in h},
        }  # fmt: skip
    return {
        "n": n, "track": main["track"],
        "perfect_physics": perfect_physics_bound(held, held_a, h_a, held_o, h_o),
        "horizons": held["horizons"],
        "floor": {"run": floor["run_dir"], "d": d_a, "d_per_h": h_a},
        "ceiling": {"run": ceiling["run_dir"], "d": d_o, "d_per_h": h_o},
        "memories": memories,
        "headline": HEADLINE_MEMORY if HEADLINE_MEMORY in memories else None,
        "pixels": pixel_bounds(held, held_a, held_o),
        "intervals": held.get("intervals"),
    }


def pixel_bounds(held: dict[str, Any], held_a: dict[str, Any], held_o: dict[str, Any]
                 ) -> dict[str, Any] | None:  # fmt: skip
    """The decoded predictions' digit position errors (px, ``runners.online.pixels``) of the
    floor, the chosen track's memory sources and the ceiling, with the decoded true future and
    "no change" of the chosen track's decoder: {label: {family: per horizon, then the mean}},
    ``pooled`` the families' mean (None where a report has none)."""
    got = [h.get("pixels") for h in (held, held_a, held_o)]
    if not all(got):
        return None
    p, pa, po = got

    def rows(px: dict[str, Any], key: str) -> dict[str, list[float]]:
        out = {f: v[key] for f, v in px["families"].items()}
        return {**out, POOLED: np.mean(list(out.values()), axis=0).tolist()}

    return {"n": p["n"], "horizons": p["horizons"], "rows": {
        "true future, decoded": rows(p, "decoded_true"), "no change": rows(p, "no_change"),
        "floor (track A)": rows(pa, "own"),
        **{MEMORY_LABELS.get(m, m): rows(p, m) for m in held["memories"]},
        "ceiling (oracle)": rows(po, "own")}}


def _ratios(h: dict[str, list[float]], pp: dict[str, Any], branch: str
            ) -> dict[str, list[float | None]]:  # fmt: skip
    """{family: a learner's D per horizon over perfect physics' ``branch`` in its own latent}."""
    return {f: [a / c if c > 0 else None for a, c in zip(h[f], rows[branch][:-1], strict=True)]
            for f, rows in pp["families"].items() if f in h and branch in rows}  # fmt: skip


def perfect_physics_bound(held: dict[str, Any], held_a: dict[str, Any],
                          h_a: dict[str, list[float]], held_o: dict[str, Any],
                          h_o: dict[str, list[float]]) -> dict[str, Any] | None:
    """Perfect physics beside the bounds (``probes.perfect_physics``): the chosen track's
    latent's D per branch (mean over horizons, ``d``; ``d_per_h``) per family, and
    ``floor_ratio_per_h``: track A's D^n per horizon over perfect world-blind physics in
    track A's own latent (``floor_ratio_seen_per_h``: over world-blind physics from the state
    as two frames show it; ``ceiling_ratio_told_per_h``: the oracle's over the world's own
    physics from that state, in the oracle's latent; ``floor_ratio_seen_mean_per_h`` and
    ``ceiling_ratio_told_mean_per_h``: the same over the hedged branches; each where the reports
    have it). None where the reports have none."""
    pp, pp_a = held.get("perfect_physics"), held_a.get("perfect_physics")
    if not pp or not pp_a:
        return None
    fams = pp["families"]
    out: dict[str, Any] = {
        "d": {b: {f: rows[b][-1] for f, rows in fams.items() if b in rows} for b in BRANCHES},
        "d_per_h": {b: {f: rows[b][:-1] for f, rows in fams.items() if b in rows}
                    for b in BRANCHES},
    }  # fmt: skip
    for key, branch in (("floor_ratio_per_h", "blind"), ("floor_ratio_seen_per_h", "seen"),
                        ("floor_ratio_seen_mean_per_h", "seen_mean")):
        out[key] = _ratios(h_a, pp_a, branch)
    pp_o = held_o.get("perfect_physics")
    if pp_o:
        out["ceiling_ratio_told_per_h"] = _ratios(h_o, pp_o, "told")
        out["ceiling_ratio_told_mean_per_h"] = _ratios(h_o, pp_o, "told_mean")
    return out


#: The perfect-physics branches beside the bounds (``probes.perfect_physics.BRANCHES``).
BRANCHES = ("blind", "other", "seen", "told", "seen_mean", "told_mean")


def story(b: dict[str, Any]) -> str:
    """The summary's first line: how far n peer transitions of held-out worlds moved the chosen
    track from the floor towards the ceiling (pooled over the held-out families)."""
    head = b.get("headline")
    a, o = b["floor"]["d"][POOLED], b["ceiling"]["d"][POOLED]
    if head is None:  # a track without memory (A): its own floor
        return (f"track {b['track']} has no memory: held-out D {a:.3f} (the floor), "
                f"{o:.3f} with the true physics (the ceiling)")
    m = b["memories"][head]
    d, s = m["d"][POOLED], m["share"][POOLED]
    moved = (f"{b['n']} transitions from other sequences of each held-out world moved track "
             f"{b['track']} from the floor (track A, D {a:.3f}) to D {d:.3f}")
    if s is None:
        return f"{moved}; the ceiling (the oracle, D {o:.3f}) is not below the floor: no gap"
    return f"{moved}: {pct(s)} of the way to the ceiling (the oracle, D {o:.3f}){_carries(b, d)}"


#: Wrong-world memory at least this share of the oracle's margin above peer memory: the memory
#: carries its world (docs/definitions.md#does-memory-carry-the-world).
CARRIES = 0.25


def _carries(b: dict[str, Any], peer: float) -> str:
    """The story's second clause: memory of another world against the peer memory, in shares
    of the oracle's margin, and whether the memory carries its world (``CARRIES``)."""
    wrong = b["memories"].get("wrong")
    if wrong is None:
        return ""
    w = wrong["d"][POOLED]
    gap = (w - peer) / (b["floor"]["d"][POOLED] - b["ceiling"]["d"][POOLED])
    verdict = "it carries the world" if gap >= CARRIES else "it does not carry the world"
    return (f". Memory of another world: D {w:.3f}, {pct(gap)} of the oracle's margin above "
            f"peer memory: {verdict}")


#: The labels of the rows of ``tables``' first: the memory sources, then perfect physics' branches.
PHYSICS_LABELS = {"blind": "perfect physics, blind", "other": "perfect physics, other",
                  "seen": "physics, blind, as seen", "told": "physics, told, as seen",
                  "seen_mean": "physics, blind, hedged", "told_mean": "physics, told, hedged"}
#: The lines of learners' D over perfect physics per horizon (pooled): (key, label).
RATIO_LABELS = (
    ("floor_ratio_per_h", "track A / world-blind physics per horizon (pooled, each in its own "
                          "latent)"),
    ("floor_ratio_seen_per_h", "track A / world-blind physics as two frames show it"),
    ("ceiling_ratio_told_per_h", "the oracle / the world's own physics as two frames show it"),
    ("floor_ratio_seen_mean_per_h", "track A / world-blind physics, hedged"),
    ("ceiling_ratio_told_mean_per_h", "the oracle / the world's own physics, hedged"),
)


def tables(b: dict[str, Any] | None) -> list[Table]:
    """The bounds as tables (none without them): D and the share of the gap per family, per
    memory (the per-horizon shares and ratios under it), the paired intervals, the pixel errors."""
    if not b:
        return []
    fams = [f for f in b["floor"]["d"] if f != POOLED] + [POOLED]

    def d(label: str, values: dict[str, float]) -> list[str]:
        return [label, *(f"{values[f]:.3f}" for f in fams)]

    def per_h(label: str, values: list[float | None], fmt: Callable[..., str]) -> str:
        return f"{label}: " + ", ".join(f"h={h} {fmt(x, missing='n/a')}"
                                        for h, x in zip(b["horizons"], values, strict=False))

    rows = [d("floor (track A)", b["floor"]["d"])]
    rows += [[MEMORY_LABELS.get(mem, mem),
              *(f"{m['d'][f]:.3f} {pct(m['share'][f], missing='n/a'):>6}" for f in fams)]
             for mem, m in b["memories"].items()]
    rows.append(d("ceiling (oracle)", b["ceiling"]["d"]))
    pp = b.get("perfect_physics") or {}
    rows += [d(label, pp["d"][key]) for key, label in PHYSICS_LABELS.items()
             if all(f in pp.get("d", {}).get(key, {}) for f in fams)]
    notes = []
    head = b.get("headline")
    if head is not None:  # the headline memory's share per horizon, pooled
        shares = b["memories"][head]["share_per_h"].get(POOLED, [])
        notes.append(per_h("share of the gap per horizon (peer memory, pooled)", shares, pct))
    notes += [per_h(label, pp[key][POOLED], times) for key, label in RATIO_LABELS
              if POOLED in pp.get(key, {})]
    main = Table(f"floor, memory and ceiling on held-out worlds (D^{b['n']}; share of the oracle "
                 "gap closed, docs/definitions.md#the-share-of-the-oracle-gap)", ("",), fams, rows,
                 widths=(24,), cell=16, note="\n".join(notes))  # fmt: skip
    found = [main, interval_table(b.get("intervals"), fams), pixel_table(b.get("pixels"), fams)]
    return [t for t in found if t is not None]


#: The rows of ``interval_table`` for each head that reads memory: (key, memory source, label).
INTERVAL_ROWS = (*(("share", m, MEMORY_LABELS[m]) for m in ("same", "own", "wrong")),
                 ("share_own", "same", "peer, from its own D^0"),
                 ("carried", None, "carried (wrong - peer)"),
                 ("d0_vs_floor", None, "D^0 against the floor"))  # fmt: skip


def interval_table(iv: dict[str, Any] | None, fams: list[str]) -> Table | None:
    """The paired intervals (``runners.online.intervals``): the oracle's margin, then each head's
    shares: the value and its 95% interval in percent (None without them)."""
    if not iv:
        return None

    def cell(ci: dict[str, Any]) -> str:
        if ci["low"] is None:
            return pct(ci["value"], missing="n/a")
        lo, hi = (f"{100 * ci[k]:.0f}" for k in ("low", "high"))
        return pct(ci["value"]) + f" [{lo}, {hi}]"

    rows = [["the oracle's margin", *(cell(iv["margin"][f]) for f in fams)]]
    for name, h in iv["heads"].items():
        for key, mem, label in INTERVAL_ROWS:
            got = h.get(key)
            got = got.get(mem) if got is not None and mem is not None else got
            if got is not None:
                rows.append([f"{_head_label(name)}, {label}", *(cell(got[f]) for f in fams)])
    return Table(f"paired 95% intervals at n = {iv['n']} (a bootstrap of the held-out worlds and "
                 "their sequences, every head on the same samples; "
                 "docs/definitions.md#paired-intervals)", ("",), fams, rows, widths=(34,), cell=18)


def _head_label(name: str) -> str:
    """A head's name as the tables say it: "track C", "oracle"."""
    return name if name == "oracle" else f"track {name}"


def pixel_table(px: dict[str, Any] | None, fams: list[str]) -> Table | None:
    """The pixel errors at the largest horizon, a row per learner (None without them)."""
    if not px:
        return None
    k = len(px["horizons"]) - 1  # the largest horizon's column (the mean is last)
    h = px["horizons"][k]
    return Table(f"where the decoded predictions put the digits at h={h}: mean distance from the "
                 f"true positions, px (n = {px['n']}; docs/definitions.md#the-pixel-decoder)",
                 ("",), fams, [[label, *(f"{v[f][k]:.1f}" for f in fams)]
                               for label, v in px["rows"].items()], widths=(24,), cell=16)
