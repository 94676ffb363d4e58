"""Where did the time go? The lead of every report, before any single op.

The primary device's span (first GPU event start to last end) is split once, every µs counted
once (the timeline breakdown's priority order: a collective or copy under a kernel is hidden, so
communication and copies count only where *exposed*):

  idle           no GPU event running, by cause: host-wait (the CPU launched the next kernel only
                 after the GPU went idle), kernel-wait (launched in time, started late: a sync,
                 another stream, another rank), launch gaps (gaps under the launch threshold
                 between back-to-back kernels), no launch recorded
  communication  collective kernels with nothing else running (exposed); the total collective
                 time and the overlapped part are given beside it
  copies         memcpy / memset with nothing else running
  compute        kernels by the bound of their op (compute, memory, latency, underutilised,
                 host/peer link), unmodelled and opaque (no shapes)

`lever` names the biggest part a change can act on; `sentence` says it in words, first.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.diagnose.breakdown import comm_name_mask, union_us
from traceana.load.model import Trace

WORK = ("compute", "memory", "latency", "underutilised", "unmodelled", "unknown", "opaque")


def anatomy(trace: Trace, timeline: dict) -> dict | None:
    """The lead numbers of the primary device (None when the trace has no GPU events)."""
    main = next((d for d in timeline["devices"] if d["device"] == timeline["primary"]), None)
    if main is None or main["span_us"] <= 0:
        return None
    cat = main["by_category"]
    span, busy = main["span_us"], main["busy_us"]
    idle = timeline.get("idle") or {}
    long = idle.get("long") or {}
    short = (idle.get("short") or {}).get("idle_us", 0.0)
    idle_us = cat.get("idle", 0.0)
    by_cause = {"host_wait": long.get("host_wait", 0.0), "kernel_wait": long.get("kernel_wait", 0.0),
                "launch_gaps": short, "no_launch": long.get("other", 0.0)}
    # the idle summary measures gaps per device the same way; rounding aside they add up
    rest = idle_us - sum(by_cause.values())
    if rest > 0.5:
        by_cause["no_launch"] += rest
    comm_total = _comm_union(trace, timeline["primary"])
    exposed = cat.get("communication", 0.0)
    work = {k: cat.get(k, 0.0) for k in WORK if cat.get(k, 0.0) > 0}
    copies = cat.get("memcpy", 0.0) + cat.get("memset", 0.0)
    out = {
        "device": main["device"], "span_us": span, "busy_us": busy, "idle_us": idle_us,
        "idle_by_cause": by_cause,
        "communication_us": comm_total, "communication_exposed_us": exposed,
        "communication_overlapped_us": max(comm_total - exposed, 0.0),
        "copies_exposed_us": copies, "work_by_bound": work,
        "note": ("the primary device's span, each µs counted once: idle + exposed communication + exposed "
                 "copies + work by bound = span"),
    }
    out["lever"], out["sentence"] = _lever(out)
    return out


def _comm_union(trace: Trace, dev: int | None) -> float:
    gpu = trace.gpu
    if not len(gpu):
        return 0.0
    m = comm_name_mask(trace.names)[gpu.name] & (gpu.kind == 0)
    if dev is not None:
        m &= gpu.device == dev
    if not m.any():
        return 0.0
    order = np.argsort(gpu.ts[m], kind="stable")
    ts = gpu.ts[m][order]
    return union_us(ts, ts + gpu.dur[m][order])


_CAUSE_WORDS = {"host_wait": "host-wait: the CPU issued work after the GPU went idle",
                "kernel_wait": "kernel-wait: launched in time but queued behind a sync, another stream or rank",
                "launch_gaps": "launch gaps between back-to-back kernels",
                "no_launch": "no launch recorded"}


def _lever(a: dict) -> tuple[str, str]:
    span = a["span_us"]
    parts = {"idle": a["idle_us"], "communication": a["communication_exposed_us"],
             "copies": a["copies_exposed_us"], **a["work_by_bound"]}
    lever = max(parts, key=lambda k: parts[k])

    def pct(v: float) -> str:
        return f"{v / span * 100:.1f}%"

    causes = sorted(((k, v) for k, v in a["idle_by_cause"].items() if v > 0), key=lambda kv: -kv[1])
    idle_txt = (f"GPU idle {pct(a['idle_us'])} of the {u.us(span)} span ({u.us(a['idle_us'])}"
                + (": mostly " + _CAUSE_WORDS[causes[0][0]] + f", {u.us(causes[0][1])}" if causes else "") + ")")
    busy_bits = []
    if a["communication_us"] > 0:
        busy_bits.append(f"collectives {u.us(a['communication_us'])}, {u.us(a['communication_exposed_us'])} of it "
                         f"exposed ({pct(a['communication_exposed_us'])} of the span, nothing else running)")
    if a["copies_exposed_us"] > 0:
        busy_bits.append(f"copies {u.us(a['copies_exposed_us'])} exposed")
    top_work = sorted(a["work_by_bound"].items(), key=lambda kv: -kv[1])[:3]
    if top_work:
        busy_bits.append("kernels " + ", ".join(f"{k} {u.us(v)}" for k, v in top_work))
    busy_txt = f"busy {pct(a['busy_us'])}: " + "; ".join(busy_bits) if busy_bits else f"busy {pct(a['busy_us'])}"
    if lever == "idle":
        head = idle_txt + "; " + busy_txt
    elif lever == "communication":
        head = (f"Exposed communication is the biggest share: {pct(a['communication_exposed_us'])} of the "
                f"{u.us(span)} span. " + idle_txt + "; " + busy_txt)
    else:
        head = busy_txt[0].upper() + busy_txt[1:] + f" of the {u.us(span)} span; " + idle_txt
    return lever, head + "."
