"""What share of the device time the analysis could cost: attributed to an op, modelled by a formula,
estimated, opaque by cause (with the advice for each), unmodelled by op; the meta-tensor fallback's note;
and the warnings a reader needs when much of the time is uncosted. Pure.
"""

from __future__ import annotations

from traceana.diagnose.advice import OPAQUE_ADVICE
from traceana.link.attribute import Links
from traceana.load import Trace


def coverage(trace: Trace, links: Links, rows: list[dict], total: float) -> dict:
    dur = trace.gpu.dur
    attributed = float(dur[links.gpu_op >= 0].sum())
    # opaque: kernels with no costable op (link stage), plus ops whose formula lacks an input the trace
    # did not record (cost stage: row["cause_from_cost"])
    # (copies judged from their recorded bytes are costed: copies.judge_recorded)
    opaque = sum(r["device_time_us"] for r in rows if r["opaque"])
    modeled = sum(r["device_time_us"] for r in rows if r["flops"] is not None)
    estimated = sum(r["device_time_us"] for r in rows if r["flops"] is not None and r["estimated"])
    unmodeled = sum(r["device_time_us"] for r in rows if r["bound"] == "unmodelled")
    by_cause: dict[str, float] = {}
    for r in rows:
        if r["cause"]:
            by_cause[r["cause"]] = by_cause.get(r["cause"], 0.0) + r["device_time_us"]
    unmodeled_by_op: dict[str, float] = {}
    for r in rows:
        if r["bound"] == "unmodelled":
            unmodeled_by_op[r["name"]] = unmodeled_by_op.get(r["name"], 0.0) + r["device_time_us"]
    return {
        "device_time_us": total,
        "attributed_time_us": attributed,
        "unattributed_time_us": float(dur[links.gpu_op < 0].sum()),
        "modeled_time_us": modeled,
        "estimated_time_us": estimated,  # the part of modeled_time_us whose cost is an estimate
        "opaque_time_us": opaque,
        "unmodeled_time_us": unmodeled,
        "opaque_by_cause": dict(sorted(by_cause.items(), key=lambda kv: -kv[1])),
        "opaque_advice": {c: OPAQUE_ADVICE[c] for c in by_cause if c in OPAQUE_ADVICE},
        "unmodeled_by_op": dict(sorted(unmodeled_by_op.items(), key=lambda kv: -kv[1])),
    }


def meta_note(enabled: bool, rows: list[dict]) -> dict:
    """coverage["meta"]: was the meta-tensor fallback on, how many signatures it costed, and a note."""
    used = sum(1 for r in rows if r.get("meta"))
    no_formula = sum(1 for r in rows if r["bound"] == "unmodelled" and str(r.get("reason")).startswith("no formula"))
    if enabled:
        note = (f"ops with no formula were run on meta tensors (--meta): {used} signature(s) costed that way "
                "(bytes only, FLOPs 0, marked estimated)")
    else:
        note = ("ops with no formula were not run on meta tensors (off by default: it imports torch, ~2.6 s; "
                "pass --meta, or it is on when torch is already imported)")
    return {"enabled": enabled, "signatures": used, "no_formula_signatures": no_formula, "note": note}


def coverage_warnings(trace: Trace, cov: dict, classes: dict | None = None) -> list[str]:
    out = []
    total = cov["device_time_us"]
    if len(trace.gpu) == 0:
        if len(trace.ops):
            out.append("no GPU activity in this trace (a CPU-only run): there is no device time to judge against "
                       "a GPU roofline; the CPU ops are listed by self time and judged against the CPU's roofs "
                       "(BLAS peak, memory bandwidth, per-op dispatch)")
        else:
            out.append("the trace has neither GPU events nor CPU ops: nothing to analyse")
        return out
    if total > 0 and cov["opaque_time_us"] / total > 0.05:
        parts = ", ".join(f"{k.replace('_', ' ')} {v / total * 100:.1f}%" for k, v in cov["opaque_by_cause"].items())
        out.append(f"{cov['opaque_time_us'] / total * 100:.1f}% of device time cannot be costed from what the trace "
                   f"recorded ({parts})")
    if not trace.record_shapes and len(trace.ops):
        by = (classes or {}).get("by_class") or {}
        parts = ", ".join(f"{k} {v / total * 100:.1f}%" for k, v in list(by.items())[:6]) if total > 0 else ""
        out.append("the trace was recorded without record_shapes=True: no FLOPs or bytes can be computed"
                   + (f" (kernel time by class, from kernel names: {parts})" if parts else "")
                   + "; record with torch.profiler.profile(record_shapes=True) to cost each op")
    return out
