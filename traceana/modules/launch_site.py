"""Where a kernel launched outside any profiled op came from: the Python frame around its launch call.

A kernel with no op (a Triton kernel called directly, a custom extension's launcher, a library calling
cudaLaunchKernel itself) carries no shapes; the python_function events (with_stack=True) still say which
line of the user's code launched it: the innermost frame of the user's own code (frames.is_user_file) that
encloses the launch call on its thread, else the innermost frame at all.

Row field set here (in place) on rows whose kernels were launched outside any op: `launch_site`
("file.py:123 (function)") for the launch of the row's longest event. One launch per row, one pass over
its thread's frames: linear in the frames for the few rows it is asked about.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from traceana.link.attribute import Links
from traceana.load.model import Trace
from traceana.modules.frames import parse_frame

CAUSES = ("outside_op",)
MAX_ROWS = 20  # rows located (the largest): each costs one pass over a thread's frames


def launch_sites(trace: Trace, links: Links, groups: Sequence, rows: list[dict]) -> None:
    """Set row["launch_site"] on the largest rows of kernels launched outside any op (see the module doc)."""
    py = trace.python
    mine = sorted((i for i, r in enumerate(rows) if r.get("cause") in CAUSES), key=lambda i: -rows[i]["device_time_us"])
    if not len(py) or not mine:
        return
    la, gpu = trace.launches, trace.gpu
    for i in mine[:MAX_ROWS]:
        ev = getattr(groups[i], "events", None)
        if ev is None or not len(ev):
            continue
        e = int(ev[int(np.argmax(gpu.dur[ev]))])
        li = int(links.gpu_launch[e]) if len(links.gpu_launch) else -1
        if li < 0:
            continue
        site = frame_at(trace, int(la.thread[li]), float(la.ts[li]))
        if site:
            rows[i]["launch_site"] = site


def frame_at(trace: Trace, thread: int, t: float) -> str | None:
    """The user's innermost Python frame around time t on a thread ("file.py:12 (fn)"), else the innermost
    frame with a file, else None."""
    py = trace.python
    on = np.flatnonzero((py.thread == thread) & (py.ts <= t) & (py.end >= t))
    if not len(on):
        return None
    fallback = None
    for j in on[np.argsort(-py.ts[on], kind="stable")].tolist():  # innermost (latest start) first
        f = parse_frame(trace.names[int(py.name[j])])
        if f is None:
            continue
        if f.user:
            return f"{f.where()} ({f.function})"
        fallback = fallback or f"{f.where()} ({f.function})"
    return fallback
