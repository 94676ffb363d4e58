"""GPU idle time between kernels, and why the GPU waited.

A device is idle where no GPU event (kernel, memcpy, memset) runs on any of its streams.
Each idle gap ends when some event starts; that event's launch (the cudaLaunchKernel /
hipLaunchKernel / cudaMemcpyAsync call linked by correlation id) says why the gap happened:

  host_wait    the launch call began after the GPU had gone idle: the CPU had not even issued
               the next piece of work, so the CPU side (Python, dispatch, launch overhead, data
               loading) is the bottleneck;
  kernel_wait  the launch call began before the GPU went idle, yet the event started later: it
               was queued behind a synchronisation, an event on another stream, or the launch
               latency itself;
  other        the event has no launch in the trace (its cause cannot be seen).

The same split is given per stream (gaps between consecutive events on one stream, as HTA's
idle-time breakdown does, with the thresholds above instead of HTA's 30 µs heuristic).
All sweeps are sorts and cumulative maxima, no per-event Python loops.
"""

from __future__ import annotations

import numpy as np

from traceana.arrays import distinct, median
from traceana.link import Links
from traceana.load.model import Trace

CAUSES = ("host_wait", "kernel_wait", "other")
TOP_GAPS = 5
# Gaps up to this long are the fixed cost of issuing kernels one by one (launch latency and
# per-op CPU dispatch): the launch_bound finding counts them. HTA's idle-time breakdown uses
# the same 30 µs as its default `consecutive_kernel_delay`. Longer gaps are idle_gap's.
LAUNCH_GAP_US = 30.0


def _classify(trace: Trace, links: Links, ev: np.ndarray, gap_start: np.ndarray) -> np.ndarray:
    """Cause index per gap, from the launch of the event that ends the gap."""
    la = links.gpu_launch[ev]
    cause = np.full(len(ev), 2, dtype=np.int8)
    has = la >= 0
    launch_ts = trace.launches.ts[la[has]] if has.any() else np.zeros(0)
    cause[has] = np.where(launch_ts > gap_start[has], 0, 1)
    return cause


def device_gaps(trace: Trace, links: Links, dev: int) -> dict:
    """Idle gaps on one device: event that ends each gap, gap start (absolute µs), length, cause."""
    gpu = trace.gpu
    idx = np.flatnonzero(gpu.device == dev)
    idx = idx[np.argsort(gpu.ts[idx], kind="stable")]
    ts = gpu.ts[idx]
    reach = np.maximum.accumulate(ts + gpu.dur[idx]) if len(idx) else np.zeros(0)
    if len(idx) < 2:
        e = np.zeros(0, dtype=np.int64)
        return {"event": e, "start": np.zeros(0), "length": np.zeros(0), "cause": np.zeros(0, np.int8),
                "t0": float(ts[0]) if len(ts) else 0.0, "t1": float(reach[-1]) if len(reach) else 0.0}
    gap = ts[1:] - reach[:-1]
    k = np.flatnonzero(gap > 0)
    ev = idx[k + 1]
    start = reach[k]
    return {"event": ev, "start": start, "length": gap[k], "cause": _classify(trace, links, ev, start),
            "t0": float(ts[0]), "t1": float(reach[-1])}


def _stream_idle(trace: Trace, links: Links, dev: int) -> list[dict]:
    gpu = trace.gpu
    out = []
    on_dev = np.flatnonzero(gpu.device == dev)
    for s in distinct(gpu.stream[on_dev]).tolist():
        idx = on_dev[gpu.stream[on_dev] == s]
        idx = idx[np.argsort(gpu.ts[idx], kind="stable")]
        row = {"stream": int(s), "events": int(len(idx)), **{c: 0.0 for c in CAUSES}}
        if len(idx) >= 2:
            reach = np.maximum.accumulate(gpu.ts[idx] + gpu.dur[idx])
            gap = gpu.ts[idx][1:] - reach[:-1]
            k = np.flatnonzero(gap > 0)
            cause = _classify(trace, links, idx[k + 1], reach[k])
            for i, c in enumerate(CAUSES):
                row[c] = float(gap[k][cause == i].sum())
        row["idle_us"] = row["host_wait"] + row["kernel_wait"] + row["other"]
        out.append(row)
    out.sort(key=lambda r: -r["events"])
    return out


def idle_summary(trace: Trace, links: Links, dev: int | None, ev_row: np.ndarray, rows: list[dict]) -> dict:
    """Idle time of one device by cause, per stream, and its largest gaps."""
    if dev is None or len(trace.gpu) == 0:
        zero = {c: 0.0 for c in CAUSES}
        return {"device": dev, "idle_us": 0.0, "by_cause": zero, "gaps": 0, "short_limit_us": LAUNCH_GAP_US,
                "short": {"gaps": 0, "idle_us": 0.0, "median_us": 0.0}, "long": dict(zero),
                "largest": [], "streams": []}
    g = device_gaps(trace, links, dev)
    by_cause = {c: float(g["length"][g["cause"] == i].sum()) for i, c in enumerate(CAUSES)}
    short = g["length"] <= LAUNCH_GAP_US
    top = np.argsort(-g["length"], kind="stable")[:TOP_GAPS]
    largest = [_describe_gap(trace, links, g, int(i), ev_row, rows) for i in top.tolist()]
    return {"device": dev, "idle_us": float(g["length"].sum()), "by_cause": by_cause,
            "gaps": int(len(g["length"])), "short_limit_us": LAUNCH_GAP_US,
            "short": {"gaps": int(short.sum()), "idle_us": float(g["length"][short].sum()),
                      "median_us": median(g["length"][short]) if short.any() else 0.0},
            "long": {c: float(g["length"][~short & (g["cause"] == i)].sum()) for i, c in enumerate(CAUSES)},
            "largest": largest, "streams": _stream_idle(trace, links, dev)}


def _label(trace: Trace, ev: int, ev_row: np.ndarray, rows: list[dict]) -> str:
    r = int(ev_row[ev]) if ev >= 0 and ev < len(ev_row) else -1
    if r >= 0 and not rows[r].get("opaque"):
        return rows[r]["name"]
    return trace.names[int(trace.gpu.name[ev])][:120]


def _describe_gap(trace: Trace, links: Links, g: dict, i: int, ev_row: np.ndarray, rows: list[dict]) -> dict:
    ev = int(g["event"][i])
    start, length = float(g["start"][i]), float(g["length"][i])
    gpu = trace.gpu
    # the event that ran last before the gap: the latest-ending event at or before its start
    before = np.flatnonzero((gpu.device == gpu.device[ev]) & (gpu.ts + gpu.dur <= start + 1e-6))
    prev = int(before[np.argmax(gpu.ts[before] + gpu.dur[before])]) if len(before) else -1
    out = {"start_us": start - g["t0"], "length_us": length, "cause": CAUSES[int(g["cause"][i])],
           "next": _label(trace, ev, ev_row, rows), "next_row": _row_id(ev, ev_row, rows),
           "prev": _label(trace, prev, ev_row, rows) if prev >= 0 else None, "cpu_call": None}
    la = trace.launches
    if len(la):
        ov = np.minimum(la.end, start + length) - np.maximum(la.ts, start)
        j = int(np.argmax(ov))
        if ov[j] > 0.5 * length:
            out["cpu_call"] = trace.names[int(la.name[j])]
    return out


def _row_id(ev: int, ev_row: np.ndarray, rows: list[dict]) -> str | None:
    r = int(ev_row[ev]) if 0 <= ev < len(ev_row) else -1
    return rows[r]["id"] if r >= 0 else None


def idle_finding(summary: dict, span_us: float) -> dict | None:
    """The idle_gap finding for gaps longer than LAUNCH_GAP_US (shorter ones are launch overhead,
    counted by launch_bound). Saving = their host-wait part: the CPU had not issued the work."""
    from traceana import units as u

    long = summary["long"]
    idle = sum(long.values())
    if span_us <= 0 or idle < 0.01 * span_us:
        return None
    big = []
    for g in summary["largest"][:3]:
        s = (f"{u.us(g['length_us'])} at +{u.us(g['start_us'])} ({g['cause'].replace('_', '-')}, before "
             f"{u.kernel_name(g['next'], 60)}")
        if g.get("cpu_call"):
            s += f"; the CPU was in {g['cpu_call']}"
        big.append(s + ")")
    n_long = summary["gaps"] - summary["short"]["gaps"]
    text = (f"The GPU (device {summary['device']}) was idle {u.us(summary['idle_us'])} of its {u.us(span_us)} span "
            f"({summary['idle_us'] / span_us * 100:.1f}%); {u.us(idle)} of it in {u.plural(n_long, 'gap')} longer than "
            f"{LAUNCH_GAP_US:g} µs (the shorter ones are launch overhead, see launch_bound). "
            f"Host-wait {u.us(long['host_wait'])}: the next kernel was launched only after the GPU had gone idle, "
            "so the CPU (Python, dispatch, data loading, post-processing) set the pace. "
            f"Kernel-wait {u.us(long['kernel_wait'])}: launched in time but started late, queued behind a "
            "synchronisation (.item(), .cpu(), cudaStreamSynchronize), another stream, an event or another rank. "
            f"Other {u.us(long['other'])}: no launch recorded. Largest gaps: " + "; ".join(big) + ". "
            "Fix host-wait by overlapping CPU work with GPU work: prefetch data (DataLoader workers, pin_memory, "
            "non_blocking copies), move post-processing off the critical path, CUDA graphs / "
            "torch.compile(mode='reduce-overhead'); kernel-wait by removing syncs from the step. Saving shown: "
            "the host-wait (kernel-wait depends on what it waits for and is not counted).")
    return {"kind": "idle_gap", "title": f"GPU idle {u.us(idle)} in gaps over {LAUNCH_GAP_US:g} µs "
                                         f"({idle / span_us * 100:.1f}% of the span): host-wait "
                                         f"{u.us(long['host_wait'])}, kernel-wait {u.us(long['kernel_wait'])}",
            "text": text, "ops": [g["next_row"] for g in summary["largest"] if g.get("next_row")][:10],
            "saving_us": long["host_wait"], "idle_us": long["host_wait"]}
