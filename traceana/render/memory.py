"""The memory section as the reports show it: one summary line, and for HTML the peaks, the ops holding
memory at the peak and the allocation curve drawn over the profiled steps (an inline SVG).

Reads only analysis["memory"] (diagnose/memory.py, docs/analysis-schema.md) and treats it as untrusted:
numbers are checked, columns cut to one length, strings cut and escaped (XML-escaped in the SVG, left to
jinja's autoescaping elsewhere). A saved analysis from before the section existed shows nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from traceana import units as u
from traceana.render.views import fmt_pct, fmt_time_us
from traceana.document import mapping, seq
from traceana.units import num, text
from traceana.render.svg import _esc

#: Devices shown (GPUs first, as the section orders them).
MAX_DEVICES = 4
#: Curve points drawn per device (the section keeps at most 400; a hand-made file may hold more).
MAX_CURVE = 2000
MAX_STEPS = 200
TOP_ROWS = 10
W, H = 960, 190
ML, MR, MT, MB = 72, 24, 22, 36
ALLOC_COLOUR, RESERVED_COLOUR, PEAK_COLOUR = "#3d6fd6", "#8d6e1f", "#c2527a"


#: A device whose peak is under this and under TRIVIAL_SHARE of another device's is left out of the report
#: (the host's few bytes beside a GPU's gigabytes say nothing).
TRIVIAL_BYTES = 1 << 20
TRIVIAL_SHARE = 0.01


def devices(a: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The section's devices with a numeric peak (at most MAX_DEVICES), trivial ones left out."""
    out = [mapping(d) for d in seq(mapping(a.get("memory")).get("devices"))]
    out = [d for d in out if num(d.get("peak_allocated_bytes")) is not None]
    top = max((num(d.get("peak_allocated_bytes")) or 0.0 for d in out), default=0.0)
    keep = [d for d in out if not (num(d.get("peak_allocated_bytes")) < TRIVIAL_BYTES
                                   and num(d.get("peak_allocated_bytes")) < TRIVIAL_SHARE * top)]
    return keep[:MAX_DEVICES]


def _peak_step(d: Mapping[str, Any]) -> str:
    """'ProfilerStep#N' holding the peak, or ''."""
    at = num(d.get("peak_at_us"))
    if at is None:
        return ""
    for s in seq(d.get("steps"))[:MAX_STEPS]:
        s = mapping(s)
        st, dur = num(s.get("start_us")), num(s.get("dur_us"))
        if st is not None and dur is not None and st <= at <= st + dur:
            return f"ProfilerStep#{text(s.get('step'), 12)}"
    return ""


def _device_phrase(d: Mapping[str, Any], gpu: bool) -> str:
    dev = text(d.get("device"), 30) or "?"
    peak = u.bytes_iec(d.get("peak_allocated_bytes"))
    bits = [f"{dev} peak {peak} allocated"]
    res = num(d.get("reserved_at_peak_bytes"))
    if gpu and res is not None and res > 0:
        bits[0] += f" ({u.bytes_iec(res)} reserved)"
    if text(d.get("totals")) == "reconstructed":
        bits[0] += " (summed from the recording's start: the events carry no totals)"
    step = _peak_step(d)
    if step:
        bits[0] += f" in {step}"
    top = [mapping(x) for x in seq(d.get("top_at_peak"))[:1]]
    if top and num(top[0].get("bytes")):
        bits.append(f"most held by {text(top[0].get('op'), 60)} ({u.bytes_iec(top[0].get('bytes'))})")
    return ", ".join(bits)


def memory_line(a: Mapping[str, Any]) -> str:
    """One line for the summary: the peak per device (and the allocator's calls), or how to record memory;
    '' when the analysis has no memory section."""
    m = mapping(a.get("memory"))
    if not m:
        return ""
    if m.get("recorded") is not True:
        return ("not recorded — record with torch.profiler.profile(profile_memory=True) for peak memory per "
                "device and step and the ops that hold it")
    devs = devices(a)
    gpus = [d for d in devs if text(d.get("type")) != "cpu"]
    shown = gpus or devs
    parts = [_device_phrase(d, bool(gpus)) for d in shown[:3]]
    host = [d for d in devs if text(d.get("type")) == "cpu"]
    if gpus and host:
        parts.append(f"host {u.bytes_iec(host[0].get('peak_allocated_bytes'))}")
    calls = mapping(m.get("allocator"))
    n = num(calls.get("count"))
    if n:
        names = "/".join(text(mapping(c).get("call"), 30) for c in seq(calls.get("calls"))[:3])
        parts.append(f"{u.plural(n, 'allocator call')} ({names}, {fmt_time_us(calls.get('host_us'))} of CPU time)")
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------------ HTML


def memory_view(a: Mapping[str, Any]) -> dict[str, Any] | None:
    """What templates/memory.html.j2 shows; None without a memory section."""
    m = mapping(a.get("memory"))
    if not m:
        return None
    if m.get("recorded") is not True:
        return {"note": memory_line(a), "devices": []}
    window = _timeline_window(a, num(m.get("t0_us")))
    out = []
    devs = devices(a)
    gpus = [d for d in devs if text(d.get("type")) != "cpu"]
    for i, d in enumerate(devs):  # (the first device gets the timeline window)
        facts = [("peak allocated", u.nbytes(d.get("peak_allocated_bytes")))]
        step = _peak_step(d)
        if step:
            facts.append(("when", f"{step}, {fmt_time_us(d.get('peak_at_us'))} after the start"))
        if num(d.get("reserved_at_peak_bytes")) is not None and text(d.get("type")) != "cpu":
            facts.append(("reserved at that peak", u.nbytes(d.get("reserved_at_peak_bytes"))))
            facts.append(("peak reserved", u.nbytes(d.get("peak_reserved_bytes"))))
        live = mapping(d.get("live_at_peak"))
        if live:
            facts.append(("held at the peak by recorded allocations",
                          f"{u.nbytes(live.get('bytes'))} in {u.plural(live.get('allocations'), 'allocation')}"))
            if num(live.get("before_recording_bytes")):  # (0 B says nothing)
                facts.append(("allocated before the recording and still held",
                              u.nbytes(live.get("before_recording_bytes"))))
        lost = mapping(d.get("unattributed"))
        if (num(lost.get("share_pct")) or 0.0) >= 0.5:
            facts.append(("not charged to an op", f"{u.bytes_iec(lost.get('bytes'))} of the bytes allocated "
                          f"({fmt_pct(lost.get('share_pct'))}): {text(lost.get('why'), 600)}"))
        if text(lost.get("at_peak")):
            facts.append(("held at the peak", text(lost.get("at_peak"), 400)))
        if text(d.get("totals")) == "reconstructed":
            facts.append(("totals", "not in the events: summed from the recording's start (memory allocated "
                                    "before it is not counted)"))
        facts.append(("events", f"{u.plural(d.get('allocations'), 'allocation')}, {u.plural(d.get('frees'), 'free')}"))
        full = text(d.get("type")) != "cpu" or not gpus  # beside GPUs the host's memory gets its facts only
        svg = curve_svg(d, window if i == 0 else None) if full else ""
        caption = ("Allocated (filled)" + (" and reserved (dashed)" if "<path" in svg and 'stroke-dasharray="4 3"' in svg
                                           else "") + " over the profiled steps (bands, hover for each step's peak)"
                   + ("; the dotted box is the window the timeline draws" if 'stroke-dasharray="2 2"' in svg else "")
                   + ".") if svg else ""
        out.append({
            "device": text(d.get("device"), 30) or "?", "facts": facts, "caption": caption,
            "svg": Markup(svg),
            "at_peak": _op_rows(d.get("top_at_peak")) if full else [],
            "modules": _op_rows(d.get("modules_at_peak"), "module") if full else [],
            "allocating": _op_rows(d.get("top_allocating")) if full else [],
            "steps": _step_rows(d.get("steps")) if full else [],
        })
    return {"note": "", "line": memory_line(a), "devices": out}


def _op_rows(v: Any, key: str = "op") -> list[tuple[str, str, str]]:
    rows = []
    for x in seq(v)[:TOP_ROWS]:
        x = mapping(x)
        if not (num(x.get("bytes")) or 0.0) > 0:  # no zero-byte rows
            continue
        rows.append((text(x.get(key), 200) or "?", u.bytes_iec(x.get("bytes")), u.count(x.get("allocations"))))
    return rows


def _step_rows(v: Any) -> list[tuple[str, ...]]:
    rows = []
    for s in seq(v)[:MAX_STEPS]:
        s = mapping(s)
        rows.append((f"#{text(s.get('step'), 12)}", fmt_time_us(s.get("dur_us")),
                     u.bytes_iec(s.get("start_allocated_bytes")), u.bytes_iec(s.get("peak_allocated_bytes")),
                     u.bytes_iec(s.get("peak_reserved_bytes")) if num(s.get("peak_reserved_bytes")) is not None else "—",
                     u.bytes_iec(s.get("end_allocated_bytes")), u.bytes_iec(s.get("allocated_bytes"))))
    return rows


def _timeline_window(a: Mapping[str, Any], t0: float | None) -> tuple[float, float, str] | None:
    """The report timeline's window on the memory section's clock (µs from t0): (start, end, its name)."""
    t = mapping(a.get("timeline"))
    s, d = num(t.get("start_us")), num(t.get("dur_us"))
    if t0 is None or s is None or d is None or d <= 0:
        return None
    w = mapping(t.get("window"))
    return s - t0, s - t0 + d, text(w.get("name"), 40) or "the timeline's window"


def _column(v: Any, n: int | None = None) -> list[float | None]:
    xs = seq(v)[:MAX_CURVE]
    out = [num(x) for x in xs]
    return out if n is None else (out + [None] * n)[:n]


def _ticks(top: float) -> tuple[float, list[float]]:
    """A rounded axis top in bytes and 3-5 ticks (powers of 1024 times 1, 2, 5)."""
    if top <= 0:
        return 1.0, [0.0, 1.0]
    unit = 1.0
    while unit * 1024 <= top:
        unit *= 1024
    for step in (0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500):
        if top / (step * unit) <= 5:
            break
    s = step * unit
    n = int(-(-top // s))
    return n * s, [k * s for k in range(n + 1)]


def curve_svg(d: Mapping[str, Any], window: tuple[float, float, str] | None = None) -> str:
    """Allocated (filled) and reserved (dashed) over time as step functions, the profiled steps as bands,
    the peak marked; `window`: the report timeline's window, bracketed. An SVG fragment for the page."""
    c = mapping(d.get("curve"))
    t = _column(c.get("t_us"))
    al = _column(c.get("allocated"), len(t))
    # (the host's allocator reserves nothing apart: its Total Reserved is 0)
    has_res = bool(seq(c.get("reserved"))) and text(d.get("type")) != "cpu"
    rs = _column(c.get("reserved"), len(t)) if has_res else [None] * len(t)
    pts = [(x, y, r) for x, y, r in zip(t, al, rs) if x is not None and y is not None]
    if not pts:
        return ""
    pts.sort(key=lambda p: p[0])
    steps = []
    for s in seq(d.get("steps"))[:MAX_STEPS]:
        s = mapping(s)
        st, du = num(s.get("start_us")), num(s.get("dur_us"))
        if st is not None and du is not None and du >= 0:
            steps.append((st, st + du, text(s.get("step"), 12), s))
    x0 = min([pts[0][0]] + [s[0] for s in steps])
    x1 = max([pts[-1][0]] + [s[1] for s in steps])
    if window:
        x0, x1 = min(x0, window[0]), max(x1, window[1])
    if x1 <= x0:
        x1 = x0 + 1.0
    start = num(d.get("start_allocated_bytes"))
    if start is not None and x0 < pts[0][0]:  # before the first event: what was allocated when recording began
        pts.insert(0, (x0, start, pts[0][2]))
    peak = num(d.get("peak_allocated_bytes")) or max(p[1] for p in pts)
    top_val = max([peak] + [p[1] for p in pts] + [p[2] for p in pts if p[2] is not None])
    ymax, ticks = _ticks(top_val)
    pw, ph = W - ML - MR, H - MT - MB

    def sx(v: float) -> float:
        return ML + (v - x0) / (x1 - x0) * pw

    def sy(v: float) -> float:
        return MT + ph - max(min(v / ymax, 1.0), 0.0) * ph

    dev = _esc(d.get("device"), 30)
    out = [f'<svg class="memchart" viewBox="0 0 {W} {H}" width="100%" role="img" '
           f'aria-label="allocated memory on {dev} over the profiled steps" xmlns="http://www.w3.org/2000/svg">']
    for k, (a, b, name, s) in enumerate(steps):  # the steps as alternating bands
        tip = (f"ProfilerStep#{name}: {fmt_time_us(b - a)}; peak allocated {u.bytes_iec(s.get('peak_allocated_bytes'))}"
               f", allocated {u.bytes_iec(s.get('allocated_bytes'))} in {u.plural(s.get('allocations'), 'allocation')}")
        out.append(f'<rect x="{sx(a):.1f}" y="{MT}" width="{max(sx(b) - sx(a), 0.5):.1f}" height="{ph}" '
                   f'fill="{"#eef0f3" if k % 2 == 0 else "#f6f7f9"}"><title>{_esc(tip, 400)}</title></rect>')
        if sx(b) - sx(a) > 28 and len(steps) <= 60:
            out.append(f'<text x="{(sx(a) + sx(b)) / 2:.1f}" y="{MT - 6}" font-size="10" text-anchor="middle" '
                       f'fill="#5f6670">#{_esc(name, 12)}</text>')
    if window:
        a, b, name = window
        out.append(f'<rect x="{sx(a):.1f}" y="{MT}" width="{max(sx(b) - sx(a), 1.0):.1f}" height="{ph}" fill="none" '
                   f'stroke="#5f6670" stroke-dasharray="2 2"><title>{_esc(name, 40)}: the window the timeline '
                   f'above draws</title></rect>')
    for v in ticks:  # the y axis
        y = sy(v)
        out.append(f'<line x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}" stroke="#d5d9df" stroke-width="0.5"/>')
        out.append(f'<text x="{ML - 6}" y="{y + 3:.1f}" font-size="10" text-anchor="end" fill="#5f6670">'
                   f'{_esc(u.bytes_iec(v), 20)}</text>')
    out.append(f'<text x="{ML}" y="{H - 8}" font-size="10" fill="#5f6670">0</text>')
    out.append(f'<text x="{W - MR}" y="{H - 8}" font-size="10" text-anchor="end" fill="#5f6670">'
               f'{_esc(fmt_time_us(x1 - x0), 20)}</text>')
    out.append(f'<path d="{_step_path(pts, 1, sx, sy, x1, fill=True)}" fill="{ALLOC_COLOUR}" fill-opacity="0.25" '
               f'stroke="{ALLOC_COLOUR}" stroke-width="1"><title>allocated</title></path>')
    if any(p[2] is not None for p in pts):
        rpts = [p for p in pts if p[2] is not None]
        out.append(f'<path d="{_step_path(rpts, 2, sx, sy, x1)}" fill="none" stroke="{RESERVED_COLOUR}" '
                   f'stroke-width="1" stroke-dasharray="4 3"><title>reserved</title></path>')
    at = num(d.get("peak_at_us"))
    if at is not None:
        px, py = sx(at), sy(peak)
        label = f"peak {u.bytes_iec(peak)}"
        anchor = "end" if px > ML + pw * 0.8 else "start"
        dx = -6 if anchor == "end" else 6
        out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{PEAK_COLOUR}"><title>{_esc(label)} at '
                   f'{_esc(fmt_time_us(at))}</title></circle>')
        out.append(f'<text x="{px + dx:.1f}" y="{max(py - 4, 10):.1f}" font-size="11" text-anchor="{anchor}" '
                   f'fill="{PEAK_COLOUR}">{_esc(label, 40)}</text>')
    out.append("</svg>")
    return "".join(out)


def _step_path(pts: list, k: int, sx, sy, x_end: float, fill: bool = False) -> str:
    """A step function through pts (the value after each event holds until the next one)."""
    parts = [f"M{sx(pts[0][0]):.1f},{sy(0.0) if fill else sy(pts[0][k]):.1f}"]
    if fill:
        parts.append(f"V{sy(pts[0][k]):.1f}")
    for p, q in zip(pts, pts[1:]):
        parts.append(f"H{sx(q[0]):.1f}V{sy(q[k]):.1f}")
    parts.append(f"H{sx(x_end):.1f}")
    if fill:
        parts.append(f"V{sy(0.0):.1f}Z")
    return "".join(parts)


# ------------------------------------------------------------------------------------------------ markdown


def memory_markdown(a: Mapping[str, Any], top: int = 5) -> list[str]:
    """The long markdown form's memory block: per device its peaks and the ops holding most at the peak."""
    from traceana.render.md import md_text, table_row

    devs = [d for d in devices(a) if text(d.get("type")) != "cpu"] or devices(a)
    if mapping(a.get("memory")).get("recorded") is not True or not devs:
        return []
    lines = ["## Memory (profile_memory=True)", "",
             table_row(["device", "peak allocated", "reserved then", "peak reserved", "when", "held most at the peak"]),
             "|---|--:|--:|--:|---|---|"]
    for d in devs:
        held = ", ".join(f"{text(mapping(x).get('op'), 60)} {u.bytes_iec(mapping(x).get('bytes'))}"
                         for x in seq(d.get("top_at_peak"))[:top])
        res = num(d.get("reserved_at_peak_bytes")) if text(d.get("type")) != "cpu" else None
        peak_res = num(d.get("peak_reserved_bytes")) if text(d.get("type")) != "cpu" else None
        lines.append(table_row([md_text(d.get("device"), 30), u.bytes_iec(d.get("peak_allocated_bytes")),
                                u.bytes_iec(res) if res is not None else "—",
                                u.bytes_iec(peak_res) if peak_res is not None else "—",
                                md_text(_peak_step(d), 40) or "—", md_text(held, 400) or "—"]))
    return lines
