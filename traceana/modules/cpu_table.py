"""The by-module table of a CPU-only trace: the same `modules` section as table.py, each op instance's
self time in place of GPU event time; and each CPU verdict's and CPU finding's module and user frame.

An op instance is one call of its signature (its verdict row); its self time (clipped at 0) is what it
adds to its module, so the modules' sums equal the verdicts' self time. FLOPs and bytes are the row's
per call. The bounds are the CPU verdicts' (compute, memory, dispatch, underutilised, composite,
unmodelled).
"""

from __future__ import annotations

import numpy as np

from traceana.modules.attribute import PHASES, Places
from traceana.modules.table import (OTHER, SOURCE_NOTES, _backward_note, _by_source, _majority, _row_fields,
                                    _stats, _top_rows, _tree)
from traceana.modules import table

#: The CPU verdicts' bounds, each computed in the slot of table.BOUNDS at the same index and renamed after.
CPU_BOUNDS = ("compute", "memory", "dispatch", "underutilised", "composite", "unmodelled")
_SLOT = {b: table.BOUNDS.index(g) for b, g in zip(CPU_BOUNDS, ("compute", "memory", "latency", "underutilised",
                                                                 "host_link", "unmodelled"))}
_RENAME = {table.BOUNDS[i]: b for b, i in _SLOT.items()}


def cpu_module_table(places: Places, rows: list[dict], sig: np.ndarray, self_us: np.ndarray) -> dict:
    """The `modules` section from CPU self time; also writes each row's module / source fields (in place)."""
    n = len(sig)
    ev_row = np.asarray(sig, dtype=np.int64) if n else np.zeros(0, dtype=np.int64)
    dur = np.clip(np.asarray(self_us, dtype=np.float64), 0.0, None)
    total_us = float(dur.sum())
    for r in rows:  # _row_fields weighs by the rows' own time
        r["device_time_us"] = r["self_us"]
    mod, phase, fr = places.module, places.phase.astype(np.int64), places.frame
    flops_pc = np.array([float(r.get("flops") or 0.0) for r in rows] + [0.0])
    bytes_pc = np.array([float(r.get("bytes") or 0.0) for r in rows] + [0.0])
    bound = np.array([_SLOT.get(r.get("bound"), _SLOT["unmodelled"]) for r in rows] + [_SLOT["unmodelled"]],
                     dtype=np.int64)
    f_ev, b_ev, bd_ev = flops_pc[ev_row], bytes_pc[ev_row], bound[ev_row]
    _row_fields(rows, places, ev_row, mod, phase, fr, dur)
    for r in rows:
        r.pop("device_time_us", None)
    n_paths = len(places.paths)
    n_ph = len(PHASES) + 1
    nb = len(table.BOUNDS)
    key = (mod + 1) * n_ph + (phase + 1)
    size = (n_paths + 1) * n_ph
    t = np.bincount(key, weights=dur, minlength=size).reshape(n_paths + 1, n_ph)
    fl = np.bincount(key, weights=f_ev, minlength=size).reshape(n_paths + 1, n_ph)
    by = np.bincount(key, weights=b_ev, minlength=size).reshape(n_paths + 1, n_ph)
    tb = np.bincount(key * nb + bd_ev, weights=dur, minlength=size * nb).reshape(n_paths + 1, n_ph, nb)
    tree, by_class = _tree(places, t[1:], fl[1:], by[1:], tb[1:], _top_rows(mod, ev_row, dur, rows, n_paths),
                           total_us)
    acc = places.accumulate if places.accumulate is not None else np.zeros(n, dtype=bool)
    none = mod < 0
    cat = np.select([acc, phase == 1, phase == 2], [2, 1, 3], 0)
    other = []
    for c, (k, label) in enumerate(OTHER):
        m = none & (cat == c)
        if m.any():
            tb_c = np.bincount(bd_ev[m], weights=dur[m], minlength=nb)
            other.append({"key": k, "label": label, **_stats(dur[m].sum(), f_ev[m].sum(), b_ev[m].sum(), tb_c,
                                                               total_us)})
    out = {
        "source": places.source,
        "note": SOURCE_NOTES[places.source].replace("issued each op", "issued each op (CPU self time)"),
        "backward": _backward_note(places, t, float(dur[none & (cat == 2)].sum())),
        "total": {"time_us": total_us, "flops": float(f_ev.sum()), "bytes": float(b_ev.sum())},
        "time": "cpu_self",
        "tree": tree,
        "by_class": by_class,
        "other": other,
        "by_source": _by_source(places, fr, phase, dur, f_ev, b_ev, bd_ev, mod, total_us),
    }
    _rename(out)
    return out


def _rename(x) -> None:
    """Every "bound" value from table.BOUNDS' slot names to the CPU bound computed in it (in place)."""
    if isinstance(x, dict):
        for k, v in x.items():
            if k == "bound" and isinstance(v, str):
                x[k] = _RENAME.get(v, v)
            else:
                _rename(v)
    elif isinstance(x, list):
        for v in x:
            _rename(v)


def cpu_finding_fields(findings: list[dict], rows: list[dict]) -> None:
    """Each CPU finding's module class and user frame: those holding at least half its ops' self time."""
    by_id = {r["id"]: {**r, "device_time_us": r["self_us"]} for r in rows}
    for f in findings:
        rs = [by_id[i] for i in f.get("ops") or () if i in by_id]
        f["module_class"] = _majority(rs, "module_class")
        f["source"] = _majority(rs, "source")
