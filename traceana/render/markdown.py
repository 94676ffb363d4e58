"""A short GitHub-flavoured markdown report, sized for a PR comment (< 65,000 characters).

Every string from the analysis goes through `md_text` (inline text and table cells) or
into a code fence longer than any backtick run it contains, so an op name cannot open a
link, an HTML tag, a new table cell or a new line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from traceana.render import (
    BOUNDS,
    bound_of,
    by_bound,
    fmt_dims,
    fmt_pct,
    fmt_sig,
    fmt_time_us,
    fmt_types,
    mapping,
    num,
    seq,
    share,
    text,
    verdict,
)

#: GitHub rejects comments longer than 65,536 characters; stay clear of it.
MAX_CHARS = 65_000
TOP_OPS = 15
MAX_EXPLANATIONS = 5
MAX_LINES = 20
MAX_WARNINGS = 30

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_BLOCK_START = re.compile(r"^([#+\-=>]|\d+(?=[.)]))")
_BACKTICKS = re.compile(r"`+")


def md_text(value: Any, limit: int | None = 200, line_start: bool = False) -> str:
    """Untrusted text as inert inline markdown: one line, specials escaped, `<` as &lt;.

    `line_start`: the text opens a block (a list item's body), so a leading `#`, `-`,
    `+`, `=`, `>` or `1.` would start a heading, list or quote; escape it.
    """
    s = " ".join(text(value, limit).split())  # newlines, tabs and CR become single spaces
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    if line_start:
        m = _BLOCK_START.match(s)
        if m and m.group(1)[0].isdigit():
            s = m.group(1) + "\\" + s[m.end():]
        elif m:
            s = "\\" + s
    return s


def code_block(lines: list[str]) -> str:
    """A fenced block whose fence is longer than any backtick run inside it."""
    body = "\n".join(lines)
    longest = max((len(m.group(0)) for m in _BACKTICKS.finditer(body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{body}\n{fence}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _device(dev: Mapping[str, Any]) -> list[str]:
    name = md_text(dev.get("name"), 120) or "unknown device"
    key = md_text(dev.get("key"), 80)
    peaks = ", ".join(
        f"{md_text(k, 20)} {fmt_sig(v)}"
        for k, v in sorted(mapping(dev.get("peak_tflops")).items(), key=lambda kv: text(kv[0]))
        if num(v) is not None
    )
    dram = num(dev.get("dram_gbps"))
    out = [
        f"**Device:** {name} (table row: {key or 'unknown'})",
        f"**Peaks:** {peaks + ' TFLOP/s' if peaks else 'unknown'} · "
        f"**DRAM:** {fmt_sig(dram) + ' GB/s' if dram is not None else 'unknown'}"
        + (f" · source: {md_text(dev.get('source'), 80)}" if text(dev.get("source")) else ""),
    ]
    return [" \\\n".join(out)]


def _breakdown(analysis: Mapping[str, Any]) -> list[str]:
    parts, total = by_bound(analysis)
    if not parts:
        return []
    lines = ["## Time by bound", "", _row(["bound", "time", "%"]), "|---|--:|--:|"]
    for b in BOUNDS:
        if b in parts:
            lines.append(_row([b, fmt_time_us(parts[b]), fmt_pct(share(parts[b], total))]))
    lines.append(_row(["**total**", f"**{fmt_time_us(total)}**", ""]))
    return lines


def _ops_table(ops: list[Mapping[str, Any]], n: int) -> list[str]:
    if not ops:
        return []
    shown = ops[:n]
    lines = [
        f"## Top {len(shown)} of {len(ops):,} op signatures by device time",
        "",
        _row(["op", "shape", "dtype", "time", "% of roof", "bound"]),
        "|---|---|---|--:|--:|---|",
    ]
    for op in shown:
        lines.append(_row([
            md_text(op.get("name"), 80) or "(unnamed)",
            md_text(fmt_dims(op.get("input_dims")), 60) or "—",
            md_text(fmt_types(op.get("input_types")), 40) or "—",
            fmt_time_us(op.get("device_time_us")),
            fmt_pct(op.get("roof_pct")),
            bound_of(op),
        ]))
    return lines


def _explanations(analysis: Mapping[str, Any], n: int) -> list[str]:
    items = [e for e in seq(analysis.get("explanations")) if isinstance(e, Mapping)][:n]
    if not items:
        return []
    lines = ["## Why"]
    for e in items:
        body = [text(x, 300).replace("\r", " ") for x in seq(e.get("lines"))[:MAX_LINES]]
        body = [ln for x in body for ln in x.split("\n")][:MAX_LINES]
        lines += ["", f"**{md_text(e.get('title'), 160) or md_text(e.get('op'), 60)}**"]
        if body:
            lines += ["", code_block(body)]
    return lines


def _findings(analysis: Mapping[str, Any]) -> list[str]:
    items = [f for f in seq(analysis.get("findings")) if isinstance(f, Mapping)][:10]
    if not items:
        return []
    lines = ["## Findings", ""]
    for f in items:
        saving = num(f.get("saving_us"))
        tail = f" (saves up to {saving / 1000:,.3f} ms)" if saving is not None else ""
        lines.append(f"- **{md_text(f.get('title'), 160)}**{tail}: {md_text(f.get('text'), 400)}")
    return lines


def _coverage(analysis: Mapping[str, Any]) -> list[str]:
    cov = mapping(analysis.get("coverage"))
    device = cov.get("device_time_us")
    if num(device) is None:
        return []
    bits = [f"device {fmt_time_us(device)}"]
    for label, key in (("attributed", "attributed_time_us"), ("modelled", "modeled_time_us"),
                       ("opaque", "opaque_time_us"), ("unmodelled", "unmodeled_time_us")):
        if num(cov.get(key)) is not None:
            pct = fmt_pct(share(cov.get(key), device))
            bits.append(f"{label} {fmt_time_us(cov.get(key))} ({pct})")
    return ["## Coverage", "", " · ".join(bits)]


def _warnings(analysis: Mapping[str, Any]) -> list[str]:
    dev_notes = [n for n in seq(mapping(analysis.get("device")).get("notes")) if text(n)]
    items = [w for w in seq(analysis.get("warnings")) if text(w)] + dev_notes
    if not items:
        return []
    lines = ["## Warnings", ""]
    lines += [f"- {md_text(w, 300, line_start=True)}" for w in items[:MAX_WARNINGS]]
    if len(items) > MAX_WARNINGS:
        lines.append(f"- … and {len(items) - MAX_WARNINGS:,} more (see the HTML or JSON report)")
    return lines


def _document(analysis: Mapping[str, Any], top: int, explanations: int) -> str:
    trace = mapping(analysis.get("trace"))
    ops = [o for o in seq(analysis.get("ops")) if isinstance(o, Mapping)]
    head = [f"# traceana: {md_text(trace.get('file'), 120) or 'trace'}", "",
            f"**Verdict:** {md_text(verdict(analysis), 400)}", ""]
    sections = [
        head + _device(mapping(analysis.get("device"))),
        _breakdown(analysis),
        _ops_table(ops, top),
        _explanations(analysis, explanations),
        _findings(analysis),
        _coverage(analysis),
        _warnings(analysis),
    ]
    return "\n\n".join("\n".join(s) for s in sections if s) + "\n"


def render_markdown(analysis: Mapping[str, Any]) -> str:
    """The short markdown report; the ops table and explanations shrink to fit MAX_CHARS."""
    a = mapping(analysis)
    top, expl = TOP_OPS, MAX_EXPLANATIONS
    out = _document(a, top, expl)
    while len(out) > MAX_CHARS and (top > 1 or expl > 0):
        if expl > 0:
            expl -= 1
        else:
            top -= 1
        out = _document(a, top, expl)
    if len(out) > MAX_CHARS:  # cannot happen with the caps above; a last guarantee
        cut = out.rfind("\n", 0, MAX_CHARS - 40)
        out = out[: max(cut, 0)] + "\n\n*(report truncated)*\n"
    return out
