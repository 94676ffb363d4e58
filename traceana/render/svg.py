"""The roofline chart as a standalone SVG, drawn in pure Python (no browser, no plotting library).

`roofline_svg(analysis)` -> an SVG document: log-log axes (x arithmetic intensity FLOP/B,
y achieved TFLOP/s), the DRAM slope, one ceiling per dtype, one circle per op signature
that has FLOPs (area grows with device time, colour by bound, a <title> tooltip). Same
geometry and colours as the HTML report's chart. Every string from the analysis is
XML-escaped; the document references nothing outside itself (no href, no url(), no fonts
to fetch), so it can be attached to a PR, embedded in markdown (`![](chart.svg)`) or
converted to PNG. Deterministic: the same analysis gives the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any
from xml.sax.saxutils import escape

from traceana.render import (
    BOUNDS,
    bound_of,
    fmt_dims,
    fmt_pct,
    fmt_sig,
    fmt_time_us,
    fmt_types,
    mapping,
    num,
    seq,
    text,
)

W, H = 960, 540
ML, MR, MT, MB = 72, 162, 34, 54
MAX_POINTS = 5000
#: The slowest this many op signatures get a name label next to their circle.
LABELLED = 5

COLOURS = {"compute": "#3d6fd6", "memory": "#e8871e", "latency": "#9b5bb5", "underutilised": "#c2527a", "host_link": "#c9a227", "peer_link": "#8d6e1f",
           "communication": "#2a9d8f", "unmodelled": "#aab0b8", "opaque": "#5f6670"}


def _esc(value: Any, limit: int = 300) -> str:
    """Untrusted text for XML character data or a double-quoted attribute."""
    s = "".join(ch if ch.isprintable() or ch == " " else " " for ch in text(value, limit))
    return escape(s, {'"': "&quot;"})


def _f(v: float) -> str:
    return f"{v:.2f}"


def _tick(e: int) -> str:
    if e >= 4 or e <= -4:
        return f"1e{e}"
    return f"{10.0 ** e:,.0f}" if e >= 0 else f"{10.0 ** e:.{-e}f}"


def _points(ops: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    pts = []
    for op in ops:
        flops, x, y = num(op.get("flops")), num(op.get("intensity")), num(op.get("achieved_tflops"))
        if flops is None or flops <= 0 or x is None or x <= 0 or y is None or y <= 0:
            continue
        pts.append({"op": op, "x": x, "y": y, "t": max(num(op.get("device_time_us")) or 0.0, 0.0)})
    pts.sort(key=lambda p: -p["t"])
    return pts[:MAX_POINTS]


def roofline_svg(analysis: Mapping[str, Any]) -> str:
    """The roofline chart of `analysis` as an SVG document (a str ending in a newline)."""
    a = mapping(analysis)
    dev = mapping(a.get("device"))
    ops = [o for o in seq(a.get("ops")) if isinstance(o, Mapping)]
    pts = _points(ops)
    roofs = sorted(((text(k, 40), t) for k, v in mapping(dev.get("peak_tflops")).items()
                    if (t := num(v)) is not None and t > 0), key=lambda kv: (kv[1], kv[0]))
    bw = num(dev.get("dram_gbps"))
    bw = bw if bw is not None and bw > 0 else None
    title = f"roofline: {text(mapping(a.get('trace')).get('file'), 120) or 'trace'}"
    device = text(dev.get("name"), 120) or "unknown device"
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        'role="img" font-family="system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif" '
        'font-size="12">',
        "<!-- traceana roofline chart -->",
        f"<title>{_esc(title)}</title>",
        f'<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/>',
        f'<text x="{ML}" y="20" font-size="14" font-weight="600" fill="#1d2330">'
        f"{_esc(title)} on {_esc(device)}</text>",
    ]
    if not pts and not roofs and bw is None:
        out.append(f'<text x="{W / 2:.0f}" y="{H / 2:.0f}" text-anchor="middle" fill="#5d6677" font-size="14">'
                   "Nothing to plot: no op has a FLOP count and the device has no known roofs.</text>")
        return "\n".join(out + ["</svg>"]) + "\n"

    xs = [p["x"] for p in pts]
    ys = [p["y"] for p in pts]
    top_peak = max((t for _, t in roofs), default=0.0)
    for _, t in roofs:
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
    x0, x1, yb, yt = ML, W - MR, H - MB, MT

    def sx(v: float) -> float:
        return x0 + (math.log10(v) - lx0) / (lx1 - lx0) * (x1 - x0)

    def sy(v: float) -> float:
        return yb - (math.log10(v) - ly0) / (ly1 - ly0) * (yb - yt)

    out += _axes(lx0, lx1, ly0, ly1, sx, sy)
    out += _roofs(roofs, bw, top_peak, lx0, lx1, ly0, ly1, sx, sy)
    out += _circles(pts, sx, sy)
    out += _legend()
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _axes(lx0: int, lx1: int, ly0: int, ly1: int, sx: Any, sy: Any) -> list[str]:
    x0, x1, yb, yt = ML, W - MR, H - MB, MT
    out = ['<g stroke="#eceef2" stroke-width="1">']
    for e in range(lx0, lx1 + 1):
        gx = _f(sx(10.0 ** e))
        out.append(f'<line x1="{gx}" x2="{gx}" y1="{yt}" y2="{yb}"/>')
    for e in range(ly0, ly1 + 1):
        gy = _f(sy(10.0 ** e))
        out.append(f'<line x1="{x0}" x2="{x1}" y1="{gy}" y2="{gy}"/>')
    out.append("</g>")
    out.append('<g fill="#5d6677">')
    xstep = max(1, math.ceil((lx1 - lx0) / 12))
    ystep = max(1, math.ceil((ly1 - ly0) / 10))
    for e in range(lx0, lx1 + 1, xstep):
        out.append(f'<text x="{_f(sx(10.0 ** e))}" y="{yb + 17}" text-anchor="middle">{_tick(e)}</text>')
    for e in range(ly0, ly1 + 1, ystep):
        out.append(f'<text x="{x0 - 8}" y="{_f(sy(10.0 ** e) + 4)}" text-anchor="end">{_tick(e)}</text>')
    out.append("</g>")
    out.append(f'<g stroke="#8a92a0" stroke-width="1"><line x1="{x0}" x2="{x1}" y1="{yb}" y2="{yb}"/>'
               f'<line x1="{x0}" x2="{x0}" y1="{yt}" y2="{yb}"/></g>')
    mid = (yt + yb) / 2
    out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{H - 12}" text-anchor="middle" font-weight="600" '
               'fill="#1d2330">arithmetic intensity (FLOP/B)</text>')
    out.append(f'<text x="18" y="{mid:.1f}" text-anchor="middle" font-weight="600" fill="#1d2330" '
               f'transform="rotate(-90 18 {mid:.1f})">achieved TFLOP/s</text>')
    return out


def _roofs(roofs: list[tuple[str, float]], bw: float | None, top_peak: float, lx0: int, lx1: int,
           ly0: int, ly1: int, sx: Any, sy: Any) -> list[str]:
    x1 = W - MR
    xmin, xmax, ymin, ymax = 10.0 ** lx0, 10.0 ** lx1, 10.0 ** ly0, 10.0 ** ly1
    out = ['<g stroke="#2b303a" stroke-width="1.6" fill="none">']
    label_out = []
    if bw:
        xa = max(xmin, ymin * 1000 / bw)
        xb = min(xmax, (top_peak or ymax) * 1000 / bw)
        if xa < xb:
            ax, ay, bx, by = sx(xa), sy(xa * bw / 1000), sx(xb), sy(xb * bw / 1000)
            out.append(f'<line x1="{_f(ax)}" y1="{_f(ay)}" x2="{_f(bx)}" y2="{_f(by)}" stroke-dasharray="6 4"/>')
            angle = math.degrees(math.atan2(by - ay, bx - ax))
            lx, ly = ax + (bx - ax) * 0.32, ay + (by - ay) * 0.32 - 7
            label_out.append(f'<text x="{lx:.1f}" y="{ly:.1f}" transform="rotate({angle:.2f} {lx:.1f} {ly:.1f})">'
                             f"DRAM {_esc(fmt_sig(bw))} GB/s</text>")
    labels = []
    for dtype, t in roofs:
        ra = max(xmin, t * 1000 / bw) if bw else xmin
        ry = sy(t)
        out.append(f'<line x1="{_f(sx(ra))}" y1="{_f(ry)}" x2="{x1}" y2="{_f(ry)}"/>')
        labels.append((ry, f"{text(dtype, 10)} {fmt_sig(t)} TFLOP/s"))
    out.append("</g>")
    last = -math.inf
    for ry, label in sorted(labels):
        y = max(ry + 4, last + 13)
        last = y
        label_out.append(f'<text x="{x1 + 6}" y="{_f(y)}">{_esc(label)}</text>')
    return out + ['<g fill="#2b303a" font-size="11.5">', *label_out, "</g>"]


def _circles(pts: list[dict[str, Any]], sx: Any, sy: Any) -> list[str]:
    tmax = max((p["t"] for p in pts), default=0.0)
    out = ['<g fill-opacity="0.72" stroke="#ffffff" stroke-width="1">']
    labels = []
    for i, p in enumerate(pts):  # slowest (largest) first, so small circles stay on top
        op = p["op"]
        r = 3 + 14 * (math.sqrt(p["t"] / tmax) if tmax > 0 else 0.0)
        bound = bound_of(op)
        name = text(op.get("name"), 200) or "(unnamed)"
        tip = (f"{name} | {fmt_dims(op.get('input_dims'), 120) or '-'} | {fmt_types(op.get('input_types'), 60) or '-'}"
               f" | {fmt_time_us(op.get('device_time_us'))} | {fmt_sig(p['x'])} FLOP/B | "
               f"{fmt_sig(p['y'])} TFLOP/s | {fmt_pct(op.get('roof_pct'))} of roof | {bound}")
        cx, cy = sx(p["x"]), sy(p["y"])
        out.append(f'<circle cx="{_f(cx)}" cy="{_f(cy)}" r="{_f(r)}" fill="{COLOURS[bound]}">'
                   f"<title>{_esc(tip, 600)}</title></circle>")
        if i < LABELLED:
            labels.append(f'<text x="{_f(cx + r + 3)}" y="{_f(cy + 4)}">{_esc(text(name, 40))}</text>')
    out.append("</g>")
    return out + ['<g fill="#1d2330" font-size="11">', *labels, "</g>"]


def _legend() -> list[str]:
    out = ['<g font-size="11.5" fill="#1d2330">']
    x = W - MR + 6
    for i, b in enumerate(BOUNDS):
        y = H - MB - 14 * (len(BOUNDS) - i) + 4
        out.append(f'<circle cx="{x + 5}" cy="{y - 4}" r="5" fill="{COLOURS[b]}"/>'
                   f'<text x="{x + 14}" y="{y}">{b}</text>')
    out.append("</g>")
    return out
