"""`traceana diff BASE HEAD -o diff.html|md|json`: compare two runs, op signature by op signature.

BASE and HEAD are each a profiler trace, a saved analysis (`report -o x.json`), or a
directory: every trace / saved analysis in it is analysed and summed per signature (e.g.
one trace per rank). The comparison itself is traceana/compare/runs.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import click

from traceana.cli.ci import LONG_HELP, enforce_gates, fail_on_option
from traceana.cli.common import check_output
from traceana.output.safe_write import write_text

_TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".pftrace.gz")


def render_diff(doc: Mapping[str, Any], fmt: str, long: bool = False) -> str:
    """A diff document as html, md (the PR comment, or with `long` the long form) or json."""
    if fmt == "html":
        from traceana.render.diff_html import render_diff_html

        return render_diff_html(doc)
    if fmt == "md":
        from traceana.render.diff_markdown import render_diff_markdown

        return render_diff_markdown(doc, long=long)
    from traceana.render import render

    return render(doc, fmt)  # json (and the BadInput for an unknown format)


def _stem(path: str) -> str:
    base = os.path.basename(os.path.normpath(path))
    for ext in (".gz", ".json", ".pftrace"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base or "run"


def default_output(base: str, head: str) -> str:
    return f"{_stem(base)}-vs-{_stem(head)}.diff.html"


def _one(path: str, skip_diffs: bool = False) -> dict[str, Any] | None:
    """A file as an analysis: a saved one is checked, a trace is analysed."""
    from traceana.analysis import analyze
    from traceana.errors import BadInput
    from traceana.render.saved import ANALYSIS_SCHEMA, DIFF_SCHEMA, decode, sniff, validate

    schema, data = sniff(path)
    if schema is None:
        del data  # a trace: its text is read again by the loader; not kept alive meanwhile
        return analyze(path)
    if schema == DIFF_SCHEMA:
        if skip_diffs:
            return None
        raise BadInput(f"{path}: is a saved diff; diff takes traces or saved analyses")
    doc = validate(decode(data, schema), path)
    if doc["schema"] != ANALYSIS_SCHEMA:
        raise BadInput(f"{path}: expected a {ANALYSIS_SCHEMA} document")
    return doc


def files_of(path: str) -> list[str]:
    """The trace-like files of a directory (sorted), or [path] for a file."""
    from traceana.errors import BadInput

    if not os.path.isdir(path):
        if not os.path.exists(path):
            raise BadInput(f"{path}: no such file or directory")
        return [path]
    files = sorted(os.path.join(path, n) for n in os.listdir(path)
                   if n.endswith(_TRACE_SUFFIXES) and os.path.isfile(os.path.join(path, n)))
    if not files:
        raise BadInput(f"{path}: the directory has no .json or .json.gz files")
    return files


def load_side(path: str) -> tuple[dict[str, Any], str]:
    """(analysis, label) for BASE or HEAD; a directory's files are merged."""
    from traceana.compare.runs import merge_analyses

    files = files_of(path)
    if not os.path.isdir(path):
        a = _one(path)
        assert a is not None
        return a, os.path.basename(path)
    label = os.path.basename(os.path.normpath(path)) + "/"
    analyses = [a for f in files if (a := _one(f, skip_diffs=True)) is not None]
    if not analyses:
        from traceana.errors import BadInput

        raise BadInput(f"{path}: the directory holds only saved diffs, no traces or analyses")
    merged = merge_analyses(analyses, label)
    if len(analyses) == 1:
        merged = {**merged, "trace": {**merged.get("trace", {}), "file": label}}
    return merged, label


@click.command("diff")
@click.argument("base", type=click.Path(path_type=str))
@click.argument("head", type=click.Path(path_type=str))
@click.option("-o", "--output", "output", default=None,
              help="Diff file; the format follows the extension: .html, .md or .json "
                   "(default: BASE-vs-HEAD.diff.html in the current directory; '-' for stdout).")
@click.option("--format", "fmt", type=click.Choice(["html", "md", "json"]), default=None,
              help="Format when writing to stdout or when the extension says nothing.")
@click.option("--roof-threshold", type=click.FloatRange(0, 1000), default=10.0, show_default=True,
              metavar="POINTS", help="List ops whose % of roof moved by more than this many percentage points.")
@fail_on_option
@click.option("--force", is_flag=True, help="Overwrite an existing output file traceana did not write.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--long", "long_md", is_flag=True, help=LONG_HELP)
def diff(base: str, head: str, output: str | None, fmt: str | None, roof_threshold: float,
         fail_on: tuple[str, ...], force: bool, quiet: bool, long_md: bool = False) -> None:
    """Compare HEAD against BASE (traces, saved analyses, or directories of them)."""
    from traceana.compare.runs import diff_analyses
    from traceana.compare.gates import parse_all, results
    from traceana.render import format_for_path

    gates = parse_all(fail_on, diff=True)
    out = output or default_output(base, head)
    if fmt is None:
        fmt = "html" if out == "-" else format_for_path(out)
    inputs = files_of(base) + files_of(head)
    check_output(out, inputs, force)
    b, b_label = load_side(base)
    h, h_label = load_side(head)
    doc = diff_analyses(b, h, base_label=b_label, head_label=h_label, roof_threshold=roof_threshold)
    if gates:
        doc["gates"] = results(doc, gates)  # shown at the top of the diff
    write_text(out, render_diff(doc, fmt, long_md))
    if not quiet and out != "-":
        click.echo(summary(doc, out))
    enforce_gates(doc, gates)


def summary(d: Mapping[str, Any], out: str) -> str:
    """A few lines for the terminal: the total, the device warning, the counts."""
    from traceana.render.diff_markdown import headline_numbers, largest_change, total_change

    n = headline_numbers(d)
    lines = [f"device time {n['per']}: {n['base']} -> {n['head']}: {total_change(n)}"]
    if d.get("device_note"):
        lines.append(f"  warning: {d['device_note']}")
    big = largest_change(d)
    if big:
        lines.append(f"  {big}")
    lines.append(f"  {n['counts']}")
    lines.append(f"diff written to {out}")
    from traceana.render.terminal import term_lines

    return term_lines(lines)
