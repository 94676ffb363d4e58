"""Activation checkpointing's recompute: forward ops run a second time during the backward pass.

torch.utils.checkpoint keeps a block's inputs instead of its activations and runs the block's forward
again when the backward needs them. Where it runs again is visible in the trace:
  non-reentrant (use_reentrant=False, torch's default since 2.4): the recompute runs inside the saved-
            tensor unpack hook, Python frames `torch/utils/checkpoint.py(N): unpack_hook` /
            `recompute_fn` (recorded with with_stack=True);
  reentrant (use_reentrant=True): inside the autograd node `CheckpointFunctionBackward` (a cpu_op,
            recorded whatever the options), which recomputes the forward and then runs the backward
            of what it recomputed: the autograd nodes nested in it are that backward, not recompute.
Every op nested in such a region (same thread, inside its time) that is not inside a nested autograd
node is recompute; its kernels' device time is what checkpointing costs. Dropping checkpointing from
some blocks saves that time if the memory allows: the finding says how much memory the run used.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.link.attribute import Links
from traceana.load.model import Trace
from traceana.arrays import distinct

_CHECKPOINT_FILE = "torch/utils/checkpoint.py"
_RECOMPUTE_FUNCS = ("): unpack_hook", "): recompute_fn")
_REENTRANT_NODE = "CheckpointFunctionBackward"
_NODE_PREFIX = "autograd::engine::evaluate_function: "
#: Below this share of the device time the recompute is a note, not worth a finding.
MIN_SHARE = 0.01


def _inside(trace: Trace, thread: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """bool per op: nested in one of the regions (thread, ts, end) — starts inside it, on its thread."""
    ops = trace.ops
    out = np.zeros(len(ops), dtype=bool)
    if not len(ts) or not len(ops):
        return out
    order = np.lexsort((ops.ts, ops.thread))
    o_th, o_ts = ops.thread[order], ops.ts[order]
    mark = np.zeros(len(ops) + 1, dtype=np.int64)
    for th in distinct(thread).tolist():
        lo_t = int(np.searchsorted(o_th, o_th.dtype.type(th), "left"))
        hi_t = int(np.searchsorted(o_th, o_th.dtype.type(th), "right"))
        m = thread == th
        a = lo_t + np.searchsorted(o_ts[lo_t:hi_t], ts[m], "left")
        b = lo_t + np.searchsorted(o_ts[lo_t:hi_t], end[m], "left")
        np.add.at(mark, a, 1)
        np.add.at(mark, b, -1)
    out[order] = np.cumsum(mark[:-1]) > 0
    return out


def recompute_ops(trace: Trace) -> tuple[np.ndarray, str | None]:
    """(bool per op: recomputed by activation checkpointing, how it was seen: "non-reentrant" |
    "reentrant" | None)."""
    ops, names = trace.ops, trace.names
    none = np.zeros(len(ops), dtype=bool)
    if not len(ops):
        return none, None
    how = None
    regions = []
    py = getattr(trace, "python", None)
    if py is not None and len(py):
        hit = np.array([_CHECKPOINT_FILE in n and n.endswith(_RECOMPUTE_FUNCS) for n in names], dtype=bool)
        k = np.flatnonzero(hit[py.name])
        if len(k):
            regions.append((py.thread[k], py.ts[k], py.end[k]))
            how = "non-reentrant"
    node = np.array([n == _NODE_PREFIX + _REENTRANT_NODE for n in names], dtype=bool)
    r = np.flatnonzero(node[ops.name])
    if len(r):
        regions.append((ops.thread[r], ops.ts[r], ops.end[r]))
        how = how or "reentrant"
    if not regions:
        return none, None
    th, ts, end = (np.concatenate(x) for x in zip(*regions))
    inside = _inside(trace, th, ts, end)
    # the backward of what a reentrant node recomputed: autograd nodes nested in it, and all they hold
    is_node = np.array([n.startswith(_NODE_PREFIX) for n in names], dtype=bool)[ops.name]
    inner = np.flatnonzero(inside & is_node & ~node[ops.name])
    if len(inner):
        inside &= ~_inside(trace, ops.thread[inner], ops.ts[inner], ops.end[inner])
    inside &= ~is_node
    return inside, how


def recompute_finding(trace: Trace, links: Links, rows: list[dict], ev_row: np.ndarray, total_us: float,
                      device: dict, memory: dict | None, steps: int) -> dict | None:
    """One finding: the device time of the recomputed forward, what it would save, and the memory
    headroom that decides whether it can be saved."""
    mask, how = recompute_ops(trace)
    if how is None or not mask.any() or total_us <= 0:
        return None
    gop = links.gpu_op
    ev = np.flatnonzero(gop >= 0)
    ev = ev[mask[gop[ev]]]
    t = float(trace.gpu.dur[ev].sum())
    if t < MIN_SHARE * total_us:
        return None
    n_ops = int(mask.sum())
    rows_hit = sorted({int(r) for r in ev_row[ev].tolist() if r >= 0},
                      key=lambda r: -rows[r]["device_time_us"])
    per = f", {u.us(t / steps)} per step" if steps > 1 else ""
    room = _headroom(device, memory)
    text = (f"Activation checkpointing ({how}: torch.utils.checkpoint) ran the forward of the checkpointed blocks "
            f"again in the backward pass: {u.count(n_ops)} ops recomputed, whose kernels took {u.us(t)} "
            f"({t / total_us * 100:.1f}% of the device time{per}). Checkpointing trades this time for memory: "
            "a block that keeps its activations skips it. " + room + "Saving shown: that time, an upper bound "
            "(what stays checkpointed still pays its share).")
    return {"kind": "recompute", "group": "recompute",
            "title": (f"Activation checkpointing recomputes the forward: {u.us(t)} of GPU time "
                      f"({t / total_us * 100:.1f}% of the device time{per})"),
            "text": text,
            "fix": ("Checkpoint fewer blocks (or selectively: save the matmul outputs with a checkpoint policy) "
                    "if memory allows."),
            "ops": [rows[r]["id"] for r in rows_hit[:50]], "saving_us": t, "how": how}


def _headroom(device: dict, memory: dict | None) -> str:
    """The memory sentence: the peak the run reached against the device's memory, when both are known."""
    cap = device.get("mem_gb")
    devs = [d for d in (memory or {}).get("devices") or () if d.get("type") != "cpu"]
    peak = max((d.get("peak_reserved_bytes") or d.get("peak_allocated_bytes") or 0.0 for d in devs), default=0.0)
    if not peak:
        return ("Whether memory allows keeping more activations is not in this trace (record with "
                "profile_memory=True to see the peak). ")
    if not cap:
        return f"The run's memory peaked at {u.nbytes(peak)} reserved. "
    share = peak / (cap * 2**30) * 100
    return (f"The run's memory peaked at {u.nbytes(peak)} reserved, {share:.0f}% of the device's {cap:g} GiB"
            + (": there is room to keep more activations. " if share < 70 else
               ": little room; checkpoint selectively rather than less. "))
