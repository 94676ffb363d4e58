"""Renderers: the saved analysis dict in, a report string out (html, md, json).

Every renderer reads only the analysis dict (docs/analysis-schema.md), so a saved
`analysis.json` re-renders without the trace. The dict may come from an older or newer
traceana, or be hand-edited: every field may be missing or null and every string is
untrusted. It is read through traceana/document.py; what every renderer shows the same way
(formatters, words, the verdict) is views.py; numbers, shapes, dtypes and kernel names are
formatted by traceana/units.py only.

    html.py (+ first.py, ops_table.py, timeline.py, utilisation.py, svg.py, templates.py)  the page
    markdown.py, markdown_long.py, md.py     the pull-request comment and its long form
    json_out.py                              the saved analysis
    terminal.py                              the lines printed after a run (made inert)
    diff_html.py, diff_markdown.py           a comparison of two runs (traceana/compare/)
    ranks_html.py                            a cross-rank report (traceana/ranks/)
    saved.py                                 saved documents read back (`traceana render`, `diff`)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from traceana.errors import BadInput

__all__ = ["FORMATS", "format_for_path", "render"]

#: Output formats and the file extensions that select them.
FORMATS: dict[str, tuple[str, ...]] = {
    "html": (".html", ".htm"),
    "md": (".md", ".markdown"),
    "json": (".json",),
}


def render(analysis: Mapping[str, Any], fmt: str, image: str | None = None, long: bool = False) -> str:
    """Render the analysis dict as `fmt` ("html", "md" or "json"); `image`: markdown's chart URL; `long`:
    markdown's long form (--long) instead of the PR comment.
    Markdown ends with traceana's marker line (traceana/output/ownership.py: what a later run may replace)."""
    if fmt == "html":
        from traceana.render.html import render_html

        return render_html(analysis)
    if fmt == "md":
        from traceana.output.ownership import stamp_markdown
        from traceana.render.markdown import render_markdown

        return stamp_markdown(render_markdown(analysis, image=image, long=long))
    if fmt == "json":
        from traceana.render.json_out import render_json

        return render_json(analysis)
    raise BadInput(f"unknown report format {fmt!r}: expected one of html, md, json")


def format_for_path(path: str | os.PathLike) -> str:
    """The format an output path asks for, from its extension (case-insensitive)."""
    name = os.path.basename(os.fspath(path))
    dot = name.rfind(".")
    suffix = name[dot:].lower() if 0 < dot < len(name) - 1 else ""  # what PurePath(path).suffix says
    for fmt, suffixes in FORMATS.items():
        if suffix in suffixes:
            return fmt
    known = ", ".join(s for suffixes in FORMATS.values() for s in suffixes)
    raise BadInput(
        f"cannot tell the report format from {str(path)!r}: "
        f"the extension must be one of {known}"
    )
