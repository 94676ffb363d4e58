"""CPU-only traces judged: each op signature's self time against the CPU's roofs.

The roofs come from a CPU device profile (`traceana calibrate` on the machine, `report
--profile`), else from DEFAULT below, which the report names as defaults. Per signature (name,
input dims, dtypes, scalars), with the FLOPs and bytes of one call from the cost model:

    compute time  = FLOPs / BLAS peak of its dtype (gemm.fp64 / fp32 / bf16; fp16 and other dtypes
                    are held to the fp32 figure, element-wise work to its dtype's GEMM figure: the
                    most FLOP/s the CPU has shown)
    memory time   = bytes / memory bandwidth (the better of DRAM copy and triad)
    model time    = dispatch overhead (a tiny torch op's time) + max(compute, memory)
    % of roof     = max(compute, memory) / measured self time per call

The largest term names the bound: `dispatch` when the per-op overhead outweighs the work,
`compute` or `memory` otherwise; `underutilised` when the model explains under a tenth of the
self time. An op whose instances call other costed ops (aten::linear -> aten::addmm) is
`composite`: its work is counted in the op it calls, its self time is dispatch and glue. Ops
with no formula are `unmodelled`. Whatever the bound, an op whose self time per call is below
TINY_TIMES x the dispatch overhead is `dispatch`: it does little but pay the per-op cost.
"""

from __future__ import annotations

from collections import defaultdict

import msgspec
import numpy as np

from traceana import units as u
from traceana.cost import Cost, op_cost
from traceana.diagnose.cpu import self_times
from traceana.load.model import Trace
from traceana.roofline.judge import EXPLAINED_MIN
from traceana.link.signatures import make_call

#: CPU roofs when no profile is given: traceana's 2-core development VM (Xeon, AVX-512) measured
#: quietly with `traceana calibrate`, rounded; bf16 set to the fp32 figure (a CPU without AMX /
#: avx512_bf16 runs it no faster). Defaults only: a profile of the machine replaces them.
DEFAULT = {"peak_tflops": {"fp64": 0.18, "fp32": 0.36, "bf16": 0.36}, "dram_gbps": 15.0, "dispatch_us": 1.0}
TINY_TIMES = 3.0  # self time per call below this many dispatch overheads: a dispatch-bound op
#: verdicts kept in the analysis (most self time first): the report's ops table and chart read them
TOP = 2000
DISPATCH_FIX = ("fewer, larger ops: batch the work, use fused ops (torch.nn.functional.scaled_dot_product_attention, "
                "fused optimizers: foreach=True / fused=True), or torch.compile to merge element-wise chains")


def roofs(profile: dict | None) -> dict:
    """The CPU roofs used (a profile's as recorded in device.profile, or DEFAULT)."""
    if profile and profile.get("kind") == "cpu":
        peaks = dict(profile.get("peak_tflops") or {})
        return {"source": "profile", "profile": profile.get("file"), "threads": profile.get("threads"),
                "peak_tflops": {**DEFAULT["peak_tflops"], **peaks} if peaks else dict(DEFAULT["peak_tflops"]),
                "measured": sorted(peaks),
                "dram_gbps": profile.get("dram_gbps") or DEFAULT["dram_gbps"],
                "dispatch_us": profile.get("dispatch_us") or DEFAULT["dispatch_us"],
                "note": f"CPU roofs measured by device profile {profile.get('file')} ({profile.get('name')}, "
                        f"{profile.get('threads')} thread(s))"}
    return {"source": "default", "profile": None, "threads": None, "peak_tflops": dict(DEFAULT["peak_tflops"]),
            "measured": [], "dram_gbps": DEFAULT["dram_gbps"], "dispatch_us": DEFAULT["dispatch_us"],
            "note": ("CPU roofs are traceana's defaults (BLAS fp64 0.18, fp32 0.36, bf16 0.36 TFLOP/s, memory "
                     "15 GB/s, dispatch 1 µs per op), not this machine's: run `traceana calibrate -o cpu.json` "
                     "where the trace was recorded and pass --profile cpu.json")}


def cpu_peak(cost: Cost, peaks: dict[str, float]) -> tuple[str, float, str]:
    """(figure key, TFLOP/s, why) of the compute roof for one op on a CPU."""
    dt = cost.dtype
    kind = "matrix op" if cost.matrix else "element-wise work"
    if dt in ("fp64", "fp32", "bf16") and dt in peaks:
        return dt, peaks[dt], f"{dt} {kind}: the CPU's {dt} BLAS GEMM figure"
    return "fp32", peaks["fp32"], f"{dt} {kind}: no {dt} figure for a CPU, the fp32 BLAS GEMM figure used"


def _listify(v):
    """Recorded dims as JSON has them (nested lists), so a saved analysis reads back the same."""
    return [_listify(x) for x in v] if isinstance(v, (list, tuple)) else v


def _roof_us(cost: Cost | None, r: dict) -> float | None:
    """max(FLOPs / peak, bytes / bandwidth) of one call in µs; None without a Cost."""
    if not isinstance(cost, Cost):
        return None
    return max(cost.flops / (cpu_peak(cost, r["peak_tflops"])[1] * 1e6), cost.bytes / (r["dram_gbps"] * 1e3))


def _group(trace: Trace, self_us: np.ndarray, parent: np.ndarray, r: dict) -> tuple[list[dict], np.ndarray]:
    """Op instances -> signatures: calls, self time, costed descendants; and each instance's signature."""
    ops, names = trace.ops, trace.names
    keys: dict[tuple, int] = {}
    sig_of = np.empty(len(ops), dtype=np.int64)
    groups: list[dict] = []
    for i in range(len(ops)):
        key = (int(ops.name[i]), ops.dims[i], ops.types[i], ops.concrete[i])
        g = keys.get(key)
        if g is None:
            g = keys[key] = len(groups)
            groups.append({"first": i, "calls": 0, "self_us": 0.0, "with_child_cost": 0})
        sig_of[i] = g
        groups[g]["calls"] += 1
        groups[g]["self_us"] += max(float(self_us[i]), 0.0)
    costs = []
    for g in groups:
        i = g["first"]
        call = make_call(names[int(ops.name[i])], ops.dims[i], ops.types[i], ops.strides[i], ops.concrete[i], ())
        g["call"] = call
        costs.append(op_cost(call) if ops.dims[i] else None)
    # an instance calling a costed op that carries at least half its work (in roofline time; any
    # work when it has no cost of its own, e.g. an autograd node) has its work counted there
    roof = [_roof_us(c, r) for c in costs]
    marked = np.zeros(len(ops), dtype=bool)
    for i in range(len(ops)):
        mine = roof[sig_of[i]]
        if not mine:
            continue
        p = int(parent[i])
        while p >= 0:
            theirs = roof[sig_of[p]]
            if theirs is None or mine >= 0.5 * theirs:
                marked[p] = True
            p = int(parent[p])
    counts = np.bincount(sig_of[marked], minlength=len(groups))
    for g, c, k in zip(groups, costs, counts.tolist()):
        g["cost"], g["with_child_cost"] = c, k
    return groups, sig_of


def verdict(g: dict, r: dict) -> dict:
    """One signature's CPU verdict: bound, % of roof and the arithmetic in one sentence."""
    call, cost, n = g["call"], g["cost"], g["calls"]
    per = g["self_us"] / n if n else 0.0
    disp = r["dispatch_us"]
    row = {"name": call.name, "input_dims": _listify(call.dims), "input_types": list(call.types),
           "concrete_inputs": list(call.concrete) if call.concrete else [], "calls": n,
           "self_us": g["self_us"], "self_per_call_us": per, "flops": None, "bytes": None, "achieved_gflops": None,
           "achieved_gbps": None, "peak": None, "peak_tflops": None, "compute_us": None, "memory_us": None,
           "model_us": None, "roof_pct": None, "dispatch_us": disp}
    tiny = per < TINY_TIMES * disp
    if g["with_child_cost"] * 2 > n:  # most calls hand their work to a costed op they call
        row["bound"] = "dispatch" if tiny else "composite"
        row["text"] = (f"its work is counted in the ops it calls; its own {u.us(per)} per call is dispatch and glue"
                       + (f", under {TINY_TIMES:g} x the {u.us(disp)} dispatch overhead" if tiny else ""))
        return row
    if not isinstance(cost, Cost):
        why = cost.reason if cost is not None else "no shapes recorded"
        row["bound"] = "dispatch" if tiny else "unmodelled"
        row["text"] = (f"{u.us(per)} per call, under {TINY_TIMES:g} x the {u.us(disp)} dispatch overhead: the per-op "
                       "cost is most of it" if tiny else f"no FLOP/byte model ({why})")
        return row
    key, peak, why = cpu_peak(cost, r["peak_tflops"])
    compute = cost.flops / (peak * 1e6)
    memory = cost.bytes / (r["dram_gbps"] * 1e3)
    roof = max(compute, memory)
    model = disp + roof
    row.update({"flops": cost.flops, "bytes": cost.bytes, "peak": key, "peak_tflops": peak, "peak_why": why,
                "family": cost.family, "matrix": bool(cost.matrix), "dtype": cost.dtype,
                "compute_us": compute, "memory_us": memory, "model_us": model, "flops_expr": cost.flops_expr,
                "bytes_expr": cost.bytes_expr, "estimated": cost.estimated,
                "achieved_gflops": cost.flops / (per * 1e3) if per > 0 else None,
                "achieved_gbps": cost.bytes / (per * 1e3) if per > 0 else None,
                "roof_pct": roof / per * 100.0 if per > 0 else None})
    if cost.flops == 0 and cost.bytes == 0:  # a view or metadata op: nothing but per-op overhead
        row["bound"] = "dispatch"
        row["text"] = (f"dispatch-bound: no arithmetic and no data movement (a view or metadata op); all of its "
                       f"{u.us(per)} per call is per-op overhead ({u.us(disp)} dispatch measured): " + DISPATCH_FIX)
        return row
    if per > 0 and model / per < EXPLAINED_MIN:
        bound = "underutilised"
    elif disp > roof or tiny:
        bound = "dispatch"
    else:
        bound = "compute" if compute >= memory else "memory"
    row["bound"] = bound
    gf = row["achieved_gflops"] or 0.0
    gb = row["achieved_gbps"] or 0.0
    terms = (f"{cost.flops:,.0f} FLOPs / {peak:g} TFLOP/s ({key} BLAS) = {u.us(compute)}, "
             f"{cost.bytes:,.0f} B / {r['dram_gbps']:.3g} GB/s = {u.us(memory)}")
    if bound == "compute":
        text = (f"compute-bound: {terms}; measured {u.us(per)} per call, {gf:,.1f} GFLOP/s, "
                f"{u.pct(row['roof_pct'])} of the BLAS peak")
    elif bound == "memory":
        text = (f"memory-bound: {terms}; measured {u.us(per)} per call, {gb:,.2f} GB/s, "
                f"{u.pct(row['roof_pct'])} of the bandwidth")
    elif bound == "dispatch":
        text = (f"dispatch-bound: its work needs {u.us(roof)} ({terms}) but each call costs {u.us(per)}, "
                f"against {u.us(disp)} of per-op dispatch: " + DISPATCH_FIX)
    else:
        text = (f"underutilised: {terms}; with {u.us(disp)} dispatch the model explains {u.pct(model / per * 100)} of "
                f"its {u.us(per)} per call (single-threaded kernel, small or strided tensors, or allocation)")
    if row["roof_pct"] is not None and row["roof_pct"] > 100:
        text += (f" (over the roof at {u.pct(row['roof_pct'])}: " + (
            "its data is served from cache, not DRAM, or the byte model over-counts)" if memory >= compute else
            "faster than the BLAS figure: the roofs were measured under load, with fewer threads, or are "
            "the defaults; calibrate this machine)"))
    row["text"] = text
    return row


class Judged(msgspec.Struct, frozen=True):
    """Every op signature of a CPU-only trace judged, and what the levers need per op instance."""

    roofs: dict
    rows: list[dict]  # one verdict per signature, most self time first; row["id"] = "cpu1", "cpu2", ...
    sig: np.ndarray  # per op instance: its row's index
    self_us: np.ndarray  # per op instance: self time (µs, may dip below 0 on overlapping children)
    parent: np.ndarray  # per op instance: the op it is nested in (-1: top-level)
    top_level: np.ndarray  # per op instance: not nested in another op


def judge_ops(trace: Trace, profile: dict | None) -> Judged:
    """Each op signature's verdict against the CPU roofs (a profile's, or DEFAULT)."""
    r = roofs(profile)
    self_us, top_level, parent = self_times(trace)
    groups, sig_of = _group(trace, self_us, parent, r)
    rows = [verdict(g, r) for g in groups]
    order = sorted(range(len(rows)), key=lambda i: (-rows[i]["self_us"], rows[i]["name"], str(rows[i]["input_dims"])))
    rank = np.empty(len(rows), dtype=np.int64)
    rank[np.array(order, dtype=np.int64)] = np.arange(len(rows), dtype=np.int64)
    rows = [rows[i] for i in order]
    for k, row in enumerate(rows, 1):
        row["id"] = f"cpu{k}"
    return Judged(r, rows, rank[sig_of] if len(sig_of) else sig_of, self_us, parent, top_level)


def cpu_roofline(trace: Trace | Judged, profile: dict | None = None) -> dict:
    """Verdicts for the CPU ops of a CPU-only trace (top TOP signatures by self time), the roofs
    used and the dispatch-bound total. `trace`: the trace, or its ops already judged (judge_ops)."""
    j = trace if isinstance(trace, Judged) else judge_ops(trace, profile)
    r, rows = j.roofs, j.rows
    total = sum(x["self_us"] for x in rows)
    by: dict[str, float] = defaultdict(float)
    for x in rows:
        by[x["bound"]] += x["self_us"]
    disp = [x for x in rows if x["bound"] == "dispatch"]
    d_us, d_calls = sum(x["self_us"] for x in disp), sum(x["calls"] for x in disp)
    return {
        "roofs": r,
        "by_bound": dict(sorted(by.items(), key=lambda kv: -kv[1])),
        "self_us": total,
        "dispatch": {"calls": d_calls, "self_us": d_us, "signatures": len(disp),
                     "text": (f"{d_calls:,} calls of {len(disp):,} op signatures spend {u.us(d_us)} "
                              f"({u.pct(d_us / total * 100 if total else 0)} of CPU self time) on little more than "
                              f"per-op dispatch ({u.us(r['dispatch_us'])} each): {DISPATCH_FIX}") if disp else ""},
        "verdicts": rows[:TOP],
        "signatures": len(rows),
    }
