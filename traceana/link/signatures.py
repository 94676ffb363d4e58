"""Group op instances into signatures (name, input dims, dtypes, scalars): ops repeat, so
cost and roofline are computed once per signature. GPU events with no op that recorded
shapes form "opaque" groups named after their kernel or launch."""

from __future__ import annotations

import functools


import msgspec
import numpy as np

from traceana.arrays import codes_of, distinct, distinct_below, first_codes
from traceana.link.copies import LINK
from traceana.link.copies import classify as classify_copy
from traceana.cost.dtypes import NON_TENSOR, dtype_info
from traceana.cost.families.comm import CUSTOM_COMM
from traceana.cost.types import OpCall
from traceana.link.attribute import CAUSE_KEYS, Links
from traceana.load.model import Trace
from traceana.load.decode import BIDI_WARNING, clean_text

TOP_KERNELS = 5
# opaque causes whose events are grouped by kernel name (a graph replay, a compiled region)
BY_KERNEL = ("graph_replay", "graph_unaligned", "compiled")


class Group(msgspec.Struct, frozen=True):
    name: str
    call: OpCall | None  # None for opaque groups
    count: int  # op calls (or GPU events for opaque groups)
    device_us: float
    gpu_events: int
    kernels: tuple[tuple[str, float, int], ...]  # (name, total µs, events), top by time
    cause: str | None  # opaque cause key, None when the op recorded shapes
    kernel_flop: float | None = None  # torch.compile benchmark args, per call
    kernel_gb: float | None = None
    events: np.ndarray | None = None  # its GPU event indices


#: nesting levels an argument value keeps (a TensorList's dims nest 2 deep): a deeper value is no shape
#: and is read as not recorded (its nesting is the trace's: no recursion may follow it)
MAX_NEST = 16


class _TooDeep(Exception):
    pass


def _tuplify(v, depth: int = 0):
    if isinstance(v, list):
        if depth >= MAX_NEST:
            raise _TooDeep
        return tuple(_tuplify(x, depth + 1) for x in v)
    return v


@functools.lru_cache(maxsize=1 << 16)
def _decode(raw: bytes):
    """The raw JSON argument as nested tuples (cached: ops of many names share their shapes)."""
    if not raw:
        return None
    try:
        return _tuplify(msgspec.json.decode(raw))
    except (msgspec.DecodeError, RecursionError, _TooDeep):  # (RecursionError: nested past msgspec's limit)
        return None


def make_call(name: str, dims: bytes, types: bytes, strides: bytes, concrete: bytes,
              kernels: tuple[str, ...], cleaned: list[str] | None = None, extra: tuple = ()) -> OpCall:
    """The op call; trace strings in types/concrete lose bidi controls (noted in `cleaned`)."""
    d = _decode(dims)
    t = _decode(types)
    s = _decode(strides)
    c = _decode(concrete)
    ty = tuple(x if isinstance(x, str) else "" for x in t) if isinstance(t, tuple) else ()
    co = tuple(x if isinstance(x, str) else str(x) for x in c) if isinstance(c, tuple) else None
    ty2 = tuple(clean_text(x) for x in ty)
    co2 = tuple(clean_text(x) for x in co) if co is not None else None
    if cleaned is not None and (ty2 != ty or co2 != co):
        cleaned.append(name)
    return OpCall(
        name=name,
        dims=d if isinstance(d, tuple) else (),
        types=ty2,
        strides=s if isinstance(s, tuple) else None,
        concrete=co2,
        kernel_names=kernels,
        extra=extra,
    )


# non-collective ops whose formula falls back on the world size (their bucket count is one per rank)
# and the serving engines' / symmetric memory's own collectives (their group is a name, not a size)
WORLD_SIZE_OPS = frozenset({"fbgemm::block_bucketize_sparse_features"}) | frozenset(CUSTOM_COMM)


def _is_comm(name: str) -> bool:
    return name == "record_param_comms" or name.startswith(("c10d::", "nccl:", "c10d_functional::",
                                                            "_c10d_functional::"))


def _extra(trace: Trace, i: int, name: str, kflop: float | None, kgb: float | None) -> tuple:
    """OpCall.extra of op i: its recorded extra args, the world size for collectives, and
    torch.compile's kernel_flop / kernel_num_gb."""
    out = dict(trace.ops.extra.get(i, ()))
    if _is_comm(name) or name in WORLD_SIZE_OPS:
        ws = (trace.distributed or {}).get("world_size")
        if type(ws) is int and ws > 0:
            out["world_size"] = ws
    if kflop is not None:
        out["kernel_flop"] = kflop
    if kgb is not None:
        out["kernel_num_gb"] = kgb
    return tuple(sorted(out.items()))


def group_ops(trace: Trace, links: Links) -> list[Group]:
    """Signature groups for every op instance and opaque GPU event that took device time."""
    ops, gpu, names = trace.ops, trace.gpu, trace.names
    n_gpu = len(gpu)
    group_of_event = np.full(n_gpu, -1, dtype=np.int64)
    keys: dict[tuple, int] = {}
    first: list[int] = []  # representative op index (or -1) per group
    label: list[tuple[str, str | None]] = []  # (name, cause) per group
    calls: list[int] = []

    with_shapes = links.gpu_cause < 0
    # 1. ops that recorded shapes: one group per (name, dims, types, concrete)
    busy = distinct_below(links.gpu_op[with_shapes], len(ops))[0]
    op_group = np.full(len(ops), -1, dtype=np.int64)
    dims, types, conc, op_extra = ops.dims, ops.types, ops.concrete, ops.extra
    if len(busy):
        # each column coded per distinct value (link/arrays.codes_of), the signatures numbered by first appearance
        ex = np.zeros(len(busy), dtype=np.int64)  # 0: no extra args, else 1 + the extra args' code
        if op_extra:
            has = np.flatnonzero(np.isin(busy, np.fromiter(op_extra, dtype=np.int64, count=len(op_extra))))
            if len(has):
                ex[has] = 1 + codes_of([op_extra[i] for i in busy[has].tolist()], np.arange(len(has)))[0]
        coded = links.sig_codes.of(ops, links.gpu_op, busy) if links.sig_codes is not None else None
        dc, tc = coded if coded is not None else (codes_of(dims, busy)[0], codes_of(types, busy)[0])
        of, at = first_codes(ops.name[busy].astype(np.int64), dc, tc, codes_of(conc, busy)[0], ex)
        for i in busy[at].tolist():
            keys[(int(ops.name[i]), dims[i], types[i], conc[i], op_extra.get(i))] = len(keys)
        op_group[busy] = of
        first.extend(busy[at].tolist())
        label.extend((names[k[0]], None) for k in keys)
        calls.extend(np.bincount(of).tolist())
    group_of_event[with_shapes] = op_group[links.gpu_op[with_shapes]]

    # 2. opaque events: grouped by cause and by the op, launch or kernel name they run under
    opaque = np.flatnonzero(~with_shapes)
    if len(opaque):
        _group_opaque(trace, links, opaque, group_of_event, keys, first, label, calls)

    n_groups = len(first)
    dev_us = np.bincount(group_of_event, weights=gpu.dur, minlength=n_groups) if n_gpu else np.zeros(0)
    n_ev = np.bincount(group_of_event, minlength=n_groups) if n_gpu else np.zeros(0, np.int64)
    kernels = _top_kernels(group_of_event, gpu.name, gpu.dur, names, n_groups)

    by_group = np.argsort(group_of_event, kind="stable")
    cuts = np.searchsorted(group_of_event[by_group], np.arange(n_groups + 1))
    out: list[Group] = []
    cleaned: list[str] = []
    for g in range(n_groups):
        nm, cause = label[g]
        i = first[g]
        call = None
        kflop = kgb = None
        if cause is None:
            knames = tuple(k[0] for k in kernels[g])
            kf, kg = ops.kernel_flop[i], ops.kernel_num_gb[i]
            kflop = float(kf) if np.isfinite(kf) else None
            kgb = float(kg) if np.isfinite(kg) else None
            call = make_call(nm, dims[i], types[i], ops.strides[i], conc[i], knames, cleaned,
                             _extra(trace, i, nm, kflop, kgb))
        out.append(Group(nm, call, int(calls[g]), float(dev_us[g]), int(n_ev[g]), kernels[g], cause, kflop, kgb,
                         by_group[cuts[g]:cuts[g + 1]]))
    if cleaned and BIDI_WARNING not in trace.warnings:
        trace.warnings.append(BIDI_WARNING)
    _warn_unknown_dtypes(trace, out)
    return out


def _group_opaque(trace: Trace, links: Links, opaque: np.ndarray, group_of_event: np.ndarray, keys: dict,
                  first: list[int], label: list, calls: list[int]) -> None:
    """Groups for the opaque events (in place): one per (cause, name of the op or kernel the event runs
    under; and the copy's name for an op's host / peer memcpy events), numbered by first appearance; a
    group's calls are its distinct op instances (op-backed), launches, or events. Per distinct (cause,
    name), not per event.

    Kernels replayed from a graph or run inside a compiled region are grouped by their own kernel
    name (BY_KERNEL), one call per event: one graph launch or region runs many different kernels, and
    without their ops the kernel names are what says what ran (compiled_regions, replay_account)."""
    names = trace.names
    cause = links.gpu_cause[opaque].astype(np.int64)
    op_i, la_i = links.gpu_op[opaque], links.gpu_launch[opaque]
    per_kernel = np.isin(cause, [CAUSE_KEYS.index(c) for c in BY_KERNEL])
    code = trace.gpu.name[opaque].astype(np.int64)  # the kernel's name, unless ...
    from_op = (op_i >= 0) & ~per_kernel
    # an op's host<->device and peer copies are grouped apart from its kernels, one group per copy name
    # (direction and memory kind): each is judged on its link from its recorded bytes (copies.judge_recorded)
    copy = np.where(from_op & (trace.gpu.kind[opaque] == 1), code, -1)
    for c in distinct(copy[copy >= 0]).tolist():
        if LINK.get(classify_copy(names[c])[0] or "") not in ("host_link", "peer_link"):
            copy[copy == c] = -1
    code[from_op] = trace.ops.name[op_i[from_op]]  # ... the op's
    n1 = len(names) + 1
    uniq, at, inv = np.unique((cause * n1 + code) * n1 + copy + 1, return_index=True, return_inverse=True)
    group_of = np.empty(len(uniq), dtype=np.int64)
    for u in np.argsort(at, kind="stable").tolist():  # in order of first appearance
        ck, nm = CAUSE_KEYS[int(cause[at[u]])], names[int(code[at[u]])]
        key = ("opaque", ck, nm) if copy[at[u]] < 0 else ("opaque", ck, nm, names[int(copy[at[u]])])
        g = keys.get(key)
        if g is None:
            g = keys[key] = len(first)
            first.append(int(op_i[at[u]]))
            label.append((nm, ck))
            calls.append(0)
        group_of[u] = g
    ev_group = group_of[inv]
    group_of_event[opaque] = ev_group
    # calls: distinct (kind, id) per group, kind 0 an op instance, 1 a launch, 2 the event itself
    kind = np.where(per_kernel, 2, np.where(op_i >= 0, 0, np.where(la_i >= 0, 1, 2)))
    ident = np.where(kind == 0, op_i, np.where(kind == 1, la_i, opaque))
    order = np.lexsort((ident, kind, ev_group))
    g_s, k_s, i_s = ev_group[order], kind[order], ident[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (g_s[1:] != g_s[:-1]) | (k_s[1:] != k_s[:-1]) | (i_s[1:] != i_s[:-1])
    n = np.bincount(g_s[new], minlength=len(first))
    for g in distinct(ev_group).tolist():
        calls[g] = int(n[g])


def calls_named(trace: Trace, wanted: tuple[str, ...]) -> list[tuple[OpCall, int]]:
    """(signature, calls) of every op instance with one of these names, whether or not it
    launched kernels itself (cost.recover reads parents such as cudnn_convolution_backward)."""
    codes = [i for i, n in enumerate(trace.names) if n in wanted]
    if not codes or not len(trace.ops):
        return []
    ops = trace.ops
    counts: dict[tuple, int] = {}
    for i in np.flatnonzero(np.isin(ops.name, codes)).tolist():
        key = (int(ops.name[i]), ops.dims[i], ops.types[i], ops.concrete[i])
        counts[key] = counts.get(key, 0) + 1
    return [(make_call(trace.names[c], d, t, b"", k, ()), n) for (c, d, t, k), n in counts.items()]


# `Input type` strings that mark non-tensor arguments in real traces (besides cost.dtypes.NON_TENSOR).
_NOT_DTYPES = frozenset({"TensorList", "Double", "Float", "Long", "Layout", "MemoryFormat", "ScalarType",
                         "Generator", "Stream", "Storage", "Dimname", "SymInt", "SymIntList"})


def _warn_unknown_dtypes(trace: Trace, groups: list[Group]) -> None:
    """Say which recorded dtypes traceana cannot size (appended to trace.warnings, which the
    analysis reads after grouping): tensors of those dtypes are not costed."""
    unknown: dict[str, int] = {}
    for g in groups:
        if g.call is None:
            continue
        for t in set(g.call.types):
            if t and t not in NON_TENSOR and t not in _NOT_DTYPES and dtype_info(t) is None:
                unknown[t] = unknown.get(t, 0) + 1
    if unknown:
        names = ", ".join(repr(t[:40]) for t in sorted(unknown)[:5]) + (", ..." if len(unknown) > 5 else "")
        n = sum(unknown.values())
        trace.warnings.append(f"{len(unknown)} input dtypes traceana does not know ({names}) appear in "
                              f"{n} op signatures; tensors of those dtypes are not costed")


def _top_kernels(group_of_event: np.ndarray, name: np.ndarray, dur: np.ndarray, names: list[str],
                 n_groups: int) -> list[tuple]:
    result: list[list] = [[] for _ in range(n_groups)]
    if len(group_of_event) == 0:
        return [tuple() for _ in range(n_groups)]
    combo = group_of_event * (len(names) + 1) + name
    uniq, inv = np.unique(combo, return_inverse=True)
    t = np.bincount(inv, weights=dur)
    n = np.bincount(inv)
    g_of = uniq // (len(names) + 1)
    k_of = uniq % (len(names) + 1)
    order = np.lexsort((-t, g_of))
    for u in order.tolist():
        g = int(g_of[u])
        if len(result[g]) < TOP_KERNELS:
            result[g].append((names[int(k_of[u])], float(t[u]), int(n[u])))
    return [tuple(r) for r in result]
