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
from traceana.link.attribute import Links, _parents
from traceana.load.model import Trace
from traceana.meter import OFF, Meter
from traceana.arrays import distinct

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

    def __init__(self, thread: np.ndarray, ts: np.ndarray, end: np.ndarray, keep: np.ndarray | None = None) -> None:
        idx = np.arange(len(ts), dtype=np.int64) if keep is None else np.flatnonzero(keep)
        self.order = idx[np.lexsort((-end[idx], ts[idx], thread[idx]))]
        self.thread, self.ts, self.end = thread[self.order], ts[self.order], end[self.order]
        bounds = np.flatnonzero(np.diff(self.thread)) + 1
        starts = np.concatenate(([0], bounds)) if len(self.order) else np.zeros(0, np.int64)
        stops = np.concatenate((bounds, [len(self.order)])) if len(self.order) else np.zeros(0, np.int64)
        self.parent = _parents(self.ts, self.end, np.repeat(starts, stops - starts)) if len(self.order) else self.order

    def enclosing(self, thread: int, ts: float, end: float, meter: Meter = OFF) -> list[int]:
        """Indices of the intervals on `thread` enclosing [ts, end], innermost first."""
        key = self.thread.dtype.type(thread) if len(self.thread) else thread
        lo = int(np.searchsorted(self.thread, key, "left"))
        hi = int(np.searchsorted(self.thread, key, "right"))
        c = lo + int(np.searchsorted(self.ts[lo:hi], ts + EPS_US, "right")) - 1
        out: list[int] = []
        steps = 2
        while c >= lo:  # climb from the last interval started by ts to the first that is still running at end
            steps += 1
            if self.end[c] >= end - EPS_US:
                out.append(int(self.order[c]))
            c = int(self.parent[c])
        meter.visit("diagnose.stalls", steps)
        return out


class _Calls:
    """What describe_call looks up, indexed once: op and annotation nesting, launches by (thread, start), and
    the GPU events of each launch."""

    def __init__(self, trace: Trace, links: Links) -> None:
        ops, ann, la = trace.ops, trace.annotations, trace.launches
        self.ops = _Nesting(ops.thread, ops.ts, ops.end)
        step = np.fromiter((n.startswith("ProfilerStep#") for n in trace.names), dtype=bool, count=len(trace.names))
        self.ann = _Nesting(ann.thread, ann.ts, ann.end, ~step[ann.name] if len(ann) else None)
        self.la_order = np.lexsort((la.ts, la.thread))
        self.la_thread, self.la_ts = la.thread[self.la_order], la.ts[self.la_order]
        self.ev = np.argsort(links.gpu_launch, kind="stable")  # GPU events by launch, in event order per launch
        self.ev_launch = links.gpu_launch[self.ev]

    def events_of(self, launches: np.ndarray) -> np.ndarray:
        """The GPU events of these launches, by launch, each launch's in event order."""
        a = np.searchsorted(self.ev_launch, launches, "left")
        b = np.searchsorted(self.ev_launch, launches, "right")
        return np.concatenate([self.ev[p:q] for p, q in zip(a.tolist(), b.tolist())]) if len(a) else a

    def launches_in(self, thread: int, lo: float, hi: float) -> np.ndarray:
        """Launches on `thread` that started in [lo, hi]."""
        key = self.la_thread.dtype.type(thread)
        a = int(np.searchsorted(self.la_thread, key, "left"))
        b = int(np.searchsorted(self.la_thread, key, "right"))
        x = a + int(np.searchsorted(self.la_ts[a:b], lo, "left"))
        y = a + int(np.searchsorted(self.la_ts[a:b], hi, "right"))
        return self.la_order[x:y]


def _behind(trace: Trace, chain: list[int]) -> int:
    """The op the user called: the outermost of the innermost run of aten ops (-1 when none)."""
    names = trace.names
    pick = -1
    for i in reversed(chain):
        if names[int(trace.ops.name[i])].startswith("aten::"):
            pick = i
        elif pick >= 0:
            break
    return pick


def describe_call(trace: Trace, links: Links, ev_row: np.ndarray, rows: list[dict], call: int,
                  index: _Calls | None = None, meter: Meter = OFF) -> dict:
    """What one blocking runtime call was: its name, copy direction, the op and annotation behind it.
    `index`: _Calls(trace, links), built once for many calls; the work per call is then bounded by the
    call's own op nesting and the events its op launched."""
    q = index if index is not None else _Calls(trace, links)
    la, gpu, names = trace.launches, trace.gpu, trace.names
    name = names[int(la.name[call])]
    mine = q.events_of(np.array([call]))
    direction = memory = None
    for e in mine.tolist():
        if gpu.kind[e] == 1:
            direction, memory = classify(names[int(gpu.name[e])])
            break
    th, ts, end = int(la.thread[call]), float(la.ts[call]), float(la.end[call])
    chain = q.ops.enclosing(th, ts, end, meter)[::-1]  # outermost first
    anns = q.ann.enclosing(th, ts, end, meter)
    ann = anns[0] if anns else -1
    op = _behind(trace, chain)
    op_name = names[int(trace.ops.name[op])] if op >= 0 else None
    # the ops' rows: GPU events launched on this thread while the op ran
    ids: list[str] = []
    if op >= 0:
        near = q.launches_in(th, float(trace.ops.ts[op]), float(trace.ops.end[op]))
        ev = q.events_of(np.sort(near))
        meter.visit("diagnose.stalls", len(mine) + len(near) + len(ev))
        for r in distinct(ev_row[ev]).tolist():
            if r >= 0 and rows[r]["id"] not in ids:
                ids.append(rows[r]["id"])
    label = name
    if direction:
        label += f" ({direction}{', ' + memory + ' memory' if memory else ''}, host-synchronous)"
    return {"call": name, "label": label, "direction": direction, "memory": memory, "op": op_name,
            "annotation": names[int(trace.annotations.name[ann])] if ann >= 0 else None,
            "ops": ids[:10], "blocked_us": float(la.end[call] - la.ts[call])}


def stalls(trace: Trace, links: Links, acc: Account, ev_row: np.ndarray, rows: list[dict],
           steps: int, meter: Meter = OFF) -> list[dict]:
    """The ledger's sync idle grouped by (op behind the call, call): largest first."""
    m = acc.gap_sync_us > 0
    if not m.any():
        return []
    index = _Calls(trace, links)  # sorts once: ops, annotations, launches, events
    meter.visit("diagnose.stalls", len(trace.ops) + len(trace.annotations) + len(trace.launches) + len(trace.gpu))
    calls, us = acc.gap_sync_call[m], acc.gap_sync_us[m]
    uniq, inv = np.unique(calls, return_inverse=True)
    per_call = np.bincount(inv, weights=us)
    groups: dict[tuple, dict] = {}
    for c, t in zip(uniq.tolist(), per_call.tolist()):
        d = describe_call(trace, links, ev_row, rows, int(c), index, meter)
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
