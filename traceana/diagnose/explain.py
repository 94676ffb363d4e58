"""Plain-language explanations, with the arithmetic shown, for the ops that take the most time."""

from __future__ import annotations

from traceana import units as u
from traceana.diagnose.advice import GATHER_FIX, OPAQUE_ADVICE, latency_fix, memory_advice, scattered
from traceana.roofline.judge import PEAK_LABEL

TOP_N = 8


def explain_rows(rows: list[dict], device: dict, total_us: float, top_n: int = TOP_N,
                 context: dict | None = None) -> list[dict]:
    """Explanations for the top_n rows by device time (rows are already sorted); `context` keeps advice
    that contradicts the run out."""
    out = []
    for row in rows[:top_n]:
        lines = _explain(row, device, total_us, context)
        if lines:
            out.append({"op": row["id"], "title": _title(row), "lines": lines})
    return out


def _title(row: dict) -> str:
    bound = row["bound"]
    head = f"{u.kernel_name(row['name'])} ({_shape(row)})"
    if bound in ("memory", "compute"):
        roof = "bandwidth" if bound == "memory" else f"{row.get('peak_dtype') or ''} compute".strip()
        return f"{head}: {bound}-bound at {u.pct(row['roof_pct'])} of the {roof} roof"
    if bound == "latency":
        return f"{head}: latency-bound (launch floor outweighs its work; {u.pct(row['roof_pct'])} of its roof)"
    if bound == "underutilised":
        return f"{head}: underutilised, {u.pct(row['roof_pct'])} of its roof ({(row.get('limiter') or '').split(':')[0]})"
    if bound == "opaque":
        return f"{head}: no shapes in the trace"
    if bound == "unknown":
        return f"{head}: no roof for this device"
    if bound == "communication":
        c = row.get("comm") or {}
        if not c.get("sized", True):
            return f"{head}: collective, size not recorded"
        return f"{head}: collective at {u.rate_gbps(row.get('achieved_gbps'))} bus bandwidth"
    return f"{head}: no cost model"


def _shape(row: dict) -> str:
    dims = u.dims(row.get("input_dims"))
    dt = u.dtypes(row.get("input_types"))
    if dims:
        return "; ".join(x for x in (dims, dt) if x)
    return (row.get("cause") or "no shapes").replace("_", " ")


def _explain(row: dict, device: dict, total_us: float, context: dict | None = None) -> list[str]:
    share = row["device_time_us"] / total_us * 100 if total_us > 0 else 0.0
    calls = row["count"]
    lines = [f"{u.plural(calls, 'call')}, {u.us(row['device_time_us'])} of GPU time "
             f"({share:.1f}% of all device time), {u.us(row['mean_time_us'])} per call."]
    bound = row["bound"]
    if bound == "opaque":
        lines.append(f"Why no cost: {row.get('reason')}.")
        advice = OPAQUE_ADVICE.get(row.get("cause") or "")
        if advice:
            lines.append(advice)
        return lines
    if bound == "communication":
        return lines + _communication(row)
    if row.get("flops") is None:
        lines.append(f"No FLOP/byte model: {row.get('reason') or 'no formula'}. Its time is listed as "
                     "unmodelled.")
        return lines
    expr = str(row["flops_expr"])
    lines.append(f"Work per call: {expr}{'' if expr.endswith(('FLOPs', 'FLOP')) else ' FLOPs'}.")
    lines.append(f"Data per call: {row['bytes_expr']}.")
    dev = device.get("name") or "this device"
    peak, bw = row.get("peak_tflops"), device.get("dram_gbps")
    label = PEAK_LABEL.get(row.get("peak_dtype") or "", row.get("peak_dtype") or "?")
    parts = []
    if peak:
        parts.append(f"at the {dev}'s {peak:g} TFLOP/s ({label}) the FLOPs need {u.us(row['compute_time_us'])}")
    if bw:
        parts.append(f"at {bw:g} GB/s the bytes need {u.us(row['memory_time_us'])}")
    if parts:
        lines.append("Lower bounds: " + "; ".join(parts) + ".")
    if row.get("peak_why"):
        lines.append(f"Roof used: {row['peak_why']}.")
    ach = row.get("achievable")
    if isinstance(ach, dict) and ach.get("roofline_time_us") is not None:
        prof = (device.get("profile") or {}).get("file") or "the device profile"
        bits = [f"{ach['peak_tflops']:g} TFLOP/s ({ach.get('peak_dtype')})" if ach.get("peak_tflops") else "",
                f"{ach['dram_gbps']:.4g} GB/s" if ach.get("dram_gbps") else ""]
        lines.append(f"Achievable roofs measured by {prof}: {', '.join(b for b in bits if b)}: roofline time "
                     f"{u.us(ach['roofline_time_us'])} per call, {u.pct(row.get('achievable_pct'))} of achievable "
                     f"({u.pct(row.get('datasheet_pct'))} of datasheet); savings are measured against it.")
    if peak and bw and row.get("intensity") is not None:
        ridge = peak * 1e12 / (bw * 1e9)
        side = "below" if row["intensity"] < ridge else "above"
        lines.append(f"Arithmetic intensity {row['intensity']:.3g} FLOP/B is {side} the ridge point "
                     f"{ridge:.3g} FLOP/B ({peak:g} TFLOP/s / {bw:g} GB/s).")
    pct = row.get("roof_pct")
    if bound == "memory":
        lines.append(f"Measured {u.us(row['mean_time_us'])} per call against a {u.us(row['roofline_time_us'])} "
                     f"floor: {u.pct(pct)} of the bandwidth roof ({u.rate_gbps(row['achieved_gbps'])} achieved).")
        if scattered(row):
            lines.append("Verdict: memory-bound by its access pattern. Its FLOP count is irrelevant. " + GATHER_FIX)
        else:
            ridge = peak * 1e12 / (bw * 1e9) if peak and bw else None
            lines.append("Verdict: memory-bound. " + memory_advice(row, ridge))
        if any("libdevice" in n for n in row.get("notes") or ()):
            lines.append("Its transcendental functions are counted at their approximate instruction cost "
                         "(docs/cost-model.md), and even so it runs at the memory roof: the special-function "
                         "math is hidden behind the DRAM traffic, so a cheaper formula would not speed it up.")
    elif bound == "compute":
        lines.append(f"Measured {u.us(row['mean_time_us'])} per call: {u.rate_tflops(row['achieved_tflops'])} "
                     f"achieved, {u.pct(pct)} of the {peak:g} TFLOP/s roof.")
        lines.append("Verdict: compute-bound. " + _compute_advice(row, device))
    elif bound == "latency":
        per_kernel = row["mean_time_us"] / max(row.get("kernel_count") or 1, 1)
        lines.append(f"Measured {u.us(row['mean_time_us'])} per call ({row.get('kernel_count') or 1:g} kernel(s), "
                     f"{u.us(per_kernel)} each) against a {u.us(row['roofline_time_us'])} roofline floor "
                     f"({u.pct(pct)} of its roof) and {u.us(row.get('launch_floor_us'))} of launch floor: the fixed "
                     f"cost of its kernels outweighs its work; the model explains {u.pct(row.get('model_pct'))}.")
        lines.append("Verdict: latency-bound. " + latency_fix(context))
    elif bound == "underutilised":
        lines.append(f"Measured {u.us(row['mean_time_us'])} per call against {u.us(row.get('model_time_us'))} of "
                     f"launch floor + roofline time: the model explains only {u.pct(row.get('model_pct'))}, so "
                     "neither roof nor launch overhead bounds it.")
        lines.append(f"Verdict: underutilised. What bounds it, as far as the trace shows: {row.get('limiter')}.")
    elif bound == "unknown":
        lines.append("No roof: the device table has no peak for this dtype or no bandwidth; pass "
                     "--peak-tflops / --bandwidth-gbps to judge it.")
    if isinstance(row.get("over_roof"), dict):
        lines.append(f"Over the roof: {row['over_roof'].get('text')}. No finding is built on this number.")
    return lines


def _communication(row: dict) -> list[str]:
    """A collective: its bytes, bandwidths and link, and its time split into transfer and wait
    (traceana/roofline/comm_split.py); advice that fits each part."""
    c = row.get("comm") or {}
    if not c.get("sized", True):
        lines = [f"Why no split: {row.get('reason')}."]
        advice = OPAQUE_ADVICE.get(row.get("cause") or "")
        if advice:
            lines.append(advice)
        lines.append("Without its size, transfer (moving the bytes) and wait (for the other ranks) cannot be told "
                     "apart; the cross-rank report (traceana report DIR/) measures the wait from the other ranks.")
        return lines
    n = c.get("group_size")
    lines = [f"Data per call: {row.get('bytes_expr')}."]
    lines.append(f"Achieved: {u.rate_gbps(c.get('busbw_gbps'))} bus bandwidth (bytes each rank sends / time), "
                 f"{u.rate_gbps(c.get('algbw_gbps'))} algorithm bandwidth (message / time)"
                 + (f", {c.get('algorithm')} over {n} ranks." if n else "."))
    if c.get("link_why"):
        lines.append(f"Link: {c['link_why']}.")
    if c.get("text"):
        lines.append(f"Verdict: communication. {c['text'][0].upper()}{c['text'][1:]}.")
    lines.append("Overlapping it with compute (or sending fewer bytes) recovers only the transfer; the wait is "
                 "time spent for slower ranks (imbalance, a straggler) or per-call latency: compare the ranks with "
                 "`traceana report DIR/`, or issue fewer, larger collectives.")
    return lines


def _compute_advice(row: dict, device: dict) -> str:
    peaks = device.get("peak_tflops") or {}
    dt, used = row.get("peak_dtype"), row.get("peak_tflops") or 0
    if dt == "fp32" and row.get("family") in ("gemm", "conv", "attention", "moe"):
        if peaks.get("tf32_tc", 0) > used:
            return (f"TF32 tensor cores would raise the roof to {peaks['tf32_tc']:g} TFLOP/s "
                    f"({peaks['tf32_tc'] / used:.1f}x): torch.set_float32_matmul_precision('high').")
        better = [(k, v) for k, v in peaks.items() if k in ("bf16_tc", "fp16_tc") and v > used]
        if better:
            k, v = max(better, key=lambda kv: kv[1])
            head = ("This device's TF32 tensor cores run at its fp32 rate" if "tf32_tc" in peaks
                    else "This device has no TF32 tensor cores")
            return (f"{head}; {PEAK_LABEL[k]} (autocast) offer {v:g} TFLOP/s, "
                    f"{v / used:.1f}x the fp32 roof, if the model tolerates the lower precision.")
        return "Only fewer FLOPs (smaller shapes, less recomputation) make it faster on this device."
    pct = row.get("roof_pct") or 0
    if pct < 60:
        return ("It is well under its roof: check the shapes (dimensions that are multiples of 8/16 fill "
                "tensor-core tiles) and whether the grid fills every SM (wave quantization).")
    return "It is close to the roof: only fewer FLOPs or a faster dtype make it faster."
