"""What the kernel-name levers say of a selection of GPU events (a boolean mask over trace.gpu): the
ops it belongs to, the ledger terms its time sits in, and its largest kernel names.
"""

from __future__ import annotations

import numpy as np

from traceana import units as u
from traceana.diagnose.ledger import WORK
from traceana.link.kernel_account import KernelView
from traceana.link.kernel_names import KernelName
from traceana.load.model import Trace

MIN_SHARE = 0.01  # a lever from kernel names needs 1% of the kernel time


def op_ids(view: KernelView, rows: list[dict], sel: np.ndarray) -> list[str]:
    """The ids of the rows the selected events belong to, largest share first (at most 50)."""
    r = view.row[sel]
    r = r[r >= 0]
    if not len(r):
        return []
    t = np.bincount(r, minlength=len(rows))
    return [rows[i]["id"] for i in np.argsort(-t, kind="stable")[:50].tolist() if t[i] > 0]


def source_term(view: KernelView, rows: list[dict], sel: np.ndarray, us: float) -> dict:
    """The ledger terms the selected events' time sits in (their rows' bounds, every row, not the 50 listed in
    `ops`; an event of no op is unmodelled work) and what the lever may claim: those events' own time."""
    r = np.unique(view.row[sel])
    names = []
    for i in r.tolist():
        b = rows[i].get("bound") if i >= 0 else "unmodelled"
        names.append(f"kernels.{b}" if b in WORK else "kernels.unmodelled")
    return {"term": " + ".join(dict.fromkeys(names)) or "kernels.unmodelled", "us": us}


def top_names(trace: Trace, view: KernelView, sel: np.ndarray, n: int = 3) -> list[tuple[str, float, KernelName]]:
    """The n largest kernel names among the selected events: (readable name, µs, record)."""
    if not sel.any():
        return []
    t = np.bincount(view.rec[sel], weights=trace.gpu.dur[sel], minlength=len(view.records))
    top = [i for i in np.argsort(-t, kind="stable")[:n].tolist() if t[i] > 0]
    labels = u.kernel_names([trace.names[int(view.codes[i])] for i in top], 70)
    return [(labels[j], float(t[i]), view.records[i]) for j, i in enumerate(top)]


def named(tops: list[tuple[str, float, KernelName]]) -> str:
    return "; ".join(f"{name} ({', '.join(x for x in (k.op, k.a, k.library) if x)}) {u.us(t)}" for name, t, k in tops)
