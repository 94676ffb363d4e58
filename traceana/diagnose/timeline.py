"""One representative window of the primary device, lane by lane: the data the report's timeline draws.

The window is one step: the ProfilerStep#N annotation of median duration (the lower median, so
warm-up and the odd slow step are not the picture), its GPU work being the primary device's
events *launched* inside the step (the runtime call with the same correlation id; the event's
own start when none was recorded), from the first one's start to the last one's end. Every event
of the device overlapping that window is drawn (clipped to it), also work launched by a
neighbouring step. Without steps the window is the whole span when the device has at most CAP
events, else the busiest stretch holding about CAP events' worth of the span: the length
span x CAP / events, placed where the union of GPU intervals (each instant once) covers most.

Lanes are streams; each interval carries its start and duration (µs from the window start), the
index of its op signature in analysis["ops"] (-1: none) and its category (the timeline
breakdown's: the op's bound, communication, memcpy, memset). A window holding more than CAP
intervals is aggregated: adjacent kernels shorter than a threshold `bucket_us`, of the same
category on the same lane and less than `bucket_us` apart, become one bucket (its `n` kernels,
its `busy` time, the op of its longest kernel); the threshold is the smallest that brings the
window under CAP (bisection on a monotone count). When same-category merging cannot get under
CAP (short kernels of alternating categories), neighbours of any category merge and a bucket
takes the category with most of its time (`mixed`). Idle gaps (no event of the device running,
from the ledger's accounts) are listed with their cause, the longest MAX_GAPS of them.

Also per device: idle by cause (as the lead splits the primary's), for the report's stacked bars.
Vectorised: sorts, cumulative sums and reduceat; no per-event Python loops.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from traceana.arrays import distinct
from traceana.diagnose import breakdown as bd
from traceana.diagnose import ledger as lg
from traceana.link.attribute import Links
from traceana.diagnose.buckets import buckets
from traceana.diagnose.timeline_cpu import cpu_tracks, name_table, pick_threads, step_thread
from traceana.load.model import Trace
from traceana.meter import OFF, Meter
from traceana.link.steps import _steps as profiler_steps
from traceana.link.steps import cover, merge

#: At most this many intervals are kept for the drawn window (over it, short kernels are bucketed).
CAP = 20_000
#: At most this many idle gaps of the window are listed (the longest ones).
MAX_GAPS = 2_000
#: Idle causes, as the ledger names them.
GAP_CAUSES = lg.IDLE_CAUSES
# ledger category code -> breakdown category code (the three communication parts drawn as one)
_TO_BD = np.array([bd.CATEGORIES.index("communication" if c in lg.COMM else c) for c in lg.PRIORITY], dtype=np.int8)
_ROUND = 2  # µs decimals kept (10 ns)


def step_timeline(trace: Trace, links: Links, groups: Sequence, rows: list[dict], primary: int | None,
                  accs: dict | None = None, meter: Meter = OFF) -> dict | None:
    """analysis["timeline"]: the representative window of device `primary` (None without GPU events).
    groups[i] is the signature Group behind rows[i]; accs the ledger's Account per device."""
    gpu = trace.gpu
    if primary is None or not len(gpu):
        return None
    ev_row = bd.event_rows(len(gpu), groups)
    meter.visit("timeline", len(gpu) + len(trace.ops) + len(trace.launches))
    cat = _TO_BD[lg.event_categories(trace, ev_row, rows)]
    on = np.flatnonzero(gpu.device == primary)
    if not len(on):
        return None
    if accs is None or primary not in accs:
        accs = lg.accounts(trace, links, ev_row, rows)
    acc = accs[primary]
    t0, t1, window = _window(trace, links, on)
    lanes, agg = _lanes(gpu, on, ev_row, cat, t0, t1)
    cpu = _cpu_side(trace, links, lanes, window, t0, t1)
    return {
        "device": int(primary),
        "window": window,
        "start_us": t0,
        "dur_us": t1 - t0,
        "categories": list(bd.PRIORITY),
        "lanes": lanes,
        **agg,
        **cpu,
        "gap_causes": list(GAP_CAUSES),
        "gaps": _window_gaps(acc, t0, t1),
        "idle_by_device": [{"device": int(d), "idle_us": accs[int(d)].by_category["idle"],
                            "idle_by_cause": accs[int(d)].idle_by_cause()} for d in distinct(gpu.device).tolist()],
        "note": ("times in µs from the window start; cat indexes `categories`, op indexes analysis.ops (-1: no op); "
                 "kernel indexes `kernels`; call indexes `calls` (the launching runtime call, -1: none recorded), "
                 "launch is its start, thread indexes `threads` (-1: none, or its thread not drawn); a CPU track's "
                 "name indexes `cpu_names`; gap cause indexes `gap_causes`"),
    }


def _nums(a: np.ndarray) -> list:
    """µs rounded to _ROUND decimals; whole numbers as ints (shorter JSON)."""
    return [int(x) if x.is_integer() else x for x in np.round(a, _ROUND).tolist()]


# ----------------------------------------------------------------------------- the window


def _window(trace: Trace, links: Links, on: np.ndarray) -> tuple[float, float, dict]:
    gpu = trace.gpu
    ts, end = gpu.ts[on], gpu.ts[on] + gpu.dur[on]
    nums, st, se = profiler_steps(trace)
    if len(nums):
        dur = se - st
        order = np.argsort(dur, kind="stable")
        k = int(order[(len(order) - 1) // 2])
        la = links.gpu_launch[on]
        launch = np.where(la >= 0, trace.launches.ts[np.maximum(la, 0)] if len(trace.launches) else ts, ts)
        mine = (launch >= st[k]) & (launch < se[k])
        if not mine.any():  # nothing linked to a launch in it: the events that start in the step
            mine = (ts >= st[k]) & (ts < se[k])
        t0, t1 = (float(ts[mine].min()), float(end[mine].max())) if mine.any() else (float(st[k]), float(se[k]))
        info = {"kind": "step", "name": f"ProfilerStep#{nums[k]}", "events_launched": int(mine.sum()),
                "cpu_start_us": float(st[k]) - t0, "cpu_dur_us": float(dur[k]),
                "steps": {"count": len(nums), "median_us": float(dur[k]), "min_us": float(dur.min()),
                          "max_us": float(dur.max())},
                "why": ((f"the step of median duration of {len(nums)} ProfilerStep annotations" if len(nums) > 1
                         else "the only ProfilerStep annotation") + "; its GPU work is the device's events launched "
                        "in it, from the first one's start to the last one's end")}
        return t0, t1, info
    lo, hi = float(ts.min()), float(end.max())
    if len(on) <= CAP or hi <= lo:
        return lo, hi, {"kind": "span", "why": "no ProfilerStep annotations: the device's whole span"}
    length = (hi - lo) * CAP / len(on)
    s, e = merge(ts, end)
    cand = distinct(ts)
    if len(cand) > 5000:  # candidate starts: every event start, thinned evenly to 5000
        cand = cand[np.linspace(0, len(cand) - 1, 5000).astype(np.int64)]
    cand = np.minimum(cand, hi - length)
    busy = cover(s, e, cand, cand + length)
    i = int(np.argmax(busy))
    t0 = float(cand[i])
    return t0, t0 + length, {
        "kind": "busiest", "busy_us": float(busy[i]),
        "why": (f"no ProfilerStep annotations and {len(on):,} events: the stretch of span x {CAP:,} / events where "
                "the GPU was busiest")}


# ----------------------------------------------------------------------------- kernels, launches, CPU threads


def _cpu_side(trace: Trace, links: Links, lanes: list[dict], window: dict, t0: float, t1: float) -> dict:
    """Each lane's kernel names, correlation ids and launches (its `_ev` consumed), the kernel name
    table, and the CPU threads that launched the drawn work (timeline_cpu)."""
    gpu, la = trace.gpu, trace.launches
    evs = [lane.pop("_ev") for lane in lanes]
    every = np.concatenate(evs) if evs else np.zeros(0, dtype=np.int64)
    launch = links.gpu_launch[every] if len(every) else np.zeros(0, dtype=np.int64)
    has = launch >= 0
    l_thread = np.where(has, la.thread[np.maximum(launch, 0)], -1) if len(la) else np.full(len(every), -1)
    l_ts = np.where(has, la.ts[np.maximum(launch, 0)], t0) if len(la) else np.full(len(every), t0)
    if window["kind"] == "step":
        lo = t0 + window["cpu_start_us"]
        hi = lo + window["cpu_dur_us"]
        own = step_thread(trace, window["name"], lo)
    else:  # the window itself, from its first launch (at most one window length earlier)
        lo = max(float(l_ts[has].min()), t0 - (t1 - t0)) if has.any() else t0
        lo, hi, own = min(lo, t0), t1, None
    threads, launched, omitted = pick_threads(l_thread, own, trace.threads)
    row_of = np.full(len(trace.threads) + 1, -1, dtype=np.int64)
    row_of[threads] = np.arange(len(threads))
    row = row_of[l_thread]  # -1 (no launch) indexes the spare last slot: -1
    kernels, kidx = name_table(gpu.name[every], trace.names)
    l_name = np.where(has, la.name[np.maximum(launch, 0)], -1) if len(la) else np.full(len(every), -1)
    calls, cidx = name_table(l_name[has], trace.names)
    call = np.full(len(every), -1, dtype=np.int64)
    call[has] = cidx
    at = 0
    for lane, ev in zip(lanes, evs):
        sl = slice(at, at + len(ev))
        at += len(ev)
        lane["kernel"] = kidx[sl].astype(np.int64).tolist()
        lane["corr"] = gpu.corr[ev].astype(np.int64).tolist()
        lane["call"] = call[sl].tolist()
        lane["thread"] = row[sl].tolist()
        lane["launch"] = _nums(np.where(has[sl], l_ts[sl] - t0, 0.0))
    return {"kernels": kernels, "calls": calls,
            **cpu_tracks(trace, threads, launched, omitted, t0, lo, hi)}


# ----------------------------------------------------------------------------- lanes


def _lanes(gpu, on: np.ndarray, ev_row: np.ndarray, cat: np.ndarray, t0: float, t1: float) -> tuple[list, dict]:
    """The stream lanes (columns per lane) and the aggregation facts; each lane also carries `_ev`,
    the GPU event index behind each interval (a bucket's longest kernel), for the caller to read
    kernel names and launches from and then drop."""
    ts, end = gpu.ts[on], gpu.ts[on] + gpu.dur[on]
    inside = ((ts < t1) & (end > t0)) | ((gpu.dur[on] <= 0) & (ts >= t0) & (ts <= t1))  # zero-length ones too
    sel = on[inside]
    stream = gpu.stream[sel]
    s = np.maximum(gpu.ts[sel], t0) - t0
    e = np.minimum(gpu.ts[sel] + gpu.dur[sel], t1) - t0
    order = np.lexsort((s, stream))
    sel, stream, s, e = sel[order], stream[order], s[order], np.maximum(e[order], s[order])
    c, op = cat[sel].astype(np.int64), ev_row[sel]
    b = buckets(stream, s, e, c, CAP)
    agg = {"events": int(len(sel)), "intervals": int(len(b.first)), "cap": CAP, "aggregated": b.aggregated}
    if b.aggregated:
        agg.update({"bucket_us": round(b.q, _ROUND), "mixed": b.mixed,
                    "aggregation": (f"{len(sel):,} events over the cap of {CAP:,}: adjacent kernels shorter than "
                                    f"{b.q:.3g} µs and under that apart on one stream"
                                    + (" (of any category: the bucket takes the category with most of its time)"
                                       if b.mixed else ", of the same category,") + " are drawn as one bucket")})
    lanes = []
    lane_of = stream[b.first]
    for st in distinct(stream).tolist():
        k = np.flatnonzero(lane_of == st)
        raw = stream == st
        lane = {"stream": int(st), "events": int(raw.sum()), "busy_us": round(float((e - s)[raw].sum()), _ROUND),
                "start": _nums(b.start[k]), "dur": _nums(b.end[k] - b.start[k]),
                "op": op[b.rep[k]].astype(np.int64).tolist(), "cat": b.cat[k].astype(np.int64).tolist(),
                "n": b.n[k].astype(np.int64).tolist(), "_ev": sel[b.rep[k]]}
        if b.aggregated:
            lane["busy"] = _nums(b.busy[k])
        lanes.append(lane)
    return lanes, agg


# ----------------------------------------------------------------------------- idle


def _window_gaps(acc: lg.Account, t0: float, t1: float) -> dict:
    start, length = acc.gap_start, acc.gap_len
    code = acc.gap_codes()
    end = start + length
    m = (start < t1) & (end > t0)
    s, e, code = np.maximum(start[m], t0) - t0, np.minimum(end[m], t1) - t0, code[m]
    out = {"count": int(len(s)), "idle_us": round(float((e - s).sum()), _ROUND)}
    if len(s) > MAX_GAPS:
        keep = np.sort(np.argsort(-(e - s), kind="stable")[:MAX_GAPS])
        out["dropped"] = int(len(s) - MAX_GAPS)
        out["dropped_us"] = round(float((e - s).sum() - (e[keep] - s[keep]).sum()), _ROUND)
        s, e, code = s[keep], e[keep], code[keep]
    out.update({"start": _nums(s), "dur": _nums(e - s),
                "cause": code.tolist()})
    return out
