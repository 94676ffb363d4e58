"""Memory: what the allocator held, when, for which ops, and what allocating cost the step.

Read from the `[memory]` instant events a trace recorded with `profile_memory=True` (trace.memory:
per event its time, thread, address, bytes — positive an allocation, negative a free — and the
allocator's totals after it: Total Allocated, Total Reserved, per device). Per device (its type and
index as the event names them; the host's memory is a device of its own, `cpu`):

  peak allocated   the largest Total Allocated recorded, and when; the Total Reserved at that instant
                   and the largest Total Reserved. Traces whose events carry no totals (old ones):
                   the running sum of the bytes, i.e. counted from the recording's start (said so).
  per step         the same peaks inside each ProfilerStep#N annotation, what was allocated when it
                   started and ended, and how many bytes it allocated.
  curve            allocated (and reserved) over time, at most MAX_POINTS points for drawing: per time
                   bin its lowest and highest value, plus the first, the last and the peak event, so
                   the peak is drawn exactly.
  live at peak     the allocations made at or before the peak and not freed before it (an allocation's
                   free is the next event at the same address, on the same device, with negative bytes):
                   grouped by the op that made them. Total Allocated minus their sum is memory allocated
                   before the recording began (weights, optimizer state, caches) and still held.
  by op            every allocation is charged to the innermost CPU op of its thread running at its time,
                   passing over the allocation helpers (aten::empty, empty_strided, ...) to the op that
                   asked for the memory (found by the link stage with the launches' ops: links.memory_op);
                   `owner_ops` gives that op per event, the hook by which a module path (or a source
                   line) can be put on the same rows.

Allocator calls on the host (cudaMalloc / cudaFree and their HIP and driver twins) are runtime events
(trace.launches). A free waits for the device to finish all its queued work, so the ledger counts it
with the other host-synchronous calls (ledger.SYNC_CALLS): the GPU idle it causes is charged there,
once, and `churn_finding` names it with its fix; the CPU time the calls take is reported, never claimed
as a saving. `fragmentation_finding` is about memory, not time: it saves nothing and says so.

Events whose byte counts no allocator can hold (a negative Total Allocated or Total Reserved, or any
count above MAX_BYTES: a trace written by hand or damaged) are left out of everything here, with a
warning naming how many and the worst value: one such event would otherwise be the device's peak.

Everything is sorts, searchsorted and bincount over the memory events: no per-event Python loop.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.diagnose.ledger import ALLOCATOR_FREE, Account
from traceana.link.attribute import Links, helper_ops, innermost_ops
from traceana.load.model import Trace
from traceana.meter import OFF, Meter
from traceana.link.steps import _steps as profiler_steps
from traceana.arrays import distinct

#: The curve keeps at most this many points per device (the peak among them, exactly).
MAX_POINTS = 400
#: Ops listed per device (most memory at the peak, most allocated overall).
TOP = 10
#: Device allocations on the host: the caching allocator calls these when its cache has no fitting block.
ALLOCATOR_ALLOC = frozenset({"cudaMalloc", "hipMalloc", "cuMemAlloc", "cuMemAlloc_v2", "hipExtMallocWithFlags"})
ALLOCATOR_CALLS = ALLOCATOR_ALLOC | ALLOCATOR_FREE
#: c10::DeviceType codes as the events record them.
DEVICE_TYPES = {0: "cpu", 1: "cuda", 2: "mkldnn", 6: "hip", 9: "xla", 12: "xpu", 13: "mps", 15: "hpu",
                19: "mtia", 20: "privateuseone"}
#: Fragmentation is named when reserved exceeds allocated at the peak by at least this much ...
FRAG_MIN_BYTES = 1 << 30
#: ... and by at least this share of what is reserved.
FRAG_MIN_SHARE = 0.25
NO_OP = "(outside any recorded op)"
#: No device or host memory holds a pebibyte: a byte count above it (or a negative total) is not one an
#: allocator reported, and the event is left out (with a warning).
MAX_BYTES = float(1 << 50)
HOW_TO_RECORD = ("no [memory] events in this trace: record with torch.profiler.profile(profile_memory=True) "
                 "to see peak memory per device and step, the allocation curve and the ops that hold memory "
                 "at the peak")


def device_label(dtype: int, index: int) -> str:
    """'cuda:0', 'hip:1', 'cpu' (the host's memory has no index)."""
    name = DEVICE_TYPES.get(int(dtype), f"device_type_{int(dtype)}")
    return name if int(index) < 0 or name == "cpu" else f"{name}:{int(index)}"


def owner_ops(trace: Trace, links: Links | None = None) -> np.ndarray:
    """Per memory event (trace.memory order): the op index it is charged to, -1 outside any op (the link
    stage's links.memory_op when given, found with the launches' op in one pass)."""
    m = trace.memory
    same = same_threads(trace, m.thread)
    if links is not None and links.memory_op is not None and len(links.memory_op) == len(m) and same is m.thread:
        return links.memory_op
    return innermost_ops(trace, same, m.ts, helper_ops(trace))


def same_threads(trace: Trace, thread: np.ndarray) -> np.ndarray:
    """Thread codes as the ops have them: a thread is its "pid/tid" name, however the trace wrote the ids (the
    2021 Kineto format writes a tid as a number on [memory] events and as a string on ops, two codes for one
    thread). `thread` itself when no code needs mapping."""
    first: dict[str, int] = {}
    remap = np.arange(len(trace.threads), dtype=thread.dtype if len(thread) else np.int32)
    for k, name in enumerate(trace.threads):
        remap[k] = first.setdefault(name, k)
    if not len(thread) or (remap == np.arange(len(remap))).all():
        return thread
    return remap[thread]


def _unattributed(trace: Trace, owner: np.ndarray) -> np.ndarray:
    """Per memory event charged to no op: 1 when its thread recorded no op at all, 2 when it fell between ops
    of its thread, 0 when it is charged to an op."""
    thread = same_threads(trace, trace.memory.thread)
    with_ops = np.zeros(max(len(trace.threads), 1), dtype=bool)
    if len(trace.ops):
        with_ops[distinct(trace.ops.thread)] = True
    return np.where(owner >= 0, 0, np.where(with_ops[thread], 2, 1))


def memory_section(trace: Trace, links: Links | None = None, places=None, max_points: int = MAX_POINTS,
                   top: int = TOP, meter: Meter = OFF, warnings: list[str] | None = None) -> dict:
    """analysis["memory"]: per device peaks, steps, curve and the ops holding memory (docs/analysis-schema.md).
    places: modules.attribute.Places (each op's module path), for the modules holding memory at the peak.
    warnings: gets one line when events with impossible byte counts were left out (implausible())."""
    m = getattr(trace, "memory", None)
    calls = allocator_calls(trace)
    if m is None or not len(m):
        return {"recorded": False, "note": HOW_TO_RECORD, "t0_us": None, "devices": [], "allocator": calls}
    bad, line = implausible(m)
    if line and warnings is not None:
        warnings.append(line)
    names = trace.names
    owner = owner_ops(trace, links)
    owner_name = np.where(owner >= 0, trace.ops.name[np.maximum(owner, 0)] if len(trace.ops) else -1, -1)
    # each event's module path (index into places.paths, -1 unknown), when the trace recorded modules
    mod_paths = None
    owner_mod = None
    if places is not None and places.source is not None and len(places.module) == len(trace.ops) and len(trace.ops):
        owner_mod = np.where(owner >= 0, places.module[np.maximum(owner, 0)], -1)
        mod_paths = ["/".join(p) for p in places.paths]  # the module tables' notation (modules/table.py SEP)
    nums, st, se = profiler_steps(trace)
    ok = ~bad
    first = float(m.ts[ok].min()) if ok.any() else float(m.ts.min())
    t0 = float(min(first, st.min())) if len(nums) else first  # times in the section: µs from t0
    key = m.device_type.astype(np.int64) * (1 << 40) + (m.device.astype(np.int64) + 1)
    devices = []
    why = _unattributed(trace, owner)
    for k in distinct(key[ok]).tolist():
        idx = np.flatnonzero((key == k) & ok)
        meter.visit("memory", len(key) + len(idx))  # the device's events, found by a pass over all
        idx = idx[np.argsort(m.ts[idx], kind="stable")]
        d, b, live = _device(m, idx, owner_name, names, nums, st, se, t0, max_points, top)
        d["unattributed"] = _unattributed_note(b, why[idx], d)
        if owner_mod is not None and live is not None:  # the allocations live at the peak, found once
            d["modules_at_peak"] = _by_op(owner_mod[idx][live], b[live], mod_paths, top, "module", "(no module)")
        devices.append(d)
    # GPU devices first (by peak), the host's memory after
    devices.sort(key=lambda d: (d["type"] == "cpu", -d["peak_allocated_bytes"], d["device"]))
    return {"recorded": True, "note": None, "t0_us": t0, "devices": devices, "allocator": calls,
            "steps": len(nums)}


def implausible(m) -> tuple[np.ndarray, str | None]:
    """(per memory event: its byte counts are impossible, the warning line or None). Impossible: a
    negative Total Allocated or Total Reserved, or Bytes or a total beyond MAX_BYTES (a free's Bytes is
    negative: that is how frees are written)."""
    tot, res = m.total_allocated.astype(np.float64), m.total_reserved.astype(np.float64)
    nb = np.abs(m.nbytes.astype(np.float64))
    with np.errstate(invalid="ignore"):
        bad = (tot < 0) | (tot > MAX_BYTES) | (res < 0) | (res > MAX_BYTES) | (nb > MAX_BYTES)
    n = int(bad.sum())
    if not n:
        return bad, None
    i = int(np.flatnonzero(bad)[0])
    worst = next((f"{name} = {v:,.4g}" for name, v in (("Total Allocated", tot[i]), ("Total Reserved", res[i]),
                                                        ("Bytes", float(m.nbytes[i])))
                  if np.isfinite(v) and (v < 0 and name != "Bytes" or abs(v) > MAX_BYTES)), "")
    return bad, (f"{n:,} of {len(m):,} [memory] event{'s' if n != 1 else ''} with impossible byte counts (a negative "
                 f"total, or more than 1 PiB; first: {worst} at {float(m.ts[i]):.3f} µs) left out of the memory "
                 "peaks and curve")


def _device(m, idx: np.ndarray, owner_name: np.ndarray, names: list[str], nums: list[int], st: np.ndarray,
            se: np.ndarray, t0: float, max_points: int, top: int) -> tuple[dict, np.ndarray, np.ndarray | None]:
    """(the device's entry in analysis["memory"]["devices"]; its events' bytes, as float64; the allocations
    live at its peak, None when the events carry no addresses)."""
    dtype, dev = int(m.device_type[idx[0]]), int(m.device[idx[0]])
    ts, b = m.ts[idx], m.nbytes[idx].astype(np.float64)
    tot = m.total_allocated[idx].astype(np.float64)
    res = m.total_reserved[idx].astype(np.float64)
    recorded = bool(np.isfinite(tot).all())
    if not recorded:  # no totals: allocated since the recording began
        tot = np.cumsum(b)
    p = int(np.argmax(tot))
    has_res = bool(np.isfinite(res).any())
    live = _live_at(m.addr[idx], b, p)[0]
    owners = owner_name[idx]
    out = {
        "device": device_label(dtype, dev), "type": DEVICE_TYPES.get(dtype, f"device_type_{dtype}"),
        "device_type": dtype, "index": dev,
        "events": int(len(idx)), "allocations": int((b > 0).sum()), "frees": int((b < 0).sum()),
        "allocated_bytes": float(b[b > 0].sum()), "freed_bytes": float(-b[b < 0].sum()),
        "totals": "recorded" if recorded else "reconstructed",
        "peak_allocated_bytes": float(tot[p]), "peak_at_us": float(ts[p] - t0),
        "reserved_at_peak_bytes": float(res[p]) if np.isfinite(res[p]) else None,
        "peak_reserved_bytes": float(np.nanmax(res)) if has_res else None,
        "start_allocated_bytes": float(tot[0] - b[0]), "end_allocated_bytes": float(tot[-1]),
        "peak_op": names[int(owners[p])] if owners[p] >= 0 else NO_OP,
        "steps": _steps(ts, b, tot, res, nums, st, se, t0),
        "curve": _curve(ts, tot, res if has_res else None, p, t0, max_points),
    }
    if live is None:
        out["live_at_peak"] = None
        out["top_at_peak"] = []
    else:
        held = float(b[live].sum())
        out["live_at_peak"] = {"bytes": held, "allocations": int(live.sum()),
                               "before_recording_bytes": float(tot[p]) - held if recorded else None}
        out["top_at_peak"] = _by_op(owners[live], b[live], names, top)
    out["top_allocating"] = _by_op(owners[b > 0], b[b > 0], names, top)
    return out, b, live


def _unattributed_note(b: np.ndarray, why: np.ndarray, d: dict) -> dict | None:
    """What of a device's allocations no op could be charged with, and why (None when every byte was charged,
    or nothing was allocated); also why nothing is listed as held at the peak, when that is so."""
    alloc = b > 0
    total = float(b[alloc].sum())
    lost = float(b[alloc & (why > 0)].sum())
    no_addr = d["live_at_peak"] is None
    if total <= 0 or (lost <= 0 and not no_addr):
        return None
    parts = []
    for code, reason in ((1, "on threads that recorded no op (a DataLoader worker, a library's own thread, or "
                              "thread ids the trace writes differently on its ops)"),
                         (2, "between ops on their thread (Python code outside any op, the profiler's own buffers)")):
        x = float(b[alloc & (why == code)].sum())
        if x > 0:
            parts.append(f"{x / total * 100:.1f}% {reason}")
    out = {"bytes": lost, "share_pct": lost / total * 100, "why": "; ".join(parts)}
    if no_addr:
        out["at_peak"] = ("the events carry no addresses (\"Addr\": recorded by torch >= 1.10), so no allocation "
                          "can be paired with its free: what is held at the peak cannot be told")
    return out


def _live_at(addr: np.ndarray, b: np.ndarray, p: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(allocations live at event p: made at or before it, freed after it or never; each allocation's free
    position, len when never). None when the events carry no addresses."""
    n = len(b)
    if not n or (addr <= 0).all():  # (0: not recorded)
        return None, None
    pos = np.arange(n)
    o = np.argsort(addr, kind="stable")  # by address, then position
    free_at = np.full(n, n, dtype=np.int64)
    nxt_same = addr[o[1:]] == addr[o[:-1]]
    pair = nxt_same & (b[o[:-1]] > 0) & (b[o[1:]] < 0)
    free_at[o[:-1][pair]] = o[1:][pair]
    live = (b > 0) & (pos <= p) & (free_at > p)
    return live, free_at


def _by_op(code: np.ndarray, b: np.ndarray, names: list[str], top: int, key: str = "op",
           none: str = NO_OP) -> list[dict]:
    """Bytes and allocations per op name (code -1: outside any op), largest first."""
    if not len(code):
        return []
    c = code.astype(np.int64) + 1  # -1 -> 0
    nbytes = np.bincount(c, weights=b)
    count = np.bincount(c)
    order = np.lexsort((np.arange(len(nbytes)), -nbytes))
    out = []
    for i in order.tolist():
        if count[i] == 0:
            continue
        out.append({key: names[i - 1] if i > 0 else none, "bytes": float(nbytes[i]),
                    "allocations": int(count[i])})
        if len(out) >= top:
            break
    return out


def _steps(ts: np.ndarray, b: np.ndarray, tot: np.ndarray, res: np.ndarray, nums: list[int], st: np.ndarray,
           se: np.ndarray, t0: float) -> list[dict]:
    """Per ProfilerStep: peaks inside it, allocated at its start and end, bytes it allocated."""
    if not len(nums):
        return []
    lo, hi = np.searchsorted(ts, st, "left"), np.searchsorted(ts, se, "left")
    out = []
    for n, a, z, s, e in zip(nums, lo.tolist(), hi.tolist(), st.tolist(), se.tolist()):
        before = float(tot[a - 1]) if a > 0 else float(tot[0] - b[0])
        r = res[a:z]
        rf = r[np.isfinite(r)]
        out.append({
            "step": int(n), "start_us": s - t0, "dur_us": e - s, "events": int(z - a),
            "start_allocated_bytes": before,
            "end_allocated_bytes": float(tot[z - 1]) if z > a else before,
            "peak_allocated_bytes": float(tot[a:z].max()) if z > a else before,
            "peak_reserved_bytes": float(rf.max()) if len(rf) else None,
            "allocated_bytes": float(b[a:z][b[a:z] > 0].sum()),
            "allocations": int((b[a:z] > 0).sum()),
        })
    return out


def _curve(ts: np.ndarray, tot: np.ndarray, res: np.ndarray | None, p: int, t0: float, max_points: int) -> dict:
    """At most max_points (>= 8) events: the first, the last, the peak, and per time bin its lowest and highest
    Total Allocated. Each point is the value after that event (the curve is a step function)."""
    n = len(ts)
    max_points = max(int(max_points), 8)
    if n <= max_points:
        keep = np.arange(n)
    else:
        bins = (max_points - 3) // 2
        span = float(ts[-1] - ts[0])
        k = np.minimum(((ts - ts[0]) / span * bins).astype(np.int64), bins - 1) if span > 0 else \
            np.minimum(np.arange(n) * bins // n, bins - 1)
        # ts ascending, so each bin is one run of events: its first highest and first lowest by reduceat
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        seg = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
        picks = [np.array([0, n - 1, p])]
        for ext in (np.maximum.reduceat(tot, starts), np.minimum.reduceat(tot, starts)):
            hit = np.flatnonzero(tot == ext[seg])
            picks.append(hit[np.r_[True, seg[hit][1:] != seg[hit][:-1]]])
        keep = distinct(np.concatenate(picks))
    out = {"t_us": _round(ts[keep] - t0, 2), "allocated": _round(tot[keep], 0), "points": int(len(keep))}
    if res is not None:
        r = res[keep]
        out["reserved"] = [x if ok else None for x, ok in zip(_round(np.where(np.isfinite(r), r, 0.0), 0),
                                                              np.isfinite(r).tolist())]
    return out


def _round(a: np.ndarray, d: int) -> list:
    r = np.round(a, d).tolist()
    return [int(x) if float(x).is_integer() else x for x in r]


# ------------------------------------------------------------------------------------------- allocator calls


def allocator_index(trace: Trace) -> np.ndarray:
    """Launch indices of the device allocator calls (cudaMalloc, cudaFree, their HIP and driver twins)."""
    la = trace.launches
    if not len(la):
        return np.zeros(0, dtype=np.int64)
    is_alloc = np.array([n in ALLOCATOR_CALLS for n in trace.names], dtype=bool)
    return np.flatnonzero(is_alloc[la.name])


def allocator_calls(trace: Trace) -> dict:
    """Device allocator calls on the host: per call name, how many and their CPU time, in all and inside steps."""
    la, names = trace.launches, trace.names
    empty = {"calls": [], "count": 0, "host_us": 0.0, "in_steps": 0, "in_steps_host_us": 0.0,
             "steps_with_calls": 0, "frees": 0}
    idx = allocator_index(trace)
    if not len(idx):
        return empty
    dur = la.end[idx] - la.ts[idx]
    nums, st, se = profiler_steps(trace)
    step_of = np.full(len(idx), -1, dtype=np.int64)
    if len(nums):
        o = np.argsort(st, kind="stable")
        j = np.searchsorted(st[o], la.ts[idx], "right") - 1
        ok = (j >= 0) & (la.ts[idx] < se[o][np.maximum(j, 0)])
        step_of[ok] = o[j[ok]]
    inside = step_of >= 0 if len(nums) else np.ones(len(idx), dtype=bool)
    rows = []
    code = la.name[idx]
    for c in distinct(code).tolist():
        sel = code == c
        rows.append({"call": names[c], "count": int(sel.sum()), "host_us": float(dur[sel].sum()),
                     "in_steps": int((sel & inside).sum()), "in_steps_host_us": float(dur[sel & inside].sum()),
                     "free": names[c] in ALLOCATOR_FREE})
    rows.sort(key=lambda r: (-r["host_us"], r["call"]))
    return {"calls": rows, "count": int(len(idx)), "host_us": float(dur.sum()),
            "in_steps": int(inside.sum()), "in_steps_host_us": float(dur[inside].sum()),
            "steps_with_calls": int(len(distinct(step_of[step_of >= 0]))) if len(nums) else 0,
            "frees": int(sum(r["count"] for r in rows if r["free"]))}


# ------------------------------------------------------------------------------------------- findings


def churn_finding(trace: Trace, calls: dict, acc: Account | None, steps: int, span_us: float) -> dict | None:
    """Allocator calls during the run (calls: allocator_calls): their count and CPU time, and the GPU idle the
    ledger charged to the frees (the saving: that idle, counted there once). Named when there are frees, idle
    charged to them, or allocations in two steps or more; None when the calls are only the cache growing."""
    if not calls.get("count"):
        return None
    idx = allocator_index(trace)
    idle = 0.0
    if acc is not None and len(acc.gap_sync_call):
        idle = float(acc.gap_sync_us[np.isin(acc.gap_sync_call, idx)].sum())
    # the cache growing in one step (the first after start-up) is no churn; without steps only frees say it is
    repeated = steps > 0 and calls["steps_with_calls"] >= 2
    if not (calls["frees"] or repeated or idle > 0):
        return None
    names = ", ".join(f"{r['call']} ×{r['count']:,}" for r in calls["calls"])
    where = (f"{u.plural(calls['in_steps'], 'call')} inside the {u.plural(steps, 'profiled step')} "
             f"({u.us(calls['in_steps_host_us'])} of CPU time), in {calls['steps_with_calls']} of them"
             if steps else f"{u.plural(calls['count'], 'call')} ({u.us(calls['host_us'])} of CPU time); "
             "no ProfilerStep annotations, so the whole trace is counted")
    if idle > 0:
        cost = (f"The frees wait for the device to finish all its queued work, and the GPU ran out of work "
                f"while they did: {u.us(idle)} of GPU idle ({idle / span_us * 100:.1f}% of the span) is "
                "charged to them in the step's account (the sync term, counted once). Saving shown: that idle, "
                "an upper bound.")
    else:
        cost = ("No GPU idle is charged to the frees in the step's account, so no time saving is claimed here "
                "(GPU idle while a malloc call held the CPU, if any, is host dispatch and counted in that "
                "finding); each free still waits for the device, and each call costs the CPU its time.")
    text = (f"The caching allocator went to the driver during the run ({names}): {where}. PyTorch calls the "
            "driver's malloc only when its cache holds no free block that fits, and the driver's free when it "
            "releases cached blocks (torch.cuda.empty_cache(), or an allocation that failed and was retried "
            "after emptying the cache). " + cost + " Fix: let the caching allocator keep its blocks — do not "
            "call torch.cuda.empty_cache() inside the loop; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
            "so one segment grows instead of new ones being allocated; keep tensor shapes stable from step to "
            "step (pad variable lengths to a few bucket sizes) so freed blocks fit the next step's requests.")
    title = (f"Allocator churn: {u.plural(calls['count'], 'cudaMalloc/cudaFree-type call')}"
             + (f" ({calls['in_steps']:,} inside steps)" if steps else "")
             + (f", {u.us(idle)} of GPU idle while the frees waited" if idle > 0 else
                f", {u.us(calls['host_us'])} of CPU time"))
    return {"kind": "allocator_churn", "title": title, "text": text,
            "fix": ("Keep the allocator's blocks: no empty_cache() in the loop, "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, stable (padded) shapes."),
            "group": "memory", "ops": [], "saving_us": idle, "idle_us": idle, "confidence": "medium",
            "calls": calls["count"], "host_us": calls["host_us"]}


def fragmentation_findings(section: dict) -> list[dict]:
    """Per GPU device: reserved far above allocated at the peak (memory, not time: saving 0)."""
    out = []
    for d in section.get("devices") or ():
        if d["type"] == "cpu" or d.get("reserved_at_peak_bytes") is None:
            continue
        res, alloc = d["reserved_at_peak_bytes"], d["peak_allocated_bytes"]
        gap = res - alloc
        if gap < FRAG_MIN_BYTES or gap < FRAG_MIN_SHARE * res:
            continue
        env = "PYTORCH_CUDA_ALLOC_CONF" if d["type"] != "hip" else "PYTORCH_HIP_ALLOC_CONF (or PYTORCH_CUDA_ALLOC_CONF)"
        out.append({
            "kind": "memory_fragmentation",
            "title": (f"{d['device']}: {u.bytes_iec(gap)} reserved above what is allocated at the memory peak "
                      f"({u.bytes_iec(res)} reserved, {u.bytes_iec(alloc)} allocated)"),
            "text": (f"At the peak of allocated memory on {d['device']} ({u.nbytes(alloc)}), the caching allocator "
                     f"held {u.nbytes(res)} from the driver: {u.bytes_iec(gap)} ({gap / res * 100:.0f}% of it) was "
                     "cached but not in use — blocks split to sizes the next requests do not fit (fragmentation), "
                     "so the process needs more device memory than its tensors take and can run out of memory "
                     f"with room to spare. Fix: set {env}=expandable_segments:True (segments grow and shrink in "
                     "place instead of being split), keep shapes stable across steps. This is about memory, not "
                     "time: no saving is claimed."),
            "fix": f"Set {env}=expandable_segments:True; keep shapes stable across steps.",
            "group": "memory", "ops": [], "saving_us": 0.0, "confidence": "high",
            "device": d["device"], "gap_bytes": gap,
        })
    return out
