"""What one rank's trace says about its steps, phases and collectives (beyond its Analysis).

`rank_facts(trace)` runs in the per-rank worker (traceana/ranks/executor.py) next to the analysis
and returns plain data that traceana/ranks/cross_rank.py compares across ranks:

- steps: the ProfilerStep#N windows (by step number; the longest when a step is annotated on
  several threads). Without steps the whole trace is one window.
- every GPU event is placed by its *launch* time (the cudaLaunchKernel / hipLaunchKernel call
  with the same correlation id; the event's own start when there is none): in a step (its
  position among the captured steps) and in a phase: `forward`, `backward` or `optimizer`.
- phases, from what the trace records, first found wins:
  forward    `## forward ##` annotations, else DistributedDataParallel.forward /
             FullyShardedDataParallel.forward, else derived: the part of each step before its
             first backward window, less optimizer and zero_grad windows;
  backward   `## backward ##` annotations, else the autograd engine's ops
             (`autograd::engine::evaluate_function: ...`, on the autograd thread);
  optimizer  `## optimizer ##` annotations, else `Optimizer.step#...` ranges.
  Where windows overlap, optimizer wins over backward, backward over forward.
- busy: the union of the primary device's GPU event intervals inside the step windows (each
  instant once, however many streams run), so busy <= the windows' total.
- collectives: the device time of the communication kernels (traceana/link/comm_kernels.py) on the
  primary device launched inside a step, in all and by kind. (Each call's arrival, end, group and
  what the rank did before it — what the ranks are matched by — is ranks/summary.py's, next to this.)
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from traceana.link.comm_kernels import comm_event_mask
from traceana.link.kernel_names.comm import kind as collective_kind  # AllReduce, AllGather, ... from a name

PHASES = ("forward", "backward", "optimizer")
_STEP = re.compile(r"^ProfilerStep#([0-9]{1,18})$")  # ASCII, and int64 holds it (a longer run is no step)
_MARK = re.compile(r"^##\s*(forward|backward|optimizer)\s*##$", re.IGNORECASE)
_FORWARD = re.compile(r"^(DistributedDataParallel|FullyShardedDataParallel)\.forward$")
_OPT_STEP = re.compile(r"^Optimizer\.step#")
_ZERO_GRAD = re.compile(r"^(Optimizer\.zero_grad#|##\s*zero_grad\s*##$)")
_AUTOGRAD = "autograd::engine::evaluate_function: "


# ----------------------------------------------------------------------------- intervals


def merge(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of [ts, end) intervals as sorted, disjoint (starts, ends)."""
    if len(ts) == 0:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(ts, kind="stable")
    s, e = ts[order], np.maximum(end[order], ts[order])
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def cover(starts: np.ndarray, ends: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
    """Length of the disjoint sorted intervals (starts, ends) inside each [lo, hi)."""
    lo, hi = np.atleast_1d(np.asarray(lo, dtype=float)), np.atleast_1d(np.asarray(hi, dtype=float))
    if len(starts) == 0:
        return np.zeros(len(lo))
    cum = np.concatenate(([0.0], np.cumsum(ends - starts)))

    def upto(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(starts, x, side="right") - 1
        inside = np.where(i >= 0, np.clip(x - starts[np.maximum(i, 0)], 0, None), 0.0)
        inside = np.minimum(inside, np.where(i >= 0, ends[np.maximum(i, 0)] - starts[np.maximum(i, 0)], 0.0))
        return cum[np.maximum(i, 0)] * (i >= 0) + inside

    return np.maximum(upto(np.maximum(hi, lo)) - upto(lo), 0.0)


def inside(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Index of the disjoint sorted interval holding each t, -1 where none does."""
    if len(starts) == 0:
        return np.full(len(t), -1, dtype=np.int64)
    i = np.searchsorted(starts, t, side="right") - 1
    ok = (i >= 0) & (t < ends[np.maximum(i, 0)])
    return np.where(ok, i, -1)


# ----------------------------------------------------------------------------- the trace


def _steps(trace: Any) -> tuple[list[int], np.ndarray, np.ndarray]:
    names, ann = trace.names, trace.annotations
    steps: dict[int, tuple[float, float]] = {}
    for code, ts, end in zip(ann.name.tolist(), ann.ts.tolist(), ann.end.tolist()):
        m = _STEP.match(names[code])
        if m:
            n = int(m.group(1))
            if n not in steps or end - ts > steps[n][1] - steps[n][0]:
                steps[n] = (ts, end)
    nums = sorted(steps)
    return nums, np.array([steps[n][0] for n in nums]), np.array([steps[n][1] for n in nums])


def _ranges(trace: Any, want: Any, ops: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Merged windows of the annotations (or CPU ops) whose name `want(name)` accepts."""
    src = trace.ops if ops else trace.annotations
    codes = np.array([bool(want(n)) for n in trace.names], dtype=bool)
    if len(src) == 0 or not codes.any():
        return np.zeros(0), np.zeros(0)
    sel = codes[src.name]
    return merge(src.ts[sel], src.end[sel])


def _launch_ts(trace: Any) -> np.ndarray:
    """Per GPU event: the start of the runtime call that launched it (same correlation id),
    else the event's own start."""
    gpu, ln = trace.gpu, trace.launches
    out = gpu.ts.astype(float).copy()
    if len(gpu) == 0 or len(ln) == 0:
        return out
    ok = ln.corr >= 0
    if not ok.any():
        return out
    order = np.argsort(ln.corr[ok], kind="stable")
    corr, ts = ln.corr[ok][order], ln.ts[ok][order]
    i = np.minimum(np.searchsorted(corr, gpu.corr), len(corr) - 1)
    hit = (gpu.corr >= 0) & (corr[i] == gpu.corr)
    out[hit] = ts[i[hit]]
    return out


def phase_windows(trace: Any, st: np.ndarray, se: np.ndarray) -> tuple[dict[str, tuple], dict[str, str]]:
    """{phase: (starts, ends)} merged windows and {phase: where they came from}."""
    win: dict[str, tuple] = {}
    src: dict[str, str] = {}
    for p in PHASES:
        w = _ranges(trace, lambda n, p=p: (m := _MARK.match(n)) is not None and m.group(1).lower() == p)
        if len(w[0]):
            win[p], src[p] = w, f"## {p} ## annotations"
    if "backward" not in win:
        w = _ranges(trace, lambda n: n.startswith(_AUTOGRAD), ops=True)
        if len(w[0]):
            win["backward"], src["backward"] = w, "autograd engine ops (evaluate_function)"
    if "optimizer" not in win:
        w = _ranges(trace, lambda n: _OPT_STEP.match(n) is not None)
        if len(w[0]):
            win["optimizer"], src["optimizer"] = w, "Optimizer.step# ranges"
    if "forward" not in win:
        w = _ranges(trace, lambda n: _FORWARD.match(n) is not None)
        if len(w[0]):
            win["forward"], src["forward"] = w, "DistributedDataParallel/FSDP .forward ranges"
    if "forward" not in win and "backward" in win and len(st):
        bs, be = win["backward"]
        zs, ze = _ranges(trace, lambda n: _ZERO_GRAD.match(n) is not None)
        os_, oe = win.get("optimizer", (np.zeros(0), np.zeros(0)))
        skip = merge(np.concatenate((zs, os_)), np.concatenate((ze, oe)))
        fs, fe = [], []
        for s, e in zip(st.tolist(), se.tolist()):
            j = np.searchsorted(be, s, side="right")  # first backward window ending after s
            if j >= len(bs) or bs[j] >= e:
                continue
            b = max(bs[j], s)
            cut = [(x, y) for x, y in zip(*skip) if y > s and x < b]  # few: zero_grad, optimizer
            lo = s
            for x, y in sorted(cut):
                if x > lo:
                    fs.append(lo), fe.append(min(x, b))
                lo = max(lo, y)
            if lo < b:
                fs.append(lo), fe.append(b)
        if fs:
            win["forward"] = merge(np.array(fs), np.array(fe))
            src["forward"] = "derived: each step before its first backward window, less optimizer and zero_grad"
    return win, src


def rank_facts(trace: Any) -> dict[str, Any]:
    """Plain-data facts of one rank (see the module doc)."""
    names, gpu = trace.names, trace.gpu
    nums, st, se = _steps(trace)
    dist = trace.distributed or {}
    rank, world = dist.get("rank"), dist.get("world_size")
    out: dict[str, Any] = {
        "rank": rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
        "world_size": world if isinstance(world, int) and not isinstance(world, bool) else None,
        "steps": (se - st).tolist(), "step_numbers": nums,
        "device": None, "busy_us": 0.0, "window_us": float((se - st).sum()) if nums else float(trace.span_us),
        "collective_us": 0.0, "collective_kernels": 0, "collective_by_kind": {},
        "phases": {}, "phase_source": {},
    }
    if len(gpu) == 0:
        return out
    ids, inv = np.unique(gpu.device, return_inverse=True)
    dev = int(ids[int(np.argmax(np.bincount(inv, weights=gpu.dur)))])
    on = gpu.device == dev
    out["device"] = dev
    t_launch = _launch_ts(trace)
    if nums:
        step = inside(t_launch, st, se)
        ws, we = merge(st, se)
    else:  # the whole trace is one window
        step = np.zeros(len(gpu), dtype=np.int64)
        lo = float(min(gpu.ts.min(), t_launch.min()))
        ws, we = np.array([lo]), np.array([float(max((gpu.ts + gpu.dur).max(), lo))])
        out["window_us"] = float(we[0] - ws[0])
    bs, be = merge(gpu.ts[on], gpu.ts[on] + gpu.dur[on])
    out["busy_us"] = float(cover(bs, be, ws, we).sum())
    win, src = phase_windows(trace, st, se)
    phase = np.full(len(gpu), "", dtype=object)
    for p in PHASES:  # later phases win where windows overlap
        if p in win:
            phase[inside(t_launch, *win[p]) >= 0] = p
    coll = on & comm_event_mask(names, gpu.name) & (gpu.kind == 0) & (step >= 0)
    own = on & ~coll & (step >= 0)
    for p in PHASES:
        if p not in win:
            continue
        sel_own, sel_coll = own & (phase == p), coll & (phase == p)
        os_, oe = merge(gpu.ts[sel_own], gpu.ts[sel_own] + gpu.dur[sel_own])
        out["phases"][p] = {"wall_us": float(cover(*win[p], ws, we).sum()),
                            "work_us": float((oe - os_).sum()),
                            "collective_us": float(gpu.dur[sel_coll].sum())}
        out["phase_source"][p] = src[p]
    idx = np.flatnonzero(coll)
    by_kind: dict[str, float] = {}
    codes, inv = np.unique(gpu.name[idx], return_inverse=True)
    for code, us in zip(codes.tolist(), np.bincount(inv, weights=gpu.dur[idx]).tolist() if len(idx) else []):
        kind = collective_kind(names[code])
        by_kind[kind] = by_kind.get(kind, 0.0) + float(us)
    out["collective_us"] = float(sum(by_kind.values()))
    out["collective_kernels"] = len(idx)
    out["collective_by_kind"] = dict(sorted(by_kind.items(), key=lambda kv: -kv[1]))
    return out
