"""Sync stalls: the GPU idle while the CPU was blocked in a host-synchronous call, and the op behind it.

The ledger charges an idle gap to a blocking call when the call was in progress as the GPU ran out of
work (ledger._gaps). Here those charges are grouped by what issued the call — the op the user's code
called (`aten::item`, `aten::to`, `aten::nonzero` …: the outermost of the innermost run of aten ops
around the call) and the call itself — and each group becomes one finding with its fix. The fix
depends on why the op synchronises, which is a property of the op, not of the trace:

  a scalar read (.item(), float(t), bool(t), `if t:`) copies one value to the host and waits;
  a copy to host memory (.to('cpu'), .cpu(), .numpy(), non_blocking=False) waits for the copy;
  an op whose output size depends on the data (nonzero, masked_select, unique, boolean-mask indexing,
  repeat_interleave without output_size) must read the size back before it can allocate;
  an explicit torch.cuda.synchronize() / stream or event synchronize (timing code, debugging).
The allocator's frees (cudaFree: torch.cuda.empty_cache(), or a retried allocation) are grouped here too,
and named by diagnose/memory.py's allocator-churn finding, with the allocator's fix.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.link.copies import classify
from traceana.diagnose.ledger import ALLOCATOR_FREE, Account
from traceana.link.attribute import Links
from traceana.link.nesting import OpNesting, nesting_of, op_nesting
from traceana.load.model import Trace
from traceana.meter import OFF, Meter
from traceana.arrays import distinct, slices

_SCALAR = ("aten::item", "aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal")
_TO_HOST = ("aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu", "aten::numpy", "aten::_copy_from",
            "aten::_copy_from_and_resize", "aten::tolist")
_DATA_SIZED = ("aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique", "aten::_unique2",
               "aten::unique_consecutive", "aten::unique_dim", "aten::repeat_interleave", "aten::index",
               "aten::argwhere", "aten::masked_scatter", "aten::bincount", "aten::histc")

FIX = {
    "scalar": ("Keep the value on the GPU: compare, accumulate and branch with tensor ops (torch.where, "
               "running sums on device), and read it on the host once every N steps or after the loop; "
               ".item(), float(t), bool(t) and `if t:` each wait for every kernel queued before them."),
    "to_host": ("Copy into pinned host memory with non_blocking=True and wait on an event only where the "
                "value is read (or keep the tensor on the GPU): a copy to pageable memory, or one with "
                "non_blocking=False, blocks the CPU until the GPU has drained its queue."),
    "data_sized": ("The op's output size depends on the data, so the CPU must read the size back before it can "
                   "go on: use a fixed-size form (torch.where with a mask, nonzero_static / size=, "
                   "repeat_interleave(output_size=...), masked ops instead of boolean indexing), or move it off "
                   "the hot path."),
    "explicit": ("Remove the explicit synchronize from the step (torch.cuda.synchronize(), stream/event "
                 ".synchronize(): often timing or debug code); to time, record CUDA events and read them after "
                 "the step."),
    "to_device": ("Copy from pinned host memory with non_blocking=True (DataLoader(pin_memory=True), "
                  "tensor.pin_memory()): a copy from pageable memory is synchronous for the host."),
}

SHORT_FIX = {
    "scalar": "Keep the value on the GPU; read it on the host once every N steps.",
    "to_host": "Copy to pinned memory with non_blocking=True and wait only where the value is read.",
    "data_sized": "Use a fixed-size form (torch.where, nonzero_static, output_size=) or move it off the hot path.",
    "explicit": "Remove the explicit synchronize from the step; time with CUDA events.",
    "to_device": "Copy from pinned memory with non_blocking=True (pin_memory=True).",
}


def _kind(op: str | None, call: str, direction: str | None) -> str:
    if call in ALLOCATOR_FREE:  # the allocator releasing memory: diagnose/memory.py's churn finding names it
        return "allocator"
    if op in _SCALAR:
        return "scalar"
    if op in _DATA_SIZED:
        return "data_sized"
    if direction == "HtoD":
        return "to_device"
    if op in _TO_HOST or direction == "DtoH":
        return "to_host"
    return "explicit"


EPS_US = 1e-3  # µs: the clock's resolution at epoch-scale timestamps


class _Nesting:
    """Intervals (ops, or annotations) of each thread by start, longest first, with their nesting parents:
    the intervals enclosing a call are found by one search and a climb, bounded by the nesting depth."""

    def __init__(self, nest: OpNesting) -> None:
        """nest: the intervals' nesting (link/nesting.py: the link stage's, for the ops)."""
        self.order, self.thread, self.ts, self.end = nest.order, nest.thread, nest.ts, nest.end
        self.parent = nest.parent

    @classmethod
    def of(cls, thread: np.ndarray, ts: np.ndarray, end: np.ndarray, keep: np.ndarray | None = None) -> _Nesting:
        """The nesting of the intervals in keep (all when None)."""
        idx = np.arange(len(ts), dtype=np.int64) if keep is None else np.flatnonzero(keep)
        sub = op_nesting(_Cols(thread[idx], ts[idx], end[idx]))
        return cls(OpNesting(None, idx[sub.order], sub.thread, sub.ts, sub.end, sub.starts, sub.stops, sub.parent,
                             False))

    def climb(self, thread: np.ndarray, ts: np.ndarray, end: np.ndarray) -> tuple[list[tuple], int]:
        """The intervals enclosing each [ts[i], end[i]] on thread[i], all calls at once: per round of the climb
        from the last interval started by ts (+ the clock's resolution) up its parents, (calls, their
        intervals, which of those still run at end) — rounds in order, so innermost first; and the
        intervals visited (+ 2 per call: its searches)."""
        n = len(ts)
        c = np.full(n, -1, dtype=np.int64)
        if len(self.thread) and n:
            for th in distinct(thread).tolist():  # one search per thread for all its calls
                m = np.flatnonzero(thread == th)
                key = self.thread.dtype.type(th)
                lo = int(np.searchsorted(self.thread, key, "left"))
                hi = int(np.searchsorted(self.thread, key, "right"))
                k = lo + np.searchsorted(self.ts[lo:hi], ts[m] + EPS_US, "right") - 1
                c[m] = np.where(k >= lo, k, -1)
        at = np.flatnonzero(c >= 0)
        c = c[at]
        rounds = []
        visits = 2 * n
        while len(at):  # (a parent sits earlier in its thread's run, or is -1: the climb ends)
            visits += len(at)
            rounds.append((at, self.order[c], self.end[c] >= end[at] - EPS_US))
            c = self.parent[c]
            up = c >= 0
            at, c = at[up], c[up]
        return rounds, visits


class _Cols:
    """Interval columns (thread, ts, end), as op_nesting reads them."""

    def __init__(self, thread: np.ndarray, ts: np.ndarray, end: np.ndarray) -> None:
        self.thread, self.ts, self.end = thread, ts, end


class _Calls:
    """What describe_calls looks up, indexed once: op and annotation nesting, launches by (thread, start), and
    the GPU events of each launch."""

    def __init__(self, trace: Trace, links: Links) -> None:
        ann, la = trace.annotations, trace.launches
        self.ops = _Nesting(nesting_of(trace, links))
        step = np.fromiter((n.startswith("ProfilerStep#") for n in trace.names), dtype=bool, count=len(trace.names))
        self.ann = _Nesting.of(ann.thread, ann.ts, ann.end, ~step[ann.name] if len(ann) else None)
        self.la_order = np.lexsort((la.ts, la.thread))
        self.la_thread, self.la_ts = la.thread[self.la_order], la.ts[self.la_order]
        self.ev = np.argsort(links.gpu_launch, kind="stable")  # GPU events by launch, in event order per launch
        self.ev_launch = links.gpu_launch[self.ev]

    def events_of(self, launches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The GPU events of these launches, by launch, each launch's in event order; and which launch (its
        place in `launches`) each is of."""
        a = np.searchsorted(self.ev_launch, launches, "left")
        b = np.searchsorted(self.ev_launch, launches, "right")
        return slices(self.ev, a, b)

    def launches_in(self, thread: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per (thread, lo, hi): the launches on that thread that started in [lo, hi], concatenated; and which
        window each is from."""
        x = np.zeros(len(thread), dtype=np.int64)
        y = np.zeros(len(thread), dtype=np.int64)
        for th in distinct(thread).tolist():  # one search per thread for all its windows
            m = np.flatnonzero(thread == th)
            key = self.la_thread.dtype.type(th)
            a = int(np.searchsorted(self.la_thread, key, "left"))
            b = int(np.searchsorted(self.la_thread, key, "right"))
            x[m] = a + np.searchsorted(self.la_ts[a:b], lo[m], "left")
            y[m] = a + np.searchsorted(self.la_ts[a:b], hi[m], "right")
        return slices(self.la_order, x, y)


def _behind(names: list[str], op_name: np.ndarray, rounds: list[tuple], n: int) -> np.ndarray:
    """Per call, the op the user called: the outermost of the innermost run of aten ops among the ops enclosing
    it (rounds: _Nesting.climb's, innermost first), -1 when none."""
    aten = np.fromiter((x.startswith("aten::") for x in names), dtype=bool, count=len(names))
    pick = np.full(n, -1, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    for at, node, enc in rounds:
        live = enc & ~done[at]
        a = aten[op_name[node]]
        pick[at[live & a]] = node[live & a]
        done[at[live & ~a & (pick[at] >= 0)]] = True
    return pick


def _innermost(rounds: list[tuple], n: int) -> np.ndarray:
    """Per call, the innermost interval enclosing it (rounds: _Nesting.climb's), -1 when none."""
    out = np.full(n, -1, dtype=np.int64)
    for at, node, enc in rounds:
        new = enc & (out[at] < 0)
        out[at[new]] = node[new]
    return out


def describe_calls(trace: Trace, links: Links, ev_row: np.ndarray, rows: list[dict], calls: np.ndarray,
                   index: _Calls | None = None, meter: Meter = OFF) -> list[dict]:
    """What each blocking runtime call was: its name, copy direction, the op and annotation behind it, and the
    rows its op launched. `index`: _Calls(trace, links), built once; the work is then bounded by the calls'
    own op nesting and the events their ops launched, all calls at once."""
    q = index if index is not None else _Calls(trace, links)
    la, gpu, names, ops = trace.launches, trace.gpu, trace.names, trace.ops
    n = len(calls)
    # each call's own events: its direction and memory from its first memcpy
    a = np.searchsorted(q.ev_launch, calls, "left")
    b = np.searchsorted(q.ev_launch, calls, "right")
    cp = np.flatnonzero(gpu.kind[q.ev] == 1)  # the memcpy events' places in q.ev
    first = np.full(n, -1, dtype=np.int64)
    if len(cp):
        k = np.searchsorted(cp, a, "left")
        f = cp[np.minimum(k, len(cp) - 1)]
        first = np.where((k < len(cp)) & (f < b), f, -1)
    kinds: dict[int, tuple[str | None, str | None]] = {}
    th, ts, end = la.thread[calls], la.ts[calls], la.end[calls]
    op_rounds, v_ops = q.ops.climb(th, ts, end)
    ann_rounds, v_ann = q.ann.climb(th, ts, end)
    op = _behind(names, ops.name, op_rounds, n)
    ann = _innermost(ann_rounds, n)
    visits = v_ops + v_ann
    # the ops' rows: GPU events launched on the call's thread while its op ran (the first 10 rows, by row)
    has = np.flatnonzero(op >= 0)
    ids: list[list[str]] = [[] for _ in range(n)]
    if len(has):
        near, w_near = q.launches_in(th[has], ops.ts[op[has]], ops.end[op[has]])
        ev, w_ev = q.events_of(near)
        w_ev = w_near[w_ev]
        visits += int((b - a)[has].sum()) + len(near) + len(ev)
        r = ev_row[ev]
        keep = r >= 0
        r, w_ev = r[keep], w_ev[keep]
        o = np.lexsort((r, w_ev))
        r, w_ev = r[o], w_ev[o]
        new = np.ones(len(r), dtype=bool)
        new[1:] = (r[1:] != r[:-1]) | (w_ev[1:] != w_ev[:-1])
        r, w_ev = r[new], w_ev[new]
        for ri, wi in zip(r.tolist(), w_ev.tolist()):
            got = ids[has[wi]]
            if len(got) < 10:
                got.append(rows[ri]["id"])
    meter.visit("diagnose.stalls", visits)
    out = []
    blocked = (end - ts).tolist()
    for i, (call, e, o_, an) in enumerate(zip(calls.tolist(), first.tolist(), op.tolist(), ann.tolist())):
        name = names[int(la.name[call])]
        direction = memory = None
        if e >= 0:
            code = int(gpu.name[int(q.ev[e])])
            if code not in kinds:
                kinds[code] = classify(names[code])
            direction, memory = kinds[code]
        label = name
        if direction:
            label += f" ({direction}{', ' + memory + ' memory' if memory else ''}, host-synchronous)"
        out.append({"call": name, "label": label, "direction": direction, "memory": memory,
                    "op": names[int(ops.name[o_])] if o_ >= 0 else None,
                    "annotation": names[int(trace.annotations.name[an])] if an >= 0 else None,
                    "ops": ids[i], "blocked_us": blocked[i]})
    return out


def stalls(trace: Trace, links: Links, acc: Account, ev_row: np.ndarray, rows: list[dict],
           steps: int, meter: Meter = OFF) -> list[dict]:
    """The ledger's sync idle grouped by (op behind the call, call): largest first."""
    m = acc.gap_sync_us > 0
    if not m.any():
        return []
    index = _Calls(trace, links)  # sorts once: annotations, launches, events (the ops: the link stage's)
    meter.visit("diagnose.stalls", len(trace.ops) + len(trace.annotations) + len(trace.launches) + len(trace.gpu))
    calls, us = acc.gap_sync_call[m], acc.gap_sync_us[m]
    uniq, inv = np.unique(calls, return_inverse=True)
    per_call = np.bincount(inv, weights=us)
    groups: dict[tuple, dict] = {}
    for d, t in zip(describe_calls(trace, links, ev_row, rows, uniq.astype(np.int64), index, meter),
                    per_call.tolist()):
        key = (d["op"], d["label"])
        g = groups.get(key)
        if g is None:
            g = groups[key] = {**d, "count": 0, "idle_us": 0.0, "blocked_us": 0.0, "kind": _kind(d["op"], d["call"],
                                                                                              d["direction"])}
        g["count"] += 1
        g["idle_us"] += t
        g["blocked_us"] += d["blocked_us"]
        for i in d["ops"]:
            if i not in g["ops"] and len(g["ops"]) < 10:
                g["ops"].append(i)
    out = sorted(groups.values(), key=lambda g: -g["idle_us"])
    for g in out:
        g["per_step_us"] = g["idle_us"] / steps if steps else None
    return out


def stall_findings(found: list[dict], span_us: float, steps: int) -> list[dict]:
    """One finding per stall group that idles the GPU for at least 0.5% of the span."""
    out = []
    for g in found:
        if span_us <= 0 or g["idle_us"] < 0.005 * span_us or g["kind"] == "allocator":
            continue  # (the allocator's frees: memory.churn_finding carries their idle, once)
        who = g["op"] or g["call"]
        what = {"scalar": "reads a scalar back to the host", "to_host": "copies to the host synchronously",
                "data_sized": "reads its data-dependent output size back to the host",
                "to_device": "copies from pageable host memory (synchronous for the host)",
                "explicit": "synchronizes the device explicitly"}[g["kind"]]
        per_step = (f"{u.us(g['per_step_us'])} per step, " if g.get("per_step_us") is not None and steps > 1 else "")
        where = f" inside `{g['annotation']}`" if g.get("annotation") else ""
        text = (f"{who}{where} {what}: the CPU was blocked in {g['label']} "
                f"{u.plural(g['count'], 'time')} ({u.us(g['blocked_us'])} in all), and the GPU ran out of queued "
                f"work while it waited: {u.us(g['idle_us'])} of GPU idle ({per_step}"
                f"{g['idle_us'] / span_us * 100:.1f}% of the span) is charged to it — the idle from when the GPU "
                f"drained until the call returned, plus one launch gap. {FIX[g['kind']]} Saving shown: that idle "
                "time, an upper bound (without the sync the CPU can queue the next work ahead, as far as it keeps up).")
        out.append({
            "kind": "sync_stall",
            "title": (f"{who} stalls the GPU: {u.us(g['idle_us'])} idle ({per_step}"
                      f"{g['idle_us'] / span_us * 100:.1f}% of the span) while the CPU waits in {g['call']}"),
            "text": text, "fix": SHORT_FIX[g["kind"]],
            "group": f"sync:{g['kind']}", "ops": list(g["ops"]), "saving_us": g["idle_us"],
            "idle_us": g["idle_us"], "confidence": "high" if g["kind"] != "explicit" else "medium",
        })
    return out
