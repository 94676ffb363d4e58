"""The ledger as the report states it: terms that sum to the span, one sentence, the lever.

Built from the primary device's Account (ledger.py) and nothing else, so every view that reads it —
the lead sentence, the stacked bar, the idle table, the terminal, markdown, JSON and DataFrames —
shows the same numbers. Each term has one meaning (TERMS); where Holistic Trace Analysis uses the
same word for something else, `notes` says so.
"""

from __future__ import annotations

from traceana import units as u
from traceana.diagnose.ledger import COMM, IDLE_CAUSES, LAUNCH_GAP_US, WORK, Account

# key -> (group, label, meaning)
TERMS = {
    "compute": ("work", "kernels: compute-bound", "kernels of ops whose FLOPs at the peak set their time"),
    "memory": ("work", "kernels: memory-bound", "kernels of ops whose DRAM bytes at the bandwidth set their time"),
    "latency": ("work", "kernels: latency-bound", "kernels so short that the per-kernel launch floor outweighs the work"),
    "underutilised": ("work", "kernels: underutilised", "kernels far below both roofs and their launch floor"),
    "unmodelled": ("work", "kernels: unmodelled", "kernels of ops with no cost formula"),
    "unknown": ("work", "kernels: no peak", "kernels of ops whose dtype has no peak in the device table"),
    "opaque": ("work", "kernels: opaque", "kernels whose op the trace recorded no shapes for"),
    "comm_transfer": ("communication", "communication: transfer",
                      "exposed collective time moving bytes: the bytes the algorithm sends per rank at the link's "
                      "bandwidth (the last part of each collective kernel)"),
    "comm_wait": ("communication", "communication: waiting for other ranks",
                  "exposed collective time beyond its transfer: the kernel waits for its peers (the slowest rank); "
                  "overlap cannot recover it, balancing the ranks can"),
    "comm_unsized": ("communication", "communication: split unknown",
                     "exposed collective time whose size or link is not known, so transfer and wait cannot be told "
                     "apart"),
    "copies": ("copies", "copies (exposed)", "memcpy / memset with no kernel or collective running"),
    "sync": ("idle", "idle: sync stall",
             "GPU idle while a thread feeding it was blocked in a host-synchronous call (synchronize, a "
             "synchronous copy, .item()): the queue drained because the CPU waited"),
    "launch_gaps": ("idle", "idle: launch gaps",
                    f"gaps of at most {LAUNCH_GAP_US:g} µs between back-to-back GPU events: the fixed cost of issuing "
                    "work one kernel at a time"),
    "host_dispatch": ("idle", "idle: host dispatch",
                      "gaps whose next event's launch returned only after the GPU went idle, late in the gap: the "
                      "CPU (Python, dispatch, data loading, a slow first launch) set the pace"),
    "graph_launch": ("idle", "idle: inside graph launches",
                     "gaps, or parts of gaps, whose next work was launched late while the thread feeding the GPU sat "
                     "inside a CUDA / HIP graph launch, instantiation, upload or capture: the host's cost of graphs"),
    "stream_wait": ("idle", "idle: waiting on a dependency",
                    "gaps whose next event was launched in time (or early in the gap) but started late: it waited on "
                    "another stream, an event or a graph's dependencies"),
    "no_work": ("idle", "idle: nothing issued", "gaps whose next event has no launch in the trace"),
}
ORDER = WORK + COMM + ("copies",) + IDLE_CAUSES
# terms a change on this rank can act on (waiting for other ranks, and what cannot be seen, cannot)
ACTIONABLE = ("sync", "host_dispatch", "graph_launch", "launch_gaps", "stream_wait", "comm_transfer", "copies",
              "compute", "memory", "latency", "underutilised")
NOTES = {
    "hta": ("Holistic Trace Analysis' idle-time breakdown splits each stream's gaps into host_wait, kernel_wait and "
            "other, per stream; HTA's kernel_wait is a gap under 30 µs between consecutive kernels of one stream "
            "(here: launch_gaps, measured for the whole device). This ledger counts idle only where the whole "
            "device is idle, once per µs, and names sync stalls, host dispatch and dependency waits apart."),
    "communication": ("communication counts only where no kernel runs (exposed); `communication.total_us` is the "
                      "union of all collective kernels, hidden or not"),
}


def build(acc: Account, steps: int, step_us: float | None, stalls: list[dict], largest: list[dict]) -> dict:
    """analysis["ledger"] from the primary device's Account."""
    by = acc.by_category
    span = acc.span_us
    idle = acc.idle_by_cause()
    values = {k: by[k] for k in WORK + COMM}
    values["copies"] = by["memcpy"] + by["memset"]
    values.update(idle)
    terms = [{"key": k, "group": TERMS[k][0], "us": values[k], "share": values[k] / span if span > 0 else 0.0,
              "label": TERMS[k][1], "meaning": TERMS[k][2]} for k in ORDER if values[k] > 0]
    busy = sum(by[k] for k in WORK + COMM) + values["copies"]
    exposed = sum(by[k] for k in COMM)
    split = acc.comm_split_us
    known = split["comm_transfer"] + split["comm_wait"]
    out = {
        "device": acc.device, "start_us": acc.t0, "span_us": span, "busy_us": busy, "idle_us": by["idle"],
        "steps": steps, "step_us": step_us,
        "terms": terms,
        "work_by_bound": {k: by[k] for k in WORK if by[k] > 0},
        "communication": {
            "total_us": acc.comm_total_us, "exposed_us": exposed, "overlapped_us": max(acc.comm_total_us - exposed, 0.0),
            "transfer_us": split["comm_transfer"], "wait_us": split["comm_wait"], "unsized_us": split["comm_unsized"],
            "exposed_transfer_us": by["comm_transfer"], "exposed_wait_us": by["comm_wait"],
            "exposed_unsized_us": by["comm_unsized"],
            "sized_share": known / (known + split["comm_unsized"]) if known + split["comm_unsized"] > 0 else None,
        },
        "copies": {"exposed_us": values["copies"], "memcpy_us": by["memcpy"], "memset_us": by["memset"]},
        "idle": {"by_cause": idle, "stalls": stalls, "largest": largest},
        "notes": dict(NOTES),
    }
    out["lever"] = lever(values)
    out["sentence"] = sentence(out, values)
    return out


def lever(values: dict) -> str | None:
    best = max(ACTIONABLE, key=lambda k: values.get(k, 0.0))
    return best if values.get(best, 0.0) > 0 else None


def _pct(v: float, span: float) -> str:
    return f"{v / span * 100:.1f}%" if span > 0 else "—"


def sentence(led: dict, values: dict) -> str:
    """Where the span went, in one sentence: the largest parts first, each with its share."""
    span = led["span_us"]
    if span <= 0:
        return "The GPU ran no measurable work."
    per = (f" ({u.plural(led['steps'], 'profiler step')}, median {u.us(led['step_us'])})"
           if led.get("steps") and led.get("step_us") else "")
    parts = []
    work = sorted(((k, v) for k, v in led["work_by_bound"].items()), key=lambda kv: -kv[1])
    kern = sum(v for _, v in work)
    if kern > 0:
        top = ", ".join(f"{k} {u.us(v)}" for k, v in work[:3])
        parts.append((kern, f"kernels {u.us(kern)} ({_pct(kern, span)}: {top})"))
    c = led["communication"]
    if c["exposed_us"] > 0:
        bits = []
        if c["exposed_transfer_us"] > 0:
            bits.append(f"transfer {u.us(c['exposed_transfer_us'])}")
        if c["exposed_wait_us"] > 0:
            bits.append(f"waiting for other ranks {u.us(c['exposed_wait_us'])}")
        if c["exposed_unsized_us"] > 0:
            bits.append(f"size unknown {u.us(c['exposed_unsized_us'])}")
        parts.append((c["exposed_us"], f"exposed communication {u.us(c['exposed_us'])} ({_pct(c['exposed_us'], span)}: "
                      + ", ".join(bits) + ")"))
    if values["copies"] > 0:
        parts.append((values["copies"], f"exposed copies {u.us(values['copies'])} ({_pct(values['copies'], span)})"))
    idle = led["idle_us"]
    if idle > 0:
        causes = sorted(((k, v) for k, v in led["idle"]["by_cause"].items() if v > 0), key=lambda kv: -kv[1])
        words = {"sync": "sync stalls", "launch_gaps": "launch gaps", "host_dispatch": "host dispatch",
                 "graph_launch": "inside graph launches",
                 "stream_wait": "waiting on dependencies", "no_work": "nothing issued"}
        txt = ", ".join(f"{words[k]} {u.us(v)}" for k, v in causes[:3])
        stall = (led["idle"]["stalls"] or [None])[0]
        if stall and causes and causes[0][0] == "sync":
            txt += f" — mostly {stall['op'] or stall['call']} waiting in {stall['call']}"
        parts.append((idle, f"GPU idle {u.us(idle)} ({_pct(idle, span)}: {txt})"))
    parts.sort(key=lambda p: -p[0])
    return f"Of the {u.us(span)} span{per}: " + "; ".join(p[1] for p in parts) + "."
