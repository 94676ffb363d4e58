"""The run's first screen: "Do this first" for many ranks — who made the others wait, and why.

At most three levers by the wait they explain, and the imbalance after them when there is one; each
{kind, rank, title, text, fix, us}, `us` per step (per trace without steps):

  late_rank    the rank that caused the most waiting (and the next, when it caused at least half as much) (ranks/waits.py: the waits of the others at the
               collectives it arrived at last), the phase most of it was in, and what it did instead
               — the largest share of its lateness: more work (and the ops), host time with no op,
               host dispatch, data loading, a blocking call, a late start from an earlier collective
  step_start   ranks entering the step late, when the wait charged to step starts is worth a lever
  imbalance    all_to_all sizes that differ between ranks (the received elements: MoE routing,
               embedding sharding), else work between collectives that differs by 10% or more
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceana.ranks.straggler import ms

MIN_SHARE = 0.01  # a lever is worth at least this share of the median step
UNEVEN = 1.2  # all_to_all: the largest receiver over the mean
WORK_UNEVEN = 0.10  # work between collectives: the most over the median

_CAUSE = {
    "work": "more work than the others",
    "comm": "other collectives (another group's) running",
    "data": "data loading (DataLoader)",
    "sync": "a blocking host call (a synchronize, .item(), a blocking copy) that left its GPU idle",
    "host_dispatch": "its CPU issuing GPU work late (host dispatch: Python, CPU ops, launches)",
    "launch_gaps": "launch gaps between short kernels",
    "stream_wait": "its GPU waiting on another stream or event",
    "no_work": "its GPU idle with nothing launched in the trace",
    "untracked": "host time with no op recorded on the thread that issued the collective (Python, I/O, "
                 "logging, a sleep, a lock)",
    "earlier": "leaving an earlier collective later than the others",
}
#: short names of the causes, for the shares
WORDS = {"work": "more work", "comm": "other collectives", "data": "data loading", "sync": "blocking calls",
         "host_dispatch": "host dispatch", "launch_gaps": "launch gaps", "stream_wait": "stream waits",
         "no_work": "GPU idle, nothing launched", "untracked": "host time with no op",
         "earlier": "a later start (an earlier collective)", "step start": "late step starts"}
_FIX = {
    "work": "Balance the work: {rank} runs more{ops} before these collectives than the other ranks — uneven "
            "shards, token routing or embedding lookups; else make that work faster on {rank} (its own report's "
            "levers).",
    "untracked": "Find what {rank}'s Python does there (record it with with_stack=True; look for I/O, logging, "
                 "checkpoint writes, a sleep or a lock) and move it off the step, or give every rank the same.",
    "host_dispatch": "{rank}'s CPU feeds its GPU too slowly before these collectives: see its own report's host "
                     "dispatch finding (fewer, larger ops: torch.compile, CUDA graphs; a faster input path).",
    "data": "Load {rank}'s data ahead: more DataLoader workers, pin_memory, a deeper prefetch_factor; check its "
            "shard is not slower to read than the others'.",
    "sync": "Remove the host synchronisation on {rank} before these collectives (.item(), .cpu(), printing a "
            "tensor, torch.cuda.synchronize()).",
    "earlier": "{rank} left an earlier collective late: look at the collectives before these on {rank} (another "
               "process group: pipeline or tensor-parallel peers) and at who made it wait there.",
}
_FIX_OTHER = "See {rank}'s own report for what held its GPU before these collectives."


def _share(parts: Mapping[str, float], total: float, most: int = 2) -> str:
    items = sorted(((k, v) for k, v in parts.items() if v > 0), key=lambda kv: -kv[1])[:most]
    return ", ".join(f"{WORDS.get(k, k)} {ms(v)} ({v / total * 100:.0f}%)" for k, v in items) if total > 0 else ""


def _late_rank(col: Mapping[str, Any], unit: str, floor: float, k: int = 0) -> dict[str, Any] | None:
    """The k-th rank by wait caused (k = 1 only when it caused at least half the first's)."""
    by = list(col.get("by_rank") or [])
    if len(by) <= k or by[k]["caused_us"] < floor or (k and by[k]["caused_us"] < 0.5 * by[0]["caused_us"]):
        return None
    top = by[k]
    caused, label = top["caused_us"], top["label"]
    phases = {k: v for k, v in top["by_phase_us"].items() if k != "unknown"}
    phase = max(phases, key=phases.get) if phases else None
    total_wait = float(col.get("wait_us") or 0.0)
    where = f", {_share(top['by_phase_us'], caused)}" if phase else ""
    title = (f"{label} makes the other ranks wait: {ms(caused)} {unit}" + (f", most in the {phase}" if phase else ""))
    text = [f"{label} arrived last at {top['last_arrivals']} collective{'s' if top['last_arrivals'] != 1 else ''}; "
            f"the other ranks waited {ms(caused)} {unit} for it{where}"
            + (f" — {caused / total_wait * 100:.0f}% of all the waiting in collectives." if total_wait > 0 else ".")]
    causes = dict(top["by_cause_us"])
    cause = max(causes, key=causes.get) if causes else None
    ops = ""
    if cause:
        parts = _share(causes, sum(causes.values()), most=3)
        text.append(f"What it was doing instead: {parts}; most of it {_CAUSE.get(cause, cause)}.")
        if cause == "work" and top["ops"]:
            named = "; ".join(f"{o['name'][:80]} {ms(o['us'])}" for o in top["ops"][:3])
            text.append(f"The work it ran there: {named}.")
            ops = f" ({top['ops'][0]['name'][:60]})"
    if not k and len(by) > 1 and 0.25 * caused <= by[1]["caused_us"] < 0.5 * caused:
        text.append(f"Next: {by[1]['label']}, {ms(by[1]['caused_us'])} {unit}.")
    fix = (_FIX.get(cause) or _FIX_OTHER).format(rank=label, ops=ops)
    return {"kind": "late_rank", "rank": label, "phase": phase, "cause": cause, "us": caused, "title": title,
            "text": " ".join(text), "fix": fix}


def _step_start(col: Mapping[str, Any], unit: str, floor: float) -> dict[str, Any] | None:
    sk = col.get("step_skew")
    if not sk or (sk.get("caused_us") or 0.0) < floor:
        return None
    label = sk["label"]
    return {"kind": "step_start", "rank": label, "us": sk["caused_us"],
            "title": f"{label} enters the step late: {ms(sk['lag_median_us'])} after the earliest rank "
                     f"(median over {sk['steps']} steps)",
            "text": f"The first collective of a step waits for the last rank to enter it: {ms(sk['caused_us'])} {unit} "
                    f"of the other ranks' waiting comes from late step starts (the most any rank entered a step "
                    f"late: {ms(sk['lag_max_us'])}).",
            "fix": f"Find what runs on {label} between its last collective and the next step (the optimizer's tail, "
                   "logging, metrics, checkpointing, data loading between steps) and make it the same on every "
                   "rank, or move it off the step."}


def _imbalance(col: Mapping[str, Any], unit: str) -> dict[str, Any] | None:
    a2a = col.get("all_to_all")
    if a2a and a2a["max_over_mean"] >= UNEVEN:
        return {"kind": "imbalance", "rank": a2a["max_rank"], "us": None,
                "title": f"all_to_all sizes are uneven: {a2a['max_rank']} receives {a2a['max_over_mean']:.2f}x "
                         "the mean",
                "text": f"Over {a2a['calls']} matched all_to_all calls, {a2a['max_rank']} received "
                        f"{a2a['max_elements']:,.0f} elements {unit} against a mean of {a2a['mean_elements']:,.0f} "
                        f"(the least: {a2a['min_rank']}, {a2a['min_elements']:,.0f}): it has more to receive and "
                        "more to compute, and the others wait for it.",
                "fix": "Balance the routing: MoE expert load balancing (an auxiliary loss, a capacity factor, expert "
                       "placement) or the embedding tables' sharding, so every rank receives about the same."}
    work = col.get("work_us") or {}
    if len(work) >= 2:
        vals = sorted(work.values())
        med = vals[(len(vals) - 1) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
        top = max(work, key=work.get)
        if med > 0 and work[top] / med - 1 >= WORK_UNEVEN:
            return {"kind": "imbalance", "rank": top, "us": work[top] - med,
                    "title": f"{top} does {(work[top] / med - 1) * 100:.0f}% more work between collectives than the "
                             "median rank",
                    "text": f"{top}: {ms(work[top])} {unit} of work between its collectives, the median rank "
                            f"{ms(med)}: the others wait for the difference at every collective.",
                    "fix": f"Give {top} less work (data, shards, experts), or find why the same work takes it longer "
                           "(its own report: a slower device, throttling, a different kernel)."}
    return None


def first_screen(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The levers (see the module doc), largest wait first; the imbalance last."""
    col = doc.get("collectives")
    if not col:
        return []
    s = doc["summary"]
    unit = "per step" if s.get("per_step") else "in the trace"
    floor = max(MIN_SHARE * (s.get("median_step_us") or 0.0), 1.0)
    out = [x for x in (_late_rank(col, unit, floor), _late_rank(col, unit, floor, 1), _step_start(col, unit, floor))
           if x]
    out.sort(key=lambda x: -x["us"])
    out = out[:3]
    imb = _imbalance(col, unit)
    if imb:  # what makes a rank late, when the sizes say so: always shown, after the levers
        out.append(imb)
    return out
