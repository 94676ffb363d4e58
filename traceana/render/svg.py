"""The roofline chart as SVG, drawn in pure Python (no browser, no plotting library).

`roofline_svg(analysis)` -> an SVG document: log-log axes (x arithmetic intensity FLOP/B, y
achieved TFLOP/s), the DRAM slope, one ceiling per distinct peak (dtypes sharing a peak share a
line and a label), one circle per op signature that has FLOPs (area grows with device time,
colour by bound), and under it a bandwidth strip for the ops with no FLOPs (copy_, fill_, cat,
indexing: achieved GB/s against the DRAM roof and the host link), which a FLOP/s axis cannot
place. The slowest LABELLED ops (and STRIP_LABELLED of the strip) are named on the chart; each
label takes the first free place around its circle (right, left, above, below, the diagonals,
then further out with a leader line), free meaning inside the plot and clear of the other
labels, the roofs and their labels and the labelled circles; a label with no free place is left out (the
tooltip still names the op). Roof labels sit in the right margin, pushed apart to 13 px and
kept above the legend. Every tick is written the same way: a power of ten as 10 with
a superscript exponent (10⁻², 10⁻¹, 10⁰, 10¹, 10³), however wide the range.

When the analysis carries a measured device profile (analysis["device"]["profile"], assumed to
be {dram_gbps, peak_tflops {dtype: TFLOP/s}} as `report --profile` records what the machine
achieves), its roofs are drawn dashed beside the datasheet's; without that key nothing is drawn.

`roofline_svg(analysis, ids=anchors, html=True)` is the same chart for the HTML report: no XML
prolog, no title, no legend (the page has its own), and circles and labels carry the op's
anchor (data-op), a class and tabindex for report.js instead of a <title>.

Every string from the analysis is XML-escaped; the document references nothing outside itself
(no href, no url(), no fonts to fetch). Deterministic: the same analysis gives the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from traceana.roofline.bounds import BOUNDS
from traceana.document import bound_of, mapping, seq
from traceana.render.views import fmt_dims, fmt_pct, fmt_sig, fmt_time_us, fmt_types, row_bound
from traceana.render.svg_labels import CHAR_W, Box, Placer, overlaps, reserve_line, spread
from traceana.units import kernel_names, num, text

W, H_MAIN, STRIP_H = 960, 540, 150
ML, MR, MT, MB = 72, 186, 34, 54
MAX_POINTS = 5000
#: The slowest this many op signatures with FLOPs get a name label next to their circle.
LABELLED = 8
#: ... and this many of the ops on the bandwidth strip.
STRIP_LABELLED = 3

COLOURS = {"compute": "#3d6fd6", "memory": "#e8871e", "latency": "#9b5bb5", "underutilised": "#c2527a", "host_link": "#c9a227", "peer_link": "#8d6e1f",
           "communication": "#2a9d8f", "unmodelled": "#aab0b8", "opaque": "#5f6670",
           # a CPU-only trace's own verdicts (diagnose/cpu_roofline.py)
           "dispatch": "#9b5bb5", "composite": "#7f9fd6"}



def _esc(value: Any, limit: int = 300) -> str:
    """Untrusted text for XML character data or a double-quoted attribute."""
    s = "".join(ch if ch.isprintable() or ch == " " else " " for ch in text(value, limit))
    # & first, as xml.sax.saxutils.escape does (not imported: it pulls in urllib and http, ~10 ms)
    return s.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;").replace('"', "&quot;")


def _f(v: float) -> str:
    return f"{v:.2f}"


_SUP = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def tick(e: int) -> str:
    """10**e as 10 with a superscript exponent (10⁻², 10⁰, 10³): the one notation of every axis."""
    return "10" + str(e).translate(_SUP)


def _points(ops: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    pts = []
    for i, op in enumerate(ops):
        flops, x, y = num(op.get("flops")), num(op.get("intensity")), num(op.get("achieved_tflops"))
        if flops is None or flops <= 0 or x is None or x <= 0 or y is None or y <= 0:
            continue
        pts.append({"op": op, "i": i, "x": x, "y": y, "t": max(num(op.get("device_time_us")) or 0.0, 0.0)})
    pts.sort(key=lambda p: -p["t"])
    return pts[:MAX_POINTS]


def strip_points(ops: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The ops the bandwidth strip shows: no FLOPs (0), moved bytes at a known rate; slowest first."""
    pts = []
    for i, op in enumerate(ops):
        flops, gbps = num(op.get("flops")), num(op.get("achieved_gbps"))
        if flops != 0 or gbps is None or gbps <= 0 or bound_of(op) == "communication":
            continue
        pts.append({"op": op, "i": i, "x": gbps, "t": max(num(op.get("device_time_us")) or 0.0, 0.0)})
    pts.sort(key=lambda p: -p["t"])
    return pts[:MAX_POINTS]


def _roof_groups(peaks: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(dtypes sharing the peak, TFLOP/s), lowest first."""
    by: dict[float, list[str]] = {}
    for k, v in peaks.items():
        t = num(v)
        if t is not None and t > 0:
            by.setdefault(t, []).append(text(k, 12))
    return [(" · ".join(sorted(names)), t) for t, names in sorted(by.items())]


def _profile(dev: Mapping[str, Any]) -> tuple[float | None, list[tuple[str, float]]]:
    """The measured roofs (achievable DRAM GB/s, [(dtypes, TFLOP/s)]) of device["profile"], if any."""
    prof = mapping(dev.get("profile"))
    bw = num(prof.get("dram_gbps"))
    return (bw if bw is not None and bw > 0 else None), _roof_groups(mapping(prof.get("peak_tflops")))


def roofline_svg(analysis: Mapping[str, Any], ids: list[str] | None = None, html: bool = False) -> str:
    """The roofline chart of `analysis` as an SVG document (a str ending in a newline); with html,
    an inline <svg id="chart"> (no namespace: HTML parsers put it in SVG's) whose circles carry ids[i]
    (the op's anchor) for the page's script."""
    a = mapping(analysis)
    dev = mapping(a.get("device"))
    ops = [o for o in seq(a.get("ops")) if isinstance(o, Mapping)]
    pts, strip = _points(ops), strip_points(ops)
    roofs = _roof_groups(mapping(dev.get("peak_tflops")))
    bw = num(dev.get("dram_gbps"))
    bw = bw if bw is not None and bw > 0 else None
    ach_bw, ach_roofs = _profile(dev)
    h = H_MAIN + (STRIP_H if strip else 0)
    mt = 18 if html else MT
    title = f"roofline: {text(mapping(a.get('trace')).get('file'), 120) or 'trace'}"
    device = text(dev.get("name"), 120) or "unknown device"
    font = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif"
    if html:
        out = [f'<svg id="chart" class="chart" viewBox="0 0 {W} {h}" '
               f'role="img" aria-label="roofline chart" font-size="12">']
    else:
        out = ['<?xml version="1.0" encoding="UTF-8"?>',
               f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" '
               f'role="img" font-family="{font}" font-size="12">',
               "<!-- traceana roofline chart -->",
               f"<title>{_esc(title)}</title>",
               f'<rect x="0" y="0" width="{W}" height="{h}" fill="#ffffff"/>',
               f'<text x="{ML}" y="20" font-size="14" font-weight="600" fill="#1d2330">'
               f"{_esc(title)} on {_esc(device)}</text>"]
    if not pts and not strip and not roofs and bw is None:
        out.append(f'<text x="{W / 2:.0f}" y="{H_MAIN / 2:.0f}" text-anchor="middle" fill="#5d6677" font-size="14" '
                   'class="empty">Nothing to plot: no op has a FLOP count or a byte rate and the device has no '
                   "known roofs.</text>")
        return "\n".join(out + ["</svg>"]) + "\n"

    xs = [p["x"] for p in pts]
    ys = [p["y"] for p in pts]
    top_peak = max((t for _, t in roofs), default=0.0)
    for _, t in roofs + ach_roofs:
        ys.append(t)
        if bw:
            xs.append(t * 1000 / bw)
    xs = xs or [0.1, 100.0]
    ys = ys or ([bw / 1e4, bw / 10] if bw else [0.01, 10.0])
    lx0 = math.floor(math.log10(min(xs)) - 0.3)
    lx1 = math.ceil(math.log10(max(xs)) + 0.3)
    ly0 = math.floor(math.log10(min(ys)) - 0.3)
    ly1 = math.ceil(math.log10(max(ys)) + 0.15)
    if lx1 - lx0 < 2:
        lx0, lx1 = lx0 - 1, lx1 + 1
    if ly1 - ly0 < 2:
        ly0, ly1 = ly0 - 1, ly1 + 1
    x0, x1, yb, yt = ML, W - MR, H_MAIN - MB, mt

    def sx(v: float) -> float:
        return x0 + (math.log10(v) - lx0) / (lx1 - lx0) * (x1 - x0)

    def sy(v: float) -> float:
        return yb - (math.log10(v) - ly0) / (ly1 - ly0) * (yb - yt)

    placer = Placer((x0 + 2, yt, x1 - 2, yb - 2))
    tmax = max((p["t"] for p in pts), default=0.0)
    for p in pts[:LABELLED]:  # the labelled circles are kept clear of every label, the slope's too
        cx, cy, r = sx(p["x"]), sy(p["y"]), _radius(p["t"], tmax)
        placer.taken.append((cx - r, cy - r, cx + r, cy + r))
    out += _axes(lx0, lx1, ly0, ly1, sx, sy, yt)
    legend_top = yb - 14 * len(BOUNDS) - 8 if not html else yb
    out += _roofs(roofs, bw, top_peak, ach_bw, ach_roofs, (lx0, lx1, ly0, ly1), sx, sy, placer, yt, legend_top)
    out += _circles(pts, sx, sy, ids, html, placer)
    if not html:
        out += _legend()
    if strip:
        out += _strip(strip, dev, bw, ach_bw, ids, html, max((p["t"] for p in pts + strip), default=0.0))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _axes(lx0: int, lx1: int, ly0: int, ly1: int, sx: Callable, sy: Callable, yt: float) -> list[str]:
    x0, x1, yb = ML, W - MR, H_MAIN - MB
    out = ['<g stroke="#eceef2" stroke-width="1">']
    for e in range(lx0, lx1 + 1):
        gx = _f(sx(10.0 ** e))
        out.append(f'<line class="grid" x1="{gx}" x2="{gx}" y1="{yt}" y2="{yb}"/>')
    for e in range(ly0, ly1 + 1):
        gy = _f(sy(10.0 ** e))
        out.append(f'<line class="grid" x1="{x0}" x2="{x1}" y1="{gy}" y2="{gy}"/>')
    out.append("</g>")
    out.append('<g fill="#5d6677">')
    xstep = max(1, math.ceil((lx1 - lx0) / 12))
    ystep = max(1, math.ceil((ly1 - ly0) / 10))
    for e in range(lx0, lx1 + 1, xstep):
        out.append(f'<text class="tick" x="{_f(sx(10.0 ** e))}" y="{yb + 17}" text-anchor="middle">{tick(e)}</text>')
    for e in range(ly0, ly1 + 1, ystep):
        out.append(f'<text class="tick" x="{x0 - 8}" y="{_f(sy(10.0 ** e) + 4)}" text-anchor="end">{tick(e)}</text>')
    out.append("</g>")
    out.append(f'<g stroke="#8a92a0" stroke-width="1"><line class="axis" x1="{x0}" x2="{x1}" y1="{yb}" y2="{yb}"/>'
               f'<line class="axis" x1="{x0}" x2="{x0}" y1="{yt}" y2="{yb}"/></g>')
    mid = (yt + yb) / 2
    out.append(f'<text class="label" x="{(x0 + x1) / 2:.1f}" y="{H_MAIN - 16}" text-anchor="middle" '
               'font-weight="600" fill="#1d2330">arithmetic intensity (FLOP/B)</text>')
    out.append(f'<text class="label" x="18" y="{mid:.1f}" text-anchor="middle" font-weight="600" fill="#1d2330" '
               f'transform="rotate(-90 18 {mid:.1f})">achieved TFLOP/s</text>')
    return out


def _slope(bw: float, top: float, dom: tuple[int, int, int, int], sx: Callable, sy: Callable) -> tuple | None:
    """The visible segment of the bandwidth slope TFLOP/s = FLOP/B x GB/s / 1000, up to `top`."""
    lx0, lx1, ly0, ly1 = dom
    xa = max(10.0 ** lx0, 10.0 ** ly0 * 1000 / bw)
    xb = min(10.0 ** lx1, top * 1000 / bw)
    if xa >= xb:
        return None
    return sx(xa), sy(xa * bw / 1000), sx(xb), sy(xb * bw / 1000)


def _slope_label(seg: tuple, at: float, above: bool, label: str, cls: str, placer: Placer) -> str:
    """A label along the slope, about `at` of the way up (moved along it to a place clear of what the
    placer holds when it can); its path is then reserved in the placer."""
    ax, ay, bx, by = seg
    angle = math.degrees(math.atan2(by - ay, bx - ax))
    ux, uy = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    nx, ny = uy, -ux  # unit normal, up-left
    off = 6 if above else -14
    length = len(label) * CHAR_W

    def boxes(f: float) -> tuple[float, float, list[Box]]:
        lx, ly = ax + (bx - ax) * f + nx * off, ay + (by - ay) * f + ny * off
        return lx, ly, [(lx + ux * k - 5, ly + uy * k - 11, lx + ux * k + 5, ly + uy * k + 3)
                        for k in range(0, int(length) + 10, 8)]

    for f in (at, at - 0.08, at + 0.08, at - 0.16, at + 0.16, at + 0.24, at + 0.32):
        lx, ly, bs = boxes(min(max(f, 0.02), 0.9))
        if not any(overlaps(b, t) for b in bs for t in placer.taken):
            break
    else:
        lx, ly, bs = boxes(at)
    placer.taken.extend(bs)
    return (f'<text class="roof-label {cls}" x="{lx:.1f}" y="{ly:.1f}" '
            f'transform="rotate({angle:.2f} {lx:.1f} {ly:.1f})">{_esc(label)}</text>')


def _roofs(roofs: list[tuple[str, float]], bw: float | None, top_peak: float, ach_bw: float | None,
           ach_roofs: list[tuple[str, float]], dom: tuple[int, int, int, int], sx: Callable, sy: Callable,
           placer: Placer, yt: float, bottom: float) -> list[str]:
    x1 = W - MR
    xmin = 10.0 ** dom[0]
    top = top_peak or 10.0 ** dom[3]
    lines, inner = [], []
    if bw and (seg := _slope(bw, top, dom, sx, sy)):
        reserve_line(placer, *seg)
        lines.append(f'<line class="roof mem" x1="{_f(seg[0])}" y1="{_f(seg[1])}" x2="{_f(seg[2])}" '
                     f'y2="{_f(seg[3])}"/>')
        inner.append(_slope_label(seg, 0.3, True, f"DRAM {fmt_sig(bw)} GB/s", "mem", placer))
    if ach_bw and (seg := _slope(ach_bw, max([t for _, t in ach_roofs] or [top]), dom, sx, sy)):
        lines.append(f'<line class="roof achievable" x1="{_f(seg[0])}" y1="{_f(seg[1])}" x2="{_f(seg[2])}" '
                     f'y2="{_f(seg[3])}" stroke-dasharray="6 4" stroke="#6b7280"/>')
        inner.append(_slope_label(seg, 0.55, False, f"measured DRAM {fmt_sig(ach_bw)} GB/s", "achievable", placer))
    labels = []
    for dtypes, t in roofs:
        ra = max(xmin, t * 1000 / bw) if bw else xmin
        lines.append(f'<line class="roof" x1="{_f(sx(ra))}" y1="{_f(sy(t))}" x2="{x1}" y2="{_f(sy(t))}"/>')
        reserve_line(placer, sx(ra), sy(t), x1, sy(t))
        labels.append((sy(t), f"{dtypes} {fmt_sig(t)} TFLOP/s", ""))
    for dtypes, t in ach_roofs:
        ra = max(xmin, t * 1000 / ach_bw) if ach_bw else xmin
        lines.append(f'<line class="roof achievable" x1="{_f(sx(ra))}" y1="{_f(sy(t))}" x2="{x1}" y2="{_f(sy(t))}" '
                     'stroke-dasharray="6 4" stroke="#6b7280"/>')
        labels.append((sy(t), f"measured {dtypes} {fmt_sig(t)}", " achievable"))
    out = ['<g stroke="#2b303a" stroke-width="1.6" fill="none">', *lines, "</g>"]
    margin = []
    for y, label, cls in spread(labels, yt + 4, bottom):
        margin.append(f'<text class="roof-label{cls}" x="{x1 + 6}" y="{_f(y)}">{_esc(label)}</text>')
    return out + ['<g fill="#2b303a" font-size="11">', *inner, *margin, "</g>"]


def _radius(t: float, tmax: float, big: float = 14.0) -> float:
    return 3 + big * (math.sqrt(t / tmax) if tmax > 0 else 0.0)


#: A point's label is at most this many characters.
LABEL_CHARS = 34


def _label_names(pts: list[dict[str, Any]]) -> list[str]:
    """Short names for labelled points (the hover has the full one): kernel names read by their core
    (told apart by template arguments), a long name kept by its head and
    its tail (where names of one family differ: cudnn_convolution_backward_input / _weight); ops whose
    names repeat get their first input's shape."""
    raw = [text(p["op"].get("name"), 400) or "(unnamed)" for p in pts]
    names = kernel_names(raw, 400)
    out = []
    for p, n in zip(pts, names):
        label = n
        if names.count(n) > 1:
            first = seq(p["op"].get("input_dims"))[:1]
            label += f" {fmt_dims(first, 24)}" if first else ""
        out.append(_head_tail(label, LABEL_CHARS))
    return out


def _head_tail(s: str, limit: int) -> str:
    """s, or its first and last characters around an ellipsis when longer than `limit`."""
    if len(s) <= limit:
        return s
    head = (limit - 1) * 2 // 5
    return s[:head] + "…" + s[len(s) - (limit - 1 - head):]


def _tip(op: Mapping[str, Any], rate: str) -> str:
    return (f"{text(op.get('name'), 200) or '(unnamed)'} | {fmt_dims(op.get('input_dims'), 120) or '-'} | "
            f"{fmt_types(op.get('input_types'), 60) or '-'} | {fmt_time_us(op.get('device_time_us'))} | {rate} | "
            f"{fmt_pct(op.get('roof_pct'))} of roof | {row_bound(op)}")


def _circle(p: dict[str, Any], cx: float, cy: float, r: float, cls: str, ids: list[str] | None, html: bool,
            tip: str) -> str:
    bound = row_bound(p["op"])
    attrs = f'cx="{_f(cx)}" cy="{_f(cy)}" r="{_f(r)}" fill="{COLOURS[bound]}"'
    if html:
        op_id = ids[p["i"]] if ids and p["i"] < len(ids) else ""
        name = text(p["op"].get("name"), 200) or "(unnamed)"
        return (f'<circle class="{cls} b-{bound}" {attrs} data-op="{_esc(op_id, 80)}" tabindex="0" '
                f'aria-label="{_esc(name)}, {_esc(fmt_time_us(p["op"].get("device_time_us")))}, {bound}"/>')
    return f'<circle class="{cls} b-{bound}" {attrs}><title>{_esc(tip, 600)}</title></circle>'


def _label(p: dict[str, Any], name: str, spot: tuple, cx: float, cy: float, r: float, cls: str,
           ids: list[str] | None, html: bool) -> list[str]:
    tx, ty, anchor, box, leader = spot
    out = []
    if leader:  # from the circle's edge towards the label box's nearest point
        bx, by = min(max(cx, box[0]), box[2]), min(max(cy, box[1]), box[3])
        d = math.hypot(bx - cx, by - cy) or 1.0
        out.append(f'<line class="leader" x1="{_f(cx + (bx - cx) / d * r)}" y1="{_f(cy + (by - cy) / d * r)}" '
                   f'x2="{_f(bx)}" y2="{_f(by)}" stroke="#8a92a0" stroke-width="0.8"/>')
    data = f' data-op="{_esc(ids[p["i"]], 80)}"' if html and ids and p["i"] < len(ids) else ""
    out.append(f'<text class="{cls}" x="{_f(tx)}" y="{_f(ty)}" text-anchor="{anchor}"{data}>{_esc(name)}</text>')
    return out


def _circles(pts: list[dict[str, Any]], sx: Callable, sy: Callable, ids: list[str] | None, html: bool,
             placer: Placer) -> list[str]:
    """The circles; labels for the first LABELLED (whose circles the placer already holds)."""
    tmax = max((p["t"] for p in pts), default=0.0)
    top = pts[:LABELLED]
    out = ['<g fill-opacity="0.72" stroke="#ffffff" stroke-width="1">']
    for p in pts:  # slowest (largest) first, so small circles stay on top
        tip = _tip(p["op"], f"{fmt_sig(p['x'])} FLOP/B | {fmt_sig(p['y'])} TFLOP/s")
        out.append(_circle(p, sx(p["x"]), sy(p["y"]), _radius(p["t"], tmax), "pt", ids, html, tip))
    out.append("</g>")
    for p in pts[LABELLED:]:  # no label covers any other point either
        placer.add_circle(sx(p["x"]), sy(p["y"]), _radius(p["t"], tmax))
    labels = []
    for p, name in zip(top, _label_names(top)):
        cx, cy, r = sx(p["x"]), sy(p["y"]), _radius(p["t"], tmax)
        placer.taken.remove((cx - r, cy - r, cx + r, cy + r))  # its own circle does not block it
        spot = placer.place(cx, cy, r, len(name) * CHAR_W)
        placer.taken.append((cx - r, cy - r, cx + r, cy + r))
        if spot:
            labels += _label(p, name, spot, cx, cy, r, "pt-label", ids, html)
    return out + ['<g fill="#1d2330" font-size="11" stroke="#ffffff" stroke-width="3" paint-order="stroke" '
                  'stroke-linejoin="round">', *labels, "</g>"]


def _legend() -> list[str]:
    out = ['<g font-size="11.5" fill="#1d2330">']
    x = W - MR + 6
    for i, b in enumerate(BOUNDS):
        y = H_MAIN - MB - 14 * (len(BOUNDS) - i) + 4
        out.append(f'<circle cx="{x + 5}" cy="{y - 4}" r="5" fill="{COLOURS[b]}"/>'
                   f'<text x="{x + 14}" y="{y}">{b}</text>')
    out.append("</g>")
    return out


def _strip(pts: list[dict[str, Any]], dev: Mapping[str, Any], bw: float | None, ach_bw: float | None,
           ids: list[str] | None, html: bool, tmax: float) -> list[str]:
    """The ops with no FLOPs on a log GB/s axis, against the DRAM roof (and host link, measured DRAM)."""
    x0, x1 = ML, W - MR
    top = H_MAIN + 4
    band0, axis_y = top + 36, top + STRIP_H - 40
    host = num(dev.get("host_link_gbps"))
    roofs = [(bw, f"DRAM {fmt_sig(bw)} GB/s", "roof")] if bw else []
    if host and host > 0:
        roofs.append((host, f"{text(dev.get('host_link'), 24) or 'host link'} {fmt_sig(host)} GB/s", "roof link"))
    if ach_bw:
        roofs.append((ach_bw, f"measured DRAM {fmt_sig(ach_bw)} GB/s", "roof achievable"))
    xs = [p["x"] for p in pts] + [r[0] for r in roofs]
    l0 = math.floor(math.log10(min(xs)) - 0.2)
    l1 = math.ceil(math.log10(max(xs)) + 0.2)
    if l1 - l0 < 2:
        l0, l1 = l0 - 1, l1 + 1

    def sx(v: float) -> float:
        return x0 + (math.log10(v) - l0) / (l1 - l0) * (x1 - x0)

    n = len(pts)
    out = [f'<g class="strip"><text class="label" x="{x0}" y="{top + 12}" font-weight="600" fill="#1d2330">'
           f"{n:,} op signature{'s' if n != 1 else ''} with no FLOPs (copies, fills, cat, indexing): achieved GB/s "
           "against the bandwidth roofs</text>",
           f'<line class="axis" x1="{x0}" x2="{x1}" y1="{axis_y}" y2="{axis_y}" stroke="#8a92a0"/>']
    step = max(1, math.ceil((l1 - l0) / 12))
    for e in range(l0, l1 + 1):
        gx = _f(sx(10.0 ** e))
        out.append(f'<line class="grid" x1="{gx}" x2="{gx}" y1="{band0}" y2="{axis_y}" stroke="#eceef2"/>')
        if (e - l0) % step == 0:
            out.append(f'<text class="tick" x="{gx}" y="{axis_y + 15}" text-anchor="middle" fill="#5d6677">'
                       f"{tick(e)}</text>")
    out.append(f'<text class="label" x="{(x0 + x1) / 2:.1f}" y="{axis_y + 31}" text-anchor="middle" '
               'font-weight="600" fill="#1d2330">achieved GB/s (bytes per call / mean time)</text>')
    placer = Placer((x0 + 2, band0 - 14, W - 4, axis_y - 1))
    last_right, row = -math.inf, 0
    for v, label, cls in sorted(roofs):
        gx = sx(v)
        dash = ' stroke-dasharray="6 4"' if "achievable" in cls else ""
        out.append(f'<line class="{cls}" x1="{_f(gx)}" x2="{_f(gx)}" y1="{band0 - 4}" y2="{axis_y}" '
                   f'stroke="#2b303a" stroke-width="1.4"{dash}/>')
        width = len(label) * CHAR_W
        row = row + 1 if gx + 4 < last_right else 0  # labels that would touch go one row down
        y = band0 - 4 + row * 13
        out.append(f'<text class="roof-label" x="{_f(gx + 4)}" y="{_f(y)}" font-size="11" fill="#2b303a">'
                   f"{_esc(label)}</text>")
        placer.taken.append((gx + 3, y - 10, gx + 5 + width, y + 3))
        last_right = gx + 4 + width
    mid = (band0 + axis_y) / 2
    # circles placed so far, by column of x as wide as the largest circle: circles whose centres are
    # further apart than that never touch, so only the neighbouring columns need checking
    radii = [_radius(p["t"], tmax, 9.0) for p in pts]
    width = max(1.0, 2 * max(radii, default=0.0))
    placed: dict[int, list[tuple[float, float, float]]] = {}
    circles, spots = [], []
    for p, r in zip(pts, radii):  # a beeswarm: each circle at the first height (from the middle out) clear of the others
        cx = sx(p["x"])
        col = int(cx // width)
        near = [q for c in (col - 1, col, col + 1) for q in placed.get(c, ())]
        cy = mid
        for k in range(0, 12):
            y = mid + (k + 1) // 2 * 5 * (1 if k % 2 else -1)
            if y - r < band0 - 2 or y + r > axis_y - 1:
                continue
            if all(math.hypot(cx - qx, y - qy) >= r + qr - 1 for qx, qy, qr in near):
                cy = y
                break
        placed.setdefault(col, []).append((cx, cy, r))
        tip = _tip(p["op"], f"{fmt_sig(p['x'])} GB/s")
        circles.append(_circle(p, cx, cy, r, "bw", ids, html, tip))
        spots.append((cx, cy, r))
    for cx, cy, r in spots[:STRIP_LABELLED]:
        placer.taken.append((cx - r, cy - r, cx + r, cy + r))
    for cx, cy, r in spots[STRIP_LABELLED:]:
        placer.add_circle(cx, cy, r)
    labels = []
    top_pts = pts[:STRIP_LABELLED]
    for p, name, (cx, cy, r) in zip(top_pts, _label_names(top_pts), spots):
        placer.taken.remove((cx - r, cy - r, cx + r, cy + r))
        spot = placer.place(cx, cy, r, len(name) * CHAR_W)
        placer.taken.append((cx - r, cy - r, cx + r, cy + r))
        if spot:
            labels += _label(p, name, spot, cx, cy, r, "pt-label", ids, html)
    return out + ['<g fill-opacity="0.72" stroke="#ffffff" stroke-width="1">', *circles, "</g>",
                  '<g fill="#1d2330" font-size="11" stroke="#ffffff" stroke-width="3" paint-order="stroke" '
                  'stroke-linejoin="round">', *labels, "</g>", "</g>"]
