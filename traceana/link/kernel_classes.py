"""Kernel classes from kernel names alone: what the device time was spent on when no shapes exist.

Every GPU event gets one class: `memcpy/memset` by its kind, otherwise the class the kernel-name
grammar reads from its name (traceana/link/kernel_names: GEMM, convolution, attention, elementwise,
reduction, normalization, copy, communication, other); every kernel of an op that is communication
is communication. No FLOPs are invented: the classes only say where the time went, and the report
asks for record_shapes=True to cost it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from traceana.link.kernel_names import CLASSES, classify
from traceana.load.model import Trace

__all__ = ["CLASSES", "classify", "kernel_classes"]


def kernel_classes(trace: Trace, groups: Sequence, rows: Sequence[dict], cls: np.ndarray) -> dict:
    """analysis["kernel_classes"]: device time per class over all GPU events and over the opaque
    ones; sets row["kernel_class"] (the class with the most of its time) on every opaque row, and
    on opaque rows made only of memcpy / memset events their recorded `bytes` (recorded_bytes per
    call, recorded_gbps): the row stays opaque (no op, no shapes), the numbers are shown. `cls`: the
    class of each GPU event (link/kernel_account.py's: a communication op's kernels are communication,
    whatever their names)."""
    dur = trace.gpu.dur
    n = len(CLASSES)
    total = np.bincount(cls, weights=dur, minlength=n) if len(cls) else np.zeros(n)
    opaque = np.zeros(n)
    for g, r in zip(groups, rows):
        ev = getattr(g, "events", None)
        if not r.get("opaque") or ev is None or not len(ev):
            continue
        t = np.bincount(cls[ev], weights=dur[ev], minlength=n)
        opaque += t
        r["kernel_class"] = CLASSES[int(np.argmax(t))]
        nb = trace.gpu.nbytes[ev]
        if (trace.gpu.kind[ev] != 0).all() and np.isfinite(nb).all():  # copies / fills: bytes recorded
            total_b = float(nb.sum())
            r["recorded_bytes"] = total_b / max(r.get("count") or 1, 1)
            r["recorded_gbps"] = total_b / (r["device_time_us"] * 1e3) if r["device_time_us"] > 0 else None

    def table(v: np.ndarray) -> dict[str, float]:
        order = sorted(range(n), key=lambda i: (-v[i], i))
        return {CLASSES[i]: float(v[i]) for i in order if v[i] > 0}

    return {"by_class": table(total), "opaque_by_class": table(opaque), "total_us": float(dur.sum())}
