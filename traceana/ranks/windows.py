"""What a rank did before it arrived at each collective: the interval from its previous collective's
end (the last time it was in step with the others) to its arrival, split by what filled it.

A rank that arrives late spent that interval longer than the others did; ranks/waits.py sets the
late rank's split against the other ranks' for the same collective. The interval is cut into
(each µs once, the first that applies):

  work        a GPU rank: the union of its device's non-communication GPU events (kernels, copies);
              a CPU rank: the union of the outermost ops on the thread that issued the call
  comm        other collectives' kernels running meanwhile (other groups, other streams)
  idle        a GPU rank's device idle, by the ledger's cause (diagnose/ledger.py): sync (a blocking
              host call), host_dispatch (the CPU issued the next work late), launch_gaps, stream_wait,
              no_work; a CPU rank: `untracked`, host time with no recorded op on the issuing thread
              (Python, I/O, a sleep, a lock)
and besides: data loading (the time a DataLoader annotation ran in it, on any thread), and the two
ops with the most time in it (GPU time of the kernels they launched, or CPU time of the ops).

Vectorised over the calls: their intervals are disjoint and sorted (each starts where every earlier
call had ended), so one cover() per interval set gives every call's share.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from traceana.diagnose.ledger import IDLE_CAUSES
from traceana.link.steps import cover, merge
from traceana.arrays import distinct

IDLE = ("sync", "host_dispatch", "launch_gaps", "stream_wait", "no_work", "untracked")
TOP = 2  # ops named per interval
_LOADER = "dataloader"


def starts(t: np.ndarray, end: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Per call (sorted by arrival t): where its interval starts — the latest end of the calls before it
    (an end not recorded counts as the arrival), never after its own arrival; `fallback` for the first."""
    e = np.where(np.isfinite(end), end, t)
    prev = np.concatenate(([-np.inf], np.maximum.accumulate(e)[:-1])) if len(t) else np.zeros(0)
    w0 = np.where(np.isfinite(prev), prev, fallback)
    return np.minimum(w0, t)


def _covered(s: np.ndarray, e: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    if not len(s):
        return np.zeros(len(w0))
    a, b = merge(s, e)
    return cover(a, b, w0, w1)


def _top_ops(ts: np.ndarray, end: np.ndarray, code: np.ndarray, w0: np.ndarray, w1: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """(codes, µs) of the TOP codes with the most time clipped to each interval (-1 / 0 when fewer)."""
    n = len(w0)
    codes = np.full((n, TOP), -1, dtype=np.int64)
    us = np.zeros((n, TOP), dtype=np.float32)
    if not len(ts) or not n:
        return codes, us
    k = np.searchsorted(w0, ts, side="right") - 1  # the interval each one starts in (they are disjoint)
    kk = np.maximum(k, 0)
    d = np.minimum(end, w1[kk]) - np.maximum(ts, w0[kk])
    ok = (k >= 0) & (d > 0)
    if not ok.any():
        return codes, us
    k, c, d = k[ok], code[ok], d[ok]
    pair = k * (int(code.max()) + 1) + c
    u, inv = np.unique(pair, return_inverse=True)
    tot = np.bincount(inv, weights=d)
    win, cc = u // (int(code.max()) + 1), u % (int(code.max()) + 1)
    o = np.lexsort((-tot, win))
    win, cc, tot = win[o], cc[o], tot[o]
    first = np.searchsorted(win, win, side="left")
    rank = np.arange(len(win)) - first
    keep = rank < TOP
    codes[win[keep], rank[keep]] = cc[keep]
    us[win[keep], rank[keep]] = tot[keep]
    return codes, us


def _loader(trace: Any, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    ann, names = trace.annotations, trace.names
    if not len(ann):
        return np.zeros(len(w0))
    hit = np.array([_LOADER in n.lower() for n in names], dtype=bool)[ann.name]
    return _covered(ann.ts[hit], ann.end[hit], w0, w1)


def gpu_windows(trace: Any, dev: int, acc: Any, ev_name: np.ndarray, comm_ev: np.ndarray,
                w0: np.ndarray, w1: np.ndarray) -> dict[str, np.ndarray]:
    """The split of each interval [w0, w1) of a GPU rank. acc: the device's ledger Account; ev_name:
    a name code per GPU event (its op's, else its kernel's); comm_ev: which events are communication."""
    gpu = trace.gpu
    on = gpu.device == dev
    end = gpu.ts + gpu.dur
    work = on & ~comm_ev
    out = {"work_us": _covered(gpu.ts[work], end[work], w0, w1),
           "comm_us": _covered(gpu.ts[on & comm_ev], end[on & comm_ev], w0, w1)}
    idle = np.zeros((len(w0), len(IDLE)), dtype=np.float32)
    if acc is not None and len(acc.gap_start):
        gs, gl, sync = acc.gap_start, acc.gap_len, acc.gap_sync_us
        idle[:, 0] = cover(gs, gs + sync, w0, w1)  # the blocking call holds the gap's beginning
        rest0 = gs + sync
        for c, cause in enumerate(IDLE_CAUSES):  # the rest of each gap: its own cause
            sel = (acc.gap_cause == c) & (gl > sync)
            if sel.any():
                idle[:, IDLE.index(cause)] += cover(rest0[sel], (gs + gl)[sel], w0, w1)
    out["idle_us"] = idle
    out["data_us"] = _loader(trace, w0, w1)
    sel = np.flatnonzero(work)
    sel = sel[np.argsort(gpu.ts[sel], kind="stable")]
    out["top"], out["top_us"] = _top_ops(gpu.ts[sel], end[sel], ev_name[sel], w0, w1)
    return out


def cpu_windows(trace: Any, thread: np.ndarray, w0: np.ndarray, w1: np.ndarray, skip: np.ndarray
                ) -> dict[str, np.ndarray]:
    """The split of each interval of a CPU rank, on the thread that issued each call: its outermost
    ops (not the communication ops themselves: `skip` per name code) and the time with none."""
    ops = trace.ops
    n = len(w0)
    work = np.zeros(n)
    top = np.full((n, TOP), -1, dtype=np.int64)
    top_us = np.zeros((n, TOP), dtype=np.float32)
    for th in distinct(thread).tolist():
        mine = np.flatnonzero(thread == th)
        if th < 0 or not len(ops):
            continue
        sel = np.flatnonzero((ops.thread == th) & ~skip[ops.name])
        sel = sel[np.lexsort((-ops.end[sel], ops.ts[sel]))]
        if len(sel):  # the outermost: not inside an earlier op
            reach = np.maximum.accumulate(ops.end[sel])
            outer = np.ones(len(sel), dtype=bool)
            outer[1:] = ops.ts[sel[1:]] >= reach[:-1]
            sel = sel[outer]
        a, b = w0[mine], w1[mine]
        work[mine] = _covered(ops.ts[sel], ops.end[sel], a, b)
        c, u = _top_ops(ops.ts[sel], ops.end[sel], ops.name[sel].astype(np.int64), a, b)
        top[mine], top_us[mine] = c, u
    idle = np.zeros((n, len(IDLE)), dtype=np.float32)
    idle[:, IDLE.index("untracked")] = np.maximum(w1 - w0 - work, 0.0)
    return {"work_us": work, "comm_us": np.zeros(n), "idle_us": idle, "data_us": _loader(trace, w0, w1),
            "top": top, "top_us": top_us}
