"""Compare two analyses: `diff_analyses(base, head)` -> a `traceana.diff/1` document.

Pure: plain dicts in (saved analyses, docs/analysis-schema.md), a plain JSON-serialisable
dict out; no files, no printing. The renderers (render/diff_markdown.py, render/diff_html.py)
and the gates (gates.py) read only the returned document.

Matching op signatures, in order:
1. exact: the same (name, input_dims, input_types); rows that differ only in scalars or
   concrete inputs are summed first, so each key is one signature;
2. "shape": for a (name, input_types) with exactly one unmatched signature left on each
   side, those two are paired (the shapes changed);
3. "name": the same for an op name alone (dtypes changed too).
Ambiguous leftovers stay new / vanished: a guessed pairing would report a delta that is not
one. `by_name` sums every signature per op name, which stays meaningful when shapes change.
Devices are never part of the key, so a run on an A100 matches a run on a V100.

Noise: a profile is one run. When both sides carry ProfilerStep#N annotations every time is
divided by the side's step count (so 5 steps against 6 compares like with like), and the
document says which normalisation it used. Deltas under NOISE_PCT are counted as unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from traceana.link.kernel_classes import classify
from traceana.roofline.bounds import BOUNDS
from traceana.document import mapping, seq
from traceana.units import num, text

DIFF_SCHEMA = "traceana.diff/1"
ANALYSIS_SCHEMA = "traceana.analysis/1"
#: % of roof changes (percentage points) at or under this are not listed as roof changes.
ROOF_THRESHOLD_PP = 10.0
#: Relative changes under this (%) count as unchanged in the summary counts.
NOISE_PCT = 2.0


# ------------------------------------------------------------------ signatures


def _key(op: Mapping[str, Any]) -> tuple[str, str, str]:
    dump = lambda v: json.dumps(v, sort_keys=True, default=str)  # noqa: E731
    return text(op.get("name")), dump(seq(op.get("input_dims"))), dump(seq(op.get("input_types")))


def collapse_ops(ops: Iterable[Any]) -> list[dict[str, Any]]:
    """Op rows summed per (name, input_dims, input_types), most device time first.

    `roofline_total_us` is the roof time of all calls (roof time per call x calls), so
    % of roof stays roofline_total / device time when rows are summed; it is None when no
    row of the signature has a roof (unmodelled, opaque, unknown peak).
    """
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for op in ops:
        if not isinstance(op, Mapping):
            continue
        key = _key(op)
        t = num(op.get("device_time_us")) or 0.0
        count = num(op.get("count")) or 0.0
        roof = num(op.get("roofline_time_us"))
        g = groups.get(key)
        if g is None:
            g = groups[key] = {
                "name": key[0], "input_dims": seq(op.get("input_dims")),
                "input_types": seq(op.get("input_types")), "count": 0, "device_time_us": 0.0,
                "roofline_total_us": None, "flops": num(op.get("flops")), "bytes": num(op.get("bytes")),
                "bound": text(op.get("bound")) or "unmodelled", "_rows": 0, "_best": -1.0,
                "_pct": num(op.get("roof_pct")),
            }
        g["count"] += int(count)
        g["device_time_us"] += t
        g["_rows"] += 1
        if roof is not None and count:
            g["roofline_total_us"] = (g["roofline_total_us"] or 0.0) + roof * count
        if t > g["_best"]:
            g["_best"] = t
            g["bound"] = text(op.get("bound")) or "unmodelled"
    out = []
    for g in groups.values():
        rows, pct = g.pop("_rows"), g.pop("_pct")
        g.pop("_best")
        if rows > 1 or pct is None:
            pct = (100.0 * g["roofline_total_us"] / g["device_time_us"]
                   if g["roofline_total_us"] is not None and g["device_time_us"] > 0 else None)
        g["roof_pct"] = pct
        out.append(g)
    out.sort(key=lambda g: (-g["device_time_us"], g["name"], _key(g)))
    return out


# ------------------------------------------------------------------ merging


def _sum_dicts(dicts: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Numbers summed key by key; nested mappings (e.g. opaque_by_cause) summed too."""
    out: dict[str, Any] = {}
    for d in dicts:
        for k, v in d.items():
            if isinstance(v, Mapping):
                out[k] = _sum_dicts([out.get(k) or {}, v])
            elif num(v) is not None:
                out[k] = (num(out.get(k)) or 0.0) + num(v)  # type: ignore[operator]
    return out


def merge_analyses(analyses: list[Mapping[str, Any]], label: str) -> dict[str, Any]:
    """Several analyses (a directory of traces: ranks, or repeated runs) as one.

    Ops are summed per signature, coverage and breakdown key by key, and steps too, so
    "per step" means per (file, step). Peaks and the device are the first file's; a
    warning says when the files ran on different devices.
    """
    if len(analyses) == 1:
        return dict(analyses[0])
    first = mapping(analyses[0])
    files = [text(mapping(a.get("trace")).get("file")) for a in analyses]
    steps = [num(mapping(a.get("trace")).get("steps")) or 0 for a in analyses]
    warnings = []
    names = sorted({text(mapping(a.get("device")).get("name")) or "unknown" for a in analyses})
    if len(names) > 1:
        warnings.append(f"{label}: the files ran on different devices ({', '.join(names)}); "
                        "roofs are those of the first file's device")
    if any(s <= 0 for s in steps) and any(s > 0 for s in steps):
        warnings.append(f"{label}: only some files have ProfilerStep annotations; times are not per step")
    ops = collapse_ops(op for a in analyses for op in seq(a.get("ops")))
    for op in ops:
        op["roofline_time_us"] = (op["roofline_total_us"] / op["count"]
                                  if op["roofline_total_us"] is not None and op["count"] else None)
    for a, f in zip(analyses, files):
        warnings += [f"{f}: {text(w, 500)}" for w in seq(a.get("warnings"))[:20]]
    return {
        "schema": ANALYSIS_SCHEMA,
        "tool": first.get("tool"),
        "trace": {"file": label, "files": files, "merge_warnings": warnings[:],
                  "steps": int(sum(steps)) if all(s > 0 for s in steps) else 0},
        "device": first.get("device"),
        "coverage": _sum_dicts([mapping(a.get("coverage")) for a in analyses]),
        "breakdown": _sum_dicts([mapping(a.get("breakdown")) for a in analyses]),
        "ops": ops,
        "explanations": [],
        "findings": [],
        "warnings": warnings,
    }


# ------------------------------------------------------------------ the diff


def _total(a: Mapping[str, Any]) -> float:
    t = num(mapping(a.get("breakdown")).get("total_us"))
    if t is None:
        t = num(mapping(a.get("coverage")).get("device_time_us"))
    return t or 0.0


def _pct(new: float, old: float) -> float | None:
    """Relative change in percent; None when there is nothing to compare against."""
    if old > 0:
        return 100.0 * (new - old) / old
    return None


def _delta(base_us: float, head_us: float) -> dict[str, Any]:
    return {"base_us": base_us, "head_us": head_us, "delta_us": head_us - base_us,
            "delta_pct": _pct(head_us, base_us)}


def _side(a: Mapping[str, Any], label: str) -> dict[str, Any]:
    trace, dev = mapping(a.get("trace")), mapping(a.get("device"))
    return {
        "label": text(label or trace.get("file"), 300),
        "files": [text(f, 300) for f in seq(trace.get("files"))] or [text(trace.get("file"), 300)],
        "device": {"name": text(dev.get("name"), 200), "key": dev.get("key"),
                   "dram_gbps": num(dev.get("dram_gbps")),
                   "peak_tflops": {text(k, 40): num(v) for k, v in mapping(dev.get("peak_tflops")).items()}},
        "steps": int(num(trace.get("steps")) or 0),
        "device_time_us": _total(a),
        "coverage": {k: v for k, v in mapping(a.get("coverage")).items()},
        "ops": len(seq(a.get("ops"))),
    }


def _normalisation(b: dict[str, Any], h: dict[str, Any]) -> dict[str, Any]:
    bs, hs = b["steps"], h["steps"]
    if bs > 0 and hs > 0:
        note = (f"Times are per profiler step: base has {bs} ProfilerStep annotations, head {hs}; "
                "each side's device time is divided by its step count.")
        return {"per": "step", "base_steps": bs, "head_steps": hs, "note": note}
    which = "neither side has" if bs == hs == 0 else ("base has no" if bs == 0 else "head has no")
    note = (f"Times are whole-trace totals: {which} ProfilerStep annotations, so time per step is "
            "unknown; profile the same number of steps on both sides (torch.profiler schedule).")
    return {"per": "run", "base_steps": bs, "head_steps": hs, "note": note}


def _device_note(b: dict[str, Any], h: dict[str, Any]) -> str | None:
    bd, hd = b["device"], h["device"]
    same = (bd["key"] == hd["key"]) if bd["key"] and hd["key"] else (bd["name"] == hd["name"])
    if same:
        return None
    return (f"Different devices: base ran on {bd['name'] or 'an unknown device'}, head on "
            f"{hd['name'] or 'an unknown device'}; time differences include the hardware, not only the code.")


def _op_side(g: Mapping[str, Any], scale: float, total: float) -> dict[str, Any]:
    t = g["device_time_us"] * scale
    return {"count": g["count"], "device_time_us": g["device_time_us"], "time_us": t,
            "share_pct": 100.0 * t / total if total > 0 else None, "roof_pct": g["roof_pct"],
            "roofline_total_us": g["roofline_total_us"], "bound": g["bound"], "flops": g["flops"]}


def _match(base_ops: list[dict[str, Any]], head_ops: list[dict[str, Any]]
           ) -> tuple[list[tuple[dict, dict, str]], list[dict], list[dict]]:
    """(base, head, how) pairs, then unmatched head ops (new) and base ops (vanished)."""
    head_by_key = {_key(g): g for g in head_ops}
    pairs: list[tuple[dict, dict, str]] = []
    left_b: list[dict] = []
    for g in base_ops:
        h = head_by_key.pop(_key(g), None)
        if h is not None:
            pairs.append((g, h, "exact"))
        else:
            left_b.append(g)
    left_h = [g for g in head_ops if _key(g) in head_by_key]
    for tier, keyfn in (("shape", lambda g: (g["name"], _key(g)[2])), ("name", lambda g: g["name"])):
        bk: dict[Any, list[dict]] = {}
        hk: dict[Any, list[dict]] = {}
        for g in left_b:
            bk.setdefault(keyfn(g), []).append(g)
        for g in left_h:
            hk.setdefault(keyfn(g), []).append(g)
        paired_b, paired_h = set(), set()
        for k, bs in bk.items():
            hs = hk.get(k, [])
            if len(bs) == 1 and len(hs) == 1:
                pairs.append((bs[0], hs[0], tier))
                paired_b.add(id(bs[0]))
                paired_h.add(id(hs[0]))
        left_b = [g for g in left_b if id(g) not in paired_b]
        left_h = [g for g in left_h if id(g) not in paired_h]
    return pairs, left_h, left_b


def _by_name(base_ops: list[dict], head_ops: list[dict], bscale: float, hscale: float) -> list[dict]:
    """Time per op name (all signatures summed): robust when shapes changed between runs."""
    names: dict[str, list[float]] = {}
    for g in base_ops:
        names.setdefault(g["name"], [0.0, 0.0])[0] += g["device_time_us"] * bscale
    for g in head_ops:
        names.setdefault(g["name"], [0.0, 0.0])[1] += g["device_time_us"] * hscale
    rows = [{"name": n, **_delta(b, h)} for n, (b, h) in names.items()]
    rows.sort(key=lambda r: (-abs(r["delta_us"]), r["name"]))
    return rows


#: Causes of rows named by a kernel, not an op: no op launched their kernels (link/attribute.py CAUSES).
UNLINKED = ("no_launch", "graph_replay", "graph_unaligned", "outside_op", "compiled")
#: What each such cause means, in a diff's words.
UNLINKED_WORDS = {"no_launch": "kernels with no launch in the trace", "graph_replay": "kernels in CUDA/HIP graph replays",
                  "graph_unaligned": "kernels in graph replays not matched to a capture",
                  "outside_op": "kernels launched outside any op", "compiled": "compiled-region kernels"}
#: A moved kernel's op, per side, lists at most this many kernel names.
MOVED_KERNELS = 4


def _kernels(a: Mapping[str, Any]) -> tuple[dict[str, dict[str, float]], list[tuple[str, str, str, float]]]:
    """(kernel name -> {op name: µs} over the rows whose kernels an op launched; [(row name, kernel name, cause,
    µs)] of the kernels of rows named by a kernel, which no op launched: graph replays, no launch, ...)."""
    linked: dict[str, dict[str, float]] = {}
    lone: list[tuple[str, str, str, float]] = []
    for op in seq(a.get("ops")):
        op = mapping(op)
        cause, name = text(op.get("cause")), text(op.get("name"))
        for k in seq(op.get("kernels")):
            k = mapping(k)
            kn, t = text(k.get("name")), num(k.get("time_us")) or 0.0
            if not kn or t <= 0:
                continue
            if cause in UNLINKED:
                lone.append((name, kn, cause, t))
            elif kn != name:
                linked.setdefault(kn, {})
                linked[kn][name] = linked[kn].get(name, 0.0) + t
    return linked, lone


def _moved(base: Mapping[str, Any], head: Mapping[str, Any], bscale: float, hscale: float) -> dict[str, Any]:
    """Kernels no op launched on one side, matched by kernel name to the op that launched kernels of that name
    (on either side): per op name, the time of its kernels that ran unlinked on each side; per cause, how much
    of it was matched. A kernel name under several ops is shared in proportion to their time."""
    bl, blone = _kernels(base)
    hl, hlone = _kernels(head)
    homes: dict[str, dict[str, float]] = {}
    for m in (bl, hl):
        for k, ops in m.items():
            for o, t in ops.items():
                homes.setdefault(k, {})
                homes[k][o] = homes[k].get(o, 0.0) + t
    by_op: dict[str, dict[str, Any]] = {}
    causes: dict[str, dict[str, Any]] = {}
    rows: dict[str, list[float]] = {}  # kernel-named rows whose time went to an op: (base, head) µs moved
    unmatched: dict[tuple[str, str], dict[str, Any]] = {}  # (side, kernel class) -> unlinked kernels no op names
    for side, lone, scale in (("base", blone, bscale), ("head", hlone, hscale)):
        for row, k, cause, t in lone:
            t *= scale
            c = causes.setdefault(cause, {"cause": cause, "words": UNLINKED_WORDS.get(cause, cause),
                                          "base_us": 0.0, "head_us": 0.0, "base_matched_us": 0.0,
                                          "head_matched_us": 0.0, "ops": {}})
            c[f"{side}_us"] += t
            home = homes.get(k)
            if not home:  # no op launches a kernel of this name on either side: kept by its class
                u = c.setdefault("unmatched_by_class", {})
                cls = classify(k)
                u[cls] = u.get(cls, 0.0) + t
                un = unmatched.setdefault((side, cls), {"us": 0.0, "kernels": []})
                un["us"] += t
                if len(un["kernels"]) < MOVED_KERNELS:
                    un["kernels"].append(k)
                continue
            c[f"{side}_matched_us"] += t
            total = sum(home.values())
            rows.setdefault(row, [0.0, 0.0])[0 if side == "base" else 1] += t
            for o, w in home.items():
                share = t * w / total
                e = by_op.setdefault(o, {"name": o, "base_us": 0.0, "head_us": 0.0, "causes": {}, "kernels": []})
                e[f"{side}_us"] += share
                e["causes"][cause] = e["causes"].get(cause, 0.0) + share
                if k not in e["kernels"] and len(e["kernels"]) < MOVED_KERNELS:
                    e["kernels"].append(k)
                c["ops"][o] = c["ops"].get(o, 0.0) + share
    for c in causes.values():
        c["ops"] = dict(sorted(c["ops"].items(), key=lambda kv: -kv[1])[:5])
    ops = sorted(by_op.values(), key=lambda e: (-abs(e["head_us"] - e["base_us"]), e["name"]))
    classes: dict[str, set[str]] = {}  # op name -> the classes of the kernels it launches (either side)
    for m in (bl, hl):
        for k, opnames in m.items():
            for o in opnames:
                classes.setdefault(o, set()).add(classify(k))
    return {"ops": ops, "causes": sorted(causes.values(), key=lambda c: -abs(c["head_us"] - c["base_us"])),
            "rows": rows, "unmatched": unmatched, "classes": classes}


def _by_name_moved(rows: list[dict], moved: dict[str, Any]) -> list[dict]:
    """by_name with each op's kernels that ran unlinked added to its side (base_unlinked_us, head_unlinked_us),
    so an op whose kernels went into graph replays is not called faster; the kernel-named rows whose time
    went to an op are left out (it is counted there)."""
    extra = {e["name"]: e for e in moved["ops"]}
    gone = moved["rows"]
    out = []
    for r in rows:
        if r["name"] in gone:
            b, h = gone[r["name"]]
            r = {**r, **_delta(max(r["base_us"] - b, 0.0), max(r["head_us"] - h, 0.0))}
            if r["base_us"] <= 1e-6 and r["head_us"] <= 1e-6:
                continue
        e = extra.pop(r["name"], None)
        if e is not None:
            r = {**r, "base_linked_us": r["base_us"], "head_linked_us": r["head_us"],
                 "base_unlinked_us": e["base_us"], "head_unlinked_us": e["head_us"],
                 "unlinked_causes": sorted(e["causes"], key=lambda c: -e["causes"][c]), "kernels": e["kernels"],
                 **_delta(r["base_us"] + e["base_us"], r["head_us"] + e["head_us"])}
        out.append(r)
    for r in out:  # faster, while kernels of its class ran unlinked and unnamed in head: maybe moved, not faster
        if r["delta_us"] >= 0:
            continue
        side = "head"
        for cls in sorted(moved["classes"].get(r["name"], ())):
            un = moved["unmatched"].get((side, cls))
            if un and un["us"] >= 0.25 * abs(r["delta_us"]) > 0 and cls not in ("memcpy/memset", "other"):
                r["maybe_moved"] = {"side": side, "class": cls, "us": un["us"], "kernels": un["kernels"]}
                break
    for e in extra.values():  # ops whose kernels ran only unlinked
        out.append({"name": e["name"], "base_linked_us": 0.0, "head_linked_us": 0.0,
                    "base_unlinked_us": e["base_us"], "head_unlinked_us": e["head_us"],
                    "unlinked_causes": sorted(e["causes"], key=lambda c: -e["causes"][c]), "kernels": e["kernels"],
                    **_delta(e["base_us"], e["head_us"])})
    out.sort(key=lambda r: (-abs(r["delta_us"]), r["name"]))
    return out


def diff_analyses(base: Mapping[str, Any], head: Mapping[str, Any], *, base_label: str = "",
                  head_label: str = "", roof_threshold: float = ROOF_THRESHOLD_PP) -> dict[str, Any]:
    """The differences between two analyses (see the module docstring for the matching)."""
    base, head = mapping(base), mapping(head)
    b, h = _side(base, base_label), _side(head, head_label)
    norm = _normalisation(b, h)
    bscale = 1.0 / b["steps"] if norm["per"] == "step" else 1.0
    hscale = 1.0 / h["steps"] if norm["per"] == "step" else 1.0
    btot, htot = b["device_time_us"] * bscale, h["device_time_us"] * hscale
    base_ops, head_ops = collapse_ops(seq(base.get("ops"))), collapse_ops(seq(head.get("ops")))
    pairs, new, vanished = _match(base_ops, head_ops)

    ops = []
    for bg, hg, how in pairs:
        bs, hs = _op_side(bg, bscale, btot), _op_side(hg, hscale, htot)
        roof_delta = (hs["roof_pct"] - bs["roof_pct"]
                      if hs["roof_pct"] is not None and bs["roof_pct"] is not None else None)
        row = {"name": bg["name"], "input_dims": bg["input_dims"], "input_types": bg["input_types"],
               "match": how, "base": bs, "head": hs, **_delta(bs["time_us"], hs["time_us"]),
               "roof_delta_pp": roof_delta,
               "roof_changed": roof_delta is not None and abs(roof_delta) > roof_threshold}
        if how != "exact":
            row["head_input_dims"], row["head_input_types"] = hg["input_dims"], hg["input_types"]
        ops.append(row)
    ops.sort(key=lambda r: (-abs(r["delta_us"]), r["name"], _key(r)))

    def lone(g: dict, scale: float, total: float, side: str) -> dict[str, Any]:
        return {"name": g["name"], "input_dims": g["input_dims"], "input_types": g["input_types"],
                side: _op_side(g, scale, total)}

    by_bound: dict[str, dict[str, Any]] = {}
    bb, hb = mapping(mapping(base.get("breakdown")).get("by_bound")), mapping(mapping(head.get("breakdown")).get("by_bound"))
    for k in [*BOUNDS, *sorted((set(bb) | set(hb)) - set(BOUNDS))]:
        bv, hv = num(bb.get(k)), num(hb.get(k))
        if bv is None and hv is None:
            continue
        by_bound[text(k, 40)] = _delta((bv or 0.0) * bscale, (hv or 0.0) * hscale)

    def moved(rows: list[dict], sign: int) -> int:
        return sum(1 for r in rows if r["delta_pct"] is not None and sign * r["delta_pct"] >= NOISE_PCT)

    warnings = [text(w, 500) for a in (base, head) for w in seq(mapping(a.get("trace")).get("merge_warnings"))]
    relinked = _moved(base, head, bscale, hscale)
    return {
        "schema": DIFF_SCHEMA,
        "tool": mapping(head.get("tool")) or mapping(base.get("tool")),
        "base": b,
        "head": h,
        "device_note": _device_note(b, h),
        "normalisation": norm,
        "noise_pct": NOISE_PCT,
        "roof_threshold_pp": roof_threshold,
        "total": _delta(btot, htot),
        "by_bound": by_bound,
        "summary": {"matched": len(ops), "exact": sum(r["match"] == "exact" for r in ops),
                    "new": len(new), "vanished": len(vanished),
                    "slower": moved(ops, 1), "faster": moved(ops, -1),
                    "roof_changed": sum(r["roof_changed"] for r in ops)},
        "ops": ops,
        "new": [lone(g, hscale, htot, "head") for g in new],
        "vanished": [lone(g, bscale, btot, "base") for g in vanished],
        "by_name": _by_name_moved(_by_name(base_ops, head_ops, bscale, hscale), relinked),
        "moved": {"ops": relinked["ops"][:50], "causes": relinked["causes"]},
        "warnings": warnings,
    }
