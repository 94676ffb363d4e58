"""Where a CPU-only trace's time went: CPU ops by self time (no roofline: there is no device).

Self time = an op's duration minus the durations of the ops nested directly inside it on the
same thread (nesting by time, as the profiler records it). Top-level ops are those not nested in
another op; ProfilerStep annotations give the step count. Only run for traces without GPU
events, whose op counts are small, so a per-thread stack walk is cheap.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from traceana.load.model import Trace

TOP = 15


def self_times(trace: Trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per op instance: self time (µs, may dip below 0 on overlapping children), whether it is
    top-level, and its parent op (-1 for top-level ops), by time nesting per thread."""
    ops = trace.ops
    n = len(ops)
    self_us = (ops.end - ops.ts).astype(np.float64)
    top_level = np.ones(n, dtype=bool)
    parent = np.full(n, -1, dtype=np.int64)
    order = np.lexsort((-(ops.end - ops.ts), ops.ts, ops.thread))
    stack: list[int] = []
    thread = None
    for i in order.tolist():
        if ops.thread[i] != thread:
            thread, stack = ops.thread[i], []
        while stack and ops.end[stack[-1]] <= ops.ts[i]:
            stack.pop()
        if stack and ops.end[i] <= ops.end[stack[-1]] + 1e-9:
            parent[i] = stack[-1]
            self_us[parent[i]] -= ops.end[i] - ops.ts[i]
            top_level[i] = False
        stack.append(i)
    return self_us, top_level, parent


def cpu_breakdown(trace: Trace) -> dict | None:
    ops = trace.ops
    n = len(ops)
    if n == 0:
        return None
    names = trace.names
    self_us, top_level, _ = self_times(trace)
    by = defaultdict(lambda: [0, 0.0, 0.0])
    for i in range(n):
        rec = by[names[int(ops.name[i])]]
        rec[0] += 1
        rec[1] += float(ops.end[i] - ops.ts[i])
        rec[2] += max(float(self_us[i]), 0.0)
    rows = sorted(({"name": k, "calls": v[0], "total_us": v[1], "self_us": v[2]} for k, v in by.items()),
                  key=lambda r: (-r["self_us"], r["name"]))
    top_time = float((ops.end - ops.ts)[top_level].sum())
    steps = int(sum(1 for c in trace.annotations.name.tolist() if names[c].startswith("ProfilerStep#")))
    return {
        "ops": len(rows), "op_calls": n, "self_us": float(np.clip(self_us, 0, None).sum()),
        "top_level_us": top_time, "steps": steps, "span_us": trace.span_us,
        "by_self_time": rows[:TOP],
        "note": "CPU ops by self time (their duration minus the ops nested inside them, per thread)",
    }
