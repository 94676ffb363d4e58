"""The CPU side of the report's timeline: the threads that launched the drawn step's GPU work.

Per thread (the one holding the step's annotation first, then by how many drawn kernels each
launched; at most MAX_THREADS) two tracks over the CPU range of the window: its outermost cpu ops
(an op not nested in another op of its thread), and its outermost user annotations other than
ProfilerStep (record_function ranges), when it has any. Each interval is clipped to the range;
times are µs from the window start, names index one table. Over CPU_CAP intervals in all, short
neighbours on a track merge into buckets exactly as the GPU lanes do (timeline.buckets), a
bucket named after its longest interval. Vectorised per thread (at most MAX_THREADS passes).
"""

from __future__ import annotations

import re

import numpy as np

from traceana.diagnose.buckets import buckets
from traceana.load.model import Trace
from traceana.arrays import distinct

#: At most this many CPU threads are drawn (the others are counted in `threads_omitted`).
MAX_THREADS = 8
#: At most this many CPU intervals (ops and annotations, all threads) are kept; over it, short ones merge.
CPU_CAP = 10_000
#: Names (kernel and CPU) are kept to this many characters.
MAX_NAME = 1000
_STEP = re.compile(r"^ProfilerStep#[0-9]+$")
_ROUND = 2


def _nums(a: np.ndarray) -> list:
    return [int(x) if x.is_integer() else x for x in np.round(a, _ROUND).tolist()]


def name_table(codes: np.ndarray, names: list[str]) -> tuple[list[str], np.ndarray]:
    """The distinct names of `codes` (each cut to MAX_NAME), sorted by the name itself (so the table
    does not depend on the order events came in), and each code's index into it."""
    uniq, inv = np.unique(codes, return_inverse=True)
    table = [names[c][:MAX_NAME] for c in uniq.tolist()]
    order = sorted(range(len(table)), key=table.__getitem__)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return [table[i] for i in order], rank[inv].astype(np.int64)


def pick_threads(launch_threads: np.ndarray, step_thread: int | None,
                 names: list[str]) -> tuple[list[int], dict[int, int], int]:
    """Thread codes to draw: the step's thread, then by kernels launched (most first; ties by the
    thread's name). Also the drawn kernels each launched and how many launching threads were left out."""
    codes, counts = np.unique(launch_threads[launch_threads >= 0], return_counts=True)
    launched = dict(zip(codes.tolist(), counts.tolist()))
    order = sorted(launched, key=lambda t: (-launched[t], names[t]))
    if step_thread is not None:
        order = [step_thread] + [t for t in order if t != step_thread]
    return order[:MAX_THREADS], launched, max(0, len(order) - MAX_THREADS)


def step_thread(trace: Trace, name: str | None, start: float) -> int | None:
    """The thread holding the annotation `name` that starts at `start` (the drawn step), if any."""
    ann = trace.annotations
    if name is None or not len(ann) or name not in trace.names:
        return None
    code = trace.names.index(name)
    hit = np.flatnonzero((ann.name == code) & (np.abs(ann.ts - start) < 0.01))
    return int(ann.thread[hit[0]]) if len(hit) else None


def _outermost(ts: np.ndarray, end: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Indices (sorted by start) of the intervals no other one encloses; ties by `rank` (the name's
    place in sorted order: the result does not depend on the order events came in)."""
    order = np.lexsort((rank, -end, ts))
    ts, end = ts[order], end[order]
    before = np.maximum.accumulate(end)
    keep = np.ones(len(ts), dtype=bool)
    keep[1:] = ts[1:] >= before[:-1]
    return order[keep]


def cpu_tracks(trace: Trace, threads: list[int], launched: dict[int, int], omitted: int,
               t0: float, lo: float, hi: float) -> dict:
    """The drawn threads' tracks over [lo, hi] (trace clock), times from t0."""
    ops, ann = trace.ops, trace.annotations
    not_step = np.zeros(len(trace.names), dtype=bool)
    if len(ann):
        codes = distinct(ann.name)
        not_step[codes] = [not _STEP.match(trace.names[c]) for c in codes.tolist()]
    rows: list[dict] = []
    parts = []  # per track: (its row, kind, name codes, start, end), clipped, times from t0
    for th in threads:
        row = {"thread": trace.threads[th], "launched": int(launched.get(th, 0))}
        for kind, src, extra in (("ops", ops, None), ("annotations", ann, not_step)):
            if not len(src):
                continue
            m = (src.thread == th) & (src.ts <= hi) & (src.end >= lo)
            if extra is not None:
                m &= extra[src.name]
            idx = np.flatnonzero(m)
            if not len(idx) and kind == "annotations":
                continue
            idx = idx[_outermost(src.ts[idx], src.end[idx], name_table(src.name[idx], trace.names)[1])]
            s = np.maximum(src.ts[idx], lo) - t0
            e = np.maximum(np.minimum(src.end[idx], hi) - t0, s)
            parts.append((len(rows), kind, src.name[idx], s, e))
        rows.append(row)
    track = np.concatenate([np.full(len(p[3]), i, dtype=np.int64) for i, p in enumerate(parts)]) if parts \
        else np.zeros(0, dtype=np.int64)
    name = np.concatenate([p[2] for p in parts]).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
    s = np.concatenate([p[3] for p in parts]) if parts else np.zeros(0)
    e = np.concatenate([p[4] for p in parts]) if parts else np.zeros(0)
    b = buckets(track, s, e, np.zeros(len(s), dtype=np.int64), CPU_CAP)
    names, idx = name_table(name[b.rep] if len(s) else name, trace.names)
    of = track[b.first] if len(s) else track
    for i, (r, kind, *_rest) in enumerate(parts):
        k = np.flatnonzero(of == i)
        cols = {"start": _nums(b.start[k]), "dur": _nums(b.end[k] - b.start[k]),
                "name": idx[k].astype(np.int64).tolist(), "n": b.n[k].astype(np.int64).tolist()}
        if b.aggregated:
            cols["busy"] = _nums(b.busy[k])
        rows[r][kind] = cols
    out = {"threads": rows, "cpu_names": names, "cpu_range": [round(lo - t0, _ROUND), round(hi - t0, _ROUND)],
           "cpu_events": int(len(s)), "cpu_intervals": int(len(b.first)), "cpu_cap": CPU_CAP,
           "threads_omitted": int(omitted)}
    if b.aggregated:
        out["cpu_aggregation"] = (f"{len(s):,} CPU intervals over the cap of {CPU_CAP:,}: adjacent ones shorter "
                                  f"than {b.q:.3g} µs and under that apart on one track are drawn as one bucket, "
                                  "named after its longest")
    return out
