"""The run's collective calls, as the context rules (context.py) read them.

`collectives` lists every call (read through trace_view.TraceView): each outermost communication op
(a c10d op holding a record_param_comms is one call) with its algorithm, phase, parent ops, input
and output elements and GPU time, and every communication kernel no such op launched (DeepEP,
graph replays, launches outside ops). `on_a_matmul` finds the forward collectives linked to a
matmul by size: tensor parallelism's signature.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import msgspec
import numpy as np

from traceana.diagnose.trace_view import TraceView
from traceana.link.comm_kernels import is_comm_op, kernel_library
from traceana.link.steps import collective_kind
from traceana.arrays import distinct

_GEMM = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm)$")
_ALGO_WORDS = (("all_to_all", r"all_?to_?all|alltoall|dispatch|combine"), ("reduce_scatter", r"reduce_?scatter"),
               ("all_gather", r"all_?gather|allgather"), ("all_reduce", r"all_?reduce|allreduce|custom_ar"),
               ("send_recv", r"^c10d::(send|recv)|^c10d::recv_any_source"), ("broadcast", r"broadcast"),
               ("barrier", r"barrier"))
_ALGO_RX = [(a, re.compile(p, re.I)) for a, p in _ALGO_WORDS]
_KIND_ALGO = {"AllReduce": "all_reduce", "ReduceScatter": "reduce_scatter", "AllGather": "all_gather",
              "AllToAll": "all_to_all", "Dispatch": "all_to_all", "Combine": "all_to_all", "Broadcast": "broadcast"}
_P2P_COLLECTIVE = {"send", "recv", "recv_any_source"}


def _sums(x: np.ndarray, parts: list[np.ndarray]) -> list[float]:
    """sum(x[p]) for each index array p: one gather and one prefix sum for all of them."""
    if not parts:
        return []
    n = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    flat = np.concatenate(parts).astype(np.int64, copy=False) if n.sum() else np.zeros(0, np.int64)
    c = np.concatenate(([0.0], np.cumsum(x[flat], dtype=float)))
    ends = np.cumsum(n)
    return (c[ends] - c[ends - n]).tolist()


def _algorithm(name: str, extra: dict) -> str | None:
    coll = extra.get("collective")
    return _algorithm_of(name, coll if isinstance(coll, str) else None)


@functools.lru_cache(maxsize=1 << 12)
def _algorithm_of(name: str, coll: str | None) -> str | None:
    """The collective a call is (by its recorded collective name, else its op name): once per distinct pair,
    the same few names recur for every call of a run (4,040 calls, 7 patterns each: 37 ms on df_index)."""
    if coll is not None:
        if coll in _P2P_COLLECTIVE:
            return "send_recv"
        name = coll
    for algo, rx in _ALGO_RX:
        if rx.search(name):
            return algo
    return None


def _decode(b: bytes) -> list:
    try:
        v = msgspec.json.decode(b) if b else []
    except msgspec.DecodeError:
        return []
    return v if isinstance(v, list) else []


def _numel(shape: Any) -> int | None:
    if not isinstance(shape, list) or not shape or not all(type(d) is int and d >= 0 for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    return n


def _elements(name: str, dims: bytes, concrete: bytes, extra: dict, algo: str | None) -> tuple[int | None, int | None]:
    """(input, output) elements of one collective call, from what it recorded."""
    i, o = extra.get("in_nelems"), extra.get("out_nelems")
    if type(i) is int and type(o) is int:
        return i, o
    d = _decode(dims)
    short = name.split("::", 1)[-1]
    if short in ("_allgather_base_", "_reduce_scatter_base_", "alltoall_base_") and len(d) >= 2:
        return _numel(d[1]), _numel(d[0])  # (output, input)
    if short in ("allgather_into_tensor_coalesced_", "reduce_scatter_tensor_coalesced_") and len(d) >= 2:
        outs, ins = d[0], d[1]
        if isinstance(outs, list) and isinstance(ins, list) and outs and ins:
            so, si = [_numel(x) for x in outs], [_numel(x) for x in ins]
            if None not in so and None not in si:
                return sum(si), sum(so)
        return None, None
    if d:
        first = _numel(d[0])
        if first is None and isinstance(d[0], list) and d[0] and isinstance(d[0][0], list):
            first = _numel(d[0][0])  # a TensorList of one tensor (c10d::allreduce_)
        if algo == "all_gather" and short.startswith("all_gather_into_tensor"):
            c = _decode(concrete)
            g = int(c[1]) if len(c) > 1 and isinstance(c[1], str) and c[1].isdigit() else None
            return first, first * g if first is not None and g else None
        return first, first
    return None, None


class Call(msgspec.Struct):
    """One communication call: an outermost c10d op, or a communication kernel no such op launched."""

    name: str
    algo: str | None
    ts: float
    end: float
    thread: int
    phase: str
    parents: list[str]
    gpu_us: float
    n_in: int | None
    n_out: int | None
    op: int
    library: str | None


def collectives(r: TraceView) -> list[Call]:
    """Every outermost communication op (a c10d op holding a record_param_comms is one call), and
    every communication kernel no such op launched (DeepEP, graph replays, launches outside ops)."""
    trace, ops = r.trace, r.trace.ops
    out: list[Call] = []
    comm = np.array([is_comm_op(n) for n in r.names], dtype=bool)
    idx = np.flatnonzero(comm[ops.name]) if len(ops) else np.zeros(0, np.int64)
    covered = np.zeros(len(trace.gpu), dtype=bool)
    if len(idx):
        order = idx[np.lexsort((-ops.end[idx], ops.ts[idx], ops.thread[idx]))]
        outer: list[int] = []
        last: dict[int, float] = {}
        for i, th, ts, end in zip(order.tolist(), ops.thread[order].tolist(), ops.ts[order].tolist(),
                                  ops.end[order].tolist()):
            if ts < last.get(th, -np.inf):
                continue  # nested in an outer communication op
            outer.append(i)
            last[th] = end
        outer_a = np.array(outer, dtype=np.int64)
        phases = r.phase(ops.ts[outer_a])
        inners = r.inner(outer_a)
        evs = r.events_in(ops.thread[outer_a], ops.ts[outer_a], ops.end[outer_a])
        gpu_us = _sums(trace.gpu.dur, evs)
        phases = phases.tolist()
        visits = 0
        for k, (i, th, ts, end) in enumerate(zip(outer, ops.thread[outer_a].tolist(), ops.ts[outer_a].tolist(),
                                                  ops.end[outer_a].tolist())):
            parents = [r.op_name[j] for j in r.ancestors(i)]
            inner = inners[k].tolist()
            extra: dict = {}
            for j in inner:
                if j in ops.extra:
                    extra.update(dict(ops.extra[j]))
            algo = _algorithm(r.op_name[i], extra)
            if algo is None:
                for j in inner:
                    algo = _algorithm(r.op_name[j], extra)
                    if algo:
                        break
            n_in, n_out = _elements(r.op_name[i], ops.dims[i], ops.concrete[i], extra, algo)
            if n_in is None and extra:
                n_in, n_out = _elements("", b"", b"", extra, algo)
            ev = evs[k]
            if algo is None and len(ev):
                kinds = [collective_kind(r.names[c]) for c in trace.gpu.name[ev].tolist()]
                algo = next((_KIND_ALGO[x] for x in kinds if x in _KIND_ALGO), None)
            visits += len(inner) + len(ev) + len(parents)
            out.append(Call(name=r.op_name[i], algo=algo, ts=ts, end=end, thread=th, phase=phases[k], parents=parents,
                            gpu_us=gpu_us[k], n_in=n_in, n_out=n_out, op=i, library=None))
        if evs:
            covered[np.concatenate(evs)] = True
        r.meter.visit("context", visits)
    lone = np.flatnonzero(r.comm_event & ~covered) if len(trace.gpu) else np.zeros(0, np.int64)
    if len(lone):
        phases = r.phase(r.launch_ts[lone])
        for k, e in enumerate(lone.tolist()):
            name = r.names[int(trace.gpu.name[e])]
            kind = collective_kind(name)
            out.append(Call(name=name, algo=_KIND_ALGO.get(kind), ts=float(r.launch_ts[e]),
                             end=float(r.launch_ts[e]), thread=-1, phase=phases[k], parents=[],
                             gpu_us=float(trace.gpu.dur[e]), n_in=None, n_out=None, op=-1,
                             library=kernel_library(name)))
    return out


def _gemm_io(r: TraceView, i: int) -> tuple[int | None, int | None]:
    """(elements of the activation input, elements of the output) of a matmul op, from its shapes."""
    d = _decode(r.trace.ops.dims[i])
    short = r.op_name[i].split("::", 1)[-1]
    shapes = [x if isinstance(x, list) and all(type(v) is int for v in x) else None for x in d]
    try:
        if short in ("mm", "bmm", "matmul", "_scaled_mm"):
            a, b = shapes[0], shapes[1]
            if not a or not b:
                return None, None
            lead = a[:-1]
            return _numel(a), _numel(lead + [b[-1]]) if len(b) >= 2 else None
        if short in ("addmm", "baddbmm"):
            a, b = shapes[1], shapes[2]
            return _numel(a), _numel(a[:-1] + [b[-1]]) if a and b else None
        if short == "linear":
            a, w = shapes[0], shapes[1]
            return _numel(a), _numel(a[:-1] + [w[0]]) if a and w else None
    except (IndexError, TypeError):
        return None, None
    return None, None


def on_a_matmul(r: TraceView, calls: list[Call]) -> list[Call]:
    """Forward collectives linked to a matmul by size: an all-reduce / reduce-scatter of as many
    elements as the matmul right before it wrote, or an all-gather whose output has as many elements
    as the next matmul's input (no other collective between them, same thread)."""
    ops = r.trace.ops
    if not any(c.op >= 0 and c.phase == "forward" and c.algo in ("all_reduce", "reduce_scatter", "all_gather")
               for c in calls):
        return []  # no call to link (and no matmuls to sort)
    gemm = r.ops_where(_GEMM)
    if not len(gemm):
        return []
    out = []
    by_end: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per thread: its matmuls by end, and their ends
    by_start: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # ... by start (ties: by end), and their starts
    for th in distinct(ops.thread[gemm]).tolist():
        g = gemm[ops.thread[gemm] == th]
        g = g[np.argsort(ops.end[g], kind="stable")]
        by_end[th] = g, ops.end[g]
        g = g[np.argsort(ops.ts[g], kind="stable")]
        by_start[th] = g, ops.ts[g]
    r.meter.visit("context", len(gemm))
    coll_ts = {}
    for c in calls:
        coll_ts.setdefault(c.thread, []).append(c.ts)
    for th in coll_ts:
        coll_ts[th] = np.sort(np.array(coll_ts[th]))
    for c in calls:  # each call: a few searches over its thread's sorted matmuls and collectives
        if c.op < 0 or c.phase != "forward" or c.algo not in ("all_reduce", "reduce_scatter", "all_gather"):
            continue
        if c.thread not in by_end:
            continue
        r.meter.visit("context", 2)
        cts = coll_ts[c.thread]
        if c.algo in ("all_reduce", "reduce_scatter"):
            g, end = by_end[c.thread]
            k = int(np.searchsorted(end, c.ts, "right"))  # the matmuls that ended by the call's start
            if not k or c.n_in is None:
                continue
            j = int(g[k - 1])
            p = int(np.searchsorted(cts, c.ts, "left"))  # the previous collective on the thread
            if p and cts[p - 1] > ops.end[j]:
                continue
            # the matmul's output = the message: several matmuls nested (linear > addmm) agree
            if _gemm_io(r, j)[1] == c.n_in:
                out.append(c)
        else:
            g, ts = by_start[c.thread]
            k = int(np.searchsorted(ts, c.end, "left"))  # the first matmul that started after the call ended
            if k == len(g) or c.n_out is None:
                continue
            j = int(g[k])
            p = int(np.searchsorted(cts, c.ts, "right"))  # the next collective on the thread
            if p < len(cts) and cts[p] < ops.ts[j]:
                continue
            if _gemm_io(r, j)[0] == c.n_out:
                out.append(c)
    return out
