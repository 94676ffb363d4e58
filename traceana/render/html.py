"""The HTML report: one self-contained page built from the saved analysis dict.

Data first, page second (memray's reporters): `build_view` turns the untrusted analysis
dict into plain strings and numbers, tested without HTML; `render_html` pours that into
templates/report.html.j2. Strings reach the page two ways only: jinja2 autoescaping for
the markup, and `|tojson` (which escapes <, >, &, ') inside a
`<script type="application/json">` block that report.js reads with JSON.parse.
Nothing on the page depends on the time of rendering, so the same input gives the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from traceana.render.ops_table import ops_table
from traceana.roofline.bounds import BOUNDS
from traceana.document import by_bound, gpu_busy, mapping, seq, share
from traceana.render.views import (
    cpu_rows,
    row_bound,
    profile_sentence,
    over_roof_mark,
    plural,
    projection_line,
    fmt_bytes,
    fmt_dims,
    fmt_int,
    fmt_pct,
    fmt_si,
    fmt_sig,
    fmt_time_us,
    fmt_types,
    short_name,
    shown_warnings,
    verdict,
)
from traceana.units import num, text
from traceana import units
from traceana.render.first import (CARDS_BEFORE_FOLD, cards, cpu_only, device_line, plan, sentence, terms,
                                   unknown_device)
from traceana.render.json_out import to_json_safe
from traceana.render.modules import modules_view, where, where_title
from traceana.render.memory import memory_view
from traceana.render.timeline import add_story
from traceana.render.utilisation import utilisation_view

#: The table holds at most this many op signatures (the JSON output has them all).
MAX_TABLE_ROWS = 100_000
#: The chart plots at most this many op signatures (the ones with the most device time).
MAX_CHART_POINTS = 5000
#: Long lists in the coverage section are cut here.
MAX_LIST = 100

_ANCHOR_BAD = re.compile(r"[^A-Za-z0-9_.-]")


def render_html(analysis: Mapping[str, Any]) -> str:
    """The analysis as a self-contained HTML page (no network, no external assets)."""
    from traceana.render.templates import environment

    view = build_view(analysis)
    return environment().get_template("report.html.j2").render(view=view, data=view.pop("data"))


def _anchors(ops: list[Mapping[str, Any]]) -> tuple[list[str], dict[str, str]]:
    """A safe, unique element id per op, and the op's own id -> that anchor."""
    anchors: list[str] = []
    by_id: dict[str, str] = {}
    seen: set[str] = set()
    for i, op in enumerate(ops):
        raw = text(op.get("id"))
        a = _ANCHOR_BAD.sub("_", raw)[:64] or f"op{i}"
        if a in seen:
            a = f"{a}-{i}"
        seen.add(a)
        anchors.append(a)
        if raw and raw not in by_id:
            by_id[raw] = a
    return anchors, by_id


def _cell(t: str, v: Any = None, title: str = "", cls: str = "") -> dict[str, str]:
    """One table cell: shown text, sort key (numbers as repr, else ""), tooltip, class."""
    n = num(v)
    return {"t": t, "v": "" if n is None else repr(n), "title": title, "cls": cls}


def _op_details(op: Mapping[str, Any], full: str = "") -> str:
    """The name cell's tooltip: the full name, then what traceana knows about how the op was costed."""
    lines = [full] if full else []
    for label, key in (("family", "family"), ("FLOPs", "flops_expr"), ("bytes", "bytes_expr"),
                       ("reason", "reason"), ("roof", "peak_why")):
        if text(op.get(key)):
            lines.append(f"{label}: {text(op.get(key), 300)}")
    if op.get("estimated") is True:
        lines.append("estimated: yes")
    kernels = [_kernel_line(k) for k in seq(op.get("kernels"))[:5]]
    kernels = [k for k in kernels if k]
    if kernels:
        lines.append("kernels:\n  " + "\n  ".join(kernels))
    return "\n".join(lines)


def _kernel_line(k: Any) -> str:
    """One kernel of the tooltip: 'name (3 calls, 12.5 µs)'; a bare string as it is."""
    if not isinstance(k, Mapping):
        return text(k, 160)
    name = text(k.get("name"), 160)
    if not name:
        return ""
    count, t = num(k.get("count")), num(k.get("time_us"))
    facts = []
    if count is not None:
        facts.append(plural(count, "call"))
    if t is not None:
        facts.append(fmt_time_us(t))
    return f"{name} ({', '.join(facts)})" if facts else name


def _mean_us(op: Mapping[str, Any]) -> float | None:
    mean = num(op.get("mean_time_us"))
    if mean is None:
        total, count = num(op.get("device_time_us")), num(op.get("count"))
        if total is not None and count:
            mean = total / count
    return mean


def _row(op: Mapping[str, Any], anchor: str) -> dict[str, Any]:
    flops, nbytes = num(op.get("flops")), num(op.get("bytes"))
    peak = num(op.get("peak_tflops"))
    peak_text = fmt_sig(peak) if peak is not None else "—"
    peak_label = text(op.get("peak_label"), 40) or (units.peak_name(op.get("peak_dtype")) if text(op.get("peak_dtype"))
                                                     else "")
    est = op.get("estimated") is True
    mark = "≈ " if est else ""  # an estimated FLOP / byte count
    bound = row_bound(op)
    full = text(op.get("name"), 2000) or "(unnamed)"
    name = short_name(full) or "(unnamed)"
    dims = units.dims(op.get("input_dims"), None, collapse=True)
    family = text(op.get("family"), 30) or text(op.get("kernel_class"), 30) or "other"
    types = fmt_types(op.get("input_types"))
    mean = _mean_us(op)
    cells = [
        _cell(name, title=_op_details(op, full), cls="name"),
        _cell(text(dims, 160), title=dims if len(dims) > 160 else "", cls="dims"),
        _cell(types, cls="dtypes"),
        _cell(fmt_int(op.get("count")), op.get("count"), cls="num"),
        _cell(fmt_time_us(op.get("device_time_us")), op.get("device_time_us"), cls="num"),
        _cell(fmt_time_us(mean), mean, cls="num"),
        _cell(mark + fmt_si(flops) if flops is not None else "—", flops,
              (units.flops(flops) + (" (estimated)" if est else "")) if flops is not None else "",
              "num est" if est and flops is not None else "num"),
        _cell(mark + fmt_bytes(nbytes) if nbytes is not None else "—", nbytes,
              (units.nbytes(nbytes) + (" (estimated)" if est else "")) if nbytes is not None else "",
              "num est" if est and nbytes is not None else "num"),
        _cell(fmt_sig(op.get("intensity")), op.get("intensity"), cls="num"),
        _cell(fmt_sig(op.get("achieved_tflops")), op.get("achieved_tflops"), cls="num"),
        _cell(fmt_sig(op.get("achieved_gbps")), op.get("achieved_gbps"), cls="num"),
        _cell(fmt_time_us(op.get("roofline_time_us")), op.get("roofline_time_us"), cls="num"),
        _cell(_pct_text(op), op.get("roof_pct"), _pct_title(op),
              cls="num over" if op.get("over_roof") else "num est" if est else "num"),
        _cell(bound.replace("_", " "), cls=f"bound b-{bound}"),
        _cell(f"{peak_text} {peak_label}".strip() if peak is not None else "—", peak,
              title=text(op.get("peak_why"), 300), cls="roof"),
        _cell(where(op) or "—", title=where_title(op), cls="where"),
    ]
    search = " ".join((full, dims, types, bound, family,
                       text(op.get("module_class"), 2000), text(op.get("source"), 400))).lower()
    return {"id": anchor, "cells": cells, "bound": bound, "family": family, "search": text(search, 3000),
            "full": full}


def _pct_text(op: Mapping[str, Any]) -> str:
    """% of roof; a mark when it rests on an estimate or beats the roof (the model, not the GPU).
    With a device profile, % of the achievable roof follows."""
    base = _pct_base(op)
    if "achievable_pct" in op:
        return f"{base} · {fmt_pct(op.get('achievable_pct'))} ach."
    return base


def _pct_base(op: Mapping[str, Any]) -> str:
    pct = fmt_pct(op.get("roof_pct"))
    if op.get("roof_pct") is None:
        return pct
    if op.get("over_roof"):
        return f"{pct} ↑"
    return f"{pct} ≈" if op.get("estimated") is True else pct


def _pct_title(op: Mapping[str, Any]) -> str:
    o = op.get("over_roof")
    if isinstance(o, Mapping):
        return f"Over the roof ({over_roof_mark(op)}): {text(o.get('text'), 400)}"
    if op.get("estimated") is True:
        return "Estimated: the FLOP/byte count rests on an assumption (see the op's notes)"
    model = num(op.get("model_pct"))
    if model is not None:
        return (f"launch floor + roofline time = {fmt_time_us(op.get('model_time_us'))} per call, "
                f"{fmt_pct(model)} of the measured time")
    return ""


def _point(op: Mapping[str, Any], anchor: str, has_row: bool) -> dict[str, Any] | None:
    """A chart point, or None when the op cannot sit on a log-log roofline chart."""
    flops, x, y = num(op.get("flops")), num(op.get("intensity")), num(op.get("achieved_tflops"))
    if flops is None or flops <= 0 or x is None or x <= 0 or y is None or y <= 0:
        return None
    return {
        "id": anchor,
        "row": has_row,
        "name": short_name(op.get("name")) or "(unnamed)",
        "dims": fmt_dims(op.get("input_dims")),
        "dtypes": fmt_types(op.get("input_types")),
        "time": fmt_time_us(op.get("device_time_us")),
        "calls": plural(op.get("count"), "call"),
        "t": num(op.get("device_time_us")) or 0.0,
        "x": x,
        "y": y,
        "pct": fmt_pct(op.get("roof_pct")),
        "bound": row_bound(op),
        "tflops": fmt_sig(y),
        "intensity": fmt_sig(x),
    }


def _device(dev: Mapping[str, Any]) -> dict[str, Any]:
    peaks = mapping(dev.get("peak_tflops"))
    facts = [("Vendor", text(dev.get("vendor"), 100)), ("Architecture", text(dev.get("arch"), 100)),
             ("SMs", fmt_int(dev.get("sms")) if num(dev.get("sms")) is not None else ""),
             ("Peaks from", text(dev.get("source"), 200)),
             ("Device profile", profile_sentence(mapping(dev.get("profile"))))]
    dram = num(dev.get("dram_gbps"))
    return {
        "name": text(dev.get("name"), 200) or unknown_device(dev),
        "key": text(dev.get("key"), 200),
        "dram": f"{fmt_sig(dram)} GB/s" if dram is not None else "—",
        "peaks": [(text(k, 40), f"{fmt_sig(v)} TFLOP/s" if num(v) is not None else "—")
                  for k, v in sorted(peaks.items(), key=lambda kv: text(kv[0]))],
        "facts": [(k, v) for k, v in facts if v],
        "notes": [text(n, 1000) for n in seq(dev.get("notes")) if text(n)],
    }


def _breakdown(analysis: Mapping[str, Any]) -> dict[str, Any]:
    parts, total = by_bound(analysis)
    scale = max(total or 0.0, sum(parts.values()))
    segments = []
    for b in BOUNDS:
        us = parts.get(b)
        if us is None:
            continue
        width = 100.0 * us / scale if scale > 0 else 0.0
        segments.append({"bound": b, "time": fmt_time_us(us), "pct": fmt_pct(share(us, total)),
                         "width": f"{width:.3f}", "shown": width > 0})
    busy = gpu_busy(analysis)
    what = "GPU busy (wall-clock: overlapping streams counted once)" if busy and busy["busy_us"] > 0 \
        else "total device time"
    return {"total": fmt_time_us(total), "segments": segments, "what": what}


def _coverage(cov: Mapping[str, Any], classes: Any = None) -> dict[str, Any]:
    device = num(cov.get("device_time_us"))
    rows = []
    for label, key in (("Device time", "device_time_us"),
                       ("Attributed to ops", "attributed_time_us"),
                       ("Modelled", "modeled_time_us"), ("Opaque", "opaque_time_us"),
                       ("Unmodelled", "unmodeled_time_us"),
                       ("Unattributed", "unattributed_time_us")):
        if key in cov:
            rows.append((label, fmt_time_us(cov.get(key)), fmt_pct(share(cov.get(key), device))))

    def listing(m: Any) -> dict[str, Any]:
        items = sorted(((text(k, 300), num(v)) for k, v in mapping(m).items()),
                       key=lambda kv: (-(kv[1] or 0.0), kv[0]))
        rest = items[MAX_LIST:]
        return {
            "rows": [(k, fmt_time_us(v), fmt_pct(share(v, device))) for k, v in items[:MAX_LIST]],
            "more": len(rest),
            "more_time": fmt_time_us(sum(v or 0.0 for _, v in rest)),
        }

    advice = mapping(cov.get("opaque_advice"))
    opaque = {(f"{k}: {text(advice.get(k), 300)}" if advice.get(k) else k): v
              for k, v in mapping(cov.get("opaque_by_cause")).items()}
    return {"rows": rows, "opaque": listing(opaque),
            "unmodelled": listing(cov.get("unmodeled_by_op")),
            "classes": listing(mapping(classes).get("by_class")),
            "meta": text(mapping(cov.get("meta")).get("note"), 500)}


def _trace_facts(trace: Mapping[str, Any], has_ledger: bool = False, ops: list[Mapping[str, Any]] | None = None,
                 cpu: bool = False) -> list[tuple[str, str]]:
    facts = [("format", text(trace.get("format"), 40))]
    if num(trace.get("events")) is not None:
        facts.append(("events", fmt_int(trace.get("events"))))
    if cpu and num(trace.get("cpu_ops")) is not None:
        facts.append(("CPU ops", fmt_int(trace.get("cpu_ops"))))
    elif num(trace.get("gpu_events")) is not None:
        facts.append(("GPU events", fmt_int(trace.get("gpu_events"))))
    if num(trace.get("span_us")) is not None and not has_ledger:  # else the device line gives the GPU's span
        facts.append(("span", fmt_time_us(trace.get("span_us"))))
    shapes = shapes_fact(trace, ops or [], "CPU self time" if cpu else "device time")
    if shapes:
        facts.append(("shapes", shapes))
    capture = mapping(trace.get("capture"))
    if capture:
        facts.append(("graph capture", text(capture.get("note"), 400)))
    dist = mapping(trace.get("distributed"))
    if dist:
        facts.append(("distributed", f"rank {text(dist.get('rank'), 12)} of "
                      f"{text(dist.get('world_size'), 12)} ({text(dist.get('backend'), 40)})"))
    return [(k, v) for k, v in facts if v]


def shapes_fact(trace: Mapping[str, Any], ops: list[Mapping[str, Any]], what: str) -> str:
    """What was recorded of the ops' input shapes, per op: "recorded for ops holding 62.0% of device time"
    ("not recorded" when the trace says record_shapes was off; "" when it does not say)."""
    flag = trace.get("record_shapes")
    if flag is False:
        return "not recorded (record_shapes=False)"
    total = sum(num(o.get("device_time_us")) or 0.0 for o in ops)
    if not ops or total <= 0:
        return "recorded" if flag is True else ""
    shaped = sum(num(o.get("device_time_us")) or 0.0 for o in ops if any(seq(o.get("input_dims"))))
    if shaped >= total * 0.9995:
        return f"recorded for every op with {what}"
    return f"recorded for ops holding {fmt_pct(share(shaped, total))} of {what}"


def _cards(a: Mapping[str, Any], link: Any) -> list[dict[str, Any]]:
    """The finding cards (render/first.py) with an anchor each and their ops as links."""
    out = []
    for i, c in enumerate(cards(a)):
        ids = [m["id"] for m in c["members"] if m["id"]]
        anchor = "f-" + (_ANCHOR_BAD.sub("_", ids[0])[:40] if ids else str(i))
        members = [{**m, "ops": [link(o) for o in m["ops"]]} for m in c["members"]]
        top = mapping(seq(a.get("findings"))[c["members"][0]["index"]])
        c = {**c, "where": where(top, 4), "where_title": where_title(top)}
        tags = [f"{c['confidence']} confidence"] if c["confidence"] else []
        if c["estimated"]:
            tags.append("estimated")
        out.append({**c, "anchor": anchor, "members": members, "tags": tags,
                    "indices": {m["index"] for m in c["members"]}})
    return out


def _plan(a: Mapping[str, Any], card_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """"Do this first", each lever linked to the card that holds its finding."""
    out = []
    for p in plan(a):
        card = next((c for c in card_list if p["finding"] in c["indices"]), None)
        out.append({**p, "href": f"#{card['anchor']}" if card else ""})
    return out


def build_view(analysis: Mapping[str, Any]) -> dict[str, Any]:
    """Everything the template shows, as display strings and plain numbers."""
    a = mapping(analysis)
    cpu = cpu_only(a)
    cv = None
    if cpu:  # a CPU-only trace: its judged signatures are the ops, its CPU the device (render/cpu_view.py)
        from traceana.render import cpu_view as cv  # only a CPU-only trace's page needs it

        a = {**a, "ops": cv.cpu_ops(a), "device": cv.cpu_device(a)}
    trace, dev, tool = mapping(a.get("trace")), mapping(a.get("device")), mapping(a.get("tool"))
    ops = [o for o in seq(a.get("ops")) if isinstance(o, Mapping)]
    anchors, by_id = _anchors(ops)
    shown = min(len(ops), MAX_TABLE_ROWS)
    in_table = set(anchors[:shown])
    names = {anchors[i]: short_name(ops[i].get("name")) for i in range(len(ops))}

    def link(op_id: Any) -> dict[str, str]:
        anchor = by_id.get(text(op_id), "")
        label = names.get(anchor) or text(op_id, 80) or "(op)"
        return {"href": f"#op-{anchor}" if anchor in in_table else "", "label": label}

    card_list = _cards(a, link)
    explanations = []
    for e in seq(a.get("explanations"))[:50]:
        if isinstance(e, Mapping):
            explanations.append({"title": text(e.get("title"), 300) or text(e.get("op"), 80),
                                 "op": link(e.get("op")) if e.get("op") is not None else None,
                                 "lines": [text(x, 2000) for x in seq(e.get("lines"))[:200]]})

    plottable = [p for i, op in enumerate(ops) if (p := _point(op, anchors[i], i < shown))]
    points = plottable[:MAX_CHART_POINTS]
    roofs = sorted(((text(k, 40), t) for k, v in mapping(dev.get("peak_tflops")).items()
                    if (t := num(v)) is not None and t > 0), key=lambda kv: (kv[1], kv[0]))
    dram = num(dev.get("dram_gbps"))

    version = text(tool.get("version"), 40)
    view = {
        "file": text(trace.get("file"), 300) or "trace",
        "trace_facts": _trace_facts(trace, bool(terms(a)), ops, cpu),
        "cpu_only": cpu,
        "tool": " ".join(x for x in (text(tool.get("name"), 40) or "traceana", version) if x),
        "schema": text(a.get("schema"), 80),
        "verdict": sentence(a) or verdict(a),
        "devline": device_line(a),
        "plan": _plan(a, card_list),
        "terms": terms(a),
        "terms_what": "the busiest CPU thread's span" if cpu else "the primary device's span",
        "cpu": cpu_rows(a),
        "bounds": cv.CPU_BOUNDS if cv else BOUNDS,
        "time_word": "CPU self time" if cpu else "device time",
        "warnings": [text(w, 2000) for w in shown_warnings(a)],
        "device": cv.cpu_device_card(a) if cv else _device(dev),
        "breakdown": _breakdown(a) if not terms(a) and not cpu else None,  # the ledger's terms say it
        "timeline": utilisation_view(a) if not cpu else {},  # a GPU's utilisation and idle time
        "memory": memory_view(a),
        "cards": card_list[:CARDS_BEFORE_FOLD],
        "more_cards": card_list[CARDS_BEFORE_FOLD:],
        "findings": bool(card_list),
        "projection": projection_line(a),
        "explanations": explanations,
        "chart": {"plotted": len(points), "left_out": len(ops) - len(plottable),
                  "capped": len(plottable) - len(points)},
        "table": ops_table([_row(ops[i], anchors[i]) for i in range(shown)], len(ops)),
        "coverage": _coverage(mapping(a.get("coverage")), a.get("kernel_classes")) if not cpu else None,
        "cpu_coverage": cv.cpu_coverage(a) if cv else None,
        "modules": modules_view(a, link),
        "data": to_json_safe({
            "points": points,
            "roofs": [{"dtype": k, "tflops": v} for k, v in roofs],
            "dram_gbps": dram if dram is not None and dram > 0 else None,
        }),
    }
    return add_story(view, a, anchors, in_table)  # the span by device, one step's timeline, the chart
