"""One op signature's row: its group, its cost and its verdict against the device's roofs (and the
achievable roofs of a profile), in the plain dict every later stage reads (docs/analysis-schema.md
"ops"). Pure: analysis.py builds a row per signature group with op_row.
"""

from __future__ import annotations

import numpy as np

from traceana.cost import Cost, op_cost
from traceana.cost.families.comm import comm_rates
from traceana.cost.meta import SOURCE as META_SOURCE
from traceana.cost.recover import cost_variants
from traceana.link.attribute import CAUSES
from traceana.link.copies import dominant_host_copy, judge_recorded, link_verdict
from traceana.link.signatures import Group
from traceana.roofline.judge import judge


def grid_blocks(blocks: np.ndarray | None, dur: np.ndarray, events: np.ndarray | None) -> float | None:
    """The launch grid (thread blocks) of a signature's kernels, weighted by their time: half of
    its recorded kernel time ran in grids of at most this many blocks. None if not recorded."""
    if blocks is None or events is None or not len(events):
        return None
    b, d = blocks[events], dur[events]
    ok = np.isfinite(b)
    if not ok.any():
        return None
    b, d = b[ok], d[ok]
    order = np.argsort(b, kind="stable")
    cum = np.cumsum(d[order])
    if cum[-1] <= 0:
        return float(b[order[len(order) // 2]])
    return float(b[order[int(np.searchsorted(cum, cum[-1] / 2))]])


def op_row(g: Group, device: dict, recovered: tuple | None = None, meta: bool = False,
         blocks: float | None = None, copies: dict | None = None, achievable: dict | None = None) -> dict:
    mean = g.device_us / g.count if g.count else g.device_us
    kernel_count = g.gpu_events / g.count if g.count else float(g.gpu_events)
    row = {
        "name": g.name,
        "input_dims": list(g.call.dims) if g.call else [],
        "input_types": list(g.call.types) if g.call else [],
        "concrete_inputs": list(g.call.concrete) if g.call and g.call.concrete else [],
        "count": g.count,
        "device_time_us": g.device_us,
        "mean_time_us": mean,
        "kernel_count": kernel_count,
        "kernels": [{"name": k, "time_us": t, "count": n} for k, t, n in g.kernels],
        "opaque": g.cause is not None,
        "cause": g.cause,
        "flops": None, "bytes": None, "intensity": None, "achieved_tflops": None, "achieved_gbps": None,
        "roofline_time_us": None, "roof_pct": None, "compute_time_us": None, "memory_time_us": None,
        "peak_dtype": None, "peak_tflops": None, "peak_why": None, "family": None,
        "flops_expr": None, "bytes_expr": None, "estimated": False, "notes": [], "reason": None,
        "launch_floor_us": None, "model_time_us": None, "model_pct": None, "limiter": None, "over_roof": None,
        "grid_blocks": None,
    }
    row["roof_kind"] = "none"
    if g.cause is not None:
        if judge_recorded(row, copies, device, g.count, CAUSES[g.cause]):
            return row
        row["bound"] = "opaque"
        row["reason"] = CAUSES[g.cause]  # replays and compiled regions: replay_account adds what ran
        return row
    cost = cost_variants(*recovered, g.count, op_cost) if recovered else op_cost(g.call, meta=meta)
    if not isinstance(cost, Cost):
        why = CAUSES[cost.cause] if cost.cause in CAUSES else f"no cost formula ({cost.reason})"
        if judge_recorded(row, copies, device, g.count, why):
            return row
        if cost.cause in CAUSES:  # a formula whose input the trace lacks: opaque for that cause
            row.update({"bound": "opaque", "opaque": True, "cause": cost.cause, "cause_from_cost": True,
                        "reason": f"{cost.reason} ({CAUSES[cost.cause]})"})
            return row
        row["bound"] = "unmodelled"
        row["reason"] = cost.reason
        return row
    v = judge(cost, mean, mean / max(kernel_count, 1e-9), device["peak_tflops"], device["dram_gbps"],
              g.call.kernel_names, kernels=kernel_count, floor_us=device.get("launch_floor_us") or 0.0,
              l2_bytes=device.get("l2_bytes"), blocks=blocks, sms=device.get("sms"))
    row.update({
        "flops": cost.flops, "bytes": cost.bytes, "intensity": v.intensity,
        "achieved_tflops": v.achieved_tflops, "achieved_gbps": v.achieved_gbps,
        "roofline_time_us": v.roofline_us, "roof_pct": v.roof_pct, "compute_time_us": v.compute_us,
        "memory_time_us": v.memory_us, "bound": v.bound, "peak_dtype": v.peak.key,
        "peak_tflops": v.peak.tflops, "peak_why": v.peak.why, "family": cost.family,
        "flops_expr": cost.flops_expr, "bytes_expr": cost.bytes_expr, "estimated": cost.estimated,
        "notes": list(cost.notes), "dtype": cost.dtype,
        "launch_floor_us": v.floor_us, "model_time_us": v.model_us, "model_pct": v.model_pct,
        "limiter": v.limiter, "over_roof": v.over_roof, "grid_blocks": blocks,
    })
    comm = comm_rates(cost, mean)
    if comm:  # its link, transfer and wait: comm_split.finish
        row["comm"] = comm
    row["roof_kind"] = roof_kind(row)
    if achievable is not None and v.bound != "communication":
        a = judge(cost, mean, mean / max(kernel_count, 1e-9), achievable["peak_tflops"], achievable["dram_gbps"],
                  g.call.kernel_names, kernels=kernel_count, floor_us=device.get("launch_floor_us") or 0.0,
                  l2_bytes=device.get("l2_bytes"), blocks=blocks, sms=device.get("sms"))
        row["datasheet_pct"] = v.roof_pct
        row["achievable_pct"] = a.roof_pct
        row["achievable"] = {
            "roofline_time_us": a.roofline_us, "model_time_us": a.model_us, "compute_time_us": a.compute_us,
            "memory_time_us": a.memory_us, "bound": a.bound, "peak_dtype": a.peak.key, "peak_tflops": a.peak.tflops,
            "dram_gbps": achievable["dram_gbps"],
            "measured": _measured_roof(a, achievable),
        }
    if copies:
        row["copies"] = {k: {kk: v[kk] for kk in ("time_us", "bytes", "events")} for k, v in sorted(copies.items())}
        part = dominant_host_copy(copies, g.device_us)
        if part:
            link_verdict(row, part, device, g.count)
            for k in ("datasheet_pct", "achievable_pct", "achievable"):  # held to its link, not DRAM/compute
                row.pop(k, None)
    if META_SOURCE in cost.detail:
        row["meta"] = True
    return row


def _measured_roof(v, achievable: dict) -> bool:
    """Whether the roof that binds the op came from the profile (else the datasheet stood in)."""
    compute_side = v.compute_us is not None and (v.memory_us is None or v.compute_us > v.memory_us)
    return v.peak.key in achievable["measured"] if compute_side else achievable["dram_measured"]


def roof_kind(row: dict) -> str:
    """Which roof the row's roofline time was computed against."""
    if row["bound"] == "communication":
        return "network"
    if row.get("roofline_time_us") is None:
        return "none"
    c, m = row.get("compute_time_us"), row.get("memory_time_us")
    return "compute" if c is not None and (m is None or c > m) else "dram"
