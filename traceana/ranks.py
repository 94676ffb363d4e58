"""Cross-rank view: many per-rank analyses in, one plain-data comparison out.

`rank_facts(trace)` is what the per-rank worker records besides the Analysis (step times,
collective kernel time); `cross_rank(analyses)` is pure: a list of Analysis dicts (each
carrying its `rank_facts`) -> the cross-rank dict (schema "traceana.ranks/1") that
render/ranks_html.py renders. Nothing here reads a file.

Definitions (README "Many ranks"):
- step time: the mean duration of the rank's distinct ProfilerStep#N annotations; without
  steps, the trace's span. When every rank has steps, every per-rank time below is per step
  (total / steps), so ranks that captured different step counts compare fairly.
- collective time: device time of NCCL / RCCL kernels (names containing "nccl" or "rccl").
  A rank's collective *wait* is its collective time minus the least of any rank: the time it
  spent in collectives beyond what the fastest-to-sync rank needed, i.e. waiting for others.
- a rank's own time is its step time minus its collective wait. In a synchronous job every
  rank's step ends together; the straggler is the rank the others wait for: the longest own
  time. Its extra own time over the median rank is split by class (the bounds; collectives
  are a class of their own) and by op signature.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from traceana import __version__

SCHEMA = "traceana.ranks/1"
COLLECTIVE = re.compile(r"nccl|rccl", re.IGNORECASE)
_KINDS = (("AllReduce", r"all_?reduce"), ("ReduceScatter", r"reduce_?scatter"), ("AllGather", r"all_?gather"),
          ("AllToAll", r"all_?to_?all"), ("Broadcast", r"broadcast|bcast"), ("SendRecv", r"send_?recv"),
          ("Send", r"send"), ("Recv", r"recv"), ("Reduce", r"reduce"))
_KIND_RE = [(k, re.compile(p, re.IGNORECASE)) for k, p in _KINDS]
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)
#: Classes the straggler's extra time is split into (the bounds, then collectives).
CLASSES = ("compute", "memory", "latency", "unknown", "unmodelled", "opaque", "collective")
TOP_OPS = 5
_CLASS_WORDS = {"compute": "compute-bound device time", "memory": "memory-bound device time",
                "latency": "latency-bound device time (short kernels, launch overhead)",
                "unknown": "device time of ops with no peak for their dtype",
                "unmodelled": "device time of ops traceana has no cost model for",
                "opaque": "device time of opaque kernels (no shapes)"}


def collective_kind(name: str) -> str:
    """AllReduce, AllGather, ... from an NCCL/RCCL kernel name; "other" when it says none."""
    for kind, rx in _KIND_RE:
        if rx.search(name):
            return kind
    return "other"


def rank_facts(trace: Any) -> dict[str, Any]:
    """Per-rank facts the Analysis does not hold: ProfilerStep durations (by step number,
    the longest when a step is annotated on several threads) and NCCL/RCCL kernel time."""
    names = trace.names
    ann = trace.annotations
    steps: dict[int, float] = {}
    for code, ts, end in zip(ann.name.tolist(), ann.ts.tolist(), ann.end.tolist()):
        m = _STEP.match(names[code])
        if m:
            n = int(m.group(1))
            steps[n] = max(steps.get(n, 0.0), end - ts)
    gpu = trace.gpu
    coll_codes = [i for i, n in enumerate(names) if COLLECTIVE.search(n)]
    by_kind: dict[str, float] = {}
    count = 0
    total = 0.0
    if coll_codes and len(gpu):
        mask = np.isin(gpu.name, np.array(coll_codes, dtype=gpu.name.dtype)) & (gpu.kind == 0)
        count = int(mask.sum())
        if count:
            codes, inv = np.unique(gpu.name[mask], return_inverse=True)
            t = np.bincount(inv, weights=gpu.dur[mask])
            for c, us in zip(codes.tolist(), t.tolist()):
                k = collective_kind(names[c])
                by_kind[k] = by_kind.get(k, 0.0) + us
            total = float(gpu.dur[mask].sum())
    dist = trace.distributed or {}
    rank = dist.get("rank")
    return {
        "rank": rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
        "world_size": dist.get("world_size") if isinstance(dist.get("world_size"), int) else None,
        "steps": [steps[k] for k in sorted(steps)],
        "step_numbers": sorted(steps),
        "collective_us": total,
        "collective_kernels": count,
        "collective_by_kind": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
    }


# ----------------------------------------------------------------------------- aggregation


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _map(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else []


def _is_collective_row(op: Mapping[str, Any]) -> bool:
    """An op row whose time is collective kernels (its name or its top kernel says NCCL/RCCL)."""
    if COLLECTIVE.search(str(op.get("name") or "")):
        return True
    kernels = [k for k in _list(op.get("kernels")) if isinstance(k, Mapping)]
    if not kernels:
        return False
    top = max(kernels, key=lambda k: _num(k.get("time_us")) or 0.0)
    return bool(COLLECTIVE.search(str(top.get("name") or "")))


def _norm(v: Any) -> Any:
    """Lists and tuples alike (an in-memory Analysis has tuples, a reloaded one lists)."""
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


def _sig(op: Mapping[str, Any]) -> tuple[str, str]:
    """(key, display) of an op signature: the key is exact (name, dims, dtypes, opaque cause),
    the display readable and cut: `aten::mm (8192×8192, 8192×8192; float, float)`."""
    from traceana.render import fmt_dims, fmt_types

    name = str(op.get("name") or "(unnamed)")
    dims, types = _norm(op.get("input_dims") or []), _norm(op.get("input_types") or [])
    cause = op.get("cause") if op.get("opaque") else None
    key = repr((name, dims, types, cause))
    if cause:
        return key, f"{name[:100]} [opaque: {cause}]"
    d, t = fmt_dims(dims, 80), fmt_types(types, 40)
    return key, (f"{name[:100]} ({d}; {t})" if d or t else name[:100])


def _rank_label(a: Mapping[str, Any], facts: Mapping[str, Any], index: int) -> tuple[int, str]:
    rank = facts.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool):
        rank = _map(_map(a.get("trace")).get("distributed")).get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool):
        m = _RANK_IN_NAME.search(str(_map(a.get("trace")).get("file") or ""))
        rank = int(m.group(1)) if m else index
    return rank, f"rank {rank}"


def _one(a: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The per-rank numbers (totals; scaled to per-step later when every rank has steps)."""
    facts = _map(a.get("rank_facts"))
    tr = _map(a.get("trace"))
    rank, label = _rank_label(a, facts, index)
    steps = [s for s in (_num(x) for x in _list(facts.get("steps"))) if s is not None and s > 0]
    span = _num(tr.get("span_us")) or 0.0
    ops = [o for o in _list(a.get("ops")) if isinstance(o, Mapping)]
    by_class = {c: 0.0 for c in CLASSES}
    sigs: dict[str, dict[str, Any]] = {}
    for o in ops:
        t = _num(o.get("device_time_us")) or 0.0
        cls = "collective" if _is_collective_row(o) else str(o.get("bound") or "unmodelled")
        by_class[cls if cls in by_class else "unmodelled"] += t
        key, shown = _sig(o)
        s = sigs.setdefault(key, {"sig": shown, "name": str(o.get("name") or ""), "class": cls, "us": 0.0})
        s["us"] += t
    coverage = _map(a.get("coverage"))
    device_us = _num(coverage.get("device_time_us"))
    if device_us is None:
        device_us = sum(by_class.values())
    coll = _num(facts.get("collective_us"))
    if coll is None:  # no facts (a saved analysis): the collective op rows are the best we have
        coll = by_class["collective"]
    dev = _map(a.get("device"))
    return {
        "rank": rank, "label": label, "file": str(tr.get("file") or ""),
        "steps": len(steps), "step_us_total": sum(steps) if steps else span, "span_us": span,
        "device_us": device_us, "by_class": by_class, "sigs": sigs,
        "collective_us": coll, "collective_by_kind": dict(_map(facts.get("collective_by_kind"))),
        "device": str(dev.get("name") or ""), "device_key": dev.get("key"),
        "warnings": len(_list(a.get("warnings"))),
    }


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def cross_rank(analyses: Sequence[Mapping[str, Any]], failed: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The cross-rank dict. `analyses` in rank-file order; `failed`: [{file, error}] for
    rank files that could not be analysed (listed in the report, not compared)."""
    from traceana.render import verdict

    rows = [_one(a, i) for i, a in enumerate(analyses)]
    per_step = bool(rows) and all(r["steps"] > 0 for r in rows)
    for r in rows:
        scale = 1.0 / r["steps"] if per_step else 1.0
        r["scale"] = scale
        r["step_us"] = r["step_us_total"] * scale
        r["device_us_scaled"] = r["device_us"] * scale
        r["by_class_scaled"] = {c: v * scale for c, v in r["by_class"].items()}
        r["collective_us_scaled"] = r["collective_us"] * scale
    min_coll = min((r["collective_us_scaled"] for r in rows), default=0.0)
    med_step = _median([r["step_us"] for r in rows])
    out_ranks = []
    for r, a in zip(rows, analyses):
        r["wait_us"] = r["collective_us_scaled"] - min_coll
        top = [o for o in _list(a.get("ops")) if isinstance(o, Mapping)][:TOP_OPS]
        out_ranks.append({
            "rank": r["rank"], "label": r["label"], "file": r["file"], "steps": r["steps"],
            "step_us": r["step_us"], "span_us": r["span_us"],
            "vs_median_pct": (r["step_us"] / med_step - 1) * 100 if med_step > 0 else None,
            "device_us": r["device_us_scaled"],
            "busy_pct": r["device_us_scaled"] / r["step_us"] * 100 if r["step_us"] > 0 else None,
            "by_class_us": r["by_class_scaled"],
            "collective_us": r["collective_us_scaled"], "collective_wait_us": r["wait_us"],
            "own_us": r["step_us"] - r["wait_us"],
            "collective_by_kind_us": {k: v * r["scale"] for k, v in r["collective_by_kind"].items()},
            "device": r["device"], "device_key": r["device_key"],
            "verdict": verdict(a), "warnings": r["warnings"],
            "top_ops": [{"id": o.get("id"), "name": o.get("name"), "sig": _sig(o)[1], "bound": o.get("bound"),
                         "device_time_us": (_num(o.get("device_time_us")) or 0.0) * r["scale"],
                         "roof_pct": _num(o.get("roof_pct"))} for o in top],
        })
    steps_known = per_step
    summary: dict[str, Any] = {
        "ranks": len(rows), "failed": len(failed), "per_step": steps_known,
        "unit": "per step" if steps_known else "per trace (no ProfilerStep annotations in every rank)",
        "median_step_us": med_step,
        "min_step_us": min((r["step_us"] for r in rows), default=None),
        "max_step_us": max((r["step_us"] for r in rows), default=None),
        "collective_us_median": _median([r["collective_us_scaled"] for r in rows]),
        "collective_wait_us_total": sum(r["wait_us"] for r in rows),
        "devices": sorted({r["device"] for r in rows if r["device"]}),
    }
    if rows and med_step > 0:
        summary["spread_pct"] = (summary["max_step_us"] - summary["min_step_us"]) / med_step * 100
    straggler = _straggler(rows, per_step) if len(rows) >= 2 else None
    return {
        "schema": SCHEMA,
        "tool": {"name": "traceana", "version": __version__},
        "summary": summary,
        "ranks": out_ranks,
        "straggler": straggler,
        "failed": [{"file": str(f.get("file") or ""), "error": str(f.get("error") or "")} for f in failed],
    }


def _straggler(rows: list[dict[str, Any]], per_step: bool) -> dict[str, Any]:
    """The rank with the longest *own* step time (step time minus its collective wait: in a
    synchronous job every rank's step ends together, and the straggler is the one the others
    wait for), and where its extra own time over the median rank goes."""
    for r in rows:
        r["own_us"] = r["step_us"] - r["wait_us"]
    slow = max(rows, key=lambda r: (r["own_us"], -rows.index(r)))
    med_own = _median([r["own_us"] for r in rows])
    extra = slow["own_us"] - med_own
    unit = "per step" if per_step else "in the trace"
    classes = []
    for c in CLASSES:
        med = _median([r["by_class_scaled"][c] for r in rows])
        mine = slow["by_class_scaled"][c]
        classes.append({"class": c, "rank_us": mine, "median_us": med, "delta_us": mine - med})
    all_sigs = sorted({k for r in rows for k in r["sigs"]})
    ops = []
    for k in all_sigs:
        vals = [r["sigs"][k]["us"] * r["scale"] if k in r["sigs"] else 0.0 for r in rows]
        med = _median(vals)
        mine = slow["sigs"][k]["us"] * slow["scale"] if k in slow["sigs"] else 0.0
        info = slow["sigs"].get(k) or next(r["sigs"][k] for r in rows if k in r["sigs"])
        ops.append({"sig": info["sig"], "key": k, "name": info["name"], "class": info["class"], "rank_us": mine, "median_us": med,
                    "delta_us": mine - med, "delta_pct": (mine / med - 1) * 100 if med > 0 else None})
    ops.sort(key=lambda o: (-o["delta_us"], o["key"]))
    work = [c for c in classes if c["class"] != "collective"]
    device_delta = sum(c["delta_us"] for c in work)
    unexplained = extra - device_delta
    lead = max(work, key=lambda c: c["delta_us"])
    others_wait = [r["wait_us"] for r in rows if r is not slow]
    text = []
    if extra <= 0 or med_own <= 0:
        text.append(f"No rank stands out: {slow['label']} takes the longest, {_ms(slow['own_us'])} {unit} of its own "
                    f"time (step time less collective wait), no more than the median rank.")
    else:
        text.append(f"{slow['label']} is the straggler: its own time (step time less collective wait) is "
                    f"{_ms(slow['own_us'])} {unit}, {_ms(extra)} ({extra / med_own * 100:.1f}%) more than the "
                    f"median rank's {_ms(med_own)}.")
        if lead["delta_us"] > 0:
            pos = [o for o in ops if o["delta_us"] > 0 and o["class"] != "collective"][:3]
            lead_ops = "; ".join(f"{o['sig']} +{_ms(o['delta_us'])}" for o in pos)
            text.append(f"The largest difference is in {_CLASS_WORDS.get(lead['class'], lead['class'])}: "
                        f"{_ms(lead['rank_us'])} {unit} against the median rank's {_ms(lead['median_us'])} "
                        f"(+{_ms(lead['delta_us'])})"
                        + (f", led by {lead_ops}." if lead_ops else "."))
        if others_wait and max(others_wait) > 0.01 * med_own and slow["wait_us"] <= _median(others_wait):
            text.append(f"The other ranks waited for it: their collectives took up to {_ms(max(others_wait))} "
                        f"{unit} longer than the quickest rank's (median wait {_ms(_median(others_wait))}; "
                        f"{slow['label']} waited {_ms(slow['wait_us'])}).")
        if unexplained > 0.1 * extra:
            text.append(f"{_ms(unexplained)} of its extra time is not device time: host-side work (data loading, "
                        "CPU ops, launches) or an idle GPU.")
    return {
        "rank": slow["rank"], "label": slow["label"], "file": slow["file"], "step_us": slow["step_us"],
        "own_us": slow["own_us"], "median_own_us": med_own, "extra_us": extra,
        "extra_pct": extra / med_own * 100 if med_own > 0 else None,
        "lead_class": lead["class"] if lead["delta_us"] > 0 else None,
        "by_class": classes, "ops": ops[:10], "device_delta_us": device_delta,
        "unexplained_us": unexplained, "text": text,
    }


def _ms(us: float) -> str:
    ms = us / 1000
    a = abs(ms)
    return f"{ms:.3f} ms" if a < 10 else f"{ms:.2f} ms" if a < 100 else f"{ms:,.1f} ms"
