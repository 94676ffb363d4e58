"""Op nesting: each thread's ops by start (longest first), and the op each one runs inside.

The link stage sorts the ops this way to find each launch's innermost op; the diagnoses that climb
the op tree (a blocking call's enclosing ops, a collective's parents, a copy's parent) read the same
order. `op_nesting(ops)` computes it; the link stage keeps it in Links.nesting, and `nesting_of(trace,
links)` hands that one out again while it describes the trace's ops (a graph replay's capture adds
ops: then it is computed afresh).
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np


class OpNesting(msgspec.Struct, frozen=True):
    """Ops sorted by (thread, start, longest first): `order[k]` is the op at sorted position k; the
    sorted columns; each thread's run of positions [starts[i], stops[i]); `parent[k]`, the sorted
    position of the op on the stack when op k starts (-1: none; see _parents)."""

    ops: Any  # the op columns (CpuOps) this was computed from
    order: np.ndarray
    thread: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    starts: np.ndarray
    stops: np.ndarray
    parent: np.ndarray
    identity: bool  # the ops were already in this order (order[k] == k)

    def lo(self) -> np.ndarray:
        """Per sorted position: the first position of its thread's run."""
        return np.repeat(self.starts, self.stops - self.starts)

    def pos(self) -> np.ndarray:
        """Per op: its sorted position (the inverse of order)."""
        if self.identity:
            return self.order
        pos = np.empty(len(self.order), dtype=np.int64)
        pos[self.order] = np.arange(len(self.order), dtype=np.int64)
        return pos

    def op_parent(self) -> np.ndarray:
        """Per op: the op index of its parent, -1 when none."""
        out = np.full(len(self.order), -1, dtype=np.int64)
        if len(self.order):
            out[self.order] = np.where(self.parent >= 0, self.order[np.maximum(self.parent, 0)], -1)
        return out


def nest_order(thread: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """np.lexsort((-end, ts, thread)): by thread, start, longest first (ties keep their order); None when
    the columns already are in that order (the loader writes each thread's ops by start), found in one pass."""
    n = len(ts)
    if n < 2:
        return None
    dth = np.diff(thread)
    dts = np.diff(ts)
    ok = (dth > 0) | ((dth == 0) & ((dts > 0) | ((dts == 0) & (end[1:] <= end[:-1]))))
    if ok.all():
        return None
    return np.lexsort((-end, ts, thread))


def op_nesting(ops) -> OpNesting:
    """The nesting of these op columns (anything with thread, ts and end)."""
    order = nest_order(ops.thread, ops.ts, ops.end)
    identity = order is None
    if identity:
        order = np.arange(len(ops.ts), dtype=np.int64)
        o_thread, o_ts, o_end = ops.thread, ops.ts, ops.end
    else:
        o_thread, o_ts, o_end = ops.thread[order], ops.ts[order], ops.end[order]
    bounds = np.flatnonzero(np.diff(o_thread)) + 1
    if len(order):
        starts = np.concatenate(([0], bounds)).astype(np.int64)
        stops = np.concatenate((bounds, [len(order)])).astype(np.int64)
        parent = _parents(o_ts, o_end, np.repeat(starts, stops - starts))
    else:
        starts = stops = parent = np.zeros(0, dtype=np.int64)
    return OpNesting(ops, order, o_thread, o_ts, o_end, starts, stops, parent, identity)


def nesting_of(trace, links) -> OpNesting:
    """The nesting of trace.ops: the link stage's (links.nesting) when it was computed from these very
    columns, else computed now."""
    got = getattr(links, "nesting", None) if links is not None else None
    if got is not None and got.ops is trace.ops:
        return got
    return op_nesting(trace.ops)


def _parents(ts: np.ndarray, end: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """parent[i]: the op on the stack when op i starts, in a stack sweep over ops sorted by start
    (ts, then longest first) within each thread's run [lo[i], ..): the nearest j in [lo[i], i) with
    end[j] > ts[i] (an op whose end is past is popped; one below a live op stays but is never on top
    when it has ended), -1 when none.

    Found by pointer jumping, all ops at once: jump[i] is a j such that every op strictly between j
    and i ended by ts[i]; it starts at i - 1, and when op jump[i] ended by ts[i] too, jump[i] moves on
    to jump[jump[i]] (those between ended by ts[jump[i]] <= ts[i]). An op that starts after every
    earlier op of its thread ended (a top-level op) has none, read off the running maximum of the
    ends without jumping. Rounds: about log2(siblings) plus the nesting depth; past 256 rounds
    (pathological overlaps) the rest is swept with a stack."""
    n = len(ts)
    parent = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return parent
    idx = np.arange(n, dtype=np.int64)
    first = lo == idx
    latest = np.empty(n)  # latest[i]: the latest end among ops lo[i]..i
    for a, z in zip(np.flatnonzero(first).tolist(), np.append(np.flatnonzero(first)[1:], n).tolist()):
        np.maximum.accumulate(end[a:z], out=latest[a:z])
    # the first round, jump[i] = i - 1 for every op, by slices over all ops at once (no gathers): op i
    # is inside the op before it, or jumps on to i - 2
    inner = ~first[1:] & (latest[:-1] > ts[1:])  # some earlier op of the thread is still running
    prev = inner & (end[:-1] > ts[1:])
    parent[1:][prev] = idx[:-1][prev]
    todo = np.flatnonzero(inner & ~prev) + 1
    jump = idx - 1
    jump[todo] = todo - 2
    todo = todo[jump[todo] >= lo[todo]]
    for _ in range(255):
        if not len(todo):
            return parent
        j = jump[todo]
        hit = end[j] > ts[todo]
        parent[todo[hit]] = j[hit]
        todo = todo[~hit]
        jump[todo] = jump[jump[todo]]
        todo = todo[jump[todo] >= lo[todo]]
    return _parents_sweep(ts, end, lo)


def _parents_sweep(ts: np.ndarray, end: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """_parents by the stack sweep itself, one op at a time."""
    parent = np.full(len(ts), -1, dtype=np.int64)
    ts_l, end_l, lo_l = ts.tolist(), end.tolist(), lo.tolist()
    stack: list[int] = []
    for i in range(len(ts_l)):
        if i == lo_l[i]:
            stack = []
        t = ts_l[i]
        while stack and end_l[stack[-1]] <= t:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return parent
