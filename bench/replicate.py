"""A trace's events replicated N times, as if the profiler had recorded N times as many steps: the logic
bench/make_large_trace.py writes big traces with, and tests/test_linear.py builds its sizes with.

Copy k of every event is shifted by k spans in time (so copies follow each other and nesting is kept),
and the ids that link events are offset by k times (the largest id + 1), per id space, so that no copy's
ids collide with another's and every kernel -> launch -> op link of copy k is the link of copy 0, moved.
Keys naming the same ids share one offset:
    args.correlation and the flow events' id (ph s/t/f, which Kineto sets to the correlation)
    args["External id"] and args["external id"] (the older kernels' spelling)
    args["Python id"] and args["Python parent id"] (a frame's parent is another frame's Python id)
    args["Ev Idx"], args["Record function id"]
Only non-negative ids are offset (-1 and 0 mean "none" in some vintages). ProfilerStep#N names are
renumbered N + k * (number of steps). Metadata events (ph M) are written once.

Plain Python over the decoded events (no JSON library): `replicate(doc, n)` returns the document with
n copies of its events.
"""

from __future__ import annotations

import math
import re

ID_KEYS = ("correlation", "External id", "external id", "Ev Idx", "Record function id",
           "Python id", "Python parent id")
#: the id space of each key: keys of one space are offset alike
SPACE = {"correlation": "correlation", "External id": "External id", "external id": "External id",
         "Ev Idx": "Ev Idx", "Record function id": "Record function id", "Python id": "Python id",
         "Python parent id": "Python id"}
FLOW_PHASES = frozenset({"s", "t", "f"})
STEP = re.compile(r"^ProfilerStep#(\d+)$")


def plan(events: list[dict]) -> tuple[float, dict[str, int], int]:
    """Time shift per copy, id offset per key (one per id space; correlation also covers flow ids), steps
    per copy."""
    t0, t1 = math.inf, -math.inf
    top: dict[str, int] = {k: 0 for k in ID_KEYS}
    steps: list[int] = []
    for e in events:
        ts = e.get("ts")
        if isinstance(ts, (int, float)) and e.get("ph") != "M":
            dur = e.get("dur")
            t0 = min(t0, ts)
            t1 = max(t1, ts + (dur if isinstance(dur, (int, float)) else 0))
        a = e.get("args")
        if isinstance(a, dict):
            for k in ID_KEYS:
                v = a.get(k)
                if type(v) is int and v > top[k]:
                    top[k] = v
        if e.get("ph") in FLOW_PHASES and type(e.get("id")) is int and e["id"] > top["correlation"]:
            top["correlation"] = e["id"]
        m = STEP.match(e.get("name") or "") if isinstance(e.get("name"), str) else None
        if m:
            steps.append(int(m.group(1)))
    span = (t1 - t0) if t1 > t0 else 0.0
    shift = span + max(span * 1e-3, 1.0)  # a small gap between copies
    n_steps = (max(steps) - min(steps) + 1) if steps else 0
    space: dict[str, int] = {}
    for k, v in top.items():
        space[SPACE[k]] = max(space.get(SPACE[k], 0), v)
    return shift, {k: space[SPACE[k]] + 1 for k in ID_KEYS}, n_steps


def copy_event(e: dict, k: int, shift: float, offs: dict[str, int], n_steps: int) -> dict:
    """Copy k of event e (k = 0: the event itself, unchanged)."""
    if k == 0:
        return e
    e = dict(e)
    ts = e.get("ts")
    if isinstance(ts, (int, float)):
        e["ts"] = ts + k * shift
    if e.get("ph") in FLOW_PHASES and type(e.get("id")) is int and e["id"] >= 0:
        e["id"] = e["id"] + k * offs["correlation"]
    a = e.get("args")
    if isinstance(a, dict):
        a = dict(a)
        for key in ID_KEYS:
            v = a.get(key)
            if type(v) is int and v >= 0:
                a[key] = v + k * offs[key]
        e["args"] = a
    name = e.get("name")
    if n_steps and isinstance(name, str):
        m = STEP.match(name)
        if m:
            e["name"] = f"ProfilerStep#{int(m.group(1)) + k * n_steps}"
    return e


def replicate(doc: dict | list, copies: int) -> dict:
    """The trace document with `copies` copies of its events (metadata events once, first)."""
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    events = doc.get("traceEvents") or []
    shift, offs, n_steps = plan(events)
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    out = list(meta)
    for k in range(copies):
        out.extend(copy_event(e, k, shift, offs, n_steps) for e in body)
    return {**doc, "traceEvents": out}
