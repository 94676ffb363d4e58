"""The diff (`traceana.diff/1`, from traceana/compare/runs.py) as GitHub-flavoured markdown for a PR.

Same rules as the markdown report (render/markdown.py): at most SHORT_CHARS characters by
default (MAX_CHARS with `long`), the headline first (device warning, total, by bound, the
biggest changes, % of roof changes), long lists folded into `<details>` blocks that take
whole rows while the budget lasts, every untrusted string through `md_text` (render/md.py),
names that shorten alike told apart (units.kernel_names). The small formatters here are
shared with the HTML diff so both show the same numbers the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceana import units
from traceana.units import kernel_names
from traceana.roofline.bounds import BOUNDS
from traceana.render.views import (
    fmt_signed_pct,
    fmt_delta_us,
    fmt_dims,
    fmt_int,
    fmt_pct,
    fmt_time_us,
    fmt_types,
    plural,
    short_name,
)
from traceana.document import mapping, seq
from traceana.units import num, text
from traceana.render.markdown import MAX_CHARS, SHORT_CHARS
from traceana.render.md import MD_NAME_CHARS, fold, md_text, table_row

TOP_CHANGES = 15
TOP_NAMES = 10
TOP_ROOF = 15


# ---------------------------------------------------------------- shared formatters


def _sides_us(row: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """(base µs, head µs) of a row: flat {base_us, head_us} or nested {base: {time_us}, head: {time_us}}."""
    b, h = num(row.get("base_us")), num(row.get("head_us"))
    if b is None and h is None:
        b, h = num(mapping(row.get("base")).get("time_us")), num(mapping(row.get("head")).get("time_us"))
    return b, h


def fmt_delta_pct(row: Mapping[str, Any]) -> str:
    """The relative change of a row, as a speed when both sides ran: '−25.9%, 1.35× faster',
    '+12.3%, 1.12× slower', 'new', 'gone'."""
    base, head = _sides_us(row)
    p = num(row.get("delta_pct"))
    if p is None and base and head is not None:
        p = (head - base) / base * 100
    if p is None:
        if (base or 0.0) <= 0 and (head or 0.0) > 0:
            return "new"
        if (base or 0.0) > 0 and (head or 0.0) <= 0:
            return "gone"
        return "—"
    words = units.speed(base, head)
    return f"{fmt_signed_pct(p)}, {words}" if words and words != "same" else fmt_signed_pct(p)


def change_sign(row: Mapping[str, Any]) -> str:
    """'better' when the time went down, 'worse' when it went up, '' when unchanged or unknown."""
    d = num(row.get("delta_us"))
    if d is None:
        base, head = _sides_us(row)
        d = head - base if base is not None and head is not None else None
    return "" if d is None or d == 0 else ("worse" if d > 0 else "better")


def fmt_roof_change(r: Mapping[str, Any]) -> str:
    b, h = mapping(r.get("base")).get("roof_pct"), mapping(r.get("head")).get("roof_pct")
    if num(b) is None and num(h) is None:
        return "—"
    return f"{fmt_pct(b)} → {fmt_pct(h)}"


def match_words(r: Mapping[str, Any]) -> str:
    return {"exact": "exact", "shape": "shapes changed", "name": "dtypes and shapes changed"}.get(
        text(r.get("match")), text(r.get("match"), 40))


def side_line(side: Mapping[str, Any]) -> tuple[str, str, str]:
    """(label, device, steps) of a diff side, plain text."""
    dev = mapping(side.get("device"))
    files = seq(side.get("files"))
    label = text(side.get("label"), 200) or "?"
    if len(files) > 1:
        label += f" ({len(files)} files)"
    name = text(dev.get("name"), 120) or "unknown device"
    key = text(dev.get("key"), 80)
    steps = int(num(side.get("steps")) or 0)
    return label, f"{name} ({key})" if key else name, f"{steps} steps" if steps else "no steps"


def headline_numbers(d: Mapping[str, Any]) -> dict[str, str]:
    """The total line's parts, plain text."""
    tot = mapping(d.get("total"))
    per = "per step" if mapping(d.get("normalisation")).get("per") == "step" else "in total"
    s = mapping(d.get("summary"))
    counts = (f"{plural(num(s.get('matched')) or 0, 'op signature')} matched ({fmt_int0(s.get('exact'))} exactly), "
              f"{fmt_int0(s.get('new'))} new, {fmt_int0(s.get('vanished'))} vanished; "
              f"{fmt_int0(s.get('slower'))} slower and {fmt_int0(s.get('faster'))} faster by "
              f"{num(d.get('noise_pct')) or 0:g}% or more; {fmt_int0(s.get('roof_changed'))} with "
              f"% of roof changed by more than {num(d.get('roof_threshold_pp')) or 0:g} points")
    return {"per": per, "base": fmt_time_us(tot.get("base_us")), "head": fmt_time_us(tot.get("head_us")),
            "delta": fmt_delta_us(tot.get("delta_us")), "pct": fmt_signed_pct(tot.get("delta_pct")),
            "speed": units.speed(tot.get("base_us"), tot.get("head_us")), "sign": change_sign(tot),
            "counts": counts}


def total_change(n: Mapping[str, str]) -> str:
    """The headline change, as an improvement or a regression: '−1.2 ms (1.35× faster, −25.9%)'."""
    words = n["speed"] if n.get("speed") and n.get("speed") != "same" else ""
    inner = ", ".join(x for x in (words, n["pct"] if n["pct"] != "—" else "") if x)
    return f"{n['delta']} ({inner})" if inner else n["delta"]


def gate_rows(d: Mapping[str, Any]) -> list[tuple[bool, str]]:
    """(passed, plain-text line) per --fail-on gate recorded in the diff."""
    out = []
    for g in seq(d.get("gates")):
        if not isinstance(g, Mapping):
            continue
        msgs = [text(m, 400) for m in seq(g.get("messages")) if text(m)]
        if g.get("ok") is True or not msgs:
            out.append((True, f"{text(g.get('spec'), 120)}: passed"))
        else:
            out += [(False, m) for m in msgs[:12]]
    return out


def moved_line(d: Mapping[str, Any]) -> str:
    """Kernels no op launched, per cause, and the ops they were matched to by kernel name, plain text ("" when
    no side has such kernels): 'Kernels no op launched: in CUDA/HIP graph replays 0.00 µs → 44.52 ms, ...;
    matched by kernel name to the ops that launch kernels of that name: 49.29 ms of head's (aten::mm 19.20 ms,
    ...); each op below counts them.'"""
    mv = mapping(d.get("moved"))
    causes = [mapping(c) for c in seq(mv.get("causes"))]
    causes = [c for c in causes if (num(c.get("base_us")) or 0.0) + (num(c.get("head_us")) or 0.0) > 0]
    if not causes:
        return ""
    parts = [f"{text(c.get('words'), 80)} {fmt_time_us(c.get('base_us'))} → {fmt_time_us(c.get('head_us'))}"
             for c in causes[:4]]
    out = "Kernels no op launched: " + ", ".join(parts)
    sides = []
    for side in ("head", "base"):
        got = sum(num(c.get(f"{side}_matched_us")) or 0.0 for c in causes)
        if got <= 0:
            continue
        ops: dict[str, float] = {}
        for c in causes:
            if num(c.get(f"{side}_matched_us")):
                for o, t in mapping(c.get("ops")).items():
                    ops[text(o, 200)] = ops.get(text(o, 200), 0.0) + (num(t) or 0.0)
        top = sorted(ops.items(), key=lambda kv: -kv[1])[:3]
        sides.append(f"{fmt_time_us(got)} of {side}'s"
                     + (" (" + ", ".join(f"{short_name(o)} {fmt_time_us(t)}" for o, t in top) + ")" if top else ""))
    if sides:
        out += ("; matched by kernel name to the ops that launch kernels of that name: " + "; ".join(sides)
                + ". The by-name changes count them with their op (moved, not new work)")
    return out + "."


def name_change(r: Mapping[str, Any]) -> str:
    """A by-name row's change: fmt_delta_pct, but never a speed for an op whose kernels may have gone where no op
    launched them ('−97.6%; or moved: 9.83 ms of gemm kernels no op launched in head')."""
    mm = mapping(r.get("maybe_moved"))
    if not mm:
        return fmt_delta_pct(r)
    p = num(r.get("delta_pct"))
    head = fmt_signed_pct(p) if p is not None else fmt_delta_pct(r)
    return (f"{head}; or moved: {fmt_time_us(mm.get('us'))} of {text(mm.get('class'), 30)} kernels no op launched "
            f"in {text(mm.get('side'), 8)}")


def unlinked_cell(r: Mapping[str, Any]) -> str:
    """'— → 19.20 ms (graph replay, no launch)': an op's kernels that ran with no op launching them, per side."""
    b, h = num(r.get("base_unlinked_us")), num(r.get("head_unlinked_us"))
    if not b and not h:
        return ""
    causes = ", ".join(text(c, 30).replace("_", " ") for c in seq(r.get("unlinked_causes"))[:2])
    return (f"{fmt_time_us(b) if b else '—'} → {fmt_time_us(h) if h else '—'}" + (f" ({causes})" if causes else ""))


def largest_change(d: Mapping[str, Any]) -> str:
    """The bound with the largest change and what explains it, plain text ("" without bounds)."""
    rows = bound_rows(d)
    if not rows:
        return ""
    k, r = max(rows, key=lambda kr: abs(num(kr[1].get("delta_us")) or 0.0))
    out = f"largest change: {k} {fmt_delta_us(r.get('delta_us'))} ({fmt_delta_pct(r)})"
    if k == "opaque":
        mv = moved_line(d)
        if mv:
            out += f": {mv[0].lower()}{mv[1:]}"
    return out


def fmt_int0(v: Any) -> str:
    """A count that is 0 when missing."""
    return fmt_int(v) if num(v) is not None else "0"


def roof_rows(d: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Matched ops whose % of roof moved past the threshold, most head time first."""
    rows = [r for r in seq(d.get("ops")) if isinstance(r, Mapping) and r.get("roof_changed") is True]
    return sorted(rows, key=lambda r: -(num(mapping(r.get("head")).get("time_us")) or 0.0))


def bound_rows(d: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    bb = mapping(d.get("by_bound"))
    order = [b for b in BOUNDS if b in bb] + sorted(k for k in bb if k not in BOUNDS)
    return [(text(k, 40), mapping(bb[k])) for k in order
            if (num(mapping(bb[k]).get("base_us")) or 0) or (num(mapping(bb[k]).get("head_us")) or 0)]


# ---------------------------------------------------------------- markdown


def _op_cells(r: Mapping[str, Any], name: str | None = None) -> list[str]:
    dims = fmt_dims(r.get("input_dims"))
    if r.get("match") not in (None, "exact") and "head_input_dims" in r:
        dims += " → " + fmt_dims(r.get("head_input_dims"))
    return [md_text(name if name is not None else short_name(r.get("name")), None) or "(unnamed)",
            md_text(dims, 80) or "—", md_text(fmt_types(r.get("input_types")), 40) or "—"]


def _rows(rows: list[Mapping[str, Any]], row: Any, *args: Any) -> list[str]:
    """Table rows, the names that shorten alike told apart among these rows."""
    names = kernel_names([r.get("name") for r in rows], MD_NAME_CHARS)
    return [row(r, *args, name=n) for r, n in zip(rows, names)]


def _change_row(r: Mapping[str, Any], name: str | None = None) -> str:
    b, h = mapping(r.get("base")), mapping(r.get("head"))
    return table_row([*_op_cells(r, name), fmt_time_us(b.get("time_us")), fmt_time_us(h.get("time_us")),
                 fmt_delta_us(r.get("delta_us")), fmt_delta_pct(r), fmt_roof_change(r),
                 md_text(match_words(r), 40)])


_CHANGE_HEAD = (table_row(["op", "shape", "dtype", "base", "head", "Δ", "change", "% of roof", "match"])
                + "\n|---|---|---|--:|--:|--:|--:|--:|---|")


def _lone_row(r: Mapping[str, Any], side: str, name: str | None = None) -> str:
    s = mapping(r.get(side))
    return table_row([*_op_cells(r, name), fmt_time_us(s.get("time_us")), fmt_pct(s.get("share_pct")),
                 fmt_pct(s.get("roof_pct")), md_text(s.get("bound"), 20) or "—"])


def _headline(d: Mapping[str, Any], top: int) -> list[list[str]]:
    b, h = mapping(d.get("base")), mapping(d.get("head"))
    bl, bd, bs = side_line(b)
    hl, hd, hs = side_line(h)
    n = headline_numbers(d)
    head = [f"# traceana diff: {md_text(bl, 120)} → {md_text(hl, 120)}", ""]
    if text(d.get("device_note")):
        head += [f"> **Warning:** {md_text(d.get('device_note'), 400)}", ""]
    head += [f"**Device time {n['per']}:** {n['base']} → {n['head']}: **{total_change(n)}**", "",
             f"**Base:** {md_text(bl, 120)} on {md_text(bd, 200)}, {bs} \\",
             f"**Head:** {md_text(hl, 120)} on {md_text(hd, 200)}, {hs}", "",
             f"*{md_text(mapping(d.get('normalisation')).get('note'), 400)}* {md_text(n['counts'], 600)}."]
    sections = [head]
    gates = gate_rows(d)
    if gates:
        specs = [g for g in seq(d.get("gates")) if isinstance(g, Mapping)]
        failed = sum(1 for g in specs if g.get("ok") is not True and seq(g.get("messages")))
        title = f"## Gates: {failed} of {len(specs)} tripped" if failed else "## Gates: all passed"
        sections.append([title, "", *(f"- {'✅' if ok else '❌'} {md_text(line, 400)}" for ok, line in gates)])
    bounds = bound_rows(d)
    if bounds:
        lines = [f"## Time by bound ({n['per']})", "", table_row(["bound", "base", "head", "Δ", "change"]),
                 "|---|--:|--:|--:|--:|"]
        lines += [table_row([md_text(k, 40), fmt_time_us(r.get("base_us")), fmt_time_us(r.get("head_us")),
                        fmt_delta_us(r.get("delta_us")), fmt_delta_pct(r)]) for k, r in bounds]
        mv = moved_line(d)
        if mv:
            lines += ["", md_text(mv, 1200)]
        sections.append(lines)
    ops = [r for r in seq(d.get("ops")) if isinstance(r, Mapping)]
    if ops and top > 0:
        sections.append([f"## Biggest changes: {min(top, len(ops))} of {plural(len(ops), 'matched op signature')}", "",
                         _CHANGE_HEAD, *_rows(ops[:top], _change_row)])
    names = [r for r in seq(d.get("by_name")) if isinstance(r, Mapping)]
    if names and top > 0:
        k = min(TOP_NAMES, top, len(names))
        unlinked = any(num(r.get("base_unlinked_us")) or num(r.get("head_unlinked_us")) for r in names[:k])
        lines = [f"## Biggest changes by op name (all signatures summed, {k} of {len(names):,})", "",
                 table_row(["op", "base", "head", "Δ", "change", *(["of it, kernels no op launched"] if unlinked
                                                                   else [])]),
                 "|---|--:|--:|--:|--:|" + ("---|" if unlinked else "")]
        lines += [table_row([md_text(n, None) or "(unnamed)", fmt_time_us(r.get("base_us")),
                             fmt_time_us(r.get("head_us")), fmt_delta_us(r.get("delta_us")), name_change(r),
                             *([md_text(unlinked_cell(r), 120)] if unlinked else [])])
                  for r, n in zip(names[:k], kernel_names([r.get("name") for r in names[:k]], MD_NAME_CHARS))]
        sections.append(lines)
    roof = roof_rows(d)
    if roof and top > 0:
        thr = num(d.get("roof_threshold_pp")) or 0
        lines = [f"## % of roof changed by more than {thr:g} points ({min(top, len(roof))} of {len(roof):,})", "",
                 _CHANGE_HEAD, *_rows(roof[:top], _change_row)]
        sections.append(lines)
    return sections


def _folded(d: Mapping[str, Any], budget: int, top: int) -> str:
    """Warnings, new, vanished and all matched ops, folded; each list gets a fair share of
    the budget (sized in priority order: matched, new, vanished), shown in a fixed order."""
    budget -= 20
    warns = [f"- {md_text(w, 300, line_start=True)}" for w in seq(d.get("warnings")) if text(w)]
    warn_block = fold(f"{len(warns):,} warnings", warns, budget)
    budget -= len(warn_block) + 2
    more = lambda n: f"*… {n:,} more in the JSON diff.*"  # noqa: E731
    lone_head = (table_row(["op", "shape", "dtype", "time", "% of device", "% of roof", "bound"])
                 + "\n|---|---|---|--:|--:|--:|---|")
    builders = []
    ops = [r for r in seq(d.get("ops")) if isinstance(r, Mapping)]
    if len(ops) > top:
        builders.append(("matched", lambda cap: fold(
            f"All {plural(len(ops), 'matched op signature')}", _rows(ops, _change_row), cap,
            head=_CHANGE_HEAD, more=more)))
    for key, side, what in (("new", "head", "new in head"), ("vanished", "base", "gone from base")):
        rows = [r for r in seq(d.get(key)) if isinstance(r, Mapping)]
        rows.sort(key=lambda r, s=side: -(num(mapping(r.get(s)).get("time_us")) or 0.0))
        builders.append((key, lambda cap, rows=rows, side=side, what=what: fold(
            f"{plural(len(rows), 'op signature')} {what}", _rows(rows, _lone_row, side), cap,
            head=lone_head, more=more)))
    blocks: dict[str, str] = {}
    for i, (key, build) in enumerate(builders):
        blocks[key] = build(budget // (len(builders) - i))
        budget -= len(blocks[key]) + 2
    parts = [b for b in (warn_block, blocks.get("new"), blocks.get("vanished"), blocks.get("matched")) if b]
    return "\n\n".join(["## Details", *parts]) if parts else ""


def render_diff_markdown(diff: Mapping[str, Any], long: bool = False) -> str:
    """The diff as markdown: at most SHORT_CHARS characters, or with `long` under MAX_CHARS, ending with
    traceana's marker line."""
    from traceana.output.ownership import MD_MARKER, stamp_markdown

    d = mapping(diff)
    limit = (MAX_CHARS if long else SHORT_CHARS) - len(MD_MARKER) - 2
    tops = (TOP_CHANGES, 10, 5, 3, 0) if long else (10, 5, 3, 0)
    for top in tops:
        core = "\n\n".join("\n".join(s) for s in _headline(d, top) if s)
        if len(core) <= limit - (2000 if long else 600):
            break
    detail = _folded(d, limit - len(core) - 10 - (0 if long else 160), top)
    out = core + (f"\n\n{detail}" if detail else "")
    if not long:
        out += ("\n\n<sub>The long form (`--long`), the HTML and the JSON diffs have every change.</sub>")
    out += "\n"
    if len(out) > limit:  # cannot happen with the caps above; a last guarantee
        cut = out.rfind("\n\n", 0, limit - 40)
        out = out[: max(cut, 0)] + "\n\n*(diff truncated)*\n"
    return stamp_markdown(out)
