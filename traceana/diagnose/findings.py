"""Findings: what to do first, each with an honest estimate of recoverable time (saving_us).

saving_us for an op = its measured time minus the time it would take at its roof (or at the
faster roof a finding proposes). It is the most that change could recover, not a promise.
"""

from __future__ import annotations

from traceana import units as u
from traceana.diagnose.advice import LATENCY_FIX, MEMORY_FIX, OPAQUE_ADVICE
from traceana.link import CAUSES

MIN_SHARE = 0.005  # ops under 0.5% of device time get no finding of their own
MAX_FINDINGS = 25


def _above_roof(row: dict) -> float:
    roof = row.get("roofline_time_us")
    if roof is None:
        return 0.0
    return max(row["device_time_us"] - row["count"] * roof, 0.0)


def find(rows: list[dict], device: dict, total_us: float) -> list[dict]:
    out: list[dict] = []
    peaks = device.get("peak_tflops") or {}
    latency = []
    for row in rows:
        share = row["device_time_us"] / total_us if total_us > 0 else 0.0
        bound = row["bound"]
        if bound == "latency":
            latency.append(row)
            continue
        if share < MIN_SHARE:
            continue
        if bound == "memory":
            out.append({
                "kind": "memory_bound",
                "title": f"{row['name']} is memory-bound at {u.pct(row['roof_pct'])} of {device.get('dram_gbps'):g} GB/s",
                "text": (f"{row['count']:,} call(s) moving {u.nbytes(row['bytes'])} each take {u.us(row['device_time_us'])}; "
                         f"the bytes alone need {u.us(row['roofline_time_us'])} per call. Its FLOPs do not matter. "
                         + MEMORY_FIX),
                "ops": [row["id"]],
                "saving_us": _above_roof(row),
            })
        elif bound == "compute":
            out.append(_compute_finding(row, peaks))
    if latency:
        t = sum(r["device_time_us"] for r in latency)
        n = sum(r["count"] * (r.get("kernel_count") or 1) for r in latency)
        if total_us > 0 and t / total_us >= MIN_SHARE:
            out.append({
                "kind": "launch_bound",
                "title": f"{len(latency)} op signature(s) are latency-bound: {n:,.0f} tiny kernels, {u.us(t)}",
                "text": (f"These kernels run far under both roofs (each a few µs). {LATENCY_FIX} "
                         "Saving assumes each op ran at its roof."),
                "ops": [r["id"] for r in sorted(latency, key=lambda r: -r["device_time_us"])[:50]],
                "saving_us": sum(_above_roof(r) for r in latency),
            })
    out.extend(_coverage_findings(rows, total_us))
    out.sort(key=lambda f: (-f["saving_us"], f["kind"], f["title"]))
    return out[:MAX_FINDINGS]


def _compute_finding(row: dict, peaks: dict) -> dict:
    used = row.get("peak_tflops") or 0
    if row.get("peak_dtype") == "fp32" and row.get("family") in ("gemm", "conv", "attention"):
        better = [(k, peaks[k]) for k in ("tf32_tc", "bf16_tc", "fp16_tc") if peaks.get(k, 0) > used]
        if better:
            k, v = better[0]
            floor = row["count"] * row["flops"] / (v * 1e6)
            return {
                "kind": "tensor_core_dtype",
                "title": f"{row['name']} runs fp32 on CUDA cores: {k.replace('_tc', '')} tensor cores offer {v / used:.1f}x",
                "text": (f"{u.rate_tflops(row['achieved_tflops'])} achieved against a {used:g} TFLOP/s fp32 roof "
                         f"({u.pct(row['roof_pct'])}). At the {v:g} TFLOP/s {k.replace('_tc', '')} tensor-core roof "
                         f"its FLOPs would need {u.us(floor)} in total instead of {u.us(row['device_time_us'])}."),
                "ops": [row["id"]],
                "saving_us": max(row["device_time_us"] - floor, 0.0),
            }
    return {
        "kind": "compute_bound",
        "title": f"{row['name']} is compute-bound at {u.pct(row['roof_pct'])} of {used:g} TFLOP/s ({row.get('peak_dtype')})",
        "text": (f"{u.count(row['flops'])} FLOPs per call at {u.rate_tflops(row['achieved_tflops'])}. Only fewer "
                 "FLOPs, a faster dtype, or shapes that fill the tensor-core tiles and every SM make it faster."),
        "ops": [row["id"]],
        "saving_us": _above_roof(row),
    }


def _coverage_findings(rows: list[dict], total_us: float) -> list[dict]:
    out = []
    by_cause: dict[str, list[dict]] = {}
    unmodelled = []
    for r in rows:
        if r["bound"] == "opaque":
            by_cause.setdefault(r.get("cause") or "", []).append(r)
        elif r["bound"] == "unmodelled":
            unmodelled.append(r)
    for cause, rs in sorted(by_cause.items()):
        t = sum(r["device_time_us"] for r in rs)
        if total_us <= 0 or t / total_us < 0.01:
            continue
        out.append({
            "kind": "opaque_time",
            "title": f"{u.us(t)} ({t / total_us * 100:.1f}%) of device time has no shapes: {cause.replace('_', ' ')}",
            "text": f"{CAUSES.get(cause, cause)}. {OPAQUE_ADVICE.get(cause, '')}",
            "ops": [r["id"] for r in rs[:50]],
            "saving_us": 0.0,
        })
    t = sum(r["device_time_us"] for r in unmodelled)
    if unmodelled and total_us > 0 and t / total_us >= 0.01:
        names = sorted({r["name"] for r in unmodelled})
        out.append({
            "kind": "unmodelled",
            "title": f"{u.us(t)} ({t / total_us * 100:.1f}%) of device time is in ops with no cost formula",
            "text": "No FLOP/byte formula yet for: " + ", ".join(names[:20]) + (" …" if len(names) > 20 else "") + ".",
            "ops": [r["id"] for r in unmodelled[:50]],
            "saving_us": 0.0,
        })
    return out
