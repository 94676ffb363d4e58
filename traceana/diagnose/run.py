"""Run every diagnosis over one trace: timeline breakdown, utilisation, idle, fusion, findings.

`diagnose` is the single entry point analysis.py calls; everything it returns is plain data.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from traceana.diagnose import breakdown as bd
from traceana.diagnose import findings as fd
from traceana.diagnose import fusion, idle
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
    facts = _launch_facts(trace, links, ev_row, rows, latency, primary)
    extra = fd.launch_findings(latency, total_us, facts)
    claimed = facts["host_wait_us"] if extra else 0.0
    f = idle.idle_finding(idle_sum, span, claimed)
    if f:
        extra.append(f)
    extra.extend(fd.fusion_findings(fusion.chains(trace, links, ev_row, rows), total_us))
    return {"findings": fd.find(rows, device, total_us, extra), "timeline": timeline, "utilisation": util}


def _launch_facts(trace: Trace, links: Links, ev_row: np.ndarray, rows: list[dict], latency: list[dict],
                  primary: int | None) -> dict:
    """CPU launch cost and preceding GPU idle of the latency-bound ops' kernels."""
    facts = {"launches": 0, "launch_us": 0.0, "gap_us": 0.0, "host_wait_us": 0.0}
    if not latency or len(trace.gpu) == 0:
        return facts
    idx = np.array([i for i, r in enumerate(rows) if r["bound"] == "latency"], dtype=np.int64)
    ev = np.flatnonzero(np.isin(ev_row, idx))
    la = links.gpu_launch[ev]
    la = np.unique(la[la >= 0])
    facts["launches"] = int(len(la))
    facts["launch_us"] = float((trace.launches.end[la] - trace.launches.ts[la]).sum())
    gap, cause = idle.gaps_before(trace, links, primary)
    facts["gap_us"] = float(gap[ev].sum())
    facts["host_wait_us"] = float(gap[ev][cause[ev] == 0].sum())
    return facts
