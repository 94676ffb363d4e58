"""Per-device breakdowns read off the ledger's accounts, and utilisation (MFU-style).

Each device's span is split once by ledger.device_account (every µs once, work first: a collective
or a copy under a kernel is hidden and costs nothing). Here those accounts are laid out per device
for the report's stacked bars and the API's DataFrame, with categories the bounds, `communication`
(exposed: transfer + wait + unsized), `memcpy`, `memset` and `idle` — the same numbers as the ledger.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from traceana.arrays import distinct
from traceana.diagnose.ledger import COMM, COPIES, WORK, Account
from traceana.load.model import Trace

CATEGORIES = WORK + ("communication",) + COPIES + ("idle",)
PRIORITY = CATEGORIES[:-1]
PRIORITY_NOTE = ("overlapping streams are counted once, for the first running category in the order "
                 + " > ".join(PRIORITY) + "; communication and copies therefore count only where no "
                 "kernel hides them (exposed time); the same split as the ledger's")


def event_rows(n_events: int, groups: Sequence) -> np.ndarray:
    """Row index per GPU event; groups[i] is the signature Group of analysis row i."""
    out = np.full(n_events, -1, dtype=np.int64)
    for i, g in enumerate(groups):
        ev = getattr(g, "events", None)
        if ev is not None and len(ev):
            out[ev] = i
    return out


def primary_device(trace: Trace, dev_id: int | None) -> int | None:
    """The device the roofs were chosen for (the one with the most GPU time), when it has events."""
    gpu = trace.gpu
    if not len(gpu):
        return None
    if dev_id is not None and (gpu.device == dev_id).any():
        return int(dev_id)
    ids, inv = np.unique(gpu.device, return_inverse=True)
    return int(ids[int(np.argmax(np.bincount(inv, weights=gpu.dur)))])


def categories(acc: Account) -> dict[str, float]:
    """One account as the breakdown's categories."""
    by = acc.by_category
    out = {k: by[k] for k in WORK}
    out["communication"] = sum(by[k] for k in COMM)
    out.update({k: by[k] for k in COPIES})
    out["idle"] = by["idle"]
    return out


def from_accounts(trace: Trace, accs: dict[int, Account], primary: int | None) -> dict:
    """Per-device breakdowns (each summing to that device's span) and the primary's id."""
    gpu = trace.gpu
    devices = []
    for d, acc in sorted(accs.items()):
        on = gpu.device == d
        cats = categories(acc)
        devices.append({"device": d, "start_us": acc.t0, "span_us": acc.span_us,
                        "busy_us": acc.span_us - cats["idle"], "by_category": cats,
                        "idle_by_cause": acc.idle_by_cause(),
                        "events": int(on.sum()), "streams": int(len(distinct(gpu.stream[on])))})
    return {"categories": list(CATEGORIES), "priority": list(PRIORITY), "note": PRIORITY_NOTE,
            "devices": devices, "primary": primary}


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
