"""The diff (`traceana.diff/1`) as one self-contained HTML page (templates/diff.html.j2).

Data first, page second, as in render/html.py: `build_diff_view` turns the untrusted diff
into display strings (tested without HTML); `render_diff_html` pours them into the template,
which reuses the report's stylesheet (report.css, pasted inline). Jinja autoescaping is the
only way a string reaches the page; the page has no script.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from traceana.render.views import fmt_dims, fmt_pct, fmt_time_us, fmt_types, short_name
from traceana.document import mapping, seq
from traceana.units import num, text
from traceana.render.diff_markdown import (
    bound_rows,
    moved_line,
    name_change,
    unlinked_cell,
    change_sign,
    total_change,
    fmt_delta_pct,
    gate_rows,
    fmt_delta_us,
    fmt_roof_change,
    headline_numbers,
    match_words,
    roof_rows,
    side_line,
)

#: Each table shows at most this many rows (the JSON diff has all of them).
MAX_ROWS = 2000


def render_diff_html(diff: Mapping[str, Any]) -> str:
    """The diff as a self-contained HTML page (no network, no script)."""
    from traceana.render.templates import environment

    return environment().get_template("diff.html.j2").render(view=build_diff_view(diff))


def _sign(row: Mapping[str, Any]) -> str:
    """The CSS class of a change: 'better' (time went down), 'worse' (up), '' (neither)."""
    return change_sign(row)


def _op(r: Mapping[str, Any]) -> dict[str, str]:
    dims = fmt_dims(r.get("input_dims"), 300)
    if r.get("match") not in (None, "exact") and "head_input_dims" in r:
        dims += " → " + fmt_dims(r.get("head_input_dims"), 300)
    return {"name": short_name(r.get("name")) or "(unnamed)", "full": text(r.get("name"), 2000), "dims": dims,
            "types": fmt_types(r.get("input_types"))}


def _change(r: Mapping[str, Any]) -> dict[str, str]:
    b, h = mapping(r.get("base")), mapping(r.get("head"))
    return {**_op(r), "base": fmt_time_us(b.get("time_us")), "head": fmt_time_us(h.get("time_us")),
            "delta": fmt_delta_us(r.get("delta_us")), "pct": fmt_delta_pct(r), "sign": _sign(r),
            "roof": fmt_roof_change(r), "match": match_words(r),
            "bound": f"{text(b.get('bound'), 20) or '—'} → {text(h.get('bound'), 20) or '—'}"}


def _lone(r: Mapping[str, Any], side: str) -> dict[str, str]:
    s = mapping(r.get(side))
    return {**_op(r), "time": fmt_time_us(s.get("time_us")), "share": fmt_pct(s.get("share_pct")),
            "roof": fmt_pct(s.get("roof_pct")), "bound": text(s.get("bound"), 20) or "—"}


def _table(rows: list[Any], fn: Any, *args: Any) -> dict[str, Any]:
    rows = [r for r in rows if isinstance(r, Mapping)]
    return {"rows": [fn(r, *args) for r in rows[:MAX_ROWS]], "total": len(rows)}


def build_diff_view(diff: Mapping[str, Any]) -> dict[str, Any]:
    """Everything the diff page shows, as display strings."""
    d = mapping(diff)
    b, h = mapping(d.get("base")), mapping(d.get("head"))
    n = headline_numbers(d)
    tool = mapping(d.get("tool"))
    sides = []
    for label, side in (("Base", b), ("Head", h)):
        name, dev, steps = side_line(side)
        sides.append({"role": label, "label": name, "device": dev, "steps": steps,
                      "files": [text(f, 300) for f in seq(side.get("files"))[:50]]})

    def sort_lone(key: str, side: str) -> list[Any]:
        rows = [r for r in seq(d.get(key)) if isinstance(r, Mapping)]
        return sorted(rows, key=lambda r: -(num(mapping(r.get(side)).get("time_us")) or 0.0))

    return {
        "title": f"{sides[0]['label']} → {sides[1]['label']}",
        "tool": " ".join(x for x in (text(tool.get("name"), 40) or "traceana", text(tool.get("version"), 40)) if x),
        "device_note": text(d.get("device_note"), 1000),
        "norm_note": text(mapping(d.get("normalisation")).get("note"), 1000),
        "total": {**n, "change": total_change(n)},
        "sides": sides,
        "bounds": [{"bound": k, "base": fmt_time_us(r.get("base_us")), "head": fmt_time_us(r.get("head_us")),
                    "delta": fmt_delta_us(r.get("delta_us")), "pct": fmt_delta_pct(r),
                    "sign": _sign(r)} for k, r in bound_rows(d)],
        "changes": _table(seq(d.get("ops")), _change),
        "moved": moved_line(d),
        "by_name": {"rows": [{"name": short_name(r.get("name")) or "(unnamed)", "full": text(r.get("name"), 2000),
                              "base": fmt_time_us(r.get("base_us")), "head": fmt_time_us(r.get("head_us")),
                              "delta": fmt_delta_us(r.get("delta_us")), "pct": name_change(r),
                              "unlinked": unlinked_cell(r), "sign": _sign(r)}
                             for r in seq(d.get("by_name"))[:MAX_ROWS] if isinstance(r, Mapping)],
                    "total": len(seq(d.get("by_name")))},
        "roof": _table(roof_rows(d), _change),
        "roof_threshold": f"{num(d.get('roof_threshold_pp')) or 0:g}",
        "new": _table(sort_lone("new", "head"), _lone, "head"),
        "vanished": _table(sort_lone("vanished", "base"), _lone, "base"),
        "warnings": [text(w, 2000) for w in seq(d.get("warnings")) if text(w)],
        "gates": [{"ok": ok, "text": line} for ok, line in gate_rows(d)],
    }
