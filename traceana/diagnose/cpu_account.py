"""Where a CPU-only trace's span went (cpu_levers.py's account): the busiest thread's span, every µs
once: its ops' self time by bound, and the time outside any op (Python between ops, data loading,
waiting); and the sentence that says it.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.diagnose.cpu_roofline import Judged

#: The account's words for each bound (the terms' labels), in the order they are listed.
TERMS = (("compute", "ops: compute-bound (BLAS)", "ops whose FLOPs at the BLAS figure set their time"),
         ("memory", "ops: memory-bound", "ops whose bytes at the memory bandwidth set their time"),
         ("dispatch", "ops: dispatch-bound", "ops whose work is smaller than the per-op dispatch cost"),
         ("underutilised", "ops: underutilised", "ops at under a tenth of the roofline model"),
         ("composite", "ops: glue in ops that call others", "self time of ops whose work is counted in the "
                                                             "ops they call (aten::linear -> aten::addmm)"),
         ("unmodelled", "ops: no cost model", "ops with no FLOP/byte formula"))
OUTSIDE = ("outside_ops", "outside any op", "no op running on the thread: Python between ops, data loading, "
                                            "waiting")


def _main_thread(trace, j: Judged) -> int:
    """The thread code with the most top-level op time (-1 without ops)."""
    ops = trace.ops
    if not len(ops):
        return -1
    t = np.bincount(ops.thread[j.top_level], weights=(ops.end - ops.ts)[j.top_level])
    return int(np.argmax(t)) if len(t) else -1


def account(trace, j: Judged) -> dict:
    """The busiest thread's span, every µs once: self time by bound (scaled onto its top-level op time,
    which the self times partition) and the time outside any op."""
    ops = trace.ops
    span = float(trace.span_us)
    th = _main_thread(trace, j)
    on = ops.thread == th
    busy = float((ops.end - ops.ts)[on & j.top_level].sum())
    bounds = np.array([r["bound"] for r in j.rows] + ["unmodelled"])
    selfc = np.clip(j.self_us, 0.0, None)
    by = {k: float(selfc[on & (bounds[j.sig] == k)].sum()) for k, _, _ in TERMS}
    total = sum(by.values())
    scale = busy / total if total > 0 else 0.0
    outside = max(span - busy, 0.0)
    terms = [{"key": k, "group": "work", "label": label, "meaning": meaning, "us": by[k] * scale,
              "share": by[k] * scale / span * 100 if span > 0 else None} for k, label, meaning in TERMS if by[k] > 0]
    terms.append({"key": OUTSIDE[0], "group": "idle", "label": OUTSIDE[1], "meaning": OUTSIDE[2], "us": outside,
                  "share": outside / span * 100 if span > 0 else None})
    others = sorted({int(x) for x in ops.thread.tolist()} - {th})
    other_us = float((ops.end - ops.ts)[~on & j.top_level].sum())
    return {"span_us": span, "thread": trace.threads[th] if 0 <= th < len(trace.threads) else None,
            "op_calls": int(len(ops)), "busy_us": busy, "outside_us": outside, "terms": terms, "other_threads": len(others),
            "other_threads_us": other_us, "steps": _steps(trace)}


def _steps(trace) -> int:
    names = trace.names
    return sum(1 for c in trace.annotations.name.tolist() if names[c].startswith("ProfilerStep#"))


def sentence(acc: dict) -> str:
    """'Of the 2.18 s span: CPU ops 2.05 s (94.0%: underutilised 1.91 s, ...); outside any op 130 ms (6.0%).'"""
    span = acc["span_us"]
    if span <= 0:
        return ""
    work = [t for t in acc["terms"] if t["key"] != OUTSIDE[0]]
    work.sort(key=lambda t: -t["us"])
    parts = ", ".join(f"{t['key']} {u.us(t['us'])}" for t in work[:4] if t["us"] > 0)
    steps = acc.get("steps") or 0
    out = (f"Of the {u.us(span)} span" + (f" ({u.plural(steps, 'profiler step')})" if steps else "")
           + f": CPU ops {u.us(acc['busy_us'])} ({u.pct(acc['busy_us'] / span * 100)}"
           + (f": {parts}" if parts else "") + ")"
           + (f" in {u.plural(acc['op_calls'], 'CPU op call')}" if acc.get("op_calls") else ""))
    if acc["outside_us"] > 0:
        out += (f"; outside any op {u.us(acc['outside_us'])} ({u.pct(acc['outside_us'] / span * 100)}: Python "
                "between ops, data loading, waiting)")
    if acc["other_threads"]:
        out += (f"; {u.plural(acc['other_threads'], 'other thread')} ran {u.us(acc['other_threads_us'])} of ops "
                "alongside")
    return out + "."
