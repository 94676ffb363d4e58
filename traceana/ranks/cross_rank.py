"""Cross-rank view: many per-rank analyses in, one plain-data comparison out.

`rank_facts(trace)` (traceana/link/steps.py) is what the per-rank worker records besides the
Analysis; `cross_rank(analyses)` is pure: a list of Analysis dicts (each carrying its
`rank_facts`) -> the cross-rank dict (schema "traceana.ranks/1") that render/ranks_html.py
renders (adding each rank's verdict, the sentence its own report leads with). Nothing here reads
a file.

Definitions (docs/ranks.md):
- step time: the mean duration of the rank's distinct ProfilerStep#N annotations; without
  steps, the trace's span. When every rank has steps, every per-rank time below is per step
  (total / steps), so ranks that captured different step counts compare fairly.
- GPU busy: the union of the rank's GPU event intervals inside its step windows (each instant
  once, however many streams run): at most 100% of the step time, never a sum of durations.
- collective time: device time of communication kernels (traceana/link/comm_kernels.py: NCCL / RCCL,
  DeepEP, NVSHMEM, custom all-reduce, ...) launched inside the steps. Each
  collective is matched across ranks by (step, phase, kind, its place among that step's
  collectives of that kind and phase); a rank's *wait* in it is its time there less the least of any rank's (the
  rank that arrived last hardly waits). The rest of its collective time is the transfer.
- own time: step time less collective wait (traceana/ranks/straggler.py finds the straggler).
- the inputs are checked to come from one run (check_inputs): duplicate rank ids, differing
  world sizes, devices or captured steps give one warning, and no cross-rank comparison.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from traceana import __version__
from traceana.link.comm_kernels import is_comm_kernel, is_comm_op
from traceana.link.steps import PHASES, collective_kind, rank_facts
from traceana.ranks.collectives import collective_section
from traceana.ranks.first import first_screen
from traceana.ranks.straggler import CLASSES, NEAR_TIE_PCT, median, straggler
from traceana.arrays import distinct

__all__ = ["CLASSES", "NEAR_TIE_PCT", "SCHEMA", "check_inputs", "collective_kind", "cross_rank", "rank_facts"]

SCHEMA = "traceana.ranks/1"
_RANK_IN_NAME = re.compile(r"rank[-_.]?([0-9]{1,9})", re.IGNORECASE)  # ASCII digits: '²' and '٣' are no rank
TOP_OPS = 5


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
    """An op row whose time is communication (its name, or its top kernel's, is communication as
    traceana/link/comm_kernels.py says: the rule the single-rank report uses)."""
    name = str(op.get("name") or "")
    if is_comm_op(name) or is_comm_kernel(name):
        return True
    kernels = [k for k in _list(op.get("kernels")) if isinstance(k, Mapping)]
    if not kernels:
        return False
    top = max(kernels, key=lambda k: _num(k.get("time_us")) or 0.0)
    return is_comm_kernel(str(top.get("name") or ""))


def _norm(v: Any) -> Any:
    """Lists and tuples alike (an in-memory Analysis has tuples, a reloaded one lists)."""
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


def _sig(op: Mapping[str, Any]) -> tuple[str, str]:
    """(key, display) of an op signature: the key is exact (name, dims, dtypes, opaque cause),
    the display readable and cut: `aten::mm (8192×8192, 8192×8192; float, float)`."""
    from traceana.units import dims as fmt_dims
    from traceana.units import dtypes as fmt_types

    name = str(op.get("name") or "(unnamed)")
    dims, types = _norm(op.get("input_dims") or []), _norm(op.get("input_types") or [])
    cause = op.get("cause") if op.get("opaque") else None
    key = repr((name, dims, types, cause))
    if cause:
        return key, f"{name[:100]} [opaque: {cause}]"
    d, t = fmt_dims(dims, 80), fmt_types(types, 40)
    return key, (f"{name[:100]} ({d}; {t})" if d or t else name[:100])


def _rank_label(a: Mapping[str, Any], facts: Mapping[str, Any], index: int) -> tuple[int, str, str]:
    """(rank id, label, where the id came from: distributedInfo, the file name, or the order)."""
    rank, src = facts.get("rank"), "distributedInfo"
    if not isinstance(rank, int) or isinstance(rank, bool):
        rank = _map(_map(a.get("trace")).get("distributed")).get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool):
        m = _RANK_IN_NAME.search(str(_map(a.get("trace")).get("file") or ""))
        rank, src = (int(m.group(1)), "file name") if m else (index, "order")
    return rank, f"rank {rank}", src


def _phases(facts: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    out = {}
    for p, v in _map(facts.get("phases")).items():
        v = _map(v)
        if p in PHASES:
            out[p] = {k: _num(v.get(k)) or 0.0 for k in ("wall_us", "work_us", "collective_us")}
            out[p]["wait_us"] = 0.0
    return out


def _calls(facts: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The rank's collective-call summary (ranks/summary.py), when its worker made one."""
    c = facts.get("calls")
    return c if isinstance(c, Mapping) and "t" in c and "n" in c else None


def _cpu_collectives(calls: Mapping[str, Any], in_steps: bool) -> tuple[float, dict[str, float]]:
    """A CPU backend's collective time: its calls' own durations (gloo's worker ranges), in all and by kind."""
    import numpy as np

    from traceana.ranks.calls import KINDS

    d = np.asarray(calls["end"], dtype=float) - np.asarray(calls["t"], dtype=float)
    ok = np.isfinite(d) & ((np.asarray(calls["step"]) >= 0) if in_steps else True)
    kinds = np.asarray(calls["kind"], dtype=np.int64)
    by = {KINDS[k]: float(d[ok & (kinds == k)].sum()) for k in distinct(kinds[ok]).tolist()}
    return float(d[ok].sum()), dict(sorted(by.items(), key=lambda kv: -kv[1]))


def _peak_memory(a: Mapping[str, Any]) -> float | None:
    """The largest allocated bytes of the rank's first device (GPU first; the host's for a CPU run)."""
    devs = [d for d in _list(_map(a.get("memory")).get("devices")) if isinstance(d, Mapping)]
    return _num(devs[0].get("peak_allocated_bytes")) if devs else None


def _saving(a: Mapping[str, Any]) -> float | None:
    """What the rank's own levers together save of its device span (its report's projection), µs."""
    p = _map(a.get("projection"))
    now, after = _num(p.get("span_now_us")), _num(p.get("span_after_us"))
    return max(now - after, 0.0) if now is not None and after is not None else None


def _one(a: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The per-rank numbers (totals; scaled to per-step later when every rank has steps)."""
    from traceana.document import gpu_busy

    facts = _map(a.get("rank_facts"))
    tr = _map(a.get("trace"))
    rank, label, source = _rank_label(a, facts, index)
    steps = [s for s in (_num(x) for x in _list(facts.get("steps"))) if s is not None and s > 0]
    span = _num(tr.get("span_us")) or 0.0
    ops = [o for o in _list(a.get("ops")) if isinstance(o, Mapping)]
    by_class = {c: 0.0 for c in CLASSES}
    sigs: dict[str, dict[str, Any]] = {}
    for o in ops:
        t = _num(o.get("device_time_us")) or 0.0
        bound = str(o.get("bound") or "unmodelled")
        cls = "collective" if bound == "communication" or _is_collective_row(o) else bound
        by_class[cls if cls in by_class else "unmodelled"] += t
        key, shown = _sig(o)
        s = sigs.setdefault(key, {"sig": shown, "name": str(o.get("name") or ""), "class": cls, "us": 0.0})
        s["us"] += t
    device_us = _num(_map(a.get("coverage")).get("device_time_us"))
    if device_us is None:
        device_us = sum(by_class.values())
    coll = _num(facts.get("collective_us"))
    if coll is None:  # no facts (a saved analysis): the collective op rows are the best we have
        coll = by_class["collective"]
    by_kind = dict(_map(facts.get("collective_by_kind")))
    calls = _calls(facts)
    if calls is not None and calls.get("backend") == "cpu" and not coll:  # a CPU backend: its calls' own time
        coll, by_kind = _cpu_collectives(calls, bool(steps))
    busy, window = _num(facts.get("busy_us")), _num(facts.get("window_us"))
    if busy is None or not window:  # no facts: the timeline's union over the device's span
        b = gpu_busy(a)
        busy, window = (b["primary"]["busy_us"], b["primary"]["span_us"]) if b else (None, None)
    if not _num(tr.get("gpu_events")):
        busy = None  # no GPU: nothing was busy or idle
    dev = _map(a.get("device"))
    world = facts.get("world_size", _map(tr.get("distributed")).get("world_size"))
    return {
        "rank": rank, "label": label, "rank_source": source, "file": str(tr.get("file") or ""),
        "world_size": world if isinstance(world, int) and not isinstance(world, bool) else None,
        "steps": len(steps), "step_numbers": [n for n in _list(facts.get("step_numbers")) if isinstance(n, int)],
        "step_us_total": sum(steps) if steps else span, "span_us": span,
        "device_us": device_us, "by_class": by_class, "sigs": sigs, "busy_us": busy, "window_us": window,
        "collective_us": coll, "collective_by_kind": by_kind,
        "calls": _calls(facts), "calls_n": int(_calls(facts)["n"]) if _calls(facts) else None,
        "phases": _phases(facts), "peak_memory_bytes": _peak_memory(a),
        "saving_us": _saving(a),
        "phase_source": {k: str(v) for k, v in _map(facts.get("phase_source")).items()},
        "device": str(dev.get("name") or ""), "device_key": dev.get("key"), "events": _num(tr.get("events")),
        "warnings": len(_list(a.get("warnings"))),
    }


def _waits(rows: list[dict[str, Any]]) -> tuple[int, dict[str, Any] | None]:
    """Each rank's collective wait (total µs; per phase too) and the wait it caused, from its calls matched
    across ranks (ranks/collectives.py: everyone leaves together, the last arrival sets the time).
    Ranks without call summaries (saved analyses) fall back to collective time less the least of any
    rank's. Returns (calls with no counterpart on another rank, the "collectives" section)."""
    for r in rows:
        r["wait_total"] = 0.0
    if len(rows) < 2:
        return 0, None
    if any(r["calls"] is None for r in rows):
        least = min(r["collective_us"] * r["scale"] for r in rows)
        for r in rows:
            r["wait_total"] = (r["collective_us"] * r["scale"] - least) / r["scale"] if r["scale"] else 0.0
        return 0, None
    section = collective_section(rows, [r["calls"] for r in rows])
    for r in rows:
        for p, us in r["suffered_by_phase"].items():
            if p in r["phases"]:
                r["phases"][p]["wait_us"] = us
    return section["unmatched_calls"], section


def _steps_text(nums: Sequence[int]) -> str:
    if not nums:
        return "no steps"
    if list(nums) == list(range(nums[0], nums[0] + len(nums))) and len(nums) > 1:
        return f"#{nums[0]}-#{nums[-1]}"
    return ", ".join(f"#{n}" for n in nums[:4]) + (" …" if len(nums) > 4 else "")


def _by(rows: list[dict[str, Any]], key: str) -> dict[Any, list[str]]:
    out: dict[Any, list[str]] = {}
    for r in rows:
        out.setdefault(r[key], []).append(r["label"] if key != "rank" else r["file"])
    return out


def check_inputs(rows: list[dict[str, Any]]) -> list[str]:
    """Why these rank files may not be one run (empty when nothing says so): duplicate rank
    ids, differing world sizes, devices or captured ProfilerStep numbers."""
    problems = []
    named = [r for r in rows if r["rank_source"] != "order"]  # an id from the order is no evidence
    dups = {k: v for k, v in _by(named, "rank").items() if len(v) > 1}
    if dups:
        k, files = next(iter(sorted(dups.items())))
        src = next(r["rank_source"] for r in rows if r["rank"] == k)
        more = f" (and {len(dups) - 1} more rank ids)" if len(dups) > 1 else ""
        problems.append(f"rank {k} appears in {len(files)} files ({and_files(files)}; rank from the {src}){more}")
    worlds = {k: v for k, v in _by(rows, "world_size").items() if k is not None}
    if len(worlds) > 1:
        each = "; ".join(f"{k} on {_few(v)}" for k, v in sorted(worlds.items()))
        problems.append(f"world sizes differ ({each})")
    elif worlds:
        (world,) = worlds
        beyond = [r["label"] for r in rows if r["rank_source"] == "distributedInfo" and not 0 <= r["rank"] < world]
        if beyond:
            problems.append(f"{_few(beyond)} outside the world size {world}")
        if len(rows) > world:
            problems.append(f"{len(rows)} rank files for a world size of {world}")
    devices = {k: v for k, v in _by(rows, "device").items() if k}
    if len(devices) > 1:
        each = "; ".join(f"{k[:60]} on {_few(v)}" for k, v in sorted(devices.items()))
        problems.append(f"devices differ ({each})")
    stepped = [r for r in rows if r["steps"]]
    if stepped and len(stepped) < len(rows):
        problems.append(f"ProfilerStep annotations in {len(stepped)} of {len(rows)} files")
    else:
        runs = {}
        for r in stepped:
            runs.setdefault(tuple(r["step_numbers"]), []).append(r["label"])
        if len(runs) > 1:
            problems.append("captured steps differ (" + "; ".join(f"{_steps_text(list(k))} on {_few(v)}"
                                                                  for k, v in sorted(runs.items())) + ")")
    return problems


def _few(labels: Sequence[str]) -> str:
    return ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")


def and_files(files: Sequence[str]) -> str:
    return _few([f[:80] for f in files])


def warning_line(problems: Sequence[str], n: int) -> str:
    return (f"these {n} rank files do not look like one run: " + "; ".join(problems)
            + ". Each rank is reported on its own; no straggler or spread is computed.")


def cross_rank(analyses: Sequence[Mapping[str, Any]], failed: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The cross-rank dict. `analyses` in rank-file order; `failed`: [{file, error}] for
    rank files that could not be analysed (listed in the report, not compared)."""
    rows = [_one(a, i) for i, a in enumerate(analyses)]
    problems = check_inputs(rows) if len(rows) > 1 else []
    per_step = bool(rows) and all(r["steps"] > 0 for r in rows)
    for r in rows:
        r["scale"] = 1.0 / r["steps"] if per_step else 1.0
    compare = len(rows) >= 2 and not problems
    unmatched, section = 0, None
    if compare:
        unmatched, section = _waits(rows)
    for r in rows:
        r.setdefault("wait_total", 0.0)
    for r in rows:
        sc = r["scale"]
        r["step_us"] = r["step_us_total"] * sc
        r["by_class_scaled"] = {c: v * sc for c, v in r["by_class"].items()}
        r["collective_us_scaled"] = r["collective_us"] * sc
        r["wait_us"] = r["wait_total"] * sc
        r["own_us"] = r["step_us"] - r["wait_us"]
        r["phases"] = {p: {k: v * sc for k, v in d.items()} for p, d in r["phases"].items()}
    med_step = median([r["step_us"] for r in rows])
    out_ranks = []
    for r, a in zip(rows, analyses):
        top = [o for o in _list(a.get("ops")) if isinstance(o, Mapping)][:TOP_OPS]
        busy_pct = r["busy_us"] / r["window_us"] * 100 if r["busy_us"] is not None and r["window_us"] else None
        out_ranks.append({
            "rank": r["rank"], "label": r["label"], "rank_source": r["rank_source"], "file": r["file"],
            "world_size": r["world_size"], "steps": r["steps"], "step_numbers": r["step_numbers"],
            "step_us": r["step_us"], "span_us": r["span_us"],
            "vs_median_pct": (r["step_us"] / med_step - 1) * 100 if compare and med_step > 0 else None,
            "device_us": r["device_us"] * r["scale"],
            "busy_us": r["busy_us"] * r["scale"] if r["busy_us"] is not None else None,
            "busy_pct": min(busy_pct, 100.0) if busy_pct is not None else None,
            "by_class_us": r["by_class_scaled"],
            "collective_us": r["collective_us_scaled"],
            "collective_wait_us": r["wait_us"] if compare else None,
            "collective_transfer_us": r["collective_us_scaled"] - r["wait_us"] if compare else None,
            "own_us": r["own_us"] if compare else None,
            "wait_caused_us": r["caused_total"] * r["scale"] if compare and "caused_total" in r else None,
            "caused_by_phase_us": {k: v * r["scale"] for k, v in r.get("caused_by_phase", {}).items()},
            "last_arrivals": r.get("last_arrivals"),
            "comm_bytes": r["comm_bytes_total"] * r["scale"] if r.get("comm_bytes_total") is not None else None,
            "collective_calls": r.get("calls_n"),
            "step_start_lag_us": r.get("step_start_lag_us"),
            "peak_memory_bytes": r["peak_memory_bytes"],
            **_projected(r, rows, compare),
            "collective_by_kind_us": {k: v * r["scale"] for k, v in r["collective_by_kind"].items()},
            "phases": r["phases"], "phase_source": r["phase_source"],
            "device": r["device"], "device_key": r["device_key"],
            "warnings": r["warnings"],
            "top_ops": [{"id": o.get("id"), "name": o.get("name"), "sig": _sig(o)[1], "bound": o.get("bound"),
                         "device_time_us": (_num(o.get("device_time_us")) or 0.0) * r["scale"],
                         "roof_pct": _num(o.get("roof_pct"))} for o in top],
        })
    summary: dict[str, Any] = {
        "ranks": len(rows), "failed": len(failed), "per_step": per_step,
        "unit": "per step" if per_step else "per trace (no ProfilerStep annotations in every rank)",
        "median_step_us": med_step,
        "min_step_us": min((r["step_us"] for r in rows), default=None),
        "max_step_us": max((r["step_us"] for r in rows), default=None),
        "collective_us_median": median([r["collective_us_scaled"] for r in rows]),
        "collective_wait_us_total": sum(r["wait_us"] for r in rows) if compare else None,
        "collectives_unmatched": unmatched,
        "devices": sorted({r["device"] for r in rows if r["device"]}),
        "consistent": not problems, "problems": problems,
        "warning": warning_line(problems, len(rows)) if problems else None,
        "near_tie_pct": NEAR_TIE_PCT,
    }
    if compare and med_step > 0:
        summary["spread_pct"] = (summary["max_step_us"] - summary["min_step_us"]) / med_step * 100
    doc = {
        "schema": SCHEMA,
        "tool": {"name": "traceana", "version": __version__},
        "summary": summary,
        "ranks": out_ranks,
        "straggler": straggler(rows, per_step) if compare else None,
        "collectives": section,
        "failed": [{"file": str(f.get("file") or ""), "error": str(f.get("error") or "")} for f in failed],
    }
    doc["first"] = first_screen(doc) if compare else []
    return doc


def _projected(r: dict[str, Any], rows: list[dict[str, Any]], compare: bool) -> dict[str, Any]:
    """The rank's own projected step (its levers' saving off its step) and that bound by the other ranks:
    with them unchanged it still waits for each at the collectives, so no step below the slowest other
    rank's own time (its step less its wait: its path to the same collectives)."""
    if not compare or r.get("saving_us") is None:
        return {"projected_step_us": None, "projected_bound_us": None, "projected_bound_by": None}
    own = r["step_us"] - r["saving_us"] * r["scale"]
    others = [(q["own_us"], q["label"]) for q in rows if q is not r]
    bound, by = max(others) if others else (None, None)
    return {"projected_step_us": max(own, 0.0), "projected_bound_us": max(own, bound) if bound is not None else own,
            "projected_bound_by": by if bound is not None and bound > own else None}
