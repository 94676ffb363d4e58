"""The Analysis per event: the verdict each kernel and op of the trace carries in the annotated trace.

Every GPU event (kernel, memcpy, memset) carries the verdict of its op signature (the row of
analysis["ops"] it was grouped into); every cpu op that owns device time carries the verdict of the
row its GPU events fell into (the row with most of its device time, the others named under "also").
A verdict is what the JSON report says of the row (bound, % of roof, FLOPs and bytes per call, the
roof used, achieved rates) and the findings whose "ops" name it, by the report's finding ids.

`event_codes` gives, per place in the trace's traceEvents list (the loader's `ordinal`), an index
into a list of JSON payloads (-1: nothing added); the payloads are encoded once per row, not per event.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np

from traceana.analysis import Parts
from traceana.diagnose.breakdown import event_rows
from traceana.link.signatures import make_call

_ENC = msgspec.json.Encoder()


def roof_text(row: dict, device: dict) -> str | None:
    """The roof the row's roofline time was computed against, in words ("bf16_tc 989 TFLOP/s")."""
    kind = row.get("roof_kind")
    if kind == "compute" and row.get("peak_dtype"):
        return f"{row['peak_dtype']} {row['peak_tflops']:g} TFLOP/s"
    if kind == "dram" and device.get("dram_gbps"):
        return f"DRAM {device['dram_gbps']:g} GB/s"
    if kind in ("host_link", "peer_link"):
        c = row.get("copy") or {}
        gbps = c.get("link_gbps")
        return f"{c.get('link') or kind.replace('_', ' ')}" + (f" {gbps:g} GB/s" if gbps else "")
    if kind == "network":
        c = row.get("comm") or {}
        gbps = c.get("link_gbps")
        return f"{c.get('link') or 'network'}" + (f" {gbps:g} GB/s" if gbps else "")
    return None


def _num(v):
    """A finite number for the payload (rounded to 4 significant digits), else None."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(f"{v:.4g}")


def row_verdict(row: dict, device: dict, findings: list[dict]) -> dict:
    """The args one row's events carry (keys without a value are left out)."""
    out = {
        "op": row["id"],
        "name": row["name"],
        "bound": row.get("bound"),
        "roof_pct": _num(row.get("roof_pct")),
        "roof": roof_text(row, device),
        "flops": row.get("flops"),
        "bytes": row.get("bytes"),
        "achieved_tflops": _num(row.get("achieved_tflops")),
        "achieved_gbps": _num(row.get("achieved_gbps")),
        "calls": row.get("count"),
        "mean_time_us": _num(row.get("mean_time_us")),
        "reason": row.get("reason"),
    }
    out = {k: v for k, v in out.items() if v is not None}
    if findings:
        out["findings"] = [{"id": f["id"], "title": f["title"]} for f in findings]
    return out


def findings_by_op(analysis: dict) -> dict[str, list[dict]]:
    """Row id -> the findings that name it, in the report's order."""
    out: dict[str, list[dict]] = {}
    for f in analysis.get("findings") or ():
        for op in f.get("ops") or ():
            out.setdefault(op, []).append(f)
    return out


def cpu_verdict(row: dict) -> dict:
    """The args a CPU-only trace's op carries: its signature's CPU verdict (analysis["cpu"]["roofline"])."""
    roof = None
    if row.get("peak"):
        roof = (f"{row['peak']} {row['peak_tflops']:g} TFLOP/s (CPU BLAS)" if (row.get("compute_us") or 0)
                >= (row.get("memory_us") or 0) else "CPU memory bandwidth")
    out = {"name": row["name"], "bound": row.get("bound"), "roof_pct": _num(row.get("roof_pct")), "roof": roof,
           "flops": row.get("flops"), "bytes": row.get("bytes"), "achieved_gflops": _num(row.get("achieved_gflops")),
           "achieved_gbps": _num(row.get("achieved_gbps")), "calls": row.get("calls"),
           "self_per_call_us": _num(row.get("self_per_call_us")), "text": row.get("text")}
    return {k: v for k, v in out.items() if v is not None}


def _cpu_codes(analysis: dict, parts: Parts, codes: np.ndarray, payloads: list[bytes]) -> None:
    """A CPU-only trace: each op of a signature the report judged (its top signatures by self time)
    carries that verdict. Matched by (name, input dims, input types), once per distinct signature."""
    rows = ((analysis.get("cpu") or {}).get("roofline") or {}).get("verdicts") or []
    ops = parts.trace.ops
    if not rows or not len(ops) or ops.ordinal is None:
        return
    seen = {}
    for r in rows:
        k = (r["name"], msgspec.json.encode(r["input_dims"]), msgspec.json.encode(r["input_types"]))
        if k not in seen:
            seen[k] = len(payloads)
            payloads.append(_ENC.encode(cpu_verdict(r)))
    names = parts.trace.names
    code_of: dict[tuple, int] = {}
    for i, (n, d, t, c) in enumerate(zip(ops.name.tolist(), ops.dims, ops.types, ops.concrete)):
        key = (n, d, t, c)
        code = code_of.get(key)
        if code is None:
            call = make_call(names[n], d, t, b"", c, ())
            code = code_of[key] = seen.get((call.name, msgspec.json.encode(_listify(call.dims)),
                                            msgspec.json.encode(list(call.types))), -1)
        if code >= 0 and ops.ordinal[i] >= 0:
            codes[ops.ordinal[i]] = code


def _listify(v):
    return [_listify(x) for x in v] if isinstance(v, (list, tuple)) else v


def event_codes(analysis: dict, parts: Parts) -> tuple[np.ndarray, list[bytes]]:
    """(code per place in traceEvents, int32, -1 for nothing; the JSON payload of each code)."""
    trace, links = parts.trace, parts.links
    rows = analysis["ops"]
    device = analysis["device"]
    by_op = findings_by_op(analysis)
    verdicts = [row_verdict(r, device, by_op.get(r["id"], [])) for r in rows]
    payloads = [_ENC.encode(v) for v in verdicts]
    codes = np.full(trace.n_events, -1, dtype=np.int32)
    gpu, ops = trace.gpu, trace.ops
    if not len(gpu):
        _cpu_codes(analysis, parts, codes, payloads)
        return codes, payloads
    ev_row = event_rows(len(gpu), parts.groups)
    if len(gpu) and gpu.ordinal is not None:
        has = ev_row >= 0
        codes[gpu.ordinal[has]] = ev_row[has]
    # cpu ops: the row with most of the op's device time; the others under "also"
    op_i = links.gpu_op
    sel = (op_i >= 0) & (ev_row >= 0)
    if sel.any() and ops.ordinal is not None:
        n_rows = len(rows)
        key = op_i[sel] * n_rows + ev_row[sel]
        uniq, inv = np.unique(key, return_inverse=True)
        t = np.bincount(inv, weights=gpu.dur[sel])
        op, row = uniq // n_rows, uniq % n_rows
        order = np.lexsort((row, -t, op))  # per op: most time first (ties: the row ranked first)
        op, row = op[order], row[order]
        starts = np.flatnonzero(np.r_[True, op[1:] != op[:-1]])
        ends = np.r_[starts[1:], len(op)]
        combos: dict[tuple, int] = {}
        for s, e in zip(starts.tolist(), ends.tolist()):
            j = int(op[s])
            o = int(ops.ordinal[j])
            if o < 0:  # an op traceana made (a graph replay's capturing op): no event of its own
                continue
            if e - s == 1:
                codes[o] = int(row[s])
                continue
            combo = tuple(row[s:e].tolist())
            c = combos.get(combo)
            if c is None:
                v = dict(verdicts[combo[0]])
                v["also"] = [rows[r]["id"] for r in combo[1:]]
                c = combos[combo] = len(payloads)
                payloads.append(_ENC.encode(v))
            codes[o] = c
    return codes, payloads
