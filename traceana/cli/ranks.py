"""`traceana report DIR/` or `traceana report a.json.gz b.json.gz ...`: the cross-rank report.

Called by cli/report.py when it is given several inputs or a directory. Every rank file is
analysed by traceana.ranks.executor (local worker processes sized to cores and memory, or a Dask
cluster), then traceana.ranks.cross_rank compares them and render/ranks_html.py writes the report.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import click

from traceana.cli.common import check_output
from traceana.output.safe_write import write_text
from traceana.errors import BadInput, GateFailed
from traceana.render.terminal import term_text


def default_output(inputs: Sequence[str]) -> str:
    if len(inputs) == 1:
        base = os.path.basename(os.path.abspath(inputs[0].rstrip("/"))) or "ranks"
        return f"{base}.report.html"
    return "ranks.report.html"


def report_ranks(inputs: Sequence[str], output: str | None, fmt: str | None, force: bool, quiet: bool,
                 executor: str, jobs: int | None, ci: Mapping[str, Any], options: Any, hta: bool,
                 strict: bool = False, allow_missing: bool = False) -> None:
    """Analyse every rank file, compare, write the report. Files that do not look like one run
    (duplicate rank ids, differing world sizes, devices or steps) give one warning line on
    stderr and in the report; with `strict` (or --strict, which arrives in `ci`), that line is
    the error (exit 2, nothing written). Rank files that could not be analysed are named in the
    report and on stderr, and the run exits 3 after writing it (unless `allow_missing`)."""
    strict = strict or bool(ci.get("strict"))
    from traceana.compare.gates import parse_all
    from traceana.ranks.executor import check_missing, find_rank_files, map_ranks, split
    from traceana.cli.progress import progress
    from traceana.ranks.cross_rank import cross_rank
    from traceana.render import format_for_path
    from traceana.render.ranks_html import NOT_READ, ranks_document, render_ranks

    for flag in ("svg", "png", "md_image"):  # (--long is for one trace's or a diff's markdown; here a no-op)
        if ci.get(flag):
            raise BadInput(f"--{flag.replace('_', '-')}: not available for a cross-rank report (give one trace)")
    gates = parse_all(ci.get("fail_on") or (), diff=False)
    out = output or default_output(inputs)
    if fmt is None:
        fmt = "html" if out == "-" else format_for_path(out)
    repeats: list[tuple[str, str]] = []
    reports: list[str] = []
    files, skipped = find_rank_files(inputs, repeats, reports)
    check_output(out, files, force)
    for kept, dropped in repeats:
        click.echo(term_text(f"traceana: {dropped} is the same file as {kept}: analysed once"), err=True)
    skipped = [p for p in skipped if p not in reports]
    if reports and not quiet:
        click.echo(term_text(f"traceana: skipped {len(reports)} report{'s' if len(reports) != 1 else ''} traceana "
                             f"wrote (e.g. {os.path.basename(reports[0])}): not a rank trace"), err=True)
    if hta:
        from traceana.diagnose.hta_views import available

        if not available():
            raise BadInput("--hta needs Holistic Trace Analysis and pandas: pip install 'traceana[hta]'")
    if skipped and not quiet:
        click.echo(term_text(f"traceana: skipped {len(skipped)} non-trace entr{'y' if len(skipped) == 1 else 'ies'} "
                             f"(e.g. {os.path.basename(skipped[0])}): only *.json and *.json.gz are rank files"),
                   err=True)
    with progress(len(files), "ranks", quiet=quiet, unit="file") as bar:
        results, where = map_ranks(files, options, executor=executor, jobs=jobs,
                                   on_done=lambda r: bar.advance(r.get("file", "")),
                                   drop=NOT_READ if fmt in ("html", "md") else ())
    analyses, failed = split(results)
    if not analyses:
        first = failed[0]["error"] if failed else "no result"
        what = (f"{inputs[0]}: is a directory of {len(files)} trace file{'s' if len(files) != 1 else ''}"
                if len(inputs) == 1 else f"{len(files)} trace files")
        raise BadInput(f"{what} and none could be analysed (first: {first})")
    cross = cross_rank(analyses, failed)
    warning = cross["summary"].get("warning")
    if warning and strict:
        raise BadInput(f"--strict: {warning.split('. Each rank')[0]}")
    doc = ranks_document(cross, analyses, where)
    write_text(out, render_ranks(doc, fmt))
    if warning:  # even with -q: the comparison the user asked for was not made
        click.echo(term_text(f"traceana: warning: {warning}"), err=True)
    if not quiet:
        for f in failed:
            click.echo(term_text(f"traceana: rank file not analysed: {f['error']}"), err=True)
        if out != "-":
            click.echo(summary(doc, out))
    check_missing(results, allow_missing)  # after the report: it lists them too
    enforce_rank_gates(analyses, gates)


def enforce_rank_gates(analyses: Sequence[Mapping[str, Any]], gates: Sequence[Any]) -> None:
    """Each rank's Analysis against the --fail-on gates: every failure on stderr, GateFailed last."""
    from traceana.compare.gates import evaluate

    failures = []
    for a in analyses:
        label = a.get("trace", {}).get("file", "")
        failures += [f"{label}: {f}" for f in evaluate(a, gates)]
    if failures:
        for f in failures[:-1]:
            click.echo(term_text(f"traceana: --fail-on {f}"), err=True)
        raise GateFailed(f"--fail-on {failures[-1]}")


def summary(doc: Mapping[str, Any], out: str) -> str:
    from traceana.render.views import fmt_time_us

    s = doc["summary"]
    wait = s.get("collective_wait_us_total")
    lines = [f"{s['ranks']} ranks analysed {doc.get('ran', '')}; median step {fmt_time_us(s['median_step_us'])} "
             f"({s['unit']})" + (f", collective wait {fmt_time_us(wait)} over all ranks" if wait is not None else "")]
    first = doc.get("first") or []
    if first:
        lines.append("Do this first:")
        lines += [f"  {i}. {lv['title']}. Fix: {lv['fix']}" for i, lv in enumerate(first, 1)]
    strag = doc.get("straggler")
    if strag:
        lines += [f"  {t}" for t in strag["text"][:1 if first else 3]]
        if not first:
            lines += [f"  {p['text']}" for p in strag.get("phases", [])]
    if s.get("failed"):
        lines.append(f"  {s['failed']} rank file(s) could not be analysed")
    lines.append(f"report written to {out}")
    from traceana.render.terminal import term_lines

    return term_lines(lines)
