"""Where each device's wall-clock time went: a timeline breakdown that sums to the span.

Every GPU event gets one category: `memcpy` / `memset` by its kind, `communication` when the
kernel is communication (traceana/comm_kernels.py), otherwise the bound of its op signature (`compute`,
`memory`, `latency`, `underutilised`, `unmodelled`, `unknown`, `opaque`). Streams overlap, so the time is the
union of intervals and each instant is counted once, for the category of highest priority
running at that instant (PRIORITY, first wins). The order puts the work that sets the pace
first: a collective or a copy that runs under a kernel on another stream is hidden behind it
and costs nothing, so `communication`, `memcpy` and `memset` count only where they are
*exposed* (nothing else runs). `idle` is the rest of the span (first GPU event start to last
event end on that device), so the categories sum exactly to the span.

Vectorised: one sort per device, then a cummax sweep per category prefix (no per-event loops).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from traceana import comm_kernels
from traceana.arrays import distinct
from traceana.load.model import Trace

# First wins when intervals of several categories overlap in time.
PRIORITY = ("compute", "memory", "latency", "underutilised", "unmodelled", "unknown", "opaque", "communication",
            "memcpy", "memset")
CATEGORIES = PRIORITY + ("idle",)
PRIORITY_NOTE = ("overlapping streams are counted once, for the first running category in the order "
                 + " > ".join(PRIORITY) + "; communication and copies therefore count only where no "
                 "kernel hides them (exposed time)")
_BOUND_CODE = {b: i for i, b in enumerate(PRIORITY)}
_LINK_BOUNDS = {"host_link": "memcpy", "peer_link": "memcpy"}  # copy signatures' other events


def event_rows(n_events: int, groups: Sequence) -> np.ndarray:
    """Row index per GPU event; groups[i] is the signature Group of analysis row i."""
    out = np.full(n_events, -1, dtype=np.int64)
    for i, g in enumerate(groups):
        ev = getattr(g, "events", None)
        if ev is not None and len(ev):
            out[ev] = i
    return out


def comm_name_mask(names: Sequence[str]) -> np.ndarray:
    """Per name code: is it a communication kernel? (traceana/comm_kernels.py: NCCL / RCCL, MSCCL++,
    NVSHMEM, DeepEP, pplx-kernels, custom all-reduce, symmetric memory)"""
    return comm_kernels.comm_name_mask(names)


def event_categories(trace: Trace, ev_row: np.ndarray, rows: Sequence[dict]) -> np.ndarray:
    """Index into PRIORITY per GPU event."""
    gpu = trace.gpu
    n = len(gpu)
    row_code = np.array([_BOUND_CODE.get(_LINK_BOUNDS.get(r.get("bound"), r.get("bound")), _BOUND_CODE["unmodelled"])
                         for r in rows],
                        dtype=np.int8)
    cat = np.full(n, _BOUND_CODE["unmodelled"], dtype=np.int8)
    has = ev_row >= 0
    if len(rows):
        cat[has] = row_code[ev_row[has]]
    if n:
        comm = comm_kernels.comm_event_mask(trace.names, gpu.name) & (gpu.kind == 0)
        cat[comm] = _BOUND_CODE["communication"]
        cat[gpu.kind == 1] = _BOUND_CODE["memcpy"]
        cat[gpu.kind == 2] = _BOUND_CODE["memset"]
    return cat


def union_us(ts: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of [ts, end) intervals; ts must be sorted ascending."""
    if len(ts) == 0:
        return 0.0
    reach = np.maximum.accumulate(end)
    gaps = ts[1:] - reach[:-1]
    return float(reach[-1] - ts[0] - gaps[gaps > 0].sum())


def device_breakdown(ts: np.ndarray, end: np.ndarray, cat: np.ndarray) -> dict:
    """One device's span split by category (events sorted by ts; times relative or absolute)."""
    out = {c: 0.0 for c in CATEGORIES}
    if len(ts) == 0:
        return {"span_us": 0.0, "busy_us": 0.0, "by_category": out}
    span = float(np.max(end) - ts[0])
    covered = 0.0
    for k, c in enumerate(PRIORITY):
        sel = cat <= k
        u = union_us(ts[sel], end[sel]) if sel.any() else 0.0
        out[c] = max(u - covered, 0.0)
        covered = max(u, covered)
    out["idle"] = max(span - covered, 0.0)
    return {"span_us": span, "busy_us": covered, "by_category": out}


def time_breakdown(trace: Trace, ev_row: np.ndarray, rows: Sequence[dict], primary: int | None) -> dict:
    """Per-device timeline breakdowns (each summing to that device's span) and the primary's."""
    gpu = trace.gpu
    cat = event_categories(trace, ev_row, rows)
    devices = []
    if len(gpu):
        order = np.lexsort((gpu.ts, gpu.device))
        dev_sorted = gpu.device[order]
        cuts = np.flatnonzero(np.diff(dev_sorted)) + 1
        for part in np.split(order, cuts):
            d = int(gpu.device[part[0]])
            t0 = float(gpu.ts[part[0]])
            ts = gpu.ts[part] - t0
            end = ts + gpu.dur[part]
            b = device_breakdown(ts, end, cat[part])
            b.update({"device": d, "start_us": t0, "events": int(len(part)),
                      "streams": int(len(distinct(gpu.stream[part])))})
            devices.append(b)
    main = next((d for d in devices if d["device"] == primary), devices[0] if devices else None)
    return {"categories": list(CATEGORIES), "priority": list(PRIORITY), "note": PRIORITY_NOTE,
            "devices": devices, "primary": main["device"] if main else None}


def utilisation(trace: Trace, ev_row: np.ndarray, rows: Sequence[dict], device: dict,
                span_us: float, dev_id: int | None) -> dict:
    """Achieved FLOP/s and bytes/s over the primary device's span against its peaks (MFU-style).

    Each modelled op's FLOPs and bytes (per call x calls) are spread over its GPU events in
    proportion to their duration, and the events on the primary device are summed.
    """
    gpu = trace.gpu
    n_rows = len(rows)
    tot_f = np.array([(r["flops"] or 0.0) * r["count"] if r.get("flops") is not None else 0.0 for r in rows],
                     dtype=np.float64)
    tot_b = np.array([(r["bytes"] or 0.0) * r["count"] if r.get("bytes") is not None else 0.0 for r in rows],
                     dtype=np.float64)
    t_row = np.array([r["device_time_us"] for r in rows], dtype=np.float64)
    sel = ev_row >= 0
    if dev_id is not None:
        sel &= gpu.device == dev_id
    ev = np.flatnonzero(sel)
    frac = np.zeros(len(ev))
    if n_rows and len(ev):
        denom = t_row[ev_row[ev]]
        frac = np.divide(gpu.dur[ev], denom, out=np.zeros(len(ev)), where=denom > 0)
    f_row = np.bincount(ev_row[ev], weights=frac * tot_f[ev_row[ev]] if len(ev) else None,
                        minlength=n_rows) if n_rows else np.zeros(0)
    b_row = np.bincount(ev_row[ev], weights=frac * tot_b[ev_row[ev]] if len(ev) else None,
                        minlength=n_rows) if n_rows else np.zeros(0)
    peaks = device.get("peak_tflops") or {}
    by_dtype: dict[str, dict] = {}
    for i, r in enumerate(rows):
        if r.get("flops") is None or not f_row[i]:
            continue
        key = r.get("peak_dtype") or r.get("dtype") or "unknown"
        d = by_dtype.setdefault(key, {"flops": 0.0, "time_us": 0.0})
        d["flops"] += float(f_row[i])
        d["time_us"] += float(t_row[i])
    for key, d in by_dtype.items():
        tf = d["flops"] / (span_us * 1e6) if span_us > 0 else None
        pk = peaks.get(key)
        d.update({"achieved_tflops": tf, "peak_tflops": pk,
                  "pct_of_peak": tf / pk * 100 if tf is not None and pk else None})
    flops = float(f_row.sum()) if n_rows else 0.0
    nbytes = float(b_row.sum()) if n_rows else 0.0
    bw = device.get("dram_gbps")
    gbps = nbytes / (span_us * 1e3) if span_us > 0 else None
    # MFU against the fastest matrix roof the modelled work used (the usual headline number).
    main = max(by_dtype.items(), key=lambda kv: kv[1]["flops"], default=(None, None))
    return {
        "device": dev_id, "span_us": span_us, "flops": flops, "bytes": nbytes,
        "achieved_tflops": flops / (span_us * 1e6) if span_us > 0 else None,
        "by_dtype": dict(sorted(by_dtype.items(), key=lambda kv: -kv[1]["flops"])),
        "mfu_dtype": main[0], "mfu_pct": main[1]["pct_of_peak"] if main[1] else None,
        "achieved_gbps": gbps, "dram_gbps": bw,
        "bandwidth_pct": gbps / bw * 100 if gbps is not None and bw else None,
        "note": "FLOPs and bytes of the modelled ops only, over the device's whole span (first GPU "
                "event start to last end), idle time included",
    }
