"""Idle gaps in words: the largest ones with what the CPU was doing, launch facts, the host finding.

All numbers come from the primary device's Account (ledger.py); this module only describes them.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.arrays import distinct, median
from traceana.diagnose.ledger import (GRAPH_LAUNCH, IDLE_CAUSES, LAUNCH_GAP_US, Account, feeding_threads,
                                      graph_calls, median_gap)
from traceana.link.attribute import Links
from traceana.link.nesting import OpNesting
from traceana.load.model import Trace
from traceana.meter import OFF, Meter

TOP_GAPS = 5


def _label(trace: Trace, ev: int, ev_row: np.ndarray, rows: list[dict]) -> str:
    r = int(ev_row[ev]) if 0 <= ev < len(ev_row) else -1
    if r >= 0 and not rows[r].get("opaque"):
        return rows[r]["name"]
    return trace.names[int(trace.gpu.name[ev])][:120]


def _cpu_doing(trace: Trace, thread: int | None, start: float, end: float, meter: Meter = OFF) -> str | None:
    """The outermost op or annotation (not a ProfilerStep) running on `thread` across the gap's middle."""
    if thread is None:
        return None
    meter.visit("diagnose.gaps", len(trace.ops) + len(trace.annotations))  # a pass over both
    mid = (start + end) / 2
    best, best_ts = None, np.inf
    for src in (trace.ops, trace.annotations):
        if not len(src):
            continue
        m = np.flatnonzero((src.thread == thread) & (src.ts <= mid) & (src.end >= mid))
        for i in m.tolist():
            n = trace.names[int(src.name[i])]
            if n.startswith("ProfilerStep#"):
                continue
            if src.ts[i] < best_ts:
                best, best_ts = n, float(src.ts[i])
    return best


def largest_gaps(trace: Trace, links: Links, acc: Account, ev_row: np.ndarray, rows: list[dict],
                 meter: Meter = OFF) -> list[dict]:
    """The TOP_GAPS longest idle gaps: where, how long, why, and what the CPU was doing."""
    gpu, la = trace.gpu, trace.launches
    code = acc.gap_codes()
    out = []
    for i in np.argsort(-acc.gap_len, kind="stable")[:TOP_GAPS].tolist():
        ev = int(acc.gap_event[i])
        start, length = float(acc.gap_start[i]), float(acc.gap_len[i])
        before = np.flatnonzero((gpu.device == gpu.device[ev]) & (gpu.ts + gpu.dur <= start + 1e-6))
        meter.visit("diagnose.gaps", len(gpu))  # a pass over the events per gap (TOP_GAPS of them)
        prev = int(before[np.argmax(gpu.ts[before] + gpu.dur[before])]) if len(before) else -1
        launch = int(links.gpu_launch[ev])
        call = int(acc.gap_sync_call[i])
        thread = int(la.thread[call]) if call >= 0 else int(la.thread[launch]) if launch >= 0 else None
        r = int(ev_row[ev])
        out.append({"start_us": start - acc.t0, "length_us": length, "cause": IDLE_CAUSES[int(code[i])],
                    "sync_us": float(acc.gap_sync_us[i]),
                    "next": _label(trace, ev, ev_row, rows), "next_row": rows[r]["id"] if r >= 0 else None,
                    "prev": _label(trace, prev, ev_row, rows) if prev >= 0 else None,
                    "cpu_call": trace.names[int(la.name[call])] if call >= 0 else None,
                    "cpu_doing": _cpu_doing(trace, thread, start, start + length, meter)})
    return out


def launch_facts(trace: Trace, links: Links, ev_row: np.ndarray, rows: list[dict], acc: Account) -> dict:
    """CPU launch cost of the device's kernels and of the latency-bound ops' kernels; the launch gaps; the
    measured per-kernel cost (FLOOR_PCT-th percentile of the device's kernel durations: what its shortest
    kernels take, whatever their work); the graph calls of the threads feeding the device."""
    gpu, la = trace.gpu, trace.launches
    on = (gpu.kind == 0) & (gpu.device == acc.device)
    lat_idx = np.array([i for i, r in enumerate(rows) if r["bound"] == "latency"], dtype=np.int64)
    lat = on & np.isin(ev_row, lat_idx)

    def launch_cost(mask: np.ndarray) -> tuple[int, float]:
        ids = links.gpu_launch[mask]
        ids = distinct(ids[ids >= 0])
        return int(len(ids)), float((la.end[ids] - la.ts[ids]).sum())

    n_la, la_us = launch_cost(on)
    n_lat, lat_us = launch_cost(lat)
    short = (acc.gap_cause == IDLE_CAUSES.index("launch_gaps")) & (acc.gap_sync_us <= 0)
    durs = gpu.dur[on]
    return {"events": int((gpu.device == acc.device).sum()), "kernels": int(on.sum()),
            "kernel_us": float(durs.sum()), "launches": n_la, "launch_us": la_us,
            "lat_launches": n_lat, "lat_launch_us": lat_us, "short_gaps": int(short.sum()),
            "short_us": acc.idle_by_cause()["launch_gaps"], "short_median_us": median_gap(acc, "launch_gaps"),
            "short_limit_us": LAUNCH_GAP_US, "lat_kernels": int(lat.sum()), "lat_kernel_us": float(gpu.dur[lat].sum()),
            "lat_exposed_us": float(acc.by_category.get("latency", 0.0)),
            "kernel_floor_us": _percentile(durs, FLOOR_PCT),
            "kernel_floor_pct": FLOOR_PCT, **graph_facts(trace, links, acc)}


def _percentile(x: np.ndarray, pct: float) -> float | None:
    """The value below which pct% of x lies (by partition: no interpolation), None for no values."""
    if not len(x):
        return None
    k = int(len(x) * pct / 100)
    return float(np.partition(x, k)[k])


#: The per-kernel cost is measured as this percentile of the device's kernel durations: what its shortest
#: kernels take (judge.py's launch-floor defaults were derived the same way from the shared traces).
FLOOR_PCT = 5


def graph_facts(trace: Trace, links: Links, acc: Account) -> dict:
    """The CUDA / HIP graph calls of the threads that feed the device: launches and builds (instantiate, upload,
    update, capture), each with its count and host time, and the launches' per-call range."""
    la = trace.launches
    idx = graph_calls(trace, feeding_threads(trace, links, acc.device))
    if not len(idx):
        return {"graph_launches": 0, "graph_launch_us": 0.0, "graph_builds": 0, "graph_build_us": 0.0}
    names = [trace.names[int(c)] for c in la.name[idx]]
    dur = la.end[idx] - la.ts[idx]
    is_launch = np.array([bool(GRAPH_LAUNCH.search(n)) for n in names], dtype=bool)
    lau = np.sort(dur[is_launch])
    return {"graph_launches": int(is_launch.sum()), "graph_launch_us": float(lau.sum()),
            "graph_launch_min_us": float(lau[0]) if len(lau) else None,
            "graph_launch_median_us": median(lau) if len(lau) else None,
            "graph_launch_max_us": float(lau[-1]) if len(lau) else None,
            "graph_launch_call": next((n for n, ok in zip(names, is_launch) if ok), None),
            "graph_builds": int((~is_launch).sum()), "graph_build_us": float(dur[~is_launch].sum()),
            "graph_build_calls": sorted(set(n for n, ok in zip(names, is_launch) if not ok))[:4]}


def _top_level(trace: Trace, thread: int, nest: OpNesting | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, name code) of the outermost ops and annotations (ProfilerStep# left out) of a thread.
    nest: the nesting of trace.ops (its thread's run already by start, longest first), when at hand."""
    names = trace.names
    skip = np.array([n.startswith("ProfilerStep#") for n in names], dtype=bool)
    if nest is not None and len(trace.ops):
        ts, end, code = _by_start(trace, thread, nest, skip)
    else:
        parts = [(src.ts[m], src.end[m], src.name[m]) for src in (trace.ops, trace.annotations) if len(src)
                 for m in [(src.thread == thread) & ~skip[src.name]]]
        if not parts:
            return np.zeros(0), np.zeros(0), np.zeros(0, np.int64)
        ts = np.concatenate([p[0] for p in parts])
        end = np.concatenate([p[1] for p in parts])
        code = np.concatenate([p[2] for p in parts]).astype(np.int64)
        o = np.lexsort((-end, ts))
        ts, end, code = ts[o], end[o], code[o]
    reach = np.maximum.accumulate(end) if len(end) else end
    top = np.ones(len(ts), dtype=bool)
    top[1:] = ts[1:] >= reach[:-1]
    return ts[top], end[top], code[top]


def _by_start(trace: Trace, thread: int, nest: OpNesting, skip: np.ndarray) -> tuple[np.ndarray, ...]:
    """The thread's ops (its run of the nesting) and annotations, skip left out, in the order of
    np.lexsort((-end, ts)) over the ops then the annotations: the annotations, sorted apart, merged in
    by one searchsorted (an annotation starting with an op: that lexsort, over all)."""
    ops, ann = trace.ops, trace.annotations
    lo, hi = np.searchsorted(nest.thread, thread, "left"), np.searchsorted(nest.thread, thread, "right")
    a_code = ops.name[nest.order[lo:hi]]
    keep = ~skip[a_code]
    a_ts, a_end, a_code = nest.ts[lo:hi][keep], nest.end[lo:hi][keep], a_code[keep].astype(np.int64)
    m = (ann.thread == thread) & ~skip[ann.name] if len(ann) else np.zeros(0, dtype=bool)
    b_ts, b_end, b_code = ann.ts[m], ann.end[m], ann.name[m].astype(np.int64)
    if not len(b_ts):
        return a_ts, a_end, a_code
    at = np.searchsorted(a_ts, b_ts, "left")
    if (np.searchsorted(a_ts, b_ts, "right") > at).any():  # ties with an op's start: sorted together
        ts, end = np.concatenate((a_ts, b_ts)), np.concatenate((a_end, b_end))
        o = np.lexsort((-end, ts))
        return ts[o], end[o], np.concatenate((a_code, b_code))[o]
    o = np.lexsort((-b_end, b_ts))
    is_b = np.zeros(len(a_ts) + len(b_ts), dtype=bool)
    is_b[at[o] + np.arange(len(o))] = True
    out = []
    for a, b in ((a_ts, b_ts), (a_end, b_end), (a_code, b_code)):
        x = np.empty(len(is_b), dtype=np.result_type(a, b))
        x[~is_b], x[is_b] = a, b[o]
        out.append(x)
    return tuple(out)


def host_activity(trace: Trace, links: Links, acc: Account, meter: Meter = OFF) -> dict[str, float]:
    """host_dispatch idle by what the launching thread was doing at each gap's middle: the outermost op
    or annotation running there (e.g. `enumerate(DataLoader)#...`, `Optimizer.step#...`), else "other"."""
    la = trace.launches
    rest_all = acc.rest_us()
    sel = (acc.gap_cause == IDLE_CAUSES.index("host_dispatch")) & (rest_all > 0)
    out: dict[str, float] = {}
    if not sel.any():
        return out
    launch = links.gpu_launch[acc.gap_event[sel]]
    rest = rest_all[sel]
    mid = acc.gap_start[sel] + acc.gap_len[sel] / 2
    thread = np.where(launch >= 0, la.thread[np.maximum(launch, 0)], -1)
    nest = getattr(links, "nesting", None)
    nest = nest if nest is not None and nest.ops is trace.ops else None
    for th in distinct(thread).tolist():
        m = thread == th
        meter.visit("diagnose.gaps", len(thread) + len(trace.ops) + len(trace.annotations) + len(trace.launches))
        ts, end, code = _top_level(trace, th, nest) if th >= 0 else (np.zeros(0), np.zeros(0), np.zeros(0, np.int64))
        j = np.searchsorted(ts, mid[m], side="right") - 1
        hit = (j >= 0) & (end[np.maximum(j, 0)] >= mid[m]) if len(ts) else np.zeros(int(m.sum()), dtype=bool)
        slow = _slow_call(trace, th, mid[m]) if th >= 0 else [None] * int(m.sum())
        for k, us, call in zip(np.where(hit, j, -1).tolist(), rest[m].tolist(), slow):
            name = call or (trace.names[int(code[k])] if k >= 0 else "other")
            out[name] = out.get(name, 0.0) + us
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


#: A runtime call this long is not dispatch work: the thread sat inside the call (a kernel's first
#: launch loading its code, an allocator call, a blocking copy). Ordinary calls take microseconds.
SLOW_CALL_US = 1000.0
_LAUNCH_WORDS = ("LaunchKernel", "LaunchCooperativeKernel", "ModuleLaunch", "cuLaunch", "hipExtLaunch")
SLOW_LAUNCH = "kernel launch calls that themselves took milliseconds"
_ALLOC_CALLS = ("Malloc", "Free")


def _slow_call(trace: Trace, thread: int, mids: np.ndarray) -> list[str | None]:
    """For each instant in mids, the activity key of a runtime call of at least SLOW_CALL_US on `thread`
    spanning it (launch calls share one key), else None."""
    la = trace.launches
    sel = np.flatnonzero((la.thread == thread) & (la.end - la.ts >= SLOW_CALL_US))
    if not len(sel):
        return [None] * len(mids)
    sel = sel[np.argsort(la.ts[sel], kind="stable")]
    j = np.searchsorted(la.ts[sel], mids, side="right") - 1
    out: list[str | None] = []
    for jj, mid in zip(j.tolist(), mids.tolist()):
        if jj < 0 or la.end[sel[jj]] < mid:
            out.append(None)
            continue
        name = trace.names[int(la.name[sel[jj]])]
        out.append(SLOW_LAUNCH if any(w in name for w in _LAUNCH_WORDS) else f"inside {name}")
    return out


#: Runtime calls that make a stream wait for an event recorded elsewhere (another stream or device).
_WAIT_CALLS = ("StreamWaitEvent", "StreamWaitValue", "cuStreamWaitEvent")


def wait_finding(trace: Trace, links: Links, ledger: dict, acc: Account, ev_row: np.ndarray,
                 rows: list[dict], meter: Meter = OFF) -> dict | None:
    """stream_wait idle: the next work was already launched yet started late, and nothing of this device
    ran meanwhile: it waited on an event, another stream or device, or a graph dependency that the
    trace does not show running. A note (saving 0): what it waited for decides what can be recovered."""
    idle = ledger["idle"]["by_cause"]
    t, span = idle["stream_wait"], ledger["span_us"]
    if span <= 0 or t < 0.05 * span:
        return None
    mask = (acc.gap_cause == IDLE_CAUSES.index("stream_wait")) & (acc.gap_len > acc.gap_sync_us)
    gaps = np.flatnonzero(mask)
    i = int(gaps[np.argmax(acc.gap_len[gaps])])
    ev, start, length = int(acc.gap_event[i]), float(acc.gap_start[i]), float(acc.gap_len[i])
    la = trace.launches
    meter.visit("diagnose.gaps", 2 * len(la))  # two passes over the launches for the longest gap
    launch = int(links.gpu_launch[ev])
    where = _label(trace, ev, ev_row, rows)
    detail = f"The longest: {u.us(length)} before {where}"
    wait_call = None
    if launch >= 0:
        lt, th = float(la.ts[launch]), int(la.thread[launch])
        detail += (f", launched {u.us(lt - acc.t0)} into the span, {u.us(max(start + length - lt, 0.0))} before it "
                   "started")
        names = trace.names
        cand = np.flatnonzero((la.thread == th) & (la.ts <= lt) & (la.ts >= start - length))
        waits = [j for j in cand.tolist() if any(w in names[int(la.name[j])] for w in _WAIT_CALLS)]
        if waits:
            j = max(waits, key=lambda j: la.ts[j])
            wait_call = names[int(la.name[j])]
            detail += f"; its stream was told to wait by {wait_call} {u.us(lt - float(la.ts[j]))} before the launch"
        doing = _cpu_doing(trace, th, start, start + length, meter)
        mid = start + length / 2
        held = np.flatnonzero((la.thread == th) & (la.ts <= mid) & (la.end >= mid))
        if len(held):  # a runtime call spanning the gap's middle: the thread sat in it (often a blocking copy)
            j = int(held[np.argmax(la.end[held] - la.ts[held])])
            detail += f"; the launching thread meanwhile sat in {names[int(la.name[j])]} ({u.us(float(la.end[j] - la.ts[j]))})"
            detail += f" under {doing}" if doing else ""
        elif doing:
            detail += f"; the launching thread meanwhile was in {doing}"
    steps = ledger.get("steps") or 0
    per = f", {u.us(t / steps)} per step" if steps > 1 else ""
    n = len(gaps)
    text = (f"The GPU sat idle {u.us(t)} ({t / span * 100:.1f}% of the span{per}) in {u.plural(n, 'gap')} whose next "
            "work had already been launched: it waited on a dependency — an event recorded by another stream, "
            "device or process, or a CUDA-graph dependency — and nothing of this device ran meanwhile, so the "
            f"work it waited for is not in this trace. {detail}. No saving is claimed: what can be recovered "
            "depends on what it waited for. Profile every stream and process the step depends on (all ranks, "
            "the serving engine's scheduler and worker processes), or check the event it waits on (a copy or "
            "collective on another stream or device).")
    return {"kind": "stream_wait", "title": (f"The GPU waits on work outside the trace: {u.us(t)} idle with its next "
                                             f"work already launched ({t / span * 100:.1f}% of the span{per})"),
            "text": text, "fix": "Profile what it waits for (other streams, devices, processes).",
            "group": "host", "ops": [rows[int(ev_row[ev])]["id"]] if ev_row[ev] >= 0 else [],
            "saving_us": 0.0, "idle_us": t, "wait_call": wait_call}
