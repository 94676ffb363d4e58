"""A CPU-only trace's "Do this first" (cpu_levers.py): its first levers, each with its saving and the
span left after it, combined so that no µs is saved twice.
"""

from __future__ import annotations

from traceana import units as u
from traceana.diagnose.cpu_roofline import Judged

#: Levers in the plan.
PLAN_SIZE = 3


def plan(found: list[dict], j: Judged, span_us: float) -> list[dict]:
    """"Do this first": the first PLAN_SIZE levers (chains are one lever: torch.compile fuses them all), each
    with its saving and the span left after it and every lever above it. Levers are combined the projection's
    way: a signature keeps t x (1 - f1) x (1 - f2) ... of its self time, so no µs is saved twice."""
    entries: list[dict] = []
    for i, f in enumerate(found):
        same = next((e for e in entries if e["group"] == f["group"] == "cpu_fusion"), None)
        if same is not None:
            same["idx"].append(i)
        elif len(entries) < PLAN_SIZE:
            entries.append({"group": f["group"], "idx": [i]})
    base = {k: j.rows[k]["self_us"] for f in found for k in f["_by"] if isinstance(k, int)}
    keep: dict = {}
    out = []
    span_now = span_us
    for e in entries:
        mine = {}
        for i in e["idx"]:
            for k, s in found[i]["_by"].items():
                mine[k] = mine.get(k, 0.0) + s
        saved = 0.0
        for k, s in mine.items():
            t = base.get(k, s) if isinstance(k, int) else s
            if t <= 0:
                continue
            before = keep.get(k, 1.0)
            keep[k] = before * max(1.0 - min(s / t, 1.0), 0.0)
            saved += t * (before - keep[k])
        after = max(span_now - saved, 0.0)
        f = found[e["idx"][0]]
        title = f["title"] if len(e["idx"]) == 1 else (
            f"Fuse {len(e['idx'])} element-wise chains (torch.compile): {u.us(sum(mine.values()))} recoverable")
        out.append({"finding": e["idx"][0], "findings": list(e["idx"]), "id": f["id"], "kind": f["kind"],
                    "title": title, "fix": f["fix"], "saving_us": float(sum(mine.values())),
                    "confidence": f["confidence"], "span_after_us": after, "span_now_us": span_us})
        span_now = after
    return out
