"""The report's ops table in the form the template draws: plain HTML rows up to LAZY_ROWS, and
beyond that the first STATIC_ROWS as HTML plus every row packed compactly (lazy_rows) for
templates/report.js to draw as the reader scrolls."""

from __future__ import annotations

from collections import Counter
from typing import Any

from markupsafe import Markup

from traceana.roofline.bounds import BOUNDS
from traceana.render.views import CPU_ONLY_BOUNDS

#: A table with more rows than this is drawn lazily by report.js from a JSON block (only the rows
#: in view are in the DOM); smaller ones are plain HTML, readable without JavaScript.
LAZY_ROWS = 2000
#: Rows of a lazy table also written as HTML: what a reader without JavaScript sees.
STATIC_ROWS = 100


def ops_table(rows: list[dict[str, Any]], total: int) -> dict[str, Any]:
    """The ops table and the choices of its filters (the bounds and op families present).

    Up to LAZY_ROWS rows are plain HTML. Beyond that only the first STATIC_ROWS are HTML and
    every row goes to `lazy` (lazy_rows: compact lists) for report.js to draw as the reader scrolls.
    """
    bounds = [b for b in (*BOUNDS, *CPU_ONLY_BOUNDS) if any(r["bound"] == b for r in rows)]
    families = sorted({r["family"] for r in rows})
    lazy = len(rows) > LAZY_ROWS
    html_rows = rows[:STATIC_ROWS] if lazy else rows
    return {"rows": html_rows, "body": table_body(html_rows), "total": total, "shown": len(rows),
            "lazy": lazy_rows(rows) if lazy else None, "sizer": _sizer(rows) if lazy else [],
            "bounds": [(b, b.replace("_", " ")) for b in bounds], "families": families,
            "estimated": any("est" in c["cls"] for r in rows for c in r["cells"]),
            "over": any("over" in c["cls"] for r in rows for c in r["cells"])}


#: what the template's autoescape (markupsafe) writes for each character it escapes
_ESCAPES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&#34;"), ("'", "&#39;"))


def _escape(value: Any) -> str:
    """Text for an HTML attribute or element, escaped byte for byte as markupsafe.escape does it (which
    costs a call into its module and a Markup object per value: ~90,000 of them in a 550-row table)."""
    s = value if type(value) is str else str(value)
    for ch, entity in _ESCAPES:
        if ch in s:
            s = s.replace(ch, entity)
    return s


def table_body(rows: list[dict[str, Any]]) -> Markup:
    """The rows as the table's <tbody> lines, each value escaped as the template's autoescape does it.
    Written here, not by a template loop: the loop looked up and escaped each of ~16 cells' four parts
    through jinja (~60 us a row, a quarter of a 550-row report's rendering)."""
    escape = _escape
    out: list[str] = []
    first = True
    for r in rows:
        out.append(f'      <tr id="op-{escape(r["id"])}" data-bound="{escape(r["bound"])}" '
                   f'data-family="{escape(r["family"])}" data-search="{escape(r["search"])}">\n')
        for c in r["cells"]:
            cls, v, title = c["cls"], c["v"], c["title"]
            out.append("        <td")
            if first:  # the table's first cell: the paint the browser times (report.js)
                out.append(' elementtiming="ops-table"')
                first = False
            if cls:
                out.append(f' class="{escape(cls)}"')
            if v:
                out.append(f' data-v="{escape(v)}"')
            if title:
                out.append(f' title="{escape(title)}"')
            out.append(f">{escape(c['t'])}</td>\n")
        out.append("      </tr>\n")
    return Markup("".join(out))


def _sizer(rows: list[dict[str, Any]]) -> list[str]:
    """The longest text of each column (none for the name and shapes, which are clipped to fit)."""
    columns = max((len(r["cells"]) for r in rows), default=0)
    out = []
    for i in range(columns):
        texts = [r["cells"][i]["t"] for r in rows if i < len(r["cells"])]
        clipped = any(r["cells"][i]["cls"] in ("name", "dims") for r in rows[:1] if i < len(r["cells"]))
        out.append("" if clipped else max(texts, key=len, default=""))
    return out


def lazy_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows of a lazy table, compact for JSON: {"strings", "classes", "rows"}.

    A row is [id, bound, family, full name (blank: the name shown), cells]; a cell is its text, or
    [text, sort key, title, class] with empty trailing parts left out, the class only when it is
    not its column's usual one (`classes`) and a title of several lines as the list of its lines.
    A text, line or class of 4 characters or more used more than once is written once, in
    `strings`, and referred to by its index. Sort keys keep 7 significant digits (the table shows at most 4). report.js
    reads this back.
    """
    columns = max((len(r["cells"]) for r in rows), default=0)
    by_column: list[list[str]] = [[] for _ in range(columns)]  # each column's classes, in row order
    for r in rows:
        for column, c in zip(by_column, r["cells"]):
            column.append(c["cls"])
    classes = [Counter(column).most_common(1)[0][0] for column in by_column]  # (a tie: the first met)
    index: dict[str, int] = {}
    strings: list[str] = []
    first: dict[str, tuple[list[Any], int]] = {}  # where a text met once so far was written

    def put(box: list[Any], t: str) -> None:
        """Append t to box, or its index once it is met a second time (the first one then too)."""
        i = index.get(t)
        if i is None:
            where = first.pop(t, None) if len(t) >= 4 else None
            if where is None:
                if len(t) >= 4:
                    first[t] = (box, len(box))
                box.append(t)
                return
            i = index[t] = len(strings)
            strings.append(t)
            where[0][where[1]] = i
        box.append(i)

    keys: dict[str, float | int | None] = {}  # sort key per sort-key text (counts and sizes recur)
    out = []
    for r in rows:
        packed: list[Any] = []
        for i, c in enumerate(r["cells"]):
            v, t, title, cls = c["v"], c["t"], c["title"], c["cls"]
            key = keys[v] if v in keys else keys.setdefault(v, _sort_key(v))
            if i < columns and cls == classes[i]:
                cls = ""
            if not title and not cls and key is None:
                if len(t) < 4:  # (too short to be written once and referred to: put() would append it)
                    packed.append(t)
                else:
                    put(packed, t)
                continue
            cell: list[Any] = []
            put(cell, t)
            cell.append(key)
            if title or cls:
                if "\n" in title:
                    lines: list[Any] = []
                    for line in title.split("\n"):
                        put(lines, line)
                    cell.append(lines)
                else:
                    put(cell, title)
                if cls:
                    put(cell, cls)
            packed.append(cell)
        row: list[Any] = [r["id"]]
        put(row, r["bound"])
        put(row, r["family"])
        put(row, r["full"] if r["full"] != r["cells"][0]["t"] else "")
        row.append(packed)
        out.append(row)
    return {"strings": strings, "classes": classes, "rows": out}


def _sort_key(v: str) -> float | int | None:
    """A cell's sort key (repr of a number, or "") to 7 significant digits; whole numbers as ints."""
    if not v:
        return None
    f = float(f"{float(v):.7g}")
    return int(f) if f.is_integer() and abs(f) < 2 ** 53 else f
