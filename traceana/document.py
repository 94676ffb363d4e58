"""An analysis document read safely, by every stage that reads one after the pipeline.

The cross-rank view, the comparison of two runs, the CI gates and every renderer read the
Analysis dict (docs/analysis-schema.md), often a saved one: it may come from an older or newer
traceana, or be hand-edited, so every field may be missing or null. These readers take it the
same way everywhere: a section that is not a mapping is empty, a list that is not a list is
empty, and the GPU's busy time and its split by bound come from one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceana.roofline.bounds import BOUNDS
from traceana.units import num, text


def mapping(value: Any) -> Mapping[str, Any]:
    """`value` if it is a mapping, else an empty one (a missing or malformed section)."""
    return value if isinstance(value, Mapping) else {}

def seq(value: Any) -> list[Any]:
    """`value` as a list if it is a list or tuple, else an empty list."""
    return list(value) if isinstance(value, (list, tuple)) else []

def share(part: Any, whole: Any) -> float | None:
    """part / whole in percent, or None when either is unknown or whole is not positive."""
    p, w = num(part), num(whole)
    if p is None or w is None or w <= 0:
        return None
    return 100.0 * p / w

def bound_of(op: Mapping[str, Any]) -> str:
    """The op's bound if it is one of BOUNDS, else "unmodelled"."""
    b = op.get("bound")
    return b if isinstance(b, str) and b in BOUNDS else "unmodelled"

def gpu_busy(analysis: Mapping[str, Any]) -> dict[str, Any] | None:
    """How long the GPUs were busy: per device, the union of its GPU event intervals (each
    instant counted once however many streams run), never a sum of durations, so busy_us is at
    most the device's span. From the timeline breakdown (breakdown.devices), so the report's
    lead, its time-by-bound split and its timeline agree.

    {busy_us, span_us (both summed over devices), busy_pct (busy / span, <= 100),
     by_category {compute, memory, ..., memset} (summed over devices; sums to busy_us),
     devices (how many), primary {device, busy_us, span_us, busy_pct}}; None when the analysis
    has no per-device timeline (an empty trace, or one saved before the timeline existed)."""
    bd = mapping(analysis.get("breakdown"))
    devs = [mapping(d) for d in seq(bd.get("devices")) if isinstance(d, Mapping)]
    busy = span = 0.0
    cats: dict[str, float] = {}
    rows = []
    for d in devs:
        b, s = num(d.get("busy_us")), num(d.get("span_us"))
        if b is None or s is None or b < 0 or s < 0:
            continue
        b = min(b, s)
        busy, span = busy + b, span + s
        for c, v in mapping(d.get("by_category")).items():
            if c != "idle" and (v := num(v)) is not None and v >= 0:
                cats[text(c, 40)] = cats.get(text(c, 40), 0.0) + v
        rows.append({"device": d.get("device"), "busy_us": b, "span_us": s,
                     "busy_pct": b / s * 100 if s > 0 else None})
    if not rows:
        return None
    prim = bd.get("primary")
    main = next((r for r in rows if r["device"] == prim and prim is not None), rows[0])
    return {"busy_us": busy, "span_us": span, "busy_pct": busy / span * 100 if span > 0 else None,
            "by_category": cats, "devices": len(rows), "primary": main}

def by_bound(analysis: Mapping[str, Any]) -> tuple[dict[str, float], float | None]:
    """GPU busy time per bound (µs, known bounds only) and the busy time they are shares of.

    Wall-clock, from gpu_busy: where streams overlap each instant counts once, for the first
    running category of the timeline's priority order (a collective or copy hidden under a
    kernel costs nothing; NCCL/RCCL kernels are `communication` whatever op launched them).
    An analysis without a timeline falls back to the per-op sums of device time."""
    busy = gpu_busy(analysis)
    if busy is not None and busy["busy_us"] > 0:
        cats = busy["by_category"]
        return {b: cats[b] for b in BOUNDS if b in cats}, busy["busy_us"]
    bd = mapping(analysis.get("breakdown"))
    raw = mapping(bd.get("by_bound"))
    parts = {b: v for b in BOUNDS if (v := num(raw.get(b))) is not None and v >= 0}
    total = num(bd.get("total_us"))
    if total is None or total <= 0:
        total = sum(parts.values()) or num(mapping(analysis.get("coverage")).get("device_time_us"))
    return parts, total
