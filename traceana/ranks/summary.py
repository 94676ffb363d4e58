"""One rank's summary for the cross-rank pass: its collective calls (ranks/calls.py) with their
steps, phases and what the rank did before each (ranks/windows.py), as numpy columns.

This is all the cross-rank matching reads of a rank — a few hundred bytes per collective call, never
the trace — so the parent process holds 256 ranks' summaries in tens of MB. `rank_summary` runs in the
per-rank worker (ranks/executor.py) on the trace, its links and the analysis' op rows.

Columns (one entry per call, in order of arrival): t (arrival, µs, the trace's clock), end (nan when
not recorded), issue (when the rank issued it), kind (index into calls.KINDS), group (index into
`groups`), seq (-1: not recorded), peer (-1), step (ProfilerStep number, -1 outside steps), phase
(index into link/steps.PHASES, -1 unknown), n_in / n_out (elements, -1 unknown), bytes (nan unknown),
dtype (index into `names`, -1), w0 (the start of the interval before it), work_us, comm_us, data_us,
idle_us (n x len(windows.IDLE)), top / top_us (n x windows.TOP: index into `names`, -1 none).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traceana.link.steps import PHASES, _steps, inside
from traceana.load.model import Trace
from traceana.ranks import calls as cl
from traceana.ranks import windows as win
from traceana.arrays import distinct

COLUMNS = ("t", "end", "issue", "kind", "group", "seq", "peer", "step", "phase", "n_in", "n_out", "bytes", "dtype",
           "w0", "work_us", "comm_us", "data_us", "idle_us", "top", "top_us")


def _codes(values: list[str], table: list[str], index: dict[str, int]) -> np.ndarray:
    out = np.empty(len(values), dtype=np.int32)
    for i, v in enumerate(values):
        if v not in index:
            index[v] = len(table)
            table.append(v)
        out[i] = index[v]
    return out


def _primary(trace: Trace) -> int | None:
    gpu = trace.gpu
    if not len(gpu):
        return None
    ids, inv = np.unique(gpu.device, return_inverse=True)
    return int(ids[int(np.argmax(np.bincount(inv, weights=gpu.dur)))])


def _phase_fn(trace: Trace, links: Any):
    """Phase name per time ("" where the trace says nothing about phases)."""
    from traceana.diagnose.trace_view import TraceView

    view = TraceView(trace, links)
    if not view.windows:
        return lambda t: np.full(len(t), "", dtype=object)
    if "optimizer" not in view.windows:
        return view.phase
    nums, st, se = view.steps
    os_ = view.windows["optimizer"][0]

    def phase(t: np.ndarray) -> np.ndarray:
        """view.phase, and after its step's optimizer began: optimizer (the step's tail: zero_grad, the
        update's own collectives, logging), not forward."""
        out = view.phase(t)
        if len(nums):
            k, ko = inside(t, st, se), inside(os_, st, se)
            first = np.full(len(st), np.inf)
            np.minimum.at(first, ko[ko >= 0], os_[ko >= 0])
            tail = (k >= 0) & (t >= first[np.maximum(k, 0)])
            out[tail] = "optimizer"
        return out
    return phase


def rank_summary(trace: Trace, links: Any, groups: Any, rows: list[dict]) -> dict[str, Any]:
    """The summary of one rank (see the module doc)."""
    from traceana.diagnose import breakdown as bd
    from traceana.diagnose import ledger as lg
    from traceana.link.comm_kernels import comm_event_mask

    dev = _primary(trace)
    calls = cl.gpu_calls(trace, links, dev) if dev is not None else []
    backend = "gpu" if calls else "cpu"
    if not calls:
        calls = cl.cpu_calls(trace)
    nums, st, se = _steps(trace)
    pids = sorted({t.split("/", 1)[0] for t in trace.threads if "/" in t})[:16]
    out: dict[str, Any] = {"host": trace.host, "pids": pids, "backend": backend, "step_numbers": list(nums),
                           "step_starts": st.tolist(), "step_ends": se.tolist(), "n": len(calls),
                           "groups": [], "names": [], "splits": {}}
    n = len(calls)
    t = np.array([c["t"] for c in calls], dtype=np.float64)
    end = np.array([c["end"] for c in calls], dtype=np.float64)
    issue = np.array([c["issue"] for c in calls], dtype=np.float64)
    step, phase = cl.step_and_phase(trace, issue, _phase_fn(trace, links))
    names: list[str] = []
    index: dict[str, int] = {}
    out["t"], out["end"], out["issue"] = t, end, issue
    out["kind"] = np.array([cl.KINDS.index(c["kind"]) if c["kind"] in cl.KINDS else len(cl.KINDS) - 1 for c in calls],
                           dtype=np.int8)
    gidx: dict[str, int] = {}
    out["group"] = _codes([c["group"] for c in calls], out["groups"], gidx).astype(np.int16) if n \
        else np.zeros(0, np.int16)
    out["seq"] = np.array([c.get("seq", -1) for c in calls], dtype=np.int64)
    out["peer"] = np.array([c.get("peer", -1) for c in calls], dtype=np.int32)
    out["step"] = step.astype(np.int64)
    out["phase"] = np.array([PHASES.index(p) if p in PHASES else -1 for p in phase], dtype=np.int8)
    out["n_in"] = np.array([c.get("n_in", -1) for c in calls], dtype=np.int64)
    out["n_out"] = np.array([c.get("n_out", -1) for c in calls], dtype=np.int64)
    out["bytes"] = np.array([c.get("bytes", np.nan) for c in calls], dtype=np.float64)
    dts = [c.get("dtype") or "" for c in calls]
    out["dtype"] = np.where(np.array([bool(d) for d in dts], dtype=bool), _codes(dts, names, index), -1).astype(np.int32) \
        if n else np.zeros(0, np.int32)
    for i, c in enumerate(calls):
        if c.get("in_split") or c.get("out_split"):
            out["splits"][i] = [list(c.get("in_split") or ()), list(c.get("out_split") or ())]
    # the interval before each arrival: from the previous call's end (the first: its step's start)
    first = np.where(step >= 0, np.interp(step, nums, st) if len(nums) else t, t[:1].min() if n else 0.0) if n else t
    w0 = win.starts(t, end, first) if n else t
    out["w0"] = w0
    if backend == "gpu":
        ev_row = bd.event_rows(len(trace.gpu), groups)
        acc = lg.accounts(trace, links, ev_row, rows).get(dev)
        row_code = _codes([str(r.get("name") or "") for r in rows], names, index) if rows else np.zeros(0, np.int32)
        ker_code = {}
        ev_name = np.empty(len(trace.gpu), dtype=np.int64)
        has = ev_row >= 0
        ev_name[has] = row_code[ev_row[has]]
        for e in np.flatnonzero(~has).tolist():
            k = int(trace.gpu.name[e])
            if k not in ker_code:
                ker_code[k] = int(_codes([trace.names[k][:200]], names, index)[0])
            ev_name[e] = ker_code[k]
        comm_ev = comm_event_mask(trace.names, trace.gpu.name) & (trace.gpu.kind == 0)
        w = win.gpu_windows(trace, dev, acc, ev_name, comm_ev, w0, t)
    else:
        issue_code, backend_code = cl._comm_op_codes(trace.names)
        skip = issue_code | backend_code | np.array([nm == "record_param_comms" or nm.startswith("ProfilerStep#")
                                                     for nm in trace.names], dtype=bool)
        w = win.cpu_windows(trace, np.array([c["thread"] for c in calls], dtype=np.int64), w0, t, skip)
        local = {}
        top = w["top"]
        for k in distinct(top[top >= 0]).tolist():
            local[k] = int(_codes([trace.names[k][:200]], names, index)[0])
        w["top"] = np.vectorize(lambda k: local.get(k, -1), otypes=[np.int64])(top) if top.size else top
    out["work_us"] = w["work_us"].astype(np.float32)
    out["comm_us"] = w["comm_us"].astype(np.float32)
    out["data_us"] = w["data_us"].astype(np.float32)
    out["idle_us"] = w["idle_us"].astype(np.float32)
    out["top"] = w["top"].astype(np.int32)
    out["top_us"] = w["top_us"].astype(np.float32)
    # keep only the names the columns point at
    used = sorted(set(out["top"][out["top"] >= 0].tolist()) | set(out["dtype"][out["dtype"] >= 0].tolist()))
    remap = np.full(len(names) + 1, -1, dtype=np.int32)
    remap[used] = np.arange(len(used), dtype=np.int32)
    out["names"] = [names[i] for i in used]
    out["top"] = np.where(out["top"] >= 0, remap[out["top"]], -1).astype(np.int32)
    out["dtype"] = np.where(out["dtype"] >= 0, remap[out["dtype"]], -1).astype(np.int32)
    return out
