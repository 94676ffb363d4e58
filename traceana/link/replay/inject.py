"""Put what the capture knows into the replay: each (graph launch, capturing op) pair becomes one
synthetic op instance appended to the replay's op columns (the capturing op's name and recorded
shapes, timed by the replayed kernels), and the aligned kernels are re-linked to it. Grouping,
costing and diagnosis then treat replayed kernels exactly like eagerly launched ones."""

from __future__ import annotations

from msgspec.structs import replace

import msgspec
import numpy as np

from traceana.link.attribute import CAUSE_KEYS, Links, causes
from traceana.load.model import CpuOps, Trace


class Match(msgspec.Struct, frozen=True):
    """One aligned graph launch: replay GPU event -> capture-trace op that launched its node."""

    launch: int  # graph launch index in the replay
    events: np.ndarray  # int64 replay GPU event indices (paired ones only)
    ops: np.ndarray  # int64 capture op index per event, -1 when the capture launch had no op
    source: int  # which capture trace


def inject(trace: Trace, links: Links, matches: list[Match], captures: list[Trace],
           unaligned: np.ndarray) -> tuple[Trace, Links]:
    """The replay with synthetic ops for every match; `unaligned`: GPU events of graph launches
    that did not align (they get the cause graph_unaligned)."""
    names = list(trace.names)
    code_of = {n: i for i, n in enumerate(names)}
    cols: dict[str, list] = {k: [] for k in ("name", "thread", "ts", "end", "dims", "types", "strides", "concrete",
                                             "kflop", "kgb")}
    extra: dict[int, tuple] = dict(trace.ops.extra)
    # the synthetic ops keep their captured op's "Call stack" / "Module Hierarchy" (the same code)
    stacks, hierarchy = dict(trace.ops.call_stack), dict(trace.ops.module_hierarchy)
    n_ops = len(trace.ops)
    gpu_op = links.gpu_op.copy()
    no_op: list[np.ndarray] = []
    gpu = trace.gpu
    for m in matches:
        cap = captures[m.source]
        co = cap.ops
        has = m.ops >= 0
        no_op.append(m.events[~has])
        ev, ops = m.events[has], m.ops[has]
        if len(ev) == 0:
            continue
        uniq, inv = np.unique(ops, return_inverse=True)
        first = n_ops + len(cols["name"])
        gpu_op[ev] = first + inv
        ts = np.full(len(uniq), np.inf)
        end = np.full(len(uniq), -np.inf)
        np.minimum.at(ts, inv, gpu.ts[ev])
        np.maximum.at(end, inv, gpu.ts[ev] + gpu.dur[ev])
        thread = int(trace.launches.thread[m.launch])
        for k, c in enumerate(uniq.tolist()):
            nm = cap.names[int(co.name[c])]
            code = code_of.get(nm)
            if code is None:
                code = code_of[nm] = len(names)
                names.append(nm)
            cols["name"].append(code)
            cols["thread"].append(thread)
            cols["dims"].append(co.dims[c])
            cols["types"].append(co.types[c])
            cols["strides"].append(co.strides[c])
            cols["concrete"].append(co.concrete[c])
            cols["kflop"].append(co.kernel_flop[c])
            cols["kgb"].append(co.kernel_num_gb[c])
            if c in co.extra:
                extra[first + k] = co.extra[c]
            if c in co.call_stack:
                stacks[first + k] = co.call_stack[c]
            if c in co.module_hierarchy:
                hierarchy[first + k] = co.module_hierarchy[c]
        cols["ts"].extend(ts.tolist())
        cols["end"].extend(end.tolist())
    ops = _extend(trace.ops, cols, extra, stacks, hierarchy)
    new = replace(trace, names=names, ops=ops)
    cause = causes(new, links.gpu_launch, gpu_op)
    if len(unaligned):
        cause[unaligned] = CAUSE_KEYS.index("graph_unaligned")
    if no_op:
        orphan = np.concatenate(no_op)
        cause[orphan] = CAUSE_KEYS.index("outside_op")
    attributed = gpu_op >= 0
    n = len(ops)
    op_us = np.bincount(gpu_op[attributed], weights=gpu.dur[attributed], minlength=n).astype(np.float64)
    op_n = np.bincount(gpu_op[attributed], minlength=n).astype(np.int64)
    return new, replace(links, gpu_op=gpu_op, op_device_us=op_us, op_gpu_events=op_n, gpu_cause=cause)


def _extend(ops: CpuOps, cols: dict[str, list], extra: dict[int, tuple], stacks: dict[int, str],
            hierarchy: dict[int, str]) -> CpuOps:
    n = len(cols["name"])
    return CpuOps(
        name=np.concatenate((ops.name, np.array(cols["name"], dtype=np.int32))),
        thread=np.concatenate((ops.thread, np.array(cols["thread"], dtype=np.int32))),
        ts=np.concatenate((ops.ts, np.array(cols["ts"], dtype=np.float64))),
        end=np.concatenate((ops.end, np.array(cols["end"], dtype=np.float64))),
        ext=np.concatenate((ops.ext, np.full(n, -1, dtype=np.int64))),
        dims=ops.dims + cols["dims"], types=ops.types + cols["types"], strides=ops.strides + cols["strides"],
        concrete=ops.concrete + cols["concrete"],
        kernel_flop=np.concatenate((ops.kernel_flop, np.array(cols["kflop"], dtype=np.float64))),
        kernel_num_gb=np.concatenate((ops.kernel_num_gb, np.array(cols["kgb"], dtype=np.float64))),
        extra=extra, call_stack=stacks, module_hierarchy=hierarchy, comm_ids=dict(ops.comm_ids),
        ordinal=None if ops.ordinal is None else np.concatenate((ops.ordinal, np.full(n, -1, dtype=np.int64))),
        seq=None if ops.seq is None else np.concatenate((ops.seq, np.full(n, -1, dtype=np.int64))),
    )
