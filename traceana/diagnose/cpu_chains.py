"""Element-wise chains of a CPU-only trace (cpu_levers.py's cpu_fusion lever): ops run back to back on
one thread, each reading the tensor the one before wrote (dataflow.py's rules); fused, a chain costs
about its longest op.
"""

from __future__ import annotations

import numpy as np

from traceana.diagnose.cpu_roofline import Judged
from traceana.diagnose.dataflow import Flow

#: Ops linked into a chain are element-wise work of these families (dataflow.FUSABLE_FAMILIES, less
#: the copies and index ops a compiler does not fuse on a CPU).
CHAIN_FAMILIES = frozenset({"pointwise", "reduction", "norm"})


def elementwise_chains(trace, j: Judged, taken: np.ndarray) -> tuple[np.ndarray, list[dict]]:
    """Element-wise chains: ops run back to back on one thread, each reading what the one before wrote.
    The ops in order are those that do work (a FLOP or byte count, or no cost model) and are not inside an
    element-wise op (a `mul` by a Python scalar converts the scalar in a nested `aten::to`): views, metadata
    ops and allocations between two element-wise ops do not break a chain, any other op does.
    Returns each instance's chain number (-1: none) and per distinct chain pattern {sigs, calls, time, saving}."""
    ops, rows = trace.ops, j.rows
    n = len(ops)
    chain = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return chain, []
    cand_row = np.array([r.get("family") in CHAIN_FAMILIES and r["bound"] in ("memory", "dispatch", "underutilised")
                         and r["name"].startswith("aten::") for r in rows] + [False])
    work_row = cand_row | np.array([bool(r.get("flops") or r.get("bytes")) or
                                    (r.get("model_us") is None and r["bound"] != "dispatch") for r in rows] + [False])
    is_cand = cand_row[j.sig] & ~taken
    inside = np.zeros(n, dtype=bool)  # some op it is nested in is element-wise
    anc = j.parent.copy()
    for _ in range(256):
        live = anc >= 0
        if not live.any():
            break
        inside[live] |= cand_row[j.sig[anc[live]]]
        anc[live] = j.parent[anc[live]]
    shown = np.flatnonzero(work_row[j.sig] & ~inside)
    order = shown[np.lexsort((ops.ts[shown], ops.thread[shown]))]  # per thread in time order
    nxt = np.full(n, -1, dtype=np.int64)
    same = ops.thread[order[1:]] == ops.thread[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    cand = order[is_cand[order]]
    flow = Flow([{**r, "input_dims": _tuples(r["input_dims"])} for r in rows])  # dims as the cost model has them
    linked = np.zeros(n, dtype=bool)  # linked[i]: i feeds nxt[i]
    for i in cand.tolist():
        b = int(nxt[i])
        if b >= 0 and is_cand[b] and flow.breaks(int(j.sig[i])) is None and flow.breaks(int(j.sig[b])) is None \
                and flow.feeds(int(j.sig[i]), int(j.sig[b])) is not None:
            linked[i] = True
    starts = [i for i in order.tolist() if linked[i]]
    prev = np.zeros(n, dtype=bool)
    prev[nxt[linked]] = True
    groups: dict[tuple, dict] = {}
    selfc = np.clip(j.self_us, 0.0, None)
    k = 0
    for s in starts:
        if prev[s]:
            continue  # not the head of its chain
        members = [s]
        while linked[members[-1]]:
            members.append(int(nxt[members[-1]]))
        chain[members] = k
        k += 1
        sigs = tuple(int(j.sig[m]) for m in members)
        t = [float(selfc[m]) for m in members]
        g = groups.setdefault(sigs, {"sigs": sigs, "calls": 0, "time_us": 0.0, "saving_us": 0.0,
                                     "by_sig": {}})
        g["calls"] += 1
        g["time_us"] += sum(t)
        keep = max(range(len(t)), key=lambda x: t[x])  # fused, the chain costs about its longest op
        g["saving_us"] += sum(t) - t[keep]
        for x, (m, tm) in enumerate(zip(sigs, t)):
            if x != keep:
                g["by_sig"][m] = g["by_sig"].get(m, 0.0) + tm
    return chain, sorted(groups.values(), key=lambda g: -g["saving_us"])


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, (list, tuple)) else v
