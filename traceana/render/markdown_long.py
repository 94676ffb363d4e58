"""The long markdown report (`--long`): everything a PR comment can hold, under MAX_CHARS
characters (GitHub's comment limit is 65,536); the default is the short one (markdown.py).

Layout: the headline (verdict, device and peaks, where the time went, findings with their
savings, the top op signatures, coverage, the first warnings), then the long detail folded
into `<details>` blocks (explanations, every op signature that fits, the remaining warnings,
coverage by cause / by op). The headline is sized first; the folded blocks then get what is
left of the budget, whole rows at a time, and say how many rows did not fit. A block is
never cut in the middle, so tables, fences and `<details>` tags always stay balanced.

Every string from the analysis goes through `md_text` (render/md.py) or into a code fence
longer than any backtick run it contains.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from traceana.roofline.bounds import BOUNDS
from traceana.document import bound_of, by_bound, mapping, seq, share
from traceana.render.views import (
    cpu_roof_lines,
    cpu_rows,
    cpu_verdict_rows,
    finding_tags,
    over_roof_mark,
    plural,
    profile_sentence,
    projection_line,
    fmt_bytes,
    fmt_dims,
    fmt_int,
    fmt_pct,
    fmt_si,
    fmt_sig,
    fmt_time_us,
    fmt_types,
    shown_warnings,
    verdict,
)
from traceana.units import num, text
from traceana.render.first import plan, saving_text, terms
from traceana.units import kernel_names
from traceana.render.modules import class_items, markdown_items, where
from traceana.render.memory import memory_line, memory_markdown
from traceana.render.md import MD_NAME_CHARS, code_block, fold, md_text, size, table_row

#: GitHub rejects comments longer than 65,536 characters; stay clear of it.
MAX_CHARS = 65_000
TOP_OPS = 15
MAX_FINDINGS = 10
MAX_EXPLANATIONS = 8
MAX_LINES = 20
#: A finding's text and an explanation line are cut here: long enough to keep the advice, which
#: comes last (10 findings x 1,200 characters stay far inside MAX_CHARS).
FINDING_CHARS = 1200
LINE_CHARS = 800
#: Warnings shown before the fold; the rest go into a <details> block.
SHOWN_WARNINGS = 3
MAX_WARNINGS = 200
MAX_PEAKS = 16
MAX_COVERAGE_ROWS = 50

# ---------------------------------------------------------------- headline


def _device(dev: Mapping[str, Any], image: str | None) -> list[str]:
    name = md_text(dev.get("name"), 120) or "unknown device"
    key = md_text(dev.get("key"), 80)
    peaks = [
        f"{md_text(k, 20)} {fmt_sig(v)}"
        for k, v in sorted(mapping(dev.get("peak_tflops")).items(), key=lambda kv: text(kv[0]))
        if num(v) is not None
    ]
    if len(peaks) > MAX_PEAKS:
        peaks = peaks[:MAX_PEAKS] + [f"… {len(peaks) - MAX_PEAKS} more"]
    dram = num(dev.get("dram_gbps"))
    out = [
        f"**Device:** {name} (table row: {key or 'unknown'})",
        f"**Peaks:** {', '.join(peaks) + ' TFLOP/s' if peaks else 'unknown'} · "
        f"**DRAM:** {fmt_sig(dram) + ' GB/s' if dram is not None else 'unknown'}"
        + (f" · source: {md_text(dev.get('source'), 80)}" if text(dev.get("source")) else ""),
    ]
    if mapping(dev.get("profile")):
        out.append(f"**Profile:** {md_text(profile_sentence(mapping(dev.get('profile'))), 600)}")
    lines = [" \\\n".join(out)]
    if image:
        lines += ["", _image(image)]
    return lines


def _image(image: str) -> str:
    """The roofline chart the user named (--md-image): our markdown, its URL percent-encoded."""
    return f"![roofline chart](<{quote(image, safe=':/?#@!$&*+,;=%~._-')}>)"


def _breakdown(analysis: Mapping[str, Any]) -> list[str]:
    """Busy time by bound, for an analysis without a ledger (its terms say it otherwise)."""
    parts, total = by_bound(analysis)
    if not parts or not total or terms(analysis):  # a CPU-only trace: no device time, no roofline talk
        return []
    lines = ["## Time by bound", "", table_row(["bound", "time", "%"]), "|---|--:|--:|"]
    for b in BOUNDS:
        if b in parts:
            lines.append(table_row([b, fmt_time_us(parts[b]), fmt_pct(share(parts[b], total))]))
    lines.append(table_row(["**total**", f"**{fmt_time_us(total)}**", ""]))
    return lines


def _lead_table(a: Mapping[str, Any]) -> list[str]:
    rows = terms(a)
    if not rows:
        cpu = cpu_rows(a)
        if not cpu:
            return []
        lines = ["## CPU ops by self time", "", table_row(["op", "calls", "self", "total"]), "|---|--:|--:|--:|"]
        return lines + [table_row([md_text(n, 80), c, st, tt]) for n, c, st, tt in cpu] + _cpu_verdicts(a)
    return ["## Where the time went (primary device's span, each µs once)", "",
            table_row(["part", "time", "% of span"]), "|---|--:|--:|",
            *(table_row([md_text(t["label"], 80), t["time"], t["pct"]]) for t in rows)]


def _cpu_verdicts(a: Mapping[str, Any], n: int = 12) -> list[str]:
    """A CPU-only trace's op signatures against the CPU roofs: the roofs, a table, the verdicts."""
    rows = cpu_verdict_rows(a)
    if not rows:
        return []
    lines = ["", "## CPU roofline verdicts", ""] + [md_text(x, 700) + "  " for x in cpu_roof_lines(a)]
    lines += ["", table_row(["op", "shape", "dtype", "calls", "self / call", "GFLOP/s", "GB/s", "% of roof", "bound"]),
              "|---|---|---|--:|--:|--:|--:|--:|---|"]
    for r in rows[:n]:
        lines.append(table_row([md_text(r["name"], 80), md_text(r["dims"], 60) or "—",
                                md_text(r["types"], 40) or "—",
                                r["calls"], r["per_call"], r["gflops"], r["gbps"], r["pct"], r["bound"]]))
    lines += [""] + [f"- **{md_text(r['name'], 80)}** [{md_text(r['dims'], 60)}]: {md_text(r['text'], 600)}"
                     for r in rows[:min(n, 8)]]
    return lines


def _ops_table(ops: list[Mapping[str, Any]], n: int) -> list[str]:
    if not ops or n <= 0:
        return []
    shown = ops[:n]
    ach = any("achievable_pct" in op for op in shown)  # a device profile was given
    at = any(where(op) for op in shown)  # the trace recorded modules or source lines
    lines = [
        f"## Top {len(shown)} of {plural(len(ops), 'op signature')} by device time",
        "",
        table_row(["op", "shape", "dtype", "time", "% of roof", *(["% of achievable"] if ach else []), "bound",
                   *(["module · code"] if at else [])]),
        "|---|---|---|--:|--:|" + ("--:|" if ach else "") + "---|" + ("---|" if at else ""),
    ]
    for op, name in zip(shown, kernel_names([op.get("name") for op in shown], MD_NAME_CHARS)):
        lines.append(table_row([
            md_text(name, None) or "(unnamed)",
            md_text(fmt_dims(op.get("input_dims"), None, True), 60) or "—",
            md_text(fmt_types(op.get("input_types")), 40) or "—",
            fmt_time_us(op.get("device_time_us")),
            _pct_cell(op),
            *([fmt_pct(op.get("achievable_pct"))] if ach else []),
            bound_of(op),
            *([md_text(where(op), 160) or "—"] if at else []),
        ]))
    return lines


def _pct_cell(op: Mapping[str, Any]) -> str:
    """% of roof, with what makes it less than a measurement: an estimate, or over the roof."""
    marks = [m for m in (over_roof_mark(op), "estimated" if op.get("estimated") is True else "") if m]
    pct = fmt_pct(op.get("roof_pct"))
    return f"{pct} ({', '.join(dict.fromkeys(marks))})" if marks and op.get("roof_pct") is not None else pct


def _findings(analysis: Mapping[str, Any], n: int) -> list[str]:
    items = [f for f in seq(analysis.get("findings")) if isinstance(f, Mapping)]
    if not items or n <= 0:
        return []
    lines = ["## Findings", ""]
    proj = projection_line(analysis)
    if proj:
        lines += [md_text(proj, 600), ""]
    alone = {p["findings"][0]: p["saving_text"] for p in plan(analysis) if len(p["findings"]) == 1}
    found = [f for f in seq(analysis.get("findings"))]
    for f in items[:n]:
        saving = num(f.get("saving_us"))
        tags = finding_tags(f)
        said = alone.get(next((i for i, g in enumerate(found) if g is f), -1)) or saving_text(saving, None, 0)
        bits = ([said] if saving and f.get("lever") is not False else []) + tags
        tail = f" ({', '.join(bits)})" if bits else ""
        at = where(f, 4)
        lines.append(f"- **{md_text(f.get('title'), 160)}**{tail}: {md_text(f.get('text'), FINDING_CHARS)}"
                     + (f" *(in {md_text(at, 300)})*" if at else ""))
    if len(items) > n:
        lines.append(f"- … and {len(items) - n:,} more findings (see the HTML or JSON report)")
    return lines


def _coverage(analysis: Mapping[str, Any]) -> list[str]:
    cov = mapping(analysis.get("coverage"))
    device = cov.get("device_time_us")
    if num(device) is None or (not num(device) and analysis.get("cpu")):
        return []
    bits = [f"device {fmt_time_us(device)}"]
    for label, key in (("attributed", "attributed_time_us"), ("modelled", "modeled_time_us"),
                       ("opaque", "opaque_time_us"), ("unmodelled", "unmodeled_time_us")):
        if num(cov.get(key)) is not None:
            pct = fmt_pct(share(cov.get(key), device))
            bits.append(f"{label} {fmt_time_us(cov.get(key))} ({pct})")
    out = ["## Coverage", "", " · ".join(bits)]
    capture = mapping(mapping(analysis.get("trace")).get("capture"))
    if text(capture.get("note")):
        out += ["", f"Graph capture: {md_text(capture.get('note'), 400)}"]
    return out


def _warning_items(analysis: Mapping[str, Any]) -> list[str]:
    dev_notes = [n for n in seq(mapping(analysis.get("device")).get("notes")) if text(n)]
    items = shown_warnings(analysis)
    items += [n for n in dev_notes if n not in items]
    return [f"- {md_text(w, 300, line_start=True)}" for w in items[:MAX_WARNINGS]]


def _headline(a: Mapping[str, Any], top: int, findings: int, image: str | None) -> list[list[str]]:
    trace = mapping(a.get("trace"))
    ops = [o for o in seq(a.get("ops")) if isinstance(o, Mapping)]
    head = [f"# traceana: {md_text(trace.get('file'), 120) or 'trace'}", "",
            f"**Where the time went:** {md_text(verdict(a), 900)}", ""]
    mem = memory_line(a)
    if mem:
        head += [f"**Memory:** {md_text(mem, 700)}", ""]
    warnings = _warning_items(a)
    warn = ["## Warnings", "", *warnings[:SHOWN_WARNINGS]] if warnings else []
    return [
        head + ([] if a.get("cpu") else _device(mapping(a.get("device")), image)),
        _lead_table(a),
        _breakdown(a),
        memory_markdown(a),
        _findings(a, findings),
        _ops_table(ops, top),
        _coverage(a),
        warn,
    ]


# ---------------------------------------------------------------- folded detail


def _explanation_items(a: Mapping[str, Any]) -> list[str]:
    out = []
    for e in [e for e in seq(a.get("explanations")) if isinstance(e, Mapping)][:MAX_EXPLANATIONS]:
        body = [text(x, LINE_CHARS).replace("\r", " ") for x in seq(e.get("lines"))[:MAX_LINES]]
        body = [ln for x in body for ln in x.split("\n")][:MAX_LINES]
        item = f"**{md_text(e.get('title'), 160) or md_text(e.get('op'), 60) or 'op'}**"
        if body:
            item += "\n\n" + code_block(body)
        out.append(item)
    return out


def _full_table(ops: list[Mapping[str, Any]], budget: int) -> str:
    header = table_row(["#", "op", "shape", "dtype", "calls", "total", "mean", "FLOPs/call", "bytes/call",
                   "TFLOP/s", "GB/s", "% of roof", "bound"])
    align = "|--:|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"
    rows = []
    names = kernel_names([op.get("name") for op in ops], MD_NAME_CHARS)
    for i, op in enumerate(ops, 1):
        mean = num(op.get("mean_time_us"))
        if mean is None and num(op.get("count")):
            mean = (num(op.get("device_time_us")) or 0.0) / num(op.get("count"))  # type: ignore[operator]
        rows.append(table_row([
            str(i), md_text(names[i - 1], None) or "(unnamed)",
            md_text(fmt_dims(op.get("input_dims"), None, True), 80) or "—",
            md_text(fmt_types(op.get("input_types")), 40) or "—",
            fmt_int(op.get("count")), fmt_time_us(op.get("device_time_us")), fmt_time_us(mean),
            fmt_si(op.get("flops")), fmt_bytes(op.get("bytes")), fmt_sig(op.get("achieved_tflops")),
            fmt_sig(op.get("achieved_gbps")), fmt_pct(op.get("roof_pct")), bound_of(op),
        ]))
    return fold(f"All {plural(len(ops), 'op signature')}", rows, budget, head=header + "\n" + align,
                    more=lambda n: f"*… {plural(n, 'more op signature')} do not fit in a comment; "
                                   "the HTML and JSON reports have all of them.*")


def _coverage_detail(a: Mapping[str, Any], budget: int) -> str:
    cov = mapping(a.get("coverage"))
    device = cov.get("device_time_us")
    rows = []
    for kind, key in (("opaque", "opaque_by_cause"), ("unmodelled", "unmodeled_by_op")):
        items = sorted(((text(k), num(v)) for k, v in mapping(cov.get(key)).items()),
                       key=lambda kv: (-(kv[1] or 0.0), kv[0]))
        for k, v in items[:MAX_COVERAGE_ROWS]:
            rows.append(table_row([kind, md_text(k.replace("_", " ") if kind == "opaque" else k, 100) or "—",
                              fmt_time_us(v), fmt_pct(share(v, device))]))
    head = table_row(["kind", "cause or op", "time", "% of device"]) + "\n|---|---|--:|--:|"
    return fold("Opaque time by cause, unmodelled time by op", rows, budget, head=head,
                    more=lambda n: f"*… and {n:,} more in the HTML report.*")


def _folded(a: Mapping[str, Any], budget: int) -> tuple[str, str]:
    """(more warnings block, detail section). Shares of the budget: explanations up to 40%,
    coverage detail up to 10%, the warnings what they need up to 15%, the op table the rest;
    the warnings then take whatever the table left."""
    ops = [o for o in seq(a.get("ops")) if isinstance(o, Mapping)]
    rest = _warning_items(a)[SHOWN_WARNINGS:]
    expl = _explanation_items(a)
    budget -= 20  # the "## Details" heading
    total = budget

    def warnings_block(cap: int) -> str:
        return fold(f"{len(rest):,} more warnings", rest, cap,
                    more=lambda n: f"*… {n:,} more in the JSON report.*")

    why = fold(f"Why: the {plural(len(expl), 'op signature')} with the most device time, explained",
               expl, int(total * 0.4), sep="\n\n")
    budget -= len(why) + 2
    cov = _coverage_detail(a, int(total * 0.1))
    budget -= len(cov) + 2
    mods = modules_block(a, int(total * 0.15), 80, 0.5)
    budget -= len(mods) + 2
    table = ""
    if len(ops) > TOP_OPS:
        reserve = min(len(warnings_block(total)), int(total * 0.15)) + 2
        table = _full_table(ops, budget - reserve)
        budget -= len(table) + 2
    warn_block = warnings_block(budget)
    parts = [p for p in (why, mods, table, cov) if p]
    detail = "\n\n".join(["## Details", *parts]) if parts else ""
    return warn_block, detail


def modules_block(a: Mapping[str, Any], budget: int, limit: int, min_pct: float) -> str:
    """The by-module tree as an indented list in a <details> block (the modules with the most device time),
    or the one line saying how to record modules when the trace has none."""
    m = mapping(a.get("modules"))
    if not m or (m.get("source") and not num(mapping(m.get("total")).get("time_us"))):
        return ""
    items = [f"{'  ' * d}- " + (md_text(n, 200) if mod else f"*{md_text(n, 200)}*") + f": {md_text(c, 300)}"
             for d, n, c, mod in markdown_items(a, limit, min_pct)]
    note = md_text(m.get("note"), 400) + (f"; {md_text(m.get('backward'), 300)}" if m.get("backward") else "")
    if not items:  # one visible line: what the trace lacks and how to record it
        line = f"**Modules and source lines:** {note}."
        return line if size(line) <= budget else ""
    classes = class_items(a)
    head = note + "."
    if classes:  # what kind of layer the time goes to, before where
        head += ("\n\nBy layer type (all instances together; a layer includes its sublayers): "
                 + " · ".join(f"**{md_text(c, 140)}** {md_text(f, 200)}" for c, f in classes))
    what = "CPU self time" if m.get("time") == "cpu_self" else "device time"
    return fold(f"By module: {what}, forward / backward (modules over {min_pct:g}% of it; the HTML and JSON "
                "have the whole tree)", items, budget, head=head + "\n",
                more=lambda n: f"*… {n:,} more in the HTML and JSON reports.*")


def render_long(analysis: Mapping[str, Any], image: str | None = None) -> str:
    """The long markdown report (< MAX_CHARS characters). `image`: a URL or path of the roofline
    chart (e.g. the file `traceana report --svg` wrote) to show under the device line."""
    a = mapping(analysis)
    for top, nfind in ((TOP_OPS, MAX_FINDINGS), (10, 5), (5, 3), (3, 1), (1, 0)):
        sections = _headline(a, top, nfind, image)
        core = "\n\n".join("\n".join(s) for s in sections if s)
        if len(core) <= MAX_CHARS - 2000:
            break
    warn_block, detail = _folded(a, MAX_CHARS - len(core) - 10)
    out = core + (f"\n\n{warn_block}" if warn_block else "") + (f"\n\n{detail}" if detail else "") + "\n"
    if len(out) > MAX_CHARS:  # cannot happen with the caps above; a last guarantee
        cut = out.rfind("\n\n", 0, MAX_CHARS - 40)
        out = out[: max(cut, 0)] + "\n\n*(report truncated)*\n"
    return out
