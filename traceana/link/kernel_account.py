"""The kernel account: every GPU event's device time by class x dtype x library, with tensor-core use,
from the kernel-name grammar alone (traceana/link/kernel_names), shapes or not.

analysis["kernels"] (docs/analysis-schema.md):
  total_us        summed device time of every GPU event (kernels, copies, fills)
  uncovered_us    the part no costed op speaks for: events of ops with no shapes, no cost formula, launched
                  outside any op, replayed from graphs (the levers from kernel names work on this part)
  matrix_us / tensor_core_us   GEMM, convolution and attention kernels' time, and the part of it the names
                  show on tensor (matrix) cores
  tensor_core_unknown_us       the part of matrix_us whose names do not say (a custom or Triton kernel)
  by_class        {class: µs}
  rows            one per (class, dtype, library, tensor cores, math: what the tensor cores multiply in, tf32
                  for fp32 operands on NVIDIA's), largest first: time_us, pct (of total_us),
                  uncovered_us, count (events), names (distinct kernel names), top (the three largest
                  names: name, time_us, count)
  collectives     {collective (all_reduce, all_gather, ..., "other"): µs} of communication kernels
Every event is counted once, in the class its name says (copies and fills by their kind; a
communication op's kernels are communication whatever their names; analysis["kernel_classes"] sums the
same classes). Linear: one pass over the distinct names, a
bincount over the events.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from traceana.arrays import distinct
from traceana.link.kernel_names import CLASSES, HEAD, MATRIX, KernelName, parse
from traceana.load.model import Trace

TOP_NAMES = 3  # names listed per account row
MAX_ROWS = 40  # account rows kept (the rest are summed into the classes)
#: op rows whose kernels no costed, judged op speaks for
UNCOVERED_BOUNDS = frozenset({"opaque", "unmodelled", "unknown"})


class KernelView(msgspec.Struct, frozen=True):
    """Per GPU event, what the levers from kernel names read (not part of the JSON)."""

    records: list[KernelName]  # one per distinct event name, in code order
    codes: np.ndarray  # the name code of each record
    rec: np.ndarray  # int64 per GPU event: its record's index
    cls: np.ndarray  # int8 per GPU event: index into CLASSES
    uncovered: np.ndarray  # bool per GPU event: no costed op speaks for it
    row: np.ndarray  # int64 per GPU event: the analysis row it belongs to (-1 none)
    account: dict = msgspec.field(default_factory=dict)  # analysis["kernels"]


def kernel_view(trace: Trace, groups: Sequence, rows: Sequence[dict]) -> KernelView:
    """The account and its per-event view; groups[i] is the signature Group behind rows[i]."""
    gpu = trace.gpu
    n = len(gpu)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return KernelView([], empty, empty, np.zeros(0, np.int8), np.zeros(0, bool), empty, _empty())
    codes = distinct(gpu.name)
    records = [parse(trace.names[c]) for c in codes.tolist()]
    rec = np.searchsorted(codes, gpu.name)
    cls = np.array([CLASSES.index(k.cls) for k in records], dtype=np.int8)[rec]
    cls[gpu.kind != 0] = CLASSES.index("memcpy/memset")  # copies and fills by their kind
    for g, r in zip(groups, rows):  # a communication op's kernels are communication, whatever their names
        ev = getattr(g, "events", None)
        if r.get("bound") == "communication" and ev is not None and len(ev):
            cls[ev[gpu.kind[ev] == 0]] = CLASSES.index("communication")
    row = np.full(n, -1, dtype=np.int64)
    for i, g in enumerate(groups):
        ev = getattr(g, "events", None)
        if ev is not None and len(ev):
            row[ev] = i
    uncovered_row = np.array([r.get("bound") in UNCOVERED_BOUNDS for r in rows] + [True], dtype=bool)
    uncovered = uncovered_row[np.where(row >= 0, row, len(rows))]
    kernel_names = [trace.names[c] for c in codes.tolist()]
    account = _account(records, kernel_names, rec, cls, uncovered, gpu.dur)
    return KernelView(records, codes, rec, cls, uncovered, row, account)


def _empty() -> dict:
    return {"total_us": 0.0, "uncovered_us": 0.0, "matrix_us": 0.0, "tensor_core_us": 0.0,
            "tensor_core_unknown_us": 0.0, "by_class": {},
            "rows": [], "collectives": {}}


def dtype_label(k: KernelName) -> str:
    """The account's dtype column: the input dtype, with a second operand's when it differs (bf16 x fp4)."""
    if k.a is None:
        return "?"
    return f"{k.a} x {k.b}" if k.b else k.a


def _account(records: list[KernelName], kernel_names: list[str], rec: np.ndarray, cls: np.ndarray,
             uncovered: np.ndarray, dur: np.ndarray) -> dict:
    keys: dict[tuple, int] = {}
    key_of = np.array([keys.setdefault((dtype_label(k), k.library, k.tensor_cores if k.matrix else None,
                                        k.math if k.matrix else None), len(keys)) for k in records], dtype=np.int64)
    key_list = list(keys)
    nk = len(key_list)
    combo = cls.astype(np.int64) * nk + key_of[rec]
    size = len(CLASSES) * nk
    t = np.bincount(combo, weights=dur, minlength=size)
    t_unc = np.bincount(combo, weights=np.where(uncovered, dur, 0.0), minlength=size)
    cnt = np.bincount(combo, minlength=size)
    total = float(dur.sum())
    # time per (combination, name): the names behind each row
    pair = combo * len(records) + rec
    upair, inv = np.unique(pair, return_inverse=True)
    pt = np.bincount(inv.reshape(-1), weights=dur)
    pc = np.bincount(inv.reshape(-1))
    names: dict[int, list[tuple[float, int, int]]] = {}
    for j in np.lexsort((-pt, upair // len(records))).tolist():
        c = int(upair[j] // len(records))
        names.setdefault(c, []).append((float(pt[j]), int(pc[j]), int(upair[j] % len(records))))
    order = [int(c) for c in np.argsort(-t, kind="stable") if t[c] > 0]
    rows = []
    for c in order[:MAX_ROWS]:
        ci, ki = divmod(c, nk)
        dt, lib, tc, math = key_list[ki]
        rows.append({"class": CLASSES[ci], "dtype": dt, "library": lib, "tensor_cores": tc, "math": math,
                     "time_us": float(t[c]), "pct": float(t[c] / total * 100.0) if total > 0 else 0.0,
                     "uncovered_us": float(t_unc[c]), "count": int(cnt[c]), "names": len(names.get(c, ())),
                     "top": [{"name": kernel_names[r][:HEAD], "time_us": tt, "count": nn}
                             for tt, nn, r in names.get(c, [])[:TOP_NAMES]]})
    by_class = np.bincount(cls.astype(np.int64), weights=dur, minlength=len(CLASSES))
    mat = np.array([CLASSES[i] in MATRIX for i in range(len(CLASSES))])[cls.astype(np.int64)]
    tc_ev = np.array([bool(k.tensor_cores) for k in records], dtype=bool)[rec] & mat
    tc_unknown = np.array([k.tensor_cores is None for k in records], dtype=bool)[rec] & mat
    comm = cls == CLASSES.index("communication")
    coll: dict[str, float] = {}
    if comm.any():
        op_of = np.array([_collective(k) for k in records], dtype=object)
        ops, oinv = np.unique(op_of[rec[comm]].astype(str), return_inverse=True)
        ot = np.bincount(oinv.reshape(-1), weights=dur[comm])
        coll = {str(o): float(x) for o, x in sorted(zip(ops, ot), key=lambda kv: -kv[1])}
    return {
        "total_us": total, "uncovered_us": float(dur[uncovered].sum()),
        "matrix_us": float(dur[mat].sum()), "tensor_core_us": float(dur[tc_ev].sum()),
        "tensor_core_unknown_us": float(dur[tc_unknown].sum()),
        "by_class": {CLASSES[i]: float(by_class[i]) for i in np.argsort(-by_class, kind="stable") if by_class[i] > 0},
        "rows": rows, "collectives": coll,
    }


def _collective(k: KernelName) -> str:
    return k.op if k.cls == "communication" and k.op else "other"

