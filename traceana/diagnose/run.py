"""Run every diagnosis over one trace: timeline breakdown, utilisation, idle, fusion, findings.

`diagnose` is the single entry point analysis.py calls; everything it returns is plain data.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from traceana.arrays import distinct
from traceana.diagnose import breakdown as bd
from traceana.diagnose import findings as fd
from traceana.diagnose import fusion, idle
from traceana.diagnose.anatomy import anatomy
from traceana.diagnose.projection import project
from traceana.link import Links
from traceana.load.model import Trace


def diagnose(trace: Trace, links: Links, groups: Sequence, rows: list[dict], device: dict,
             total_us: float) -> dict:
    """groups[i] is the signature Group behind rows[i] (rows sorted, ids assigned)."""
    ev_row = bd.event_rows(len(trace.gpu), groups)
    timeline = bd.time_breakdown(trace, ev_row, rows, device.get("id"))
    primary = timeline["primary"]
    main = next((d for d in timeline["devices"] if d["device"] == primary), None)
    span = main["span_us"] if main else 0.0
    util = bd.utilisation(trace, ev_row, rows, device, span, primary)
    idle_sum = idle.idle_summary(trace, links, primary, ev_row, rows)
    timeline["idle"] = idle_sum

    latency = [r for r in rows if r["bound"] == "latency"]
    facts = _launch_facts(trace, links, ev_row, rows, primary, idle_sum)
    extra = fd.launch_findings(latency, total_us, facts)
    f = idle.idle_finding(idle_sum, span)
    if f:
        extra.append(f)
    lead = anatomy(trace, timeline)
    f = fd.comm_finding(lead)
    if f:
        extra.append(f)
    extra.extend(fusion.fusion_findings(fusion.chains(trace, links, ev_row, rows), total_us))
    findings = fd.find(rows, device, total_us, extra)
    busy = main["busy_us"] if main else total_us
    idle_us = main["by_category"].get("idle", 0.0) if main else 0.0
    return {"findings": findings, "timeline": timeline, "utilisation": util, "lead": lead,
            "projection": project(findings, rows, busy, idle_us)}


def _launch_facts(trace: Trace, links: Links, ev_row: np.ndarray, rows: list[dict], primary: int | None,
                  idle_sum: dict) -> dict:
    """CPU launch cost of the kernels, of the latency-bound ops' kernels, and the short GPU gaps."""
    gpu, la = trace.gpu, trace.launches
    on = (gpu.kind == 0) & (gpu.device == primary) if primary is not None else gpu.kind == 0
    lat_idx = np.array([i for i, r in enumerate(rows) if r["bound"] == "latency"], dtype=np.int64)
    lat = on & np.isin(ev_row, lat_idx)

    def launch_cost(mask: np.ndarray) -> tuple[int, float]:
        ids = links.gpu_launch[mask]
        ids = distinct(ids[ids >= 0])
        return int(len(ids)), float((la.end[ids] - la.ts[ids]).sum())

    n_la, la_us = launch_cost(on)
    n_lat, lat_us = launch_cost(lat)
    short = idle_sum["short"]
    dev_events = int((gpu.device == primary).sum()) if primary is not None else len(gpu)
    return {"events": dev_events, "kernels": int(on.sum()), "kernel_us": float(gpu.dur[on].sum()), "launches": n_la, "launch_us": la_us,
            "lat_launches": n_lat, "lat_launch_us": lat_us, "short_gaps": short["gaps"],
            "short_us": short["idle_us"], "short_median_us": short["median_us"],
            "short_limit_us": idle_sum["short_limit_us"]}
