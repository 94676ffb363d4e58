"""Link stage: attribute every GPU event to the innermost cpu_op that launched it.

kernel -> launch by `correlation` (a sorted join); launch -> op by time nesting on the
launching thread (works for every trace vintage), with `External id` as the fallback when
the trace's External ids are trustworthy (after Kineto #873; before it, a launch's External
id was its correlation id and matched no op, or the wrong one).
"""

from __future__ import annotations

import operator
from math import prod
from typing import Any

import msgspec
import numpy as np

from traceana.arrays import codes_of, distinct, distinct_below, first_codes
from traceana.link.nesting import OpNesting, _parents, _parents_sweep, op_nesting  # noqa: F401 (re-exported)
from traceana.load.model import Trace

# Why a GPU event has no op with recorded shapes (the "opaque" causes).
CAUSES = {
    "no_launch": "no launch event in the trace (launched before the profiled window opened, "
                 "or the CPU side was not captured)",
    "graph_replay": "CUDA/HIP graph replay: kernels run under one graph launch, not per op",
    "graph_unaligned": "CUDA/HIP graph replay whose kernels did not line up with any captured graph (names or "
                       "count differ beyond the few events a profiler drops, or captures of several batch sizes "
                       "fit equally), so no capturing op is known for them",
    "outside_op": "launched outside any profiled op (e.g. a compiled region's runtime or a "
                  "library call with no aten op around it)",
    "compiled": "torch.compile region: the Triton/compiled kernel's launch recorded no shapes",
    "no_shapes": "the enclosing op recorded no input shapes (record_shapes was off)",
    "bad_shapes": "the op's recorded input dims or dtypes are malformed or impossible (not lists of "
                  "non-negative integers, a tensor beyond 2^63 elements, more arguments than the op takes, or "
                  "shapes the op cannot take together): the trace is corrupt here",
    "shapes_not_recorded": "the op's tensor arguments were recorded without sizes (TensorLists in traces "
                           "before torch 2.x, and some long TensorLists in newer ones)",
    "scalars_not_recorded": "an int argument the op's cost needs (a kernel size, output size, dim, k, start/end) "
                            "was not recorded (traces before torch 2.4 have no Concrete Inputs)",
    "lengths_not_recorded": "the op's cost depends on per-sequence lengths held in tensor contents (paged / "
                            "ragged attention's KV lengths), which the profiler does not record; its formula is "
                            "known but cannot be evaluated from this trace",
    "comm_unsized": "a collective recorded without its message size or group size (record_param_comms before "
                    "torch 2.1 has no args; a process group named but not sized, and no distributedInfo), and no op "
                    "that issued it recorded the tensor",
    "input_not_recorded": "an input the op's formula needs is neither among its recorded arguments nor recorded by "
                          "another op of the trace (expert weights its layer holds, embedding tables' widths, the "
                          "forward lookup a backward node belongs to): the formula is known, this trace lacks the "
                          "input",
}


class SigCodes(msgspec.Struct, frozen=True):
    """codes_of(ops.dims, at) and codes_of(ops.types, at), at: the ops gpu_op points at (sorted, distinct);
    ops and gpu_op: the columns they were computed from (a reader checks that they are still its own)."""

    ops: Any
    gpu_op: np.ndarray
    at: np.ndarray
    dims: np.ndarray
    types: np.ndarray

    def of(self, ops, gpu_op: np.ndarray, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(dims codes, types codes) of the ops sel (sorted distinct, all among at), None when these codes
        were computed from other columns."""
        if ops is not self.ops or gpu_op is not self.gpu_op:
            return None
        pos = np.searchsorted(self.at, sel)
        return self.dims[pos], self.types[pos]


class Links(msgspec.Struct, frozen=True):
    gpu_launch: np.ndarray  # int64 launch index per GPU event, -1 when none
    gpu_op: np.ndarray  # int64 op index per GPU event, -1 when none
    launch_op: np.ndarray  # int64 op index per launch, -1 when none
    op_device_us: np.ndarray  # float64 summed GPU time per op instance
    op_gpu_events: np.ndarray  # int64 GPU events per op instance
    gpu_cause: np.ndarray  # int8 index into CAUSE_KEYS, -1 = op with shapes
    by_nesting: int
    by_external_id: int
    external_ids_reliable: bool
    # int64 op index per [memory] event (trace.memory order): the innermost op of its thread at its time,
    # passing over ALLOC_HELPERS to the op that asked for the memory; -1 when none (diagnose/memory.py)
    memory_op: np.ndarray | None = None
    # the ops by (thread, start, longest first) with their nesting parents, as linking sorted them
    # (link/nesting.py: nesting_of hands it to the diagnoses that climb the op tree)
    nesting: OpNesting | None = None
    # the input dims and types of the ops with GPU events coded, as causes() coded them (group_ops reuses them)
    sig_codes: SigCodes | None = None


CAUSE_KEYS = tuple(CAUSES)
#: Ops that only hand out memory for the op above them: an allocation is charged to that op instead.
ALLOC_HELPERS = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                           "aten::new_empty_strided", "aten::resize_", "aten::empty.memory_format"})


def _innermost(trace: Trace, nest: OpNesting | None = None) -> np.ndarray:
    """Op index of the innermost op enclosing each launch on the same thread, or -1."""
    return innermost_ops(trace, trace.launches.thread, trace.launches.ts, nest=nest)


def _innermost_and_memory(trace: Trace, nest: OpNesting | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(_innermost; each memory event's op, allocation helpers passed over), from one sort of the ops."""
    la = trace.launches
    m = getattr(trace, "memory", None)
    n_mem = len(m) if m is not None else 0
    if not n_mem:
        return _innermost(trace, nest), np.zeros(0, dtype=np.int64)
    thread = np.concatenate((la.thread, m.thread))
    t = np.concatenate((la.ts, m.ts))
    skip_q = np.concatenate((np.zeros(len(la), dtype=bool), np.ones(n_mem, dtype=bool)))
    found = innermost_ops(trace, thread, t, helper_ops(trace), skip_q, nest)
    return found[:len(la)], found[len(la):]


def helper_ops(trace: Trace) -> np.ndarray:
    """Mask over ops: the allocation helpers (ALLOC_HELPERS)."""
    helper = np.array([n in ALLOC_HELPERS for n in trace.names], dtype=bool)
    return helper[trace.ops.name] if len(trace.ops) else np.zeros(0, dtype=bool)


def innermost_ops(trace: Trace, thread: np.ndarray, t: np.ndarray, skip: np.ndarray | None = None,
                  skip_q: np.ndarray | None = None, nest: OpNesting | None = None) -> np.ndarray:
    """Op index of the innermost CPU op of the same thread running at each instant (thread[i], t[i]), or -1
    (an instant on an op's end counts as inside it). skip: a mask over ops passed over (for the instants
    where skip_q is true; for all when skip_q is None) to the op enclosing them. nest: op_nesting(trace.ops),
    when already computed."""
    ops = trace.ops
    result = np.full(len(t), -1, dtype=np.int64)
    if len(ops) == 0 or len(t) == 0:
        return result
    if nest is None:
        nest = op_nesting(ops)
    order, o_thread, o_ts, o_end, parent = nest.order, nest.thread, nest.ts, nest.end, nest.parent
    starts, stops = nest.starts, nest.stops
    skip_sorted = (skip if nest.identity else skip[order]) if skip is not None and skip.any() else None
    if skip_sorted is not None and skip_q is None:
        skip_q = np.ones(len(t), dtype=bool)
    # each instant's candidate: the last op of its thread starting at or before it (instants grouped by
    # thread once, not one pass over all instants per thread)
    cand = np.full(len(t), -1, dtype=np.int64)
    by_thread = np.argsort(thread, kind="stable")
    q_thread = thread[by_thread]
    seg_thread = o_thread[starts]
    first, last = np.searchsorted(q_thread, seg_thread, "left"), np.searchsorted(q_thread, seg_thread, "right")
    for lo, hi, a, b in zip(starts.tolist(), stops.tolist(), first.tolist(), last.tolist()):
        if a == b:
            continue
        sel = by_thread[a:b]
        c = np.searchsorted(o_ts[lo:hi], t[sel], side="right") - 1 + lo
        c[c < lo] = -1
        cand[sel] = c
    # climb to the enclosing op while the candidate ended before the instant (or is skipped): each round
    # over the instants still climbing only
    at = np.flatnonzero(cand >= 0)
    c = cand[at]
    for _ in range(256):
        miss = o_end[c] < t[at]
        if skip_sorted is not None:
            miss |= skip_q[at] & skip_sorted[c]
        if not miss.any():
            break
        at, c = at[miss], parent[c[miss]]
        cand[at] = c
        up = c >= 0
        at, c = at[up], c[up]
    found = cand >= 0
    result[found] = order[cand[found]]
    return result


def _ext_lookup(keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Index into keys (first occurrence) for each query value, -1 when absent or query < 0."""
    out = np.full(len(query), -1, dtype=np.int64)
    valid = keys >= 0
    if not valid.any() or len(query) == 0:
        return out
    idx = np.flatnonzero(valid)
    k = keys[idx]
    order = np.argsort(k, kind="stable")
    ks = k[order]
    pos = np.searchsorted(ks, query)
    pos_c = np.minimum(pos, len(ks) - 1)
    hit = (query >= 0) & (pos < len(ks)) & (ks[pos_c] == query)
    out[hit] = idx[order[pos_c[hit]]]
    return out


def link(trace: Trace) -> Links:
    ops, la, gpu = trace.ops, trace.launches, trace.gpu
    nest = op_nesting(ops)
    nested, memory_op = _innermost_and_memory(trace, nest)
    by_nesting = int((nested >= 0).sum())

    # Are External ids usable? Modern traces: a nested launch shares its op's External id.
    with_ext = (nested >= 0) & (la.ext >= 0)
    if with_ext.any():
        agree = (ops.ext[nested[with_ext]] == la.ext[with_ext]).mean()
        reliable = bool(agree >= 0.5)
    else:
        equal_corr = (la.ext >= 0) & (la.ext == la.corr)
        reliable = bool(len(la) and equal_corr.mean() < 0.5)

    launch_op = nested.copy()
    by_ext = 0
    if reliable and len(ops):
        todo = np.flatnonzero((launch_op < 0) & (la.ext >= 0))
        if len(todo):
            hit = _ext_lookup(ops.ext, la.ext[todo])
            launch_op[todo] = hit
            by_ext += int((hit >= 0).sum())

    gpu_launch = _ext_lookup(la.corr, gpu.corr) if len(la) else np.full(len(gpu), -1, dtype=np.int64)
    gpu_op = np.full(len(gpu), -1, dtype=np.int64)
    has_launch = gpu_launch >= 0
    gpu_op[has_launch] = launch_op[gpu_launch[has_launch]]
    # A graph launch replays kernels that other ops captured: wherever it sits (a compiled region, a
    # record_function scope, any op), the op around it did not launch them, so they are a replay
    # (cause graph_replay), to be met with their capture, never that op's kernels.
    replayed = np.flatnonzero(has_launch)
    gpu_op[replayed[graph_launches(trace)[gpu_launch[replayed]]]] = -1
    if reliable and len(ops):
        todo = np.flatnonzero((gpu_launch < 0) & (gpu.ext >= 0))
        if len(todo):
            hit = _ext_lookup(ops.ext, gpu.ext[todo])
            gpu_op[todo] = hit
            by_ext += int((hit >= 0).sum())

    coded: list[SigCodes] = []
    cause = causes(trace, gpu_launch, gpu_op, coded)
    _warn(trace, la, ops, gpu, gpu_launch, cause, by_ext)
    attributed = gpu_op >= 0
    op_us = np.bincount(gpu_op[attributed], weights=gpu.dur[attributed], minlength=len(ops)) \
        if len(ops) else np.zeros(0)
    op_n = np.bincount(gpu_op[attributed], minlength=len(ops)) if len(ops) else np.zeros(0, np.int64)
    return Links(gpu_launch, gpu_op, launch_op, op_us.astype(np.float64), op_n.astype(np.int64), cause,
                 by_nesting, by_ext, reliable, memory_op, nest, coded[0] if coded else None)


def causes(trace: Trace, gpu_launch: np.ndarray, gpu_op: np.ndarray, coded: list | None = None) -> np.ndarray:
    """Per GPU event: -1 when its op recorded shapes, else the index of the opaque cause. coded: gets the
    SigCodes of the ops' dims and types coded on the way."""
    names = trace.names
    cause = np.full(len(gpu_op), -1, dtype=np.int8)
    no_op = gpu_op < 0
    no_launch = no_op & (gpu_launch < 0)
    cause[no_launch] = CAUSE_KEYS.index("no_launch")
    outside = np.flatnonzero(no_op & (gpu_launch >= 0))
    if len(outside):
        is_graph = graph_launches(trace)[gpu_launch[outside]]
        cause[outside] = np.where(is_graph, CAUSE_KEYS.index("graph_replay"), CAUSE_KEYS.index("outside_op"))
    has_op = np.flatnonzero(~no_op)
    if len(has_op):
        ops = trace.ops
        op_idx = gpu_op[has_op]
        uniq, inv = distinct_below(op_idx, len(ops))  # per op, not per event: an op has many kernels
        dcode, dvals = codes_of(ops.dims, uniq)  # per distinct dims / types string, not per op
        tcode, tvals = codes_of(ops.types, uniq)
        if coded is not None:
            coded.append(SigCodes(ops, gpu_op, uniq, dcode, tcode))
        shapeless = np.fromiter(map(operator.not_, dvals), dtype=bool, count=len(dvals))[dcode][inv]
        region = np.array([_is_compiled_region(n) for n in names], dtype=bool)[ops.name[op_idx]]
        triton = np.array([n.startswith("triton_") for n in names], dtype=bool)[ops.name[op_idx]]
        compiled = region | (shapeless & triton)
        cause[has_op[compiled]] = CAUSE_KEYS.index("compiled")
        cause[has_op[shapeless & ~compiled]] = CAUSE_KEYS.index("no_shapes")
        if "record_param_comms" in names and any(ops.dims):  # shapes recorded, but not the collective's
            comm = ops.name[op_idx] == names.index("record_param_comms")
            cause[has_op[shapeless & ~compiled & comm]] = CAUSE_KEYS.index("comm_unsized")
        checked: dict[tuple[bytes, bytes], bool] = {}
        checked_sizes: dict[tuple[bytes, bytes], bool] = {}
        which, first = first_codes(dcode, tcode)  # each distinct (dims, types) checked once
        pairs = list(zip(map(dvals.__getitem__, dcode[first].tolist()), map(tvals.__getitem__, tcode[first].tolist())))
        bad_op = np.array([not _shapes_ok(*k, checked) for k in pairs], dtype=bool)[which]
        cause[has_op[bad_op[inv] & ~shapeless & ~compiled]] = CAUSE_KEYS.index("bad_shapes")
        unsized = np.array([_sizes_missing(*k, checked_sizes) for k in pairs], dtype=bool)[which]
        cause[has_op[unsized[inv] & ~bad_op[inv] & ~shapeless & ~compiled]] = CAUSE_KEYS.index("shapes_not_recorded")
    return cause


_INT64_MAX = 2**63 - 1


def _sizes_missing(dims: bytes, types: bytes, cache: dict[tuple[bytes, bytes], bool]) -> bool:
    """Every argument was recorded without a size and one of them is a TensorList (`[[], []]` with
    `["TensorList", "Scalar"]`: old profilers wrote no sizes for TensorLists), so no shape exists."""
    key = (dims, types)
    hit = cache.get(key)
    if hit is None:
        hit = False
        if b"TensorList" in types:
            try:
                d, t = msgspec.json.decode(dims), msgspec.json.decode(types)
            except (msgspec.DecodeError, RecursionError):
                d = t = None
            hit = (isinstance(d, list) and isinstance(t, list) and all(x == [] for x in d)
                   and "TensorList" in t)
        cache[key] = hit
    return hit


def _shapes_ok(dims: bytes, types: bytes, cache: dict[tuple[bytes, bytes], bool]) -> bool:
    """Recorded `Input Dims` / `Input type` that a real PyTorch op could have written: a list
    whose entries are tensors (lists of non-negative ints, numel within int64), TensorLists
    (lists of those) or [] for non-tensors; a list of strings for the dtypes."""
    key = (dims, types)
    ok = cache.get(key)
    if ok is not None:
        return ok
    ok = True
    try:
        d = msgspec.json.decode(dims) if dims else []
        t = msgspec.json.decode(types) if types else []
    except (msgspec.DecodeError, RecursionError):
        d = t = None
    if not isinstance(d, list) or not isinstance(t, list) or not all(isinstance(x, str) for x in t):
        ok = False
    else:
        for entry in d:
            shapes = entry if isinstance(entry, list) and entry and isinstance(entry[0], list) else [entry]
            for shape in shapes:
                if not isinstance(shape, list) or not all(
                        type(x) is int and 0 <= x <= _INT64_MAX for x in shape) or prod(shape) > _INT64_MAX:
                    ok = False
                    break
            if not ok:
                break
    cache[key] = ok
    return ok


def _warn(trace: Trace, la, ops, gpu, gpu_launch: np.ndarray, cause: np.ndarray, by_ext: int) -> None:
    """Say what the linker had to guess or drop (appended to trace.warnings, which the
    analysis reads after linking)."""
    out = trace.warnings
    corr = la.corr[la.corr >= 0]
    dup = len(corr) - len(distinct(corr))
    if dup:
        out.append(f"{dup:,} launch events reuse another launch's correlation id (a merged or corrupt "
                   "trace?): their kernels were attributed to the first launch with that id")
    if by_ext:
        ext = ops.ext[ops.ext >= 0]
        dup_ext = len(ext) - len(distinct(ext))
        if dup_ext:
            out.append(f"{dup_ext:,} cpu ops reuse another op's External id: {by_ext:,} events linked by "
                       "External id may be attributed to the wrong op")
    bad = cause == CAUSE_KEYS.index("bad_shapes")
    if bad.any():
        total = float(gpu.dur.sum())
        t = float(gpu.dur[bad].sum())
        share = f" ({t / total * 100:.1f}% of device time)" if total > 0 else ""
        out.append(f"{int(bad.sum()):,} GPU events{share} belong to ops whose recorded input dims or dtypes "
                   "are malformed or impossible; they are reported as opaque (bad shapes), not costed")


def is_graph_launch(name: str) -> bool:
    """A runtime call that replays a captured CUDA/HIP graph (cudaGraphLaunch, hipGraphLaunch and
    their _v10000 / _ptsz variants)."""
    return "GraphLaunch" in name


def graph_launches(trace: Trace) -> np.ndarray:
    """Per launch event: whether it is a graph launch."""
    names = trace.names
    return np.fromiter(map(is_graph_launch, names), dtype=bool, count=len(names))[trace.launches.name] \
        if len(trace.launches) else np.zeros(0, dtype=bool)


def _is_compiled_region(name: str) -> bool:
    """A torch.compile region: its kernels have no per-kernel op, so no shapes exist for them."""
    return "CompiledFunction" in name or "Torch-Compiled Region" in name
