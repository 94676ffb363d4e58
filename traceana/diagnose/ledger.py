"""The step's one account: every µs of a device's span counted once, with its cause.

A device's span runs from its first GPU event's start to its last event's end. Each instant of it is
either busy (some GPU event runs) or idle, and gets exactly one term:

  work            kernels, by the bound of the op that launched them (compute, memory, latency,
                  underutilised, unmodelled, unknown, opaque). Work hides everything under it: a
                  collective or a copy that runs while a kernel runs on another stream costs nothing.
  communication   collective / p2p kernels with no work running (exposed), split per kernel into
                  comm_transfer (the bytes the algorithm moves per rank at the link's bandwidth: the
                  kernel's last transfer_us) and comm_wait (the rest of the kernel's time: waiting for
                  the peers, i.e. for the slowest rank — overlap cannot recover it, balance can);
                  comm_unsized where the size or the link is not known.
  copies          memcpy / memset with nothing above running.
  idle            no GPU event, by what the CPU side shows (per idle gap):
      sync           the GPU went idle while a thread that feeds it was blocked in a host-synchronous
                     call (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, a
                     synchronous memcpy, cudaFree — their HIP twins): the queue drained because the CPU
                     waited, or neither side worked, the GPU idle and the CPU waiting on it. The gap counts as sync
                     until the call returned (plus one launch gap of dispatch); a gap of at most
                     LAUNCH_GAP_US before work already queued stays a launch gap.
      launch_gaps    gaps of at most LAUNCH_GAP_US between back-to-back events: the fixed cost of
                     issuing work one kernel at a time.
      host_dispatch  the next event's launch call returned only after the GPU went idle, late in the gap
                     (at least half of the gap had passed): the CPU (Python, dispatch, data loading, a slow
                     first launch) set the pace.
      graph_launch   the part of a host_dispatch gap during which a thread feeding the device sat inside a
                     CUDA / HIP graph call (GRAPH_CALL: a graph launch, instantiation, upload, update, or a
                     stream capture): the host's cost of graphs. A graph's kernels start while its launch call
                     is still submitting them, so the GPU can run out of work in the middle of the call;
                     a graph's first launch uploads it. Measured as the overlap of the gap with those calls.
      stream_wait    the next event's launch call returned before the GPU went idle, or early in the gap,
                     yet the event started later: it waited on another stream, an event, or a graph's
                     dependencies.
      no_work        the next event has no launch in the trace: what held it cannot be seen.

Everything here is sorts, cumulative maxima and searchsorted over the device's events: no per-event
Python loop. Only the few gaps described in words (the largest, the stalls) are visited one by one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec
import numpy as np

from traceana.arrays import distinct, median
from traceana.link.comm_kernels import comm_name_mask
from traceana.link.attribute import Links
from traceana.load.model import Trace

LAUNCH_GAP_US = 30.0  # gaps up to this long are launch overhead (HTA's consecutive_kernel_delay default)
WORK = ("compute", "memory", "latency", "underutilised", "unmodelled", "unknown", "opaque")
COMM = ("comm_transfer", "comm_wait", "comm_unsized")
COPIES = ("memcpy", "memset")
PRIORITY = WORK + COMM + COPIES  # the first running category wins an instant
IDLE_CAUSES = ("sync", "launch_gaps", "host_dispatch", "graph_launch", "stream_wait", "no_work")
_CODE = {c: i for i, c in enumerate(PRIORITY)}
# a kernel of a copy op (a cast on the way to the device) is memory work
_BOUND_ALIAS = {"host_link": "memory", "peer_link": "memory", "communication": "comm_unsized"}

# Device memory frees: cudaFree and its twins wait for the device to finish all queued work before they
# release the memory (the caching allocator calls them from torch.cuda.empty_cache(), or when an allocation
# failed and is retried after emptying its cache). diagnose/memory.py names them (allocator churn).
ALLOCATOR_FREE = frozenset({"cudaFree", "hipFree", "cuMemFree", "cuMemFree_v2"})
# Host calls that return only when the device has finished the work they wait for.
SYNC_CALLS = ALLOCATOR_FREE | frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize",
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyHtoD", "cuMemcpyHtoD_v2",
    "hipMemcpy", "hipMemcpy2D", "hipMemcpy3D", "hipMemcpyDtoH", "hipMemcpyHtoD", "hipMemcpyFromSymbol",
    # a copy on a stream that returns when the copy is done: torch on ROCm makes every blocking
    # copy_ / .to() / .item() with it (an async copy and a stream synchronize in one call)
    "hipMemcpyWithStream",
})
# ... and asynchronous copies, which block the host when the copy could not be asynchronous (pageable
# host memory) or when it must complete before the call returns: seen as a call that ends after its copy.
_ASYNC_COPY = ("MemcpyAsync", "MemcpyDtoHAsync", "MemcpyHtoDAsync", "Memcpy2DAsync", "Memcpy3DAsync")
# Host calls that build, upload or replay a CUDA / HIP graph (runtime and driver API, any _v / _ptsz suffix):
# cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch; cudaGraphInstantiate(WithFlags / WithParams), cuGraphInstantiate,
# hipGraphInstantiate; cudaGraphUpload, cuGraphUpload, hipGraphUpload; cudaGraphExecUpdate (and the per-node
# cudaGraphExec*SetParams updates); cudaStreamBeginCapture / EndCapture (recording a graph).
GRAPH_CALL = re.compile(r"Graph(Exec\w*)?(Launch|Instantiate|Upload|Update|SetParams)|Stream(Begin|End)Capture")
GRAPH_LAUNCH = re.compile(r"GraphLaunch")


class Account(msgspec.Struct, frozen=True):
    """One device's span, split. Gap arrays are in time order (absolute µs)."""

    device: int
    t0: float
    t1: float
    by_category: dict[str, float]  # PRIORITY categories (exposed) + "idle"
    comm_total_us: float  # union of the device's communication kernels, hidden or not
    comm_split_us: dict[str, float]  # comm_transfer / comm_wait / comm_unsized summed over kernels
    gap_start: np.ndarray
    gap_len: np.ndarray
    gap_event: np.ndarray  # the GPU event that ends each gap
    gap_sync_us: np.ndarray  # the part of each gap charged to a blocking call
    gap_sync_call: np.ndarray  # launch index of that call, -1 when none
    gap_cause: np.ndarray  # index into IDLE_CAUSES of the rest of the gap (and of the gap when no sync)
    gap_graph_us: np.ndarray | None = None  # the part of each host_dispatch gap inside graph calls (graph_launch)

    @property
    def span_us(self) -> float:
        return self.t1 - self.t0

    @property
    def graph_us(self) -> np.ndarray:
        return self.gap_graph_us if self.gap_graph_us is not None else np.zeros(len(self.gap_len))

    def rest_us(self) -> np.ndarray:
        """Per gap: the part left to its gap_cause (the gap less its sync and graph parts)."""
        return self.gap_len - self.gap_sync_us - self.graph_us

    def idle_by_cause(self) -> dict[str, float]:
        rest = self.rest_us()
        out = {c: float(rest[self.gap_cause == i].sum()) for i, c in enumerate(IDLE_CAUSES)}
        out["sync"] += float(self.gap_sync_us.sum())
        out["graph_launch"] += float(self.graph_us.sum())
        return out

    def gap_codes(self) -> np.ndarray:
        """One cause per gap (for drawing): sync where the blocking call holds most of the gap, graph_launch
        where graph calls do."""
        code = self.gap_cause.copy()
        code[self.graph_us * 2 >= self.gap_len] = IDLE_CAUSES.index("graph_launch")
        code[self.gap_sync_us * 2 >= self.gap_len] = 0
        return code


def union_us(ts: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of [ts, end) intervals; ts sorted ascending."""
    if len(ts) == 0:
        return 0.0
    reach = np.maximum.accumulate(end)
    gaps = ts[1:] - reach[:-1]
    return float(reach[-1] - ts[0] - gaps[gaps > 0].sum())


def event_categories(trace: Trace, ev_row: np.ndarray, rows: Sequence[dict]) -> np.ndarray:
    """Index into PRIORITY per GPU event (communication kernels: comm_unsized until split)."""
    gpu = trace.gpu
    codes = np.array([_CODE.get(_BOUND_ALIAS.get(r.get("bound"), r.get("bound")), _CODE["unmodelled"])
                      for r in rows], dtype=np.int8)
    cat = np.full(len(gpu), _CODE["unmodelled"], dtype=np.int8)
    has = ev_row >= 0
    if len(rows):
        cat[has] = codes[ev_row[has]]
    if len(gpu):
        comm = comm_name_mask(trace.names)[gpu.name] & (gpu.kind == 0)
        cat[comm] = _CODE["comm_unsized"]
        cat[gpu.kind == 1] = _CODE["memcpy"]
        cat[gpu.kind == 2] = _CODE["memset"]
    return cat


def transfer_per_kernel(rows: Sequence[dict]) -> np.ndarray:
    """Per row: the transfer time of one of its kernels (µs), nan when not known."""
    out = np.full(len(rows), np.nan)
    for i, r in enumerate(rows):
        c = r.get("comm") if isinstance(r.get("comm"), dict) else None
        if not c:
            continue
        t = c.get("transfer_us")
        if t is None and c.get("bytes_per_rank") is not None and c.get("link_gbps"):
            t = c["bytes_per_rank"] / (c["link_gbps"] * 1e3)
        if t is not None and np.isfinite(t) and t >= 0:
            out[i] = t / max(r.get("kernel_count") or 1.0, 1.0)
    return out


def blocking_calls(trace: Trace, links: Links) -> np.ndarray:
    """Launch indices of host-synchronous runtime calls (sorted by start)."""
    la, gpu = trace.launches, trace.gpu
    if not len(la):
        return np.zeros(0, dtype=np.int64)
    names = trace.names
    sync_code = np.array([n in SYNC_CALLS for n in names], dtype=bool)
    async_code = np.array([any(k in n for k in _ASYNC_COPY) for n in names], dtype=bool)
    block = sync_code[la.name]
    cand = async_code[la.name]
    if cand.any() and len(gpu):
        copy_ev = np.flatnonzero((links.gpu_launch >= 0) & (gpu.kind == 1))
        owner = links.gpu_launch[copy_ev]
        ok = cand[owner] & (la.end[owner] >= gpu.ts[copy_ev] + gpu.dur[copy_ev])
        block[owner[ok]] = True
    idx = np.flatnonzero(block)
    return idx[np.argsort(la.ts[idx], kind="stable")]


def device_account(trace: Trace, links: Links, dev: int, cat: np.ndarray, xfer: np.ndarray,
                   ev_row: np.ndarray, blocking: np.ndarray) -> Account:
    """Split device `dev`'s span. cat: event_categories; xfer: transfer_per_kernel per row."""
    gpu = trace.gpu
    idx = np.flatnonzero(gpu.device == dev)
    idx = idx[np.argsort(gpu.ts[idx], kind="stable")]
    ts, end, c = gpu.ts[idx], gpu.ts[idx] + gpu.dur[idx], cat[idx].astype(np.int64)
    t0, t1 = (float(ts[0]), float(end.max())) if len(idx) else (0.0, 0.0)
    # communication kernels: the last transfer_us of each is transfer, the rest wait
    comm = c == _CODE["comm_unsized"]
    split = {k: 0.0 for k in COMM}
    comm_total = union_us(ts[comm], end[comm]) if comm.any() else 0.0
    if comm.any():
        r = ev_row[idx[comm]]
        x = np.where(r >= 0, xfer[np.maximum(r, 0)] if len(xfer) else np.nan, np.nan)
        known = np.isfinite(x)
        dur = end[comm] - ts[comm]
        x = np.minimum(np.where(known, x, 0.0), dur)
        split = {"comm_transfer": float(x[known].sum()), "comm_wait": float((dur - x)[known].sum()),
                 "comm_unsized": float(dur[~known].sum())}
        k_ts, k_end = ts[comm][known], end[comm][known]
        cut = k_end - x[known]
        # replace each sized communication kernel by its wait part and add its transfer part
        keep = ~comm
        keep[np.flatnonzero(comm)[~known]] = True
        ts = np.concatenate([ts[keep], k_ts, cut])
        end = np.concatenate([end[keep], cut, k_end])
        c = np.concatenate([c[keep], np.full(len(k_ts), _CODE["comm_wait"]), np.full(len(cut), _CODE["comm_transfer"])])
        o = np.argsort(ts, kind="stable")
        ts, end, c = ts[o], end[o], c[o]
    by = {k: 0.0 for k in PRIORITY}
    covered = 0.0
    for k, name in enumerate(PRIORITY):
        sel = c <= k
        u = union_us(ts[sel], end[sel]) if sel.any() else 0.0
        by[name] = max(u - covered, 0.0)
        covered = max(u, covered)
    gaps = _gaps(trace, links, idx, blocking)
    by["idle"] = float(gaps["len"].sum())
    return Account(device=int(dev), t0=t0, t1=t1, by_category=by, comm_total_us=comm_total, comm_split_us=split,
                   gap_start=gaps["start"], gap_len=gaps["len"], gap_event=gaps["event"],
                   gap_sync_us=gaps["sync"], gap_sync_call=gaps["call"], gap_cause=gaps["cause"],
                   gap_graph_us=gaps["graph"])


def _gaps(trace: Trace, links: Links, idx: np.ndarray, blocking: np.ndarray) -> dict:
    """Idle gaps of a device's events (idx sorted by start) and their causes."""
    gpu, la = trace.gpu, trace.launches
    empty = {"start": np.zeros(0), "len": np.zeros(0), "event": np.zeros(0, np.int64), "sync": np.zeros(0),
             "call": np.zeros(0, np.int64), "cause": np.zeros(0, np.int8), "graph": np.zeros(0)}
    if len(idx) < 2:
        return empty
    ts = gpu.ts[idx]
    reach = np.maximum.accumulate(ts + gpu.dur[idx])
    gap = ts[1:] - reach[:-1]
    k = np.flatnonzero(gap > 0)
    start, length, ev = reach[k], gap[k], idx[k + 1]
    launch = links.gpu_launch[ev]
    has = launch >= 0
    cause = np.full(len(k), IDLE_CAUSES.index("no_work"), dtype=np.int8)
    late = np.zeros(len(k), dtype=bool)
    # submitted (the launch call returned) after the GPU went idle, and most of the gap passed before
    # that: the CPU set the pace — including a launch call that itself took long (a kernel's first
    # launch loading its code). Submitted early in the gap yet started much later, it waited on
    # something (an event, another stream or device): a dependency, whatever the CPU did meanwhile.
    lt = la.end[launch[has]]
    late[has] = (lt > start[has]) & (lt - start[has] >= start[has] + length[has] - lt)
    cause[has & late] = IDLE_CAUSES.index("host_dispatch")
    cause[has & ~late] = IDLE_CAUSES.index("stream_wait")
    cause[length <= LAUNCH_GAP_US] = IDLE_CAUSES.index("launch_gaps")
    sync = np.zeros(len(k))
    call = np.full(len(k), -1, dtype=np.int64)
    feeders = _feeding_threads(trace, links, idx)
    if len(blocking):
        b = blocking[np.isin(la.thread[blocking], feeders)]
        if len(b):
            b_ts, b_end = la.ts[b], la.end[b]
            # the call in progress at each gap's start: the latest-reaching call that began by then
            run_end = np.maximum.accumulate(b_end)
            run_arg = _running_argmax(b_end)
            j = np.searchsorted(b_ts, start, side="right") - 1
            ok = j >= 0
            jj = np.maximum(j, 0)
            held = ok & (run_end[jj] > start)
            # a short gap before work that was already queued is the GPU's own issue latency, not the sync's
            held &= ~((length <= LAUNCH_GAP_US) & has & ~late)
            sync[held] = np.minimum(run_end[jj][held] - start[held] + LAUNCH_GAP_US, length[held])
            call[held] = b[run_arg[jj][held]]
    graph = np.zeros(len(k))
    hd = cause == IDLE_CAUSES.index("host_dispatch")
    if hd.any():
        g_ts, g_end = graph_call_spans(trace, feeders)
        if len(g_ts):
            inside = covered_in(g_ts, g_end, start[hd], start[hd] + length[hd])
            graph[hd] = np.clip(np.minimum(inside, length[hd] - sync[hd]), 0.0, None)
    return {"start": start, "len": length, "event": ev, "sync": sync, "call": call, "cause": cause, "graph": graph}


def graph_calls(trace: Trace, threads: np.ndarray | None = None) -> np.ndarray:
    """Launch indices of graph calls (GRAPH_CALL), on `threads` when given, sorted by start."""
    la = trace.launches
    if not len(la):
        return np.zeros(0, dtype=np.int64)
    is_graph = np.fromiter((bool(GRAPH_CALL.search(n)) for n in trace.names), dtype=bool, count=len(trace.names))
    sel = is_graph[la.name]
    if threads is not None:
        sel &= np.isin(la.thread, threads)
    idx = np.flatnonzero(sel)
    return idx[np.argsort(la.ts[idx], kind="stable")]


def graph_call_spans(trace: Trace, threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the graph calls of `threads` as disjoint [start, end) intervals, sorted."""
    idx = graph_calls(trace, threads)
    la = trace.launches
    return merge_intervals(la.ts[idx], la.end[idx])


def merge_intervals(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[ts, end) intervals (ts sorted) merged into disjoint ones."""
    if not len(ts):
        return np.zeros(0), np.zeros(0)
    reach = np.maximum.accumulate(end)
    new = np.ones(len(ts), dtype=bool)
    new[1:] = ts[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(ts) - 1)
    return ts[first], reach[last]


def covered_in(u_ts: np.ndarray, u_end: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per window [a, b): how much of it the disjoint sorted intervals [u_ts, u_end) cover (searchsorted over
    the intervals' running length, so linear in windows + intervals)."""
    cum = np.concatenate([[0.0], np.cumsum(u_end - u_ts)])

    def upto(x: np.ndarray) -> np.ndarray:  # covered length of (-inf, x)
        j = np.searchsorted(u_ts, x, side="right")  # intervals starting at or before x
        jj = np.maximum(j - 1, 0)
        part = np.where(j > 0, np.clip(np.minimum(x, u_end[jj]) - u_ts[jj], 0.0, None), 0.0)
        return cum[jj] * (j > 0) + part

    return np.maximum(upto(b) - upto(a), 0.0)


def _running_argmax(a: np.ndarray) -> np.ndarray:
    """Index of the running maximum of a (first index reaching it)."""
    run = np.maximum.accumulate(a)
    pos = np.where(a == run, np.arange(len(a)), 0)
    return np.maximum.accumulate(pos)


def feeding_threads(trace: Trace, links: Links, dev: int) -> np.ndarray:
    """Threads that launched any of device `dev`'s events."""
    return _feeding_threads(trace, links, np.flatnonzero(trace.gpu.device == dev))


def _feeding_threads(trace: Trace, links: Links, idx: np.ndarray) -> np.ndarray:
    """Threads that launched any of the device's events (their blocking calls can starve it)."""
    launch = links.gpu_launch[idx]
    launch = launch[launch >= 0]
    if not len(launch):
        return np.zeros(0, dtype=trace.launches.thread.dtype)
    return distinct(trace.launches.thread[launch])


def accounts(trace: Trace, links: Links, ev_row: np.ndarray, rows: Sequence[dict]) -> dict[int, Account]:
    """Every device's Account (the same rules for each)."""
    gpu = trace.gpu
    if not len(gpu):
        return {}
    cat = event_categories(trace, ev_row, rows)
    xfer = transfer_per_kernel(rows)
    blocking = blocking_calls(trace, links)
    return {int(d): device_account(trace, links, int(d), cat, xfer, ev_row, blocking)
            for d in distinct(gpu.device).tolist()}


def step_stats(trace: Trace) -> tuple[int, float | None]:
    """(ProfilerStep annotations, their median duration)."""
    names, ann = trace.names, trace.annotations
    if not len(ann):
        return 0, None
    is_step = np.array([n.startswith("ProfilerStep#") for n in names], dtype=bool)[ann.name]
    if not is_step.any():
        return 0, None
    # one per step number: the longest annotation of that name
    code, ts, end = ann.name[is_step], ann.ts[is_step], ann.end[is_step]
    dur: dict[int, float] = {}
    for c_, d in zip(code.tolist(), (end - ts).tolist()):
        dur[c_] = max(dur.get(c_, 0.0), d)
    return len(dur), median(np.array(sorted(dur.values())))


def median_gap(acc: Account, cause: str) -> float:
    rest = acc.rest_us()
    sel = (acc.gap_cause == IDLE_CAUSES.index(cause)) & (rest > 0)
    return median(rest[sel]) if sel.any() else 0.0


def stream_times(trace: Trace, dev: int, ev_row: np.ndarray, rows: Sequence[dict]) -> list[dict[str, float]]:
    """Per stream of device `dev`: its GPU events' time by op id ("" for events of no op). A stream runs its
    events one after another, so each stream's total is a floor under the device's span."""
    gpu = trace.gpu
    idx = np.flatnonzero(gpu.device == dev)
    if not len(idx):
        return []
    ids = np.array([r["id"] for r in rows] + [""], dtype=object)
    r = np.where(ev_row[idx] >= 0, ev_row[idx], len(rows))
    streams, s_inv = np.unique(gpu.stream[idx], return_inverse=True)
    key = s_inv.astype(np.int64) * (len(rows) + 1) + r
    keys, k_inv = np.unique(key, return_inverse=True)
    t = np.bincount(k_inv, weights=gpu.dur[idx])
    out: list[dict[str, float]] = [{} for _ in range(len(streams))]
    for k, v in zip(keys.tolist(), t.tolist()):
        out[k // (len(rows) + 1)][ids[k % (len(rows) + 1)]] = v
    return out
