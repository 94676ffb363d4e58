"""Which rank the others wait for, where its extra time goes, and per phase.

Pure functions over the per-rank rows traceana/ranks/cross_rank.py builds (times already per step when
every rank has steps). Definitions (docs/ranks.md):
- own time = step time less collective wait; the straggler is the rank with the longest own
  time. Ranks within NEAR_TIE_PCT of it are a near-tie: "no single straggler" is said instead.
- its extra own time over the median rank is split by class (the bounds; collectives apart)
  and by op signature (name, dims, dtypes). An op signature is compared only where every rank
  ran it with the same shapes; signatures some ranks lack (data-dependent shapes: embedding
  lookups, all_to_all splits) are listed by op name as "shapes differ", not compared.
- per phase (forward / backward / optimizer, when every rank's steps are annotated): the rank
  with the most GPU work (the busy time of its non-collective kernels launched in that phase).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from traceana.link.steps import PHASES
from traceana.roofline.bounds import BOUNDS

#: Ranks whose own time is within this % of the slowest's are a near-tie: no single straggler.
NEAR_TIE_PCT = 2.0
#: The classes a rank's device time is split into: every op bound (communication, NCCL/RCCL
#: or not, is "collective"), plus unknown (no peak for the dtype).
CLASSES = tuple(b for b in BOUNDS if b != "communication") + ("unknown", "collective")
_CLASS_WORDS = {"compute": "compute-bound device time", "memory": "memory-bound device time",
                "latency": "latency-bound device time (short kernels, launch overhead)",
                "underutilised": "device time of ops far below both roofs (grid, access pattern, occupancy)",
                "host_link": "device time of host<->device copies",
                "peer_link": "device time of GPU<->GPU copies",
                "unknown": "device time of ops with no peak for their dtype",
                "unmodelled": "device time of ops traceana has no cost model for",
                "opaque": "device time of opaque kernels (no shapes)"}


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def ms(us: float) -> str:
    v = us / 1000
    a = abs(v)
    return f"{v:.3f} ms" if a < 10 else f"{v:.2f} ms" if a < 100 else f"{v:,.1f} ms"


def and_list(labels: Sequence[str], most: int = 4) -> str:
    """'rank 3 and rank 5'; 'rank 1, rank 3 and rank 5'; 'rank 0, rank 1, rank 2 and 5 more'."""
    labels = list(labels)
    if len(labels) > most:
        return ", ".join(labels[:most - 1]) + f" and {len(labels) - most + 1} more"
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def slowest(values: Sequence[float]) -> tuple[int, list[int]]:
    """Index of the largest value (the first on equal values) and the indices of the others
    within NEAR_TIE_PCT of it."""
    top = max(range(len(values)), key=lambda i: (values[i], -i))
    lim = values[top] * NEAR_TIE_PCT / 100
    ties = [i for i, v in enumerate(values) if i != top and values[top] - v <= lim and values[top] > 0]
    return top, ties


TIE_NAMED = 8  # a near-tie's headline names this many of the slowest ranks, with their times


def _tie_text(rows: list[dict], top: int, ties: list[int], what: str, values: Sequence[float]) -> str:
    """A near-tie, naming the slowest ranks (slowest first, each with its time), so the headline says
    which ranks to look at even when none stands out alone."""
    tied = sorted([top, *ties], key=lambda i: (-values[i], rows[i]["rank"]))
    named = [f"{rows[i]['label']} ({ms(values[i])})" for i in tied[:TIE_NAMED]]
    more = len(tied) - len(named)
    names = (", ".join(named) + f" and {more} more") if more else and_list(named, most=len(named))
    if len(tied) == 2:
        return f"No single straggler: {names} are within {NEAR_TIE_PCT:g}% in {what}."
    who = f"all {len(tied)} ranks" if len(tied) == len(rows) else f"the {len(tied)} slowest ranks"
    return f"No single straggler: {who} are within {NEAR_TIE_PCT:g}% in {what}: {names}."


def compare_ops(rows: list[dict], slow: dict) -> tuple[list[dict], list[dict]]:
    """(signatures every rank ran, the slow rank against the median rank; op names whose
    shapes differ between ranks, not compared)."""
    n = len(rows)
    holders: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        for k in r["sigs"]:
            holders.setdefault(k, []).append(i)
    ops, differ = [], {}
    for k in sorted(holders):
        info = slow["sigs"].get(k) or rows[holders[k][0]]["sigs"][k]
        if len(holders[k]) == n:
            vals = [r["sigs"][k]["us"] * r["scale"] for r in rows]
            med = median(vals)
            mine = slow["sigs"][k]["us"] * slow["scale"]
            ops.append({"sig": info["sig"], "key": k, "name": info["name"], "class": info["class"],
                        "rank_us": mine, "median_us": med, "delta_us": mine - med,
                        "delta_pct": (mine / med - 1) * 100 if med > 0 else None})
            continue
        d = differ.setdefault(info["name"], {"name": info["name"], "class": info["class"], "signatures": 0,
                                             "per_rank": [0.0] * n})
        d["signatures"] += 1
        for i in holders[k]:
            d["per_rank"][i] += rows[i]["sigs"][k]["us"] * rows[i]["scale"]
    ops.sort(key=lambda o: (-o["delta_us"], o["key"]))
    me = rows.index(slow)
    out = []
    for d in differ.values():
        per = d.pop("per_rank")
        d.update({"rank_us": per[me], "median_us": median(per), "min_us": min(per), "max_us": max(per)})
        out.append(d)
    out.sort(key=lambda d: (-d["max_us"], d["name"]))
    return ops, out


def phase_stragglers(rows: list[dict]) -> list[dict]:
    """Per phase that every rank has: the rank with the most GPU work in it (per step)."""
    out = []
    for p in PHASES:
        if not rows or not all(p in r["phases"] for r in rows):
            continue
        work = [r["phases"][p]["work_us"] for r in rows]
        top, ties = slowest(work)
        med = median(work)
        r = rows[top]
        sources = sorted({r2["phase_source"].get(p, "") for r2 in rows} - {""})
        entry = {"phase": p, "source": "; ".join(sources), "rank": r["rank"], "label": r["label"],
                 "work_us": work[top], "median_us": med, "extra_us": work[top] - med,
                 "extra_pct": (work[top] / med - 1) * 100 if med > 0 else None,
                 "collective_us": r["phases"][p]["collective_us"], "wait_us": r["phases"][p]["wait_us"],
                 "ties": [rows[i]["label"] for i in sorted(ties, key=lambda i: rows[i]["rank"])]}
        if work[top] <= 0 or work[top] - med <= 0:
            entry["text"] = f"{p}: no rank stands out (the most GPU work is {ms(work[top])})."
        elif ties:
            entry["text"] = f"{p}: " + _tie_text(rows, top, ties, f"{p} GPU work", work)
        else:
            entry["text"] = (f"{p}: {r['label']} does the most GPU work, {ms(work[top])}, {ms(work[top] - med)} "
                             f"({entry['extra_pct']:.1f}%) more than the median rank's {ms(med)}.")
        out.append(entry)
    return out


def _lead_text(lead: dict, ops: list[dict], differ: list[dict], unit: str) -> str:
    """The class with the largest extra time, the compared ops behind it, and whether most of
    it sits in ops whose shapes differ between ranks (more work, not slower kernels)."""
    cls = lead["class"]
    pos = [o for o in ops if o["delta_us"] > 0 and o["class"] == cls]
    lead_ops = "; ".join(f"{o['sig']} +{ms(o['delta_us'])}" for o in pos[:3])
    words = _CLASS_WORDS.get(cls, f"device time of {cls} ops")
    out = (f"The largest difference is in {words}: {ms(lead['rank_us'])} {unit} against the "
           f"median rank's {ms(lead['median_us'])} (+{ms(lead['delta_us'])})")
    if lead_ops:
        out += f", led by {lead_ops}"
    dd = [d for d in differ if d["class"] == cls and d["rank_us"] > d["median_us"]]
    dd_extra = sum(d["rank_us"] - d["median_us"] for d in dd)
    if dd and dd_extra > sum(o["delta_us"] for o in pos):
        names = and_list([d["name"][:60] for d in dd[:2]], most=2) + (f" and {len(dd) - 2} more" if len(dd) > 2 else "")
        out += (f". Most of it is in ops whose input shapes differ between ranks ({names}): this rank has a "
                "different amount of work (data-dependent shapes: uneven embedding lookups or all_to_all splits) "
                "rather than slower kernels")
    return out + "."


def straggler(rows: list[dict], per_step: bool) -> dict[str, Any]:
    """The rank with the longest own time, its near-ties, where its extra time goes."""
    unit = "per step" if per_step else "in the trace"
    top, ties = slowest([r["own_us"] for r in rows])
    slow = rows[top]
    med_own = median([r["own_us"] for r in rows])
    extra = slow["own_us"] - med_own
    classes = []
    for c in CLASSES:
        med = median([r["by_class_scaled"][c] for r in rows])
        mine = slow["by_class_scaled"][c]
        classes.append({"class": c, "rank_us": mine, "median_us": med, "delta_us": mine - med})
    ops, differ = compare_ops(rows, slow)
    work = [c for c in classes if c["class"] != "collective"]
    device_delta = sum(c["delta_us"] for c in work)
    unexplained = extra - device_delta
    lead = max(work, key=lambda c: c["delta_us"])
    others_wait = [r["wait_us"] for r in rows if r is not slow]
    text = []
    if extra <= 0 or med_own <= 0:
        text.append(f"No rank stands out: {slow['label']} takes the longest, {ms(slow['own_us'])} {unit} of its own "
                    f"time (step time less collective wait), no more than the median rank.")
    else:
        if ties:
            text.append(_tie_text(rows, top, ties, "own time (step time less collective wait)",
                                  [r["own_us"] for r in rows]))
            text.append(f"{slow['label']} is the slowest by a hair: {ms(slow['own_us'])} {unit} of own time, "
                        f"{ms(extra)} ({extra / med_own * 100:.1f}%) more than the median rank's {ms(med_own)}.")
        else:
            text.append(f"{slow['label']} is the straggler: its own time (step time less collective wait) is "
                        f"{ms(slow['own_us'])} {unit}, {ms(extra)} ({extra / med_own * 100:.1f}%) more than the "
                        f"median rank's {ms(med_own)}.")
        if lead["delta_us"] > 0.1 * extra:
            text.append(_lead_text(lead, ops, differ, unit))
        if others_wait and max(others_wait) > 0.01 * med_own and slow["wait_us"] <= median(others_wait):
            text.append(f"The other ranks waited for it: up to {ms(max(others_wait))} {unit} of their collective "
                        f"time was waiting (median {ms(median(others_wait))}; {slow['label']} waited "
                        f"{ms(slow['wait_us'])} of its {ms(slow['collective_us_scaled'])} in collectives).")
        if device_delta <= 0:
            text.append(f"Its GPU does no more work than the median rank's ({ms(-device_delta)} {unit} less device "
                        "time): the extra time is host-side work (data loading, CPU ops, launches) or an idle GPU.")
        elif unexplained > 0.1 * extra:
            text.append(f"{ms(unexplained)} of its extra time is not device time: host-side work (data loading, "
                        "CPU ops, launches) or an idle GPU.")
    if differ:
        names = and_list([d["name"][:60] for d in differ[:3]], most=3)
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        text.append(f"Shapes differ between ranks for {names}{more} (data-dependent shapes, e.g. embedding "
                    "lookups or all_to_all splits): their time is not compared per op.")
    phases = phase_stragglers(rows)
    return {
        "rank": slow["rank"], "label": slow["label"], "file": slow["file"], "step_us": slow["step_us"],
        "own_us": slow["own_us"], "median_own_us": med_own, "extra_us": extra,
        "extra_pct": extra / med_own * 100 if med_own > 0 else None,
        "near_tie": bool(ties) and extra > 0, "ties": [rows[i]["label"] for i in ties],
        "tied": ([rows[i]["label"] for i in sorted([top, *ties], key=lambda i: (-rows[i]["own_us"], rows[i]["rank"]))]
                 if ties else []),  # the near-tie's ranks, slowest first
        "near_tie_pct": NEAR_TIE_PCT,
        "lead_class": lead["class"] if lead["delta_us"] > 0 else None,
        "by_class": classes, "ops": ops[:10], "shapes_differ": differ[:10], "shapes_differ_count": len(differ),
        "device_delta_us": device_delta, "unexplained_us": unexplained, "phases": phases, "text": text,
    }
