"""`traceana render analysis.json -o report.html|md`: re-render a saved analysis, diff or
cross-rank report.

No trace needed: the saved document (`report -o x.json`, `diff -o x.json`, `report DIR/ -o
x.json`) is checked
(schema and required sections) and handed to the same renderers `report` and `diff` use,
so `report -o a.html` and `report -o a.json` + `render a.json -o a.html` give the same bytes.
"""

from __future__ import annotations

import os

import click

from traceana.cli.ci import ci_options, enforce_gates, prepare
from traceana.cli.common import check_output
from traceana.output.safe_write import write_text


def default_output(saved: str, is_diff: bool) -> str:
    base = os.path.basename(saved)
    for ext in (".gz", ".json"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return f"{base}.{'diff' if is_diff else 'report'}.html"


def _render_ranks(doc: dict, saved: str, out: str, fmt: str, quiet: bool, ci: dict) -> None:
    from traceana.errors import BadInput
    from traceana.render.ranks_html import render_ranks

    from traceana.cli.ranks import enforce_rank_gates
    from traceana.compare.gates import parse_all

    used = [f"--{k.replace('_', '-')}" for k, v in ci.items() if v and k not in ("fail_on", "long_md")]
    if used:
        raise BadInput(f"{saved}: is a saved cross-rank report; {', '.join(sorted(used))} need a single "
                       f"analysis (render one of its ranks' traces instead)")
    gates = parse_all(ci.get("fail_on") or (), diff=False)
    write_text(out, render_ranks(doc, fmt))
    if not quiet and out != "-":
        click.echo(f"cross-rank report written to {out}")
    enforce_rank_gates(doc["analyses"], gates)


@click.command("render")
@click.argument("saved", type=click.Path(dir_okay=False, path_type=str))
@click.option("-o", "--output", "output", default=None,
              help="Output file; the format follows the extension: .html, .md or .json "
                   "(default: NAME.report.html in the current directory; '-' for stdout).")
@click.option("--format", "fmt", type=click.Choice(["html", "md", "json"]), default=None,
              help="Format when writing to stdout or when the extension says nothing.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file traceana did not write.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@ci_options
def render(saved: str, output: str | None, fmt: str | None, force: bool, quiet: bool, **ci: object) -> None:
    """Re-render SAVED (a `report -o x.json` analysis, a `diff -o x.json` diff or a cross-rank
    `report DIR/ -o x.json`) without the trace."""
    from traceana.cli.diff import render_diff
    from traceana.errors import BadInput
    from traceana.compare.gates import parse_all, results
    from traceana.render import format_for_path
    from traceana.render.saved import DIFF_SCHEMA, RANKS_SCHEMA, load_document

    doc = load_document(saved)
    is_diff = doc["schema"] == DIFF_SCHEMA
    out = output or default_output(saved, is_diff)
    if fmt is None:
        fmt = "html" if out == "-" else format_for_path(out)
    check_output(out, [saved], force)
    if doc["schema"] == RANKS_SCHEMA:
        _render_ranks(doc, saved, out, fmt, quiet, ci)
        return
    if is_diff:
        if ci.get("svg") or ci.get("png") or ci.get("md_image"):
            raise BadInput(f"{saved}: is a saved diff; --svg, --png and --md-image need an analysis")
        gates = parse_all(ci.get("fail_on") or (), diff=True)  # type: ignore[arg-type]
        if gates:
            doc["gates"] = results(doc, gates)
        write_text(out, render_diff(doc, fmt, bool(ci.get("long_md"))))
        if not quiet and out != "-":
            click.echo(f"diff written to {out}")
        enforce_gates(doc, gates)
        return
    extras = prepare(ci, [saved], force, outputs=(out,))
    write_text(out, extras.render(doc, fmt))
    if not quiet and out != "-":
        click.echo(f"report written to {out}")
    extras.finish(doc, quiet or out == "-")
