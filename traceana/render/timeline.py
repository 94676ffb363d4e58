"""The HTML report's first picture: where each device's span went, and one step lane by lane.

`add_story(view, analysis, anchors, in_table)` is the one call html.build_view makes: it adds
view["story"] (the stacked bars per device, the timeline's caption, the roofline chart as an
inline SVG from traceana.render.svg) and puts the timeline's lanes and the bandwidth strip's
points into view["data"], the JSON block that report.js and timeline.js read. Like the rest of
the renderers it reads only the analysis dict, and treats every field as untrusted: numbers are
checked, columns cut to one length, op indices kept in range, strings cut and left to jinja's
escaping (markup) or |tojson (data).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from traceana.document import bound_of, mapping, seq, share
from traceana.render.views import (
    fmt_dims,
    fmt_int,
    fmt_pct,
    fmt_sig,
    fmt_time_us,
    fmt_types,
    over_roof_mark,
    plural,
    short_name,
)
from traceana.units import num, text
from traceana.units import kernel_names
from traceana.render.json_out import to_json_safe

#: Colours of the timeline categories and idle causes (the bounds' as in report.css and svg.py).
COLOURS: dict[str, str] = {
    "compute": "#3d6fd6", "memory": "#e8871e", "latency": "#9b5bb5", "underutilised": "#c2527a",
    "host_link": "#c9a227", "peer_link": "#8d6e1f", "unmodelled": "#aab0b8", "unknown": "#c9ccd1",
    "opaque": "#5f6670", "communication": "#2a9d8f", "memcpy": "#c9a227", "memset": "#8d6e1f",
    "copies": "#c9a227",
    "comm_transfer": "#2a9d8f", "comm_wait": "#8fd3c9", "comm_unsized": "#5fb8ac",
    "sync": "#e07a7a", "host_dispatch": "#f0a3a3", "stream_wait": "#f3cf8c", "launch_gaps": "#cdd5e2",
    "no_work": "#e4e6ea", "idle": "#eef0f3", "graph_launch": "#d98cb3",
}
WORK = ("compute", "memory", "latency", "underutilised", "unmodelled", "unknown", "opaque")
IDLE_CAUSES = ("sync", "launch_gaps", "host_dispatch", "graph_launch", "stream_wait", "no_work")
LABELS: dict[str, str] = {
    "communication": "communication (exposed)", "copies": "copies (exposed)", "memcpy": "memcpy (exposed)",
    "memset": "memset (exposed)", "comm_transfer": "communication: transfer",
    "comm_wait": "communication: waiting for other ranks", "comm_unsized": "communication: split unknown",
    "sync": "idle: sync stall", "host_dispatch": "idle: host dispatch", "stream_wait": "idle: waiting on a dependency",
    "launch_gaps": "idle: launch gaps", "no_work": "idle: nothing issued", "idle": "idle",
    "graph_launch": "idle: inside graph launches",
}
#: The timeline's words for its categories (a collective there is drawn whether or not it is exposed).
TL_LABELS: dict[str, str] = {**LABELS, "communication": "collective", "memcpy": "memcpy", "memset": "memset"}
TIPS: dict[str, str] = {
    "sync": "the GPU drained while the CPU was blocked in a synchronizing call",
    "host_dispatch": "the CPU launched the next kernel only after the GPU went idle",
    "stream_wait": "launched in time, started late: waiting on another stream, an event or a graph dependency",
    "launch_gaps": "gaps of 30 µs or less between back-to-back kernels",
    "no_work": "the kernel after the gap has no launch in the trace",
    "graph_launch": "the CPU was inside a CUDA / HIP graph launch, instantiation or upload while the GPU waited",
    "communication": "collective kernels with nothing else running",
}
#: The page draws at most this many intervals and idle gaps (a saved analysis could hold more).
MAX_INTERVALS = 50_000
MAX_GAPS = 5_000
MAX_LANES = 64
#: ... and at most this many CPU threads and CPU intervals, kernel names and CPU names (an interval whose
#: name is beyond the table shows its op's name; shortening a long C++ name takes ~0.3 ms).
MAX_THREADS = 16
MAX_CPU_INTERVALS = 20_000
MAX_NAMES = 5_000
MAX_CPU_NAMES = 20_000
#: The full kernel names (shown under the short one in the hover) take about this many characters in all.
FULL_NAMES_CHARS = 400_000
_EXACT = 2 ** 53  # ints below this survive int(float(x)) unchanged


def add_story(view: dict[str, Any], analysis: Mapping[str, Any], anchors: list[str], in_table: set[str]) -> dict:
    """`view` with view["story"] and the timeline / strip data added (in place; also returned)."""
    from traceana.render.svg import roofline_svg, strip_points

    a = mapping(analysis)
    ops = [o for o in seq(a.get("ops")) if isinstance(o, Mapping)]
    data = view.setdefault("data", {})
    tl = timeline_data(a, ops, anchors, in_table)
    strip = strip_points(ops)
    data["timeline"] = to_json_safe(tl)
    data["strip"] = to_json_safe([_strip_point(p["op"], anchors[p["i"]], anchors[p["i"]] in in_table, a)
                                  for p in strip])
    view["story"] = {
        "bars": anatomy_bars(a),
        "timeline": _caption(tl, a),
        "chart": Markup(roofline_svg(a, ids=anchors, html=True)),
        "strip": len(strip),
    }
    return view


# ----------------------------------------------------------------------------- stacked bars


def _segment(key: str, us: float, span: float) -> dict[str, str]:
    label = LABELS.get(key, key)
    pct = fmt_pct(share(us, span))
    tip = f"{label}: {fmt_time_us(us)} ({pct} of the span)"
    if key in TIPS:
        tip += f"; {TIPS[key]}"
    return {"key": key, "label": label, "colour": COLOURS.get(key, "#999999"), "time": fmt_time_us(us),
            "pct": pct, "width": f"{100.0 * us / span:.3f}", "title": tip}


def anatomy_bars(a: Mapping[str, Any]) -> dict[str, Any]:
    """Per device: its span as one stacked bar. The primary device's bar is the ledger's terms,
    each once, the same numbers as the sentence and the terms table; the other devices' from
    the breakdown (work by bound, exposed communication and copies) and the timeline's idle
    causes."""
    from traceana.render.first import ledger, terms

    bd = mapping(a.get("breakdown"))
    led = ledger(a)
    rows = terms(a)
    idle_of = {text(mapping(d).get("device")): mapping(mapping(d).get("idle_by_cause"))
               for d in seq(mapping(a.get("timeline")).get("idle_by_device"))}
    devices = []
    for d in [mapping(x) for x in seq(bd.get("devices"))][:16]:
        dev, span = text(d.get("device"), 20), num(d.get("span_us"))
        primary = bool(rows) and text(led.get("device")) == dev and bool(num(led.get("span_us")))
        if primary:
            span = num(led.get("span_us"))
            segs = [{"key": t["key"], "label": t["label"], "colour": t["colour"], "time": t["time"], "pct": t["pct"],
                     "width": f"{100.0 * t['us'] / span:.3f}",
                     "title": f"{t['label']}: {t['time']} ({t['pct']} of the span)"
                              + (f"; {t['meaning']}" if t["meaning"] else "")} for t in rows]
            overlapped = num(mapping(led.get("communication")).get("overlapped_us"))
        else:
            if span is None or span <= 0:
                continue
            cats = mapping(d.get("by_category"))
            parts = [(k, num(cats.get(k)) or 0.0) for k in (*WORK, "communication", "memcpy", "memset")]
            causes = mapping(d.get("idle_by_cause")) or idle_of.get(dev) or {}
            if not causes:
                parts.append(("idle", num(cats.get("idle")) or 0.0))
            parts += [(k, num(causes.get(k)) or 0.0) for k in IDLE_CAUSES]
            segs = [_segment(k, us, span) for k, us in parts if us > 0]
            overlapped = None
        devices.append({"device": dev, "primary": primary, "span": fmt_time_us(span),
                        "streams": fmt_int(d.get("streams")), "segments": segs,
                        "overlapped": fmt_time_us(overlapped) if overlapped else ""})
    legend: dict[str, dict[str, str]] = {}
    for d in devices:
        for s in d["segments"]:
            legend.setdefault(s["label"], {"label": s["label"], "colour": s["colour"],
                                           "title": TIPS.get(s["key"], "")})
    return {"devices": devices, "legend": list(legend.values())}


# ----------------------------------------------------------------------------- the timeline


def _column(v: Any, n: int | None = None, integer: bool = False) -> list | None:
    """A list of finite numbers (ints when asked) of length n, or None."""
    xs = seq(v)
    if n is not None and len(xs) != n:
        return None
    kinds = set(map(type, xs))  # plain finite numbers (a fresh analysis): converted without a call per value
    if kinds and not integer and kinds <= {float, int}:
        try:
            if all(map(math.isfinite, xs)):
                return list(map(float, xs))
        except OverflowError:  # an int beyond float's range: the slow path says None
            pass
    if kinds == {int} and integer and -_EXACT < min(xs) and max(xs) < _EXACT:
        return xs
    out = []
    for x in xs:
        f = num(x)
        if f is None:
            return None
        out.append(int(f) if integer else f)
    return out


def timeline_data(a: Mapping[str, Any], ops: list[Mapping[str, Any]], anchors: list[str],
                  in_table: set[str]) -> dict[str, Any] | None:
    """What timeline.js draws: checked lanes, gaps, the category colours and the ops they point at."""
    t = mapping(a.get("timeline"))
    dur = num(t.get("dur_us"))
    if not t or dur is None or dur < 0:
        return None
    cats = [text(c, 30) for c in seq(t.get("categories"))][:32]
    causes = [text(c, 30) for c in seq(t.get("gap_causes"))][:8]
    raw_kernels = [text(k, 1000) for k in seq(t.get("kernels"))[:MAX_NAMES]]
    kernels = {"short": kernel_names(raw_kernels, 100),
               "full": [text(k, _full_limit(len(raw_kernels))) for k in raw_kernels]}
    calls = [text(c, 80) for c in seq(t.get("calls"))[:64]]
    cpu_names = [short_name(text(x, 1000), 120) or "(unnamed)" for x in seq(t.get("cpu_names"))[:MAX_CPU_NAMES]]
    threads = _threads(t, len(cpu_names))
    lanes, used, total = [], set(), 0
    for lane in [mapping(x) for x in seq(t.get("lanes"))][:MAX_LANES]:
        start = _column(lane.get("start"))
        if start is None:
            continue
        n = min(len(start), MAX_INTERVALS - total)
        cols = {"start": start[:n], "dur": (_column(lane.get("dur"), len(start)) or [])[:n],
                "op": (_column(lane.get("op"), len(start), True) or [])[:n],
                "cat": (_column(lane.get("cat"), len(start), True) or [])[:n],
                "n": (_column(lane.get("n"), len(start), True) or [1] * len(start))[:n]}
        if len(cols["dur"]) != n or len(cols["op"]) != n or len(cols["cat"]) != n:
            continue
        busy = _column(lane.get("busy"), len(start))
        if busy is not None:
            cols["busy"] = busy[:n]
        cols["op"] = [o if 0 <= o < len(ops) else -1 for o in cols["op"]]
        cols["cat"] = [c if 0 <= c < len(cats) else -1 for c in cols["cat"]]
        cols.update(_links(lane, len(start), n, len(raw_kernels), len(calls), len(threads)))
        used.update(o for o in cols["op"] if o >= 0)
        total += n
        lanes.append({"stream": text(lane.get("stream"), 20), "events": fmt_int(lane.get("events")),
                      "busy_time": fmt_time_us(lane.get("busy_us")), **cols})
        if total >= MAX_INTERVALS:
            break
    if not lanes:
        return None
    g = mapping(t.get("gaps"))
    gs = _column(g.get("start")) or []
    gd, gc = _column(g.get("dur"), len(gs)), _column(g.get("cause"), len(gs), True)
    gaps = {"start": gs[:MAX_GAPS], "dur": gd[:MAX_GAPS], "cause": gc[:MAX_GAPS]} if gd and gc else \
        {"start": [], "dur": [], "cause": []}
    return {
        "dur": dur, "lanes": lanes, "categories": cats, "causes": causes, "gaps": gaps,
        "colours": {k: COLOURS.get(k, "#999999") for k in (*cats, *causes)},
        "labels": {k: TL_LABELS.get(k, k) for k in (*cats, *causes)},
        "ops": {str(i): _op_info(ops[i], anchors[i], anchors[i] in in_table) for i in sorted(used)},
        "cpu": _cpu_window(mapping(t.get("window"))),
        "kernels": kernels, "calls": calls, "threads": threads, "cpu_names": cpu_names,
        "cpu_range": _column(t.get("cpu_range"), 2), "notes": drawing_notes(t),
    }


def _full_limit(n: int) -> int:
    """How much of each full kernel name the page keeps: 400 characters, less when there are many
    names (about FULL_NAMES_CHARS in all, never under 80)."""
    return max(80, min(400, FULL_NAMES_CHARS // max(n, 1)))


def _links(lane: Mapping[str, Any], m: int, n: int, n_kernels: int, n_calls: int, n_threads: int) -> dict[str, list]:
    """A lane's kernel name, correlation id and launch columns (m long in the analysis, cut to n);
    a column that is missing or malformed reads as none (-1)."""
    kernel = _column(lane.get("kernel"), m, True) or [-1] * m
    corr = _column(lane.get("corr"), m, True) or [-1] * m
    call, thread = _column(lane.get("call"), m, True), _column(lane.get("thread"), m, True)
    launch = _column(lane.get("launch"), m)
    if call is None or thread is None or launch is None:
        call, thread, launch = [-1] * m, [-1] * m, [0.0] * m
    return {"kernel": [k if 0 <= k < n_kernels else -1 for k in kernel[:n]], "corr": corr[:n],
            "call": [c if 0 <= c < n_calls else -1 for c in call[:n]],
            "thread": [x if 0 <= x < n_threads else -1 for x in thread[:n]], "launch": launch[:n]}


def _track(cols: Any, n_names: int, room: int) -> dict[str, list] | None:
    """One CPU track's checked columns (start, dur, name, n, busy), at most `room` long; None when unusable."""
    c = mapping(cols)
    start = _column(c.get("start")) if c else None
    if start is None:
        return None
    m = len(start)
    dur, name = _column(c.get("dur"), m), _column(c.get("name"), m, True)
    if dur is None or name is None:
        return None
    k = min(m, room)
    out = {"start": start[:k], "dur": dur[:k], "name": [x if 0 <= x < n_names else -1 for x in name[:k]],
           "n": (_column(c.get("n"), m, True) or [1] * m)[:k]}
    busy = _column(c.get("busy"), m) if "busy" in c else None
    if busy is not None:
        out["busy"] = busy[:k]
    return out


def _threads(t: Mapping[str, Any], n_names: int) -> list[dict[str, Any]]:
    """The CPU threads: label, kernels launched, ops and annotations tracks (checked, capped)."""
    out, room = [], MAX_CPU_INTERVALS
    for th in [mapping(x) for x in seq(t.get("threads"))][:MAX_THREADS]:
        full = text(th.get("thread"), 60)
        row: dict[str, Any] = {"thread": full, "tid": full.rsplit("/", 1)[-1], "launched": fmt_int(th.get("launched"))}
        for kind in ("ops", "annotations"):
            cols = _track(th.get(kind), n_names, room)
            if cols is not None:
                row[kind] = cols
                room -= len(cols["start"])
        out.append(row)
    return out


def drawing_notes(t: Mapping[str, Any]) -> list[str]:
    """What the drawing leaves out or merges, one sentence each (shown above the timeline)."""
    notes = []
    if t.get("aggregated") is True:
        notes.append(f"{fmt_int(t.get('events'))} GPU events drawn as {fmt_int(t.get('intervals'))} intervals: kernels "
                     f"shorter than {fmt_sig(t.get('bucket_us'))} µs merged into buckets (hover one for its count)")
    cpu_ev, cpu_iv = num(t.get("cpu_events")), num(t.get("cpu_intervals"))
    if cpu_ev is not None and cpu_iv is not None and cpu_iv < cpu_ev:
        notes.append(f"{fmt_int(cpu_ev)} CPU ops and annotations drawn as {fmt_int(cpu_iv)} intervals: short "
                     "neighbours merged, each bucket named after its longest")
    omitted = num(t.get("threads_omitted"))
    if omitted:
        notes.append(f"{plural(omitted, 'other launching thread')} not drawn (the threads that launched most "
                     "kernels are)")
    return notes


def _cpu_window(w: Mapping[str, Any]) -> list[float] | None:
    s, d = num(w.get("cpu_start_us")), num(w.get("cpu_dur_us"))
    return [s, d] if s is not None and d is not None and d > 0 else None


def _verdict(op: Mapping[str, Any]) -> str:
    bound = bound_of(op)
    pct = num(op.get("roof_pct"))
    out = bound + (f", {fmt_pct(pct)} of roof" if pct is not None else "")
    mark = over_roof_mark(op)
    if mark:
        out += f" (over the roof: {mark})"
    elif op.get("estimated") is True:
        out += " (estimated)"
    return out


def _op_info(op: Mapping[str, Any], anchor: str, in_table: bool) -> dict[str, Any]:
    return {"name": short_name(op.get("name")) or "(unnamed)", "dims": fmt_dims(op.get("input_dims"), 160),
            "dtypes": fmt_types(op.get("input_types"), 80), "verdict": _verdict(op), "bound": bound_of(op),
            "roof": fmt_pct(op.get("roof_pct")) if num(op.get("roof_pct")) is not None else "",
            "mean": fmt_time_us(op.get("mean_time_us")), "id": anchor, "row": in_table}


def _caption(tl: dict[str, Any] | None, a: Mapping[str, Any]) -> dict[str, Any] | None:
    """The timeline's heading: which window and why, and a legend of the categories it shows."""
    if not tl:
        return None
    cats = sorted({c for lane in tl["lanes"] for c in lane["cat"] if c >= 0})
    causes = sorted(set(tl["gaps"]["cause"]))
    legend = [{"label": TL_LABELS.get(k, k), "colour": COLOURS.get(k, "#999999"), "title": TIPS.get(k, "")}
              for k in [tl["categories"][c] for c in cats] + [tl["causes"][c] for c in causes
                                                                if 0 <= c < len(tl["causes"])]]
    return {"text": window_text(a), "legend": legend, "lanes": len(tl["lanes"]), "threads": len(tl["threads"]),
            "annotations": any("annotations" in th for th in tl["threads"]), "notes": tl["notes"]}


def window_text(a: Mapping[str, Any]) -> str:
    """One line: which window the timeline shows and why."""
    t = mapping(a.get("timeline"))
    w = mapping(t.get("window"))
    kind = text(w.get("kind"), 20)
    events = plural(t.get("events"), "event")
    if kind == "step":
        steps = mapping(w.get("steps"))
        if num(steps.get("count")) == 1:
            which = f"the only step ({fmt_time_us(w.get('cpu_dur_us'))} on the CPU)"
        else:
            which = (f"the step of median duration ({fmt_time_us(w.get('cpu_dur_us'))} on the CPU; "
                     f"{fmt_int(steps.get('count'))} steps from {fmt_time_us(steps.get('min_us'))} to "
                     f"{fmt_time_us(steps.get('max_us'))})")
        out = (f"{text(w.get('name'), 60)}, {which}: the GPU work launched in it, from its first kernel's start "
               f"to its last one's end, {fmt_time_us(t.get('dur_us'))}, {events}")
    elif kind == "busiest":
        out = (f"No ProfilerStep annotations: the busiest {fmt_time_us(t.get('dur_us'))} of the span "
               f"(GPU busy {fmt_time_us(w.get('busy_us'))} of it), {events}")
    else:
        out = f"No ProfilerStep annotations: the whole span, {fmt_time_us(t.get('dur_us'))}, {events}"
    if t.get("aggregated") is True:
        out += (f"; drawn as {fmt_int(t.get('intervals'))} intervals: kernels shorter than "
                f"{fmt_sig(t.get('bucket_us'))} µs merged into buckets"
                + (" (of any category)" if t.get("mixed") is True else " of one category"))
    return out + "."


# ----------------------------------------------------------------------------- the bandwidth strip


def _strip_point(op: Mapping[str, Any], anchor: str, in_table: bool, a: Mapping[str, Any]) -> dict[str, Any]:
    dram = num(mapping(a.get("device")).get("dram_gbps"))
    gbps = num(op.get("achieved_gbps"))
    return {"id": anchor, "row": in_table, "name": short_name(op.get("name")) or "(unnamed)",
            "dims": fmt_dims(op.get("input_dims")), "dtypes": fmt_types(op.get("input_types")),
            "time": fmt_time_us(op.get("device_time_us")), "calls": plural(op.get("count"), "call"),
            "gbps": fmt_sig(gbps), "dram": fmt_pct(share(gbps, dram)) if dram else "—",
            "pct": fmt_pct(op.get("roof_pct")), "bound": bound_of(op)}
