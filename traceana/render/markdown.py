"""The markdown report for a pull request: at most SHORT_CHARS bytes (UTF-8) by default.

What a reviewer reads without clicking: the device line, the ledger's sentence of where the
time went, "Do this first" (the plan's levers, each with its saving and the span after it),
and the ten op signatures with the most device time. Everything else goes into `<details>`
blocks, in this order, while the budget lasts: every term of the span, the findings grouped
as in the HTML report (title, fix, saving, confidence), warnings, coverage, the top ops'
explanations. A block holds whole items only, so tables, fences and `<details>` tags stay
balanced; a block that does not fit is left out and the closing line says where the rest is.

`long=True` (`--long`) gives the long form instead (render/markdown_long.py, up to 65,000
characters). Every string from the analysis goes through md_text (render/md.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceana.document import bound_of, mapping, seq
from traceana.render.views import fmt_dims, fmt_pct, fmt_time_us, fmt_types, plural
from traceana.units import num
from traceana.render.views import cpu_verdict_rows, profile_sentence, shown_warnings
from traceana.units import text
from traceana.render.views import verdict
from traceana.render.first import cards, cpu_only, device_line, plan, sentence, terms
from traceana.render.markdown_long import MAX_CHARS, _coverage, _explanation_items, _image, _pct_cell, render_long
from traceana.render.markdown_long import modules_block
from traceana.render.memory import memory_line
from traceana.render.md import MD_NAME_CHARS, fit, fold, md_text, size, table_row
from traceana.output.ownership import MD_MARKER
from traceana.units import kernel_names

__all__ = ["MAX_CHARS", "SHORT_CHARS", "md_text", "render_markdown"]

#: The default report's limit: a PR comment a reviewer reads, not an archive.
SHORT_CHARS = 8_000
TOP_OPS = 10
#: Room kept for the closing line.
_CLOSING = 200


def render_markdown(analysis: Mapping[str, Any], image: str | None = None, long: bool = False) -> str:
    """The markdown report: the PR comment (<= SHORT_CHARS bytes of UTF-8), or with `long` the long
    form (< MAX_CHARS). `image`: a URL or path of the roofline chart to show under the device line."""
    a = mapping(analysis)
    if long:
        return render_long(a, image)
    limit = SHORT_CHARS - size(MD_MARKER) - 2  # the file ends with the marker line (render.render stamps it)
    for top, fix_chars in ((TOP_OPS, 300), (5, 200), (3, 120), (0, 80)):
        core = "\n\n".join(b for b in _headline(a, image, top, fix_chars) if b)
        if size(core) <= limit - _CLOSING - 400:
            break
    closing = ("<sub>The long form (`--long`), the HTML and the JSON reports have every finding, "
               "op signature and explanation.</sub>")
    budget = limit - size(core) - size(closing) - 8
    out = core
    if budget > 0:
        folded = fit(_folded(a, budget), budget)
        if folded:
            out += "\n\n" + folded
    out += "\n\n" + closing + "\n"
    if size(out) > limit:  # only a pathological headline gets here: cut at a block boundary
        cut = out.encode("utf-8", "surrogatepass")[: limit - 40].decode("utf-8", "ignore").rfind("\n\n")
        out = out[: max(cut, 0)] + "\n\n*(report truncated)*\n"
    return out


# ---------------------------------------------------------------- headline


def _headline(a: Mapping[str, Any], image: str | None, top: int, fix_chars: int) -> list[str]:
    file = md_text(mapping(a.get("trace")).get("file"), 120) or "trace"
    cpu = cpu_only(a)
    head = [f"# traceana: {file}", ""]
    prof = mapping(mapping(a.get("device")).get("profile"))
    head.append(f"**Device:** {md_text(device_line(a), 400)}"
                + (" \\" if (image and not cpu) or prof else ""))
    if prof:
        head.append(f"**Profile:** {md_text(profile_sentence(prof), 600)}" + (" \\" if image and not cpu else ""))
    if image and not cpu:
        head.append(_image(image))
    head.append("")
    head.append(f"**Where the time went:** {md_text(sentence(a) or verdict(a), 1200)}")
    mem = memory_line(a)
    if mem:
        head += ["", f"**Memory:** {md_text(mem, 700)}"]
    return ["\n".join(head), _plan(a, fix_chars), _cpu(a, top) if cpu else _ops(a, top)]


def _cpu(a: Mapping[str, Any], n: int) -> str:
    """A CPU-only trace: its op signatures with the most self time, judged against the CPU's roofs."""
    verdicts = cpu_verdict_rows(a)[:n]
    if not verdicts:
        return ""
    total = num(mapping(mapping(a.get("cpu")).get("roofline")).get("signatures"))
    lines = [f"### Top {len(verdicts)} of {plural(total or len(verdicts), 'op signature')} by CPU self time", "",
             table_row(["op", "shape", "calls", "self", "self / call", "% of roof", "bound"]),
             "|---|---|--:|--:|--:|--:|---|",
             *(table_row([md_text(r["name"], 60), md_text(r["dims"], 60) or "—", r["calls"], r["self"], r["per_call"],
                          r["pct"], md_text(r["bound"], 20)]) for r in verdicts)]
    return "\n".join(lines)


def _plan(a: Mapping[str, Any], fix_chars: int) -> str:
    levers = plan(a)
    if not levers:
        return ""
    lines = ["### Do this first", ""]
    for i, p in enumerate(levers, 1):
        bits = [p["saving_text"]] if p["saving_text"] else []
        if p["after"]:
            bits.append(f"span after it{'' if i == 1 else ' and the ones above'}: {p['after']}"
                        + (f" ({p['after_pct']} shorter)" if p["after_pct"] else "")
                        + (f", median step {p['step']} → ≈ {p['step_after']}" if p["step_after"] else ""))
        if p["confidence"]:
            bits.append(f"{md_text(p['confidence'], 12)} confidence")
        lines.append(f"{i}. **{md_text(p['title'], 200)}**" + (f" — {'; '.join(bits)}" if bits else "")
                     + (" \\" if p["fix"] else ""))
        if p["fix"]:
            lines.append(f"   {md_text(p['fix'], fix_chars)}")
    return "\n".join(lines)


def _ops(a: Mapping[str, Any], n: int) -> str:
    ops = [o for o in seq(a.get("ops")) if isinstance(o, Mapping)]
    if not ops or n <= 0:
        return ""
    shown = ops[:n]
    ach = any("achievable_pct" in op for op in shown)  # a device profile was given
    lines = [f"### Top {len(shown)} of {plural(len(ops), 'op signature')} by device time", "",
             table_row(["op", "shape", "dtype", "time", "% of roof", *(["% of achievable"] if ach else []), "bound"]),
             "|---|---|---|--:|--:|" + ("--:|" if ach else "") + "---|"]
    for op, name in zip(shown, kernel_names([o.get("name") for o in shown], MD_NAME_CHARS)):
        lines.append(table_row([md_text(name, None) or "(unnamed)",
                                md_text(fmt_dims(op.get("input_dims"), None, True), 60) or "—",
                                md_text(fmt_types(op.get("input_types")), 30) or "—",
                                fmt_time_us(op.get("device_time_us")), _pct_cell(op),
                                *([fmt_pct(op.get("achievable_pct"))] if ach else []), bound_of(op)]))
    return "\n".join(lines)


# ---------------------------------------------------------------- folded


def _folded(a: Mapping[str, Any], budget: int) -> list[str]:
    """The <details> blocks in priority order, each as large as what is left allows."""
    blocks: list[str] = []
    left = budget

    def add(block: str) -> None:
        nonlocal left
        if block and size(block) + 2 <= left:
            blocks.append(block)
            left -= size(block) + 2

    mods = modules_block(a, min(left, 1800), 10, 3.0)  # its room is kept: the line on how to record stacks
    left -= size(mods) + 2 if mods else 0
    rows = terms(a)
    add(fold(f"Where the time went: every µs of {'the busiest CPU thread' if cpu_only(a) else 'the primary device'}'s "
             "span, once",
             [table_row([md_text(t["label"], 80), t["time"], t["pct"]]) for t in rows], left,
             head=table_row(["part", "time", "% of span"]) + "\n|---|--:|--:|"))
    cs = cards(a)
    add(fold(f"Findings: {plural(len(cs), 'group')}, largest saving first", [_card(c) for c in cs], left,
             more=lambda n: f"*… {plural(n, 'more group')} in the long form.*"))
    if mods:
        blocks.append(mods)
    warns = [f"- {md_text(w, 300, line_start=True)}" for w in _warnings(a)]
    add(fold(f"{plural(len(warns), 'warning')}", warns, left, more=lambda n: f"*… {n:,} more in the JSON report.*"))
    cov = _coverage(a)
    if cov:
        add(fold("Coverage", ["\n".join(cov[2:])], left))
    expl = _explanation_items(a)
    add(fold(f"Why: the {plural(len(expl), 'op signature')} with the most device time, explained", expl, left,
             sep="\n\n"))
    return blocks


def _card(c: Mapping[str, Any]) -> str:
    bits = [c["saving_text"]] if c["saving_text"] else ["note"]
    if c["confidence"]:
        bits.append(f"{md_text(c['confidence'], 12)} confidence")
    if c["estimated"]:
        bits.append("estimated")
    if c["count"] > 1:
        bits.append(f"{c['count']} findings")
    line = f"- **{md_text(c['title'], 200)}** ({', '.join(bits)})"
    return line + (f": {md_text(c['fix'], 300)}" if c["fix"] else "")


def _warnings(a: Mapping[str, Any]) -> list[Any]:
    items = shown_warnings(a)
    return items + [n for n in seq(mapping(a.get("device")).get("notes")) if text(n) and n not in items]

