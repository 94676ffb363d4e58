"""The terminal's one escaping function and the report's summary lines.

Whatever traceana prints to a terminal that came from a trace or a file name goes through
`term_text`: control characters (C0, DEL, C1: ESC and CSI start the sequences that move the
cursor, recolour, retitle the window or write to the clipboard), line and paragraph separators
and bidirectional overrides are shown as visible escapes (`\\x1b`, `\\u202e`), so a name can
neither drive the terminal nor hide or reorder what is printed around it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from traceana.units import text

_VISIBLE = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_VISIBLE.update({c: f"\\u{c:04x}" for c in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F),
                                            *range(0x2066, 0x206A), 0xFEFF)})


def term_text(value: Any, limit: int | None = None) -> str:
    """Untrusted text for a terminal: one line, nothing the terminal would act on."""
    return text(value, limit).translate(_VISIBLE)


def term_lines(lines: Iterable[str]) -> str:
    """Lines for the terminal, each made inert, joined by newlines (ours only)."""
    return "\n".join(term_text(ln) for ln in lines)


def report_summary(a: Mapping[str, Any], out: str) -> str:
    """A few lines after `traceana report`: the device line, where the time went (the ledger's
    sentence), "do this first" (the plan's levers with their savings and the span after
    them), coverage, the top ops, the memory peaks (when recorded), the first warnings."""
    from traceana import units as u
    from traceana.render.views import cpu_verdict_rows, shown_warnings, verdict
    from traceana.document import mapping, seq
    from traceana.units import num
    from traceana.render.first import cpu_only, device_line, plan, sentence

    cov = mapping(a.get("coverage"))
    total = num(cov.get("device_time_us")) or 0.0
    file = text(mapping(a.get("trace")).get("file"), 200)
    cpu = cpu_only(a)
    if cpu:  # a CPU-only trace: the CPU and its roofs, then its account's sentence
        lines = [f"{file}: {device_line(a)}"]
    else:
        lines = [f"{file}: {device_line(a)}, {u.us(total)} of GPU time"]
    prof = mapping(mapping(a.get("device")).get("profile"))
    if prof:
        from traceana.render.views import profile_sentence

        lines.append(f"  roofs: {profile_sentence(prof)}")
    if sentence(a):
        lines.append(f"  {sentence(a)}")
    elif a.get("cpu"):
        lines.append(f"  {verdict(a)}")
    levers = plan(a)
    if levers:
        lines.append("  do this first:")
    for i, p in enumerate(levers, 1):
        bits = [p["saving_text"]] if p["saving_text"] else []
        if p["after"]:
            bits.append(f"span after {p['after']}" + (f", median step ≈ {p['step_after']}" if p["step_after"] else ""))
        if p["confidence"] and p["confidence"] != "high":
            bits.append(f"{p['confidence']} confidence")
        lines.append(f"  {i}. {text(p['title'], 110)}" + (f" ({', '.join(bits)})" if bits else ""))
        if p["fix"]:
            lines.append(f"     {text(p['fix'], 160)}")
    if cpu:
        for r in cpu_verdict_rows(a)[:5]:
            lines.append(f"  {r['self']:>11}  {r['bound']:<13} {r['pct']:>7}  {text(r['name'], 50)} [{text(r['dims'], 40)}]")
    if total > 0:
        lines.append("  " + ", ".join(f"{label} {u.pct((num(cov.get(k)) or 0.0) / total * 100)}" for label, k in (
            ("modelled", "modeled_time_us"), ("unmodelled", "unmodeled_time_us"), ("opaque", "opaque_time_us"))))
    ops = [mapping(o) for o in seq(a.get("ops"))[:5]]
    for r, name in zip(ops, u.kernel_names([o.get("name") for o in ops], 70)):
        mark = " (over roof)" if r.get("over_roof") else " (estimated)" if r.get("estimated") else ""
        ach = f" {u.pct(r.get('achievable_pct')):>7} ach." if r.get("achievable_pct") is not None else ""
        lines.append(f"  {u.us(r.get('device_time_us')):>11}  {text(r.get('bound'), 13):<13} "
                     f"{u.pct(r.get('roof_pct')):>7}{ach}  {text(name, 110)}{mark}")
    if mapping(a.get("memory")).get("recorded") is True:
        from traceana.render.memory import memory_line

        lines.append(f"  memory: {text(memory_line(a), 300)}")
    for w in shown_warnings(a)[:5]:
        lines.append(f"  warning: {w}")
    lines.append(f"report written to {out}")
    return term_lines(lines)
