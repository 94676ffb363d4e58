"""Idle gaps in words: the largest ones with what the CPU was doing, launch facts, the host finding.

All numbers come from the primary device's Account (ledger.py); this module only describes them.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.arrays import distinct
from traceana.diagnose.ledger import IDLE_CAUSES, LAUNCH_GAP_US, Account, median_gap
from traceana.link import Links
from traceana.load.model import Trace

TOP_GAPS = 5


def _label(trace: Trace, ev: int, ev_row: np.ndarray, rows: list[dict]) -> str:
    r = int(ev_row[ev]) if 0 <= ev < len(ev_row) else -1
    if r >= 0 and not rows[r].get("opaque"):
        return rows[r]["name"]
    return trace.names[int(trace.gpu.name[ev])][:120]


def _cpu_doing(trace: Trace, thread: int | None, start: float, end: float) -> str | None:
    """The outermost op or annotation (not a ProfilerStep) running on `thread` across the gap's middle."""
    if thread is None:
        return None
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


def largest_gaps(trace: Trace, links: Links, acc: Account, ev_row: np.ndarray, rows: list[dict]) -> list[dict]:
    """The TOP_GAPS longest idle gaps: where, how long, why, and what the CPU was doing."""
    gpu, la = trace.gpu, trace.launches
    code = acc.gap_codes()
    out = []
    for i in np.argsort(-acc.gap_len, kind="stable")[:TOP_GAPS].tolist():
        ev = int(acc.gap_event[i])
        start, length = float(acc.gap_start[i]), float(acc.gap_len[i])
        before = np.flatnonzero((gpu.device == gpu.device[ev]) & (gpu.ts + gpu.dur <= start + 1e-6))
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
                    "cpu_doing": _cpu_doing(trace, thread, start, start + length)})
    return out


def launch_facts(trace: Trace, links: Links, ev_row: np.ndarray, rows: list[dict], acc: Account) -> dict:
    """CPU launch cost of the device's kernels and of the latency-bound ops' kernels; the launch gaps."""
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
    return {"events": int((gpu.device == acc.device).sum()), "kernels": int(on.sum()),
            "kernel_us": float(gpu.dur[on].sum()), "launches": n_la, "launch_us": la_us,
            "lat_launches": n_lat, "lat_launch_us": lat_us, "short_gaps": int(short.sum()),
            "short_us": acc.idle_by_cause()["launch_gaps"], "short_median_us": median_gap(acc, "launch_gaps"),
            "short_limit_us": LAUNCH_GAP_US}


def host_finding(ledger: dict, acc: Account) -> dict | None:
    """host_dispatch idle (the CPU issued the next work only after the GPU went idle), with what the
    CPU was doing in the largest such gaps. Its saving is that idle: an upper bound."""
    idle = ledger["idle"]["by_cause"]
    t, span = idle["host_dispatch"], ledger["span_us"]
    if span <= 0 or t < 0.01 * span:
        return None
    mine = [g for g in ledger["idle"]["largest"] if g["cause"] == "host_dispatch"][:3]
    doing = sorted({g["cpu_doing"] for g in mine if g.get("cpu_doing")})
    n = int(((acc.gap_cause == IDLE_CAUSES.index("host_dispatch")) & (acc.gap_len > acc.gap_sync_us)).sum())
    big = "; ".join(f"{u.us(g['length_us'])} at +{u.us(g['start_us'])} before {u.kernel_name(g['next'], 60)}"
                    + (f" (the CPU was in {g['cpu_doing']})" if g.get("cpu_doing") else "") for g in mine)
    steps = ledger.get("steps") or 0
    per = f", {u.us(t / steps)} per step" if steps > 1 else ""
    text = (f"The GPU sat idle {u.us(t)} ({t / span * 100:.1f}% of the span{per}) in {u.plural(n, 'gap')} over "
            f"{LAUNCH_GAP_US:g} µs that ended with work launched only after the GPU had gone idle: the CPU, not the "
            "GPU, set the pace. " + (f"Largest: {big}. " if big else "")
            + "Overlap the CPU's work with the GPU's: load data in DataLoader workers (num_workers, pin_memory, "
            "prefetch_factor), move logging and post-processing off the step, and issue fewer, larger ops "
            "(torch.compile) so the CPU stays ahead. Saving shown: that idle, an upper bound.")
    return {"kind": "host_dispatch", "title": f"The CPU sets the pace: GPU idle {u.us(t)} waiting for work to be "
                                              f"issued ({t / span * 100:.1f}% of the span)"
                                              + (f"; the CPU was in {', '.join(doing)}" if doing else ""),
            "text": text, "fix": "Keep the CPU ahead of the GPU: data loading in workers, no per-step host work.",
            "group": "host", "ops": [g["next_row"] for g in mine if g.get("next_row")],
            "saving_us": t, "idle_us": t}
