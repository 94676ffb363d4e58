"""One rank's collective calls: when it arrived at each, when it left, and which call of which group
it was — what ranks/match.py matches across ranks. Runs in the per-rank worker, on the trace.

A collective means everyone leaves together and whoever arrives last sets the time. A rank's
*arrival* is when its part of the collective starts running:

- GPU backends (NCCL, RCCL, DeepEP, NVSHMEM, ...: link/comm_kernels.py): the start of the call's
  first communication kernel on the primary device, its end the last one's end. A call is the
  outermost communication op (c10d::*, record_param_comms, nccl:*, ...) around the kernels' launches,
  else each kernel alone (DeepEP kernels, graph replays).
- CPU backends (gloo, and ranks with no communication kernel): the backend's own range for the
  call (`gloo:all_reduce`, run on its worker thread) paired in order with the op that issued it
  (`c10d::allreduce_` on the caller's thread, which holds the sizes); without that range, the
  issuing op's start (and no end).

Per call: kind (canonical: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send, recv,
...: from record_param_comms' "Collective name", else the op's name, else the kernel's), group (its
"Process Group Name", else the kernel's stream, else "default"), "Seq" when recorded, a p2p call's
peer (Src / Dst Rank, or c10d::send / recv's peer argument), message elements and bytes, all_to_all
split sizes, the step and phase it was issued in (link/steps.py), and the thread that issued it.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np

from traceana.link.comm_kernels import comm_event_mask, is_comm_op
from traceana.link.steps import _steps, inside
from traceana.load.model import Trace
from traceana.arrays import distinct

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather", "scatter",
         "barrier", "send", "recv", "send_recv", "dispatch", "combine", "other")
P2P = frozenset({"send", "recv"})
#: kinds whose message every rank of the group passes with the same size (a mismatch is a bug)
SAME_SIZE = frozenset({"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter"})
# a flattened name (lower case, letters and digits only) -> kind; the first fragment found wins
_FRAGMENTS = (("reducescatter", "reduce_scatter"), ("allgather", "all_gather"), ("allreduce", "all_reduce"),
              ("alltoall", "all_to_all"), ("all2all", "all_to_all"), ("sendrecv", "send_recv"),
              ("broadcast", "broadcast"), ("bcast", "broadcast"), ("barrier", "barrier"),
              ("dispatch", "dispatch"), ("combine", "combine"), ("recv", "recv"), ("send", "send"),
              ("reduce", "reduce"), ("gather", "gather"), ("scatter", "scatter"))
_FLAT = re.compile(r"[^a-z0-9]")
# c10d's profiling range of a backend's call ("gloo:all_reduce", "nccl:_allgather_base", "mpi:send")
_BACKEND = re.compile(r"^(gloo|nccl|rccl|mpi|ucc|xccl|hccl|mccl|fake):([A-Za-z_]+)$")
_NOT_CALL = ("wait", "work", "monitored")  # c10d::wait, _c10d_functional::wait_tensor: no collective
_DTYPE_BYTES = {"double": 8, "float64": 8, "long": 8, "int64": 8, "float": 4, "float32": 4, "int": 4, "int32": 4,
                "half": 2, "float16": 2, "bfloat16": 2, "short": 2, "int16": 2, "byte": 1, "char": 1, "bool": 1,
                "uint8": 1, "int8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "unsigned char": 1,
                "signed char": 1, "c10::half": 2, "c10::bfloat16": 2, "complexfloat": 8, "complexdouble": 16}


def kind_of(name: str) -> str | None:
    """The canonical collective kind a name says (op, backend range, kernel or "Collective name"),
    None for a wait or a name that says none."""
    base = name.lower().split("(", 1)[0].split("<", 1)[0]  # no parameter or template list
    tail = base.rsplit("::", 1)[-1].split(":", 1)[-1]
    if tail.startswith(_NOT_CALL):
        return None
    flat = _FLAT.sub("", tail)
    for frag, kind in _FRAGMENTS:
        if frag in flat:
            return kind
    return None


def dtype_bytes(t: Any) -> int | None:
    return _DTYPE_BYTES.get(str(t).lower()) if isinstance(t, str) else None


def _decode(b: bytes) -> list:
    try:
        v = msgspec.json.decode(b) if b else []
    except msgspec.DecodeError:
        return []
    return v if isinstance(v, list) else []


def _numel(shape: Any) -> int | None:
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    return n


def _tensors(dims: list, types: list) -> list[tuple[int, str]]:
    """(elements, dtype) of each sized tensor argument (a TensorList's tensors one by one)."""
    out = []
    for i, d in enumerate(dims):
        t = types[i] if i < len(types) and isinstance(types[i], str) else ""
        if isinstance(d, list) and d and all(isinstance(x, list) for x in d):
            out += [(n, t) for x in d if (n := _numel(x)) is not None and x]
        elif isinstance(d, list) and d and (n := _numel(d)) is not None:
            out.append((n, t))
    return out


def _split_arg(s: Any) -> tuple[int, ...] | None:
    if not isinstance(s, str) or not s.startswith("[") or len(s) > 1 << 20:
        return None
    body = s[1:-1].strip()
    parts = [p.strip() for p in body.split(",")] if body else []
    if not parts or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def _op_facts(trace: Trace, i: int, kind: str) -> dict[str, Any]:
    """What the issuing op itself recorded: elements in / out, dtype, a p2p peer, all_to_all splits."""
    ops = trace.ops
    dims, types, conc = _decode(ops.dims[i]), _decode(ops.types[i]), _decode(ops.concrete[i])
    name = trace.names[int(ops.name[i])].rsplit("::", 1)[-1]
    ts = _tensors(dims, types)
    out: dict[str, Any] = {}
    if ts:
        out["dtype"] = ts[0][1]
        if name in ("alltoall_base_", "_allgather_base_", "_reduce_scatter_base_") and len(ts) >= 2:
            out["n_out"], out["n_in"] = ts[0][0], ts[1][0]  # (output, input, ...)
        elif name.startswith(("allgather", "all_gather")) and len(dims) >= 2:
            outs = [n for n, _ in _tensors(dims[:1], types[:1])]
            ins = [n for n, _ in _tensors(dims[1:2], types[1:2])]
            out["n_out"], out["n_in"] = (sum(outs) or None), (sum(ins) or None)
        else:
            out["n_in"] = out["n_out"] = ts[0][0]
    if kind in P2P and len(conc) >= 3 and isinstance(conc[2], str) and conc[2].isascii() and conc[2].isdigit():
        out["peer"] = int(conc[2])  # c10d::send(tensors, pg, dst, tag) / recv_(tensors, pg, src, tag)
    if name == "alltoall_base_" and len(conc) >= 5:  # (output, input, pg, output_split_sizes, input_split_sizes, ...)
        o, i_ = _split_arg(conc[3]), _split_arg(conc[4])
        if o:
            out["out_split"] = o
        if i_:
            out["in_split"] = i_
    return out


# ----------------------------------------------------------------------------- containment


def _outermost(ts: np.ndarray, end: np.ndarray, thread: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The ops of idx not nested in another op of idx on their thread, sorted by (thread, start)."""
    if not len(idx):
        return idx
    o = idx[np.lexsort((-end[idx], ts[idx], thread[idx]))]
    th = thread[o]
    out = np.ones(len(o), dtype=bool)
    for t in distinct(th).tolist():  # threads are few
        k = np.flatnonzero(th == t)
        e = np.maximum.accumulate(end[o[k]])
        out[k[1:]] = ts[o[k[1:]]] >= e[:-1]
    return o[out]


def _enclosing(outer: np.ndarray, ts: np.ndarray, end: np.ndarray, thread: np.ndarray,
               q_thread: np.ndarray, q_t: np.ndarray) -> np.ndarray:
    """Per query (thread, time): the op of `outer` (disjoint per thread, sorted) holding it, -1 if none."""
    res = np.full(len(q_t), -1, dtype=np.int64)
    if not len(outer) or not len(q_t):
        return res
    th = thread[outer]
    for t in distinct(q_thread).tolist():
        mine = outer[th == t]
        if not len(mine):
            continue
        q = np.flatnonzero(q_thread == t)
        j = np.searchsorted(ts[mine], q_t[q], side="right") - 1
        ok = (j >= 0) & (q_t[q] <= end[mine[np.maximum(j, 0)]])
        res[q[ok]] = mine[j[ok]]
    return res


# ----------------------------------------------------------------------------- the calls


def _comm_op_codes(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per name code: (an op issuing a collective, a backend's range of a call)."""
    issue = np.zeros(len(names), dtype=bool)
    backend = np.zeros(len(names), dtype=bool)
    for c, n in enumerate(names):
        if _BACKEND.match(n):
            backend[c] = kind_of(n) is not None
        elif is_comm_op(n) and n != "record_param_comms":
            issue[c] = kind_of(n) is not None
    return issue, backend


def _args(trace: Trace, rpc: np.ndarray, owner: np.ndarray, calls: int) -> list[dict[str, Any]]:
    """Per call: its record_param_comms' recorded args (collective, sizes, group, seq, splits, peer)."""
    out: list[dict[str, Any]] = [{} for _ in range(calls)]
    ops = trace.ops
    for r, c in zip(rpc.tolist(), owner.tolist()):
        if c < 0 or out[c]:
            continue  # the first record_param_comms of a call speaks for it (coalesced calls: one group)
        d = dict(ops.extra.get(r, ()))
        d.update(ops.comm_ids.get(r, ()))
        out[c] = d
    return out


def _fill(call: dict[str, Any], args: dict[str, Any], trace: Trace, op: int) -> None:
    """The call's kind, sizes, group, seq and peer from its recorded args, else from its issuing op."""
    coll = args.get("collective")
    kind = (kind_of(coll) if isinstance(coll, str) else None) or call["kind"]
    call["kind"] = kind
    facts = _op_facts(trace, op, kind) if op >= 0 else {}
    n_in = args.get("in_nelems", facts.get("n_in"))
    n_out = args.get("out_nelems", facts.get("n_out"))
    dt = args.get("dtype") or facts.get("dtype")
    size = dtype_bytes(dt)
    call["n_in"] = n_in if type(n_in) is int else -1
    call["n_out"] = n_out if type(n_out) is int else -1
    call["bytes"] = float(max(call["n_in"], call["n_out"]) * size) if size and max(call["n_in"], call["n_out"]) >= 0 \
        else float("nan")
    call["dtype"] = str(dt)[:40] if dt else ""
    if "pg" in args:
        call["group"] = "pg:" + str(args["pg"])
    call["seq"] = int(args["seq"]) if "seq" in args else -1
    peer = args.get("dst") if kind == "send" else args.get("src") if kind == "recv" else None
    call["peer"] = peer if type(peer) is int else facts.get("peer", -1)
    for k in ("in_split", "out_split"):
        sp = args.get(k) or facts.get(k)
        if sp:
            call[k] = tuple(sp)


def gpu_calls(trace: Trace, links: Any, dev: int) -> list[dict[str, Any]]:
    """The communication kernels of device `dev`, one call per outermost communication op that launched
    them (each lone kernel a call of its own), in order of arrival."""
    gpu, la, ops, names = trace.gpu, trace.launches, trace.ops, trace.names
    ck = np.flatnonzero((gpu.device == dev) & comm_event_mask(names, gpu.name) & (gpu.kind == 0))
    if not len(ck):
        return []
    issue, _ = _comm_op_codes(names)
    is_comm = issue | np.array([n == "record_param_comms" for n in names], dtype=bool)
    comm_ops = np.flatnonzero(is_comm[ops.name]) if len(ops) else np.zeros(0, np.int64)
    outer = _outermost(ops.ts, ops.end, ops.thread, comm_ops)
    launch = links.gpu_launch[ck]
    has = launch >= 0
    owner = np.full(len(ck), -1, dtype=np.int64)
    if has.any():
        owner[has] = _enclosing(outer, ops.ts, ops.end, ops.thread, la.thread[launch[has]], la.ts[launch[has]])
    # one call per owning op; lone kernels each their own
    key = np.where(owner >= 0, owner, -2 - np.arange(len(ck)))
    uniq, inv = np.unique(key, return_inverse=True)
    n = len(uniq)
    t0 = np.full(n, np.inf)
    t1 = np.full(n, -np.inf)
    np.minimum.at(t0, inv, gpu.ts[ck])
    np.maximum.at(t1, inv, gpu.ts[ck] + gpu.dur[ck])
    first = np.full(n, -1, dtype=np.int64)
    order = np.lexsort((gpu.ts[ck], inv))
    first[inv[order[::-1]]] = ck[order[::-1]]  # the earliest kernel of each call
    issue_t = np.where(launch >= 0, la.ts[np.maximum(launch, 0)] if len(la) else gpu.ts[ck], gpu.ts[ck])
    t_issue = np.full(n, np.inf)
    np.minimum.at(t_issue, inv, issue_t)
    thread = np.full(n, -1, dtype=np.int64)
    ok = launch >= 0
    thread[inv[ok]] = la.thread[launch[ok]]
    rpc = np.flatnonzero(ops.name == names.index("record_param_comms")) if "record_param_comms" in names \
        else np.zeros(0, np.int64)
    rpc_owner_op = _enclosing(outer, ops.ts, ops.end, ops.thread, ops.thread[rpc], ops.ts[rpc]) if len(rpc) else rpc
    call_of_op = {int(k): i for i, k in enumerate(uniq.tolist()) if k >= 0}
    rpc_call = np.array([call_of_op.get(int(o), -1) for o in rpc_owner_op.tolist()], dtype=np.int64)
    args = _args(trace, rpc, rpc_call, n)
    out = []
    for i in range(n):
        op = int(uniq[i]) if uniq[i] >= 0 else -1
        k = int(first[i])
        kind = (kind_of(names[int(ops.name[op])]) if op >= 0 else None) or kind_of(names[int(gpu.name[k])]) or "other"
        call = {"t": float(t0[i]), "end": float(t1[i]), "issue": float(t_issue[i]), "thread": int(thread[i]),
                "kind": kind, "group": f"stream:{int(gpu.stream[k])}"}
        _fill(call, args[i], trace, op)
        out.append(call)
    out.sort(key=lambda c: (c["t"], c["issue"]))
    return out


def cpu_calls(trace: Trace) -> list[dict[str, Any]]:
    """Calls of a CPU backend: each issuing op (outermost communication op) paired in order, per kind,
    with the backend's range that ran it (gloo's worker thread); either alone when the other is missing."""
    ops, ann, names = trace.ops, trace.annotations, trace.names
    issue_code, backend_code = _comm_op_codes(names)
    is_comm = issue_code | np.array([n == "record_param_comms" for n in names], dtype=bool)
    comm_ops = np.flatnonzero(is_comm[ops.name]) if len(ops) else np.zeros(0, np.int64)
    outer = _outermost(ops.ts, ops.end, ops.thread, comm_ops)  # c10d ops, or a record_param_comms alone
    rpc = np.flatnonzero(ops.name == names.index("record_param_comms")) if "record_param_comms" in names \
        else np.zeros(0, np.int64)
    rpc_owner = _enclosing(outer, ops.ts, ops.end, ops.thread, ops.thread[rpc], ops.ts[rpc]) if len(rpc) else rpc
    pos = {int(o): i for i, o in enumerate(outer.tolist())}
    args = _args(trace, rpc, np.array([pos.get(int(o), -1) for o in rpc_owner.tolist()], dtype=np.int64), len(outer))
    # the backend's ranges: ops or annotations (gloo records them as user annotations)
    runs: list[tuple[float, float, str]] = []
    for src in (ops, ann):
        if len(src):
            sel = np.flatnonzero(backend_code[src.name])
            runs += [(float(src.ts[i]), float(src.end[i]), kind_of(names[int(src.name[i])]) or "other") for i in sel]
    runs.sort()
    calls = []
    for i, o in enumerate(outer.tolist()):
        kind = kind_of(names[int(ops.name[o])]) or "other"
        call = {"t": float(ops.ts[o]), "end": float("nan"), "issue": float(ops.ts[o]), "thread": int(ops.thread[o]),
                "kind": kind, "group": "default"}
        _fill(call, args[i], trace, o)
        calls.append(call)
    by_kind: dict[str, list[tuple[float, float]]] = {}
    for t, e, k in runs:
        by_kind.setdefault(k, []).append((t, e))
    if not calls:  # only the backend's ranges were recorded
        calls = [{"t": t, "end": e, "issue": t, "thread": -1, "kind": k, "group": "default", "n_in": -1, "n_out": -1,
                  "bytes": float("nan"), "dtype": "", "seq": -1, "peer": -1} for t, e, k in runs]
    else:
        used: dict[str, int] = {}
        for c in sorted(calls, key=lambda c: c["issue"]):
            lst = by_kind.get(c["kind"], [])
            j = used.get(c["kind"], 0)
            while j < len(lst) and lst[j][0] < c["issue"] - 1.0:  # a range cannot start before its call was issued
                j += 1
            if j < len(lst):
                c["t"], c["end"] = lst[j]
                j += 1
            used[c["kind"]] = j
    calls.sort(key=lambda c: (c["t"], c["issue"]))
    return calls


def step_and_phase(trace: Trace, t: np.ndarray, phase_of: Any) -> tuple[np.ndarray, np.ndarray]:
    """(ProfilerStep number, -1 outside the steps; phase name, "" when unknown) per issue time."""
    nums, st, se = _steps(trace)
    k = inside(t, st, se) if len(nums) else np.full(len(t), -1, dtype=np.int64)
    step = np.where(k >= 0, np.asarray(nums, dtype=np.int64)[np.maximum(k, 0)] if len(nums) else -1, -1)
    return step, phase_of(t)
