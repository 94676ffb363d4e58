"""The cross-rank report: html (templates/ranks.html.j2, styled by report.css), markdown, json.

The document rendered is `ranks_document(...)`: the cross-rank dict of traceana/ranks/cross_rank.py
plus every rank's own Analysis under "analyses" (so the JSON keeps everything and the page
shows each rank's headline and top ops). As for the one-trace report, `build_view` turns the
untrusted dict into display strings first; strings reach the page through autoescaping only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from traceana.document import bound_of, mapping, seq
from traceana.render.views import (
    fmt_delta_us,
    fmt_dims,
    fmt_int,
    fmt_pct,
    fmt_signed_pct,
    fmt_time_us,
    fmt_types,
    short_name,
)
from traceana.units import num, text
from traceana.render.json_out import render_json
from traceana.output.ownership import MD_MARKER, stamp_markdown
from traceana.render.markdown import SHORT_CHARS
from traceana.render.md import fold, md_text
from traceana.ranks.straggler import CLASSES
from traceana.render.ranks_first import levers, rank_columns, waits_view
_ANCHOR_BAD = re.compile(r"[^A-Za-z0-9_.-]")
#: Per-rank sections list this many ops.
TOP_OPS = 5
#: Above this many ranks the markdown's rank table goes inside <details> (half the budget at most).
FOLD_RANKS = 16
#: Analysis keys the html and markdown cross-rank reports (and the --fail-on gates) never read:
#: the rank workers leave them out of their results for those formats (the timeline is about
#: half of a rank's result). The JSON form keeps every rank's full Analysis.
NOT_READ = ("timeline",)


def ranks_document(cross: Mapping[str, Any], analyses: Sequence[Mapping[str, Any]], where: str = "") -> dict:
    """The saved multi-rank document: the cross-rank dict, each rank with its verdict (the sentence
    a one-trace report leads with), and each rank's Analysis."""
    from traceana.render.views import verdict

    doc = dict(cross)
    doc["ranks"] = [{**r, "verdict": verdict(a)} for r, a in zip(cross.get("ranks") or [], analyses)]
    doc["ran"] = where
    doc["analyses"] = [_without_calls(a) for a in analyses]
    return doc


def _without_calls(a: Mapping[str, Any]) -> Mapping[str, Any]:
    """The Analysis without its rank's call summary (the cross-rank figures above are made from it; a
    256-rank document would carry ~100 MB of them)."""
    facts = a.get("rank_facts")
    if not isinstance(facts, Mapping) or "calls" not in facts:
        return a
    return {**a, "rank_facts": {k: v for k, v in facts.items() if k != "calls"}}


def render_ranks(doc: Mapping[str, Any], fmt: str) -> str:
    if fmt == "json":
        return render_json(doc)
    if fmt == "md":
        return render_ranks_markdown(doc)
    if fmt == "html":
        return render_ranks_html(doc)
    from traceana.errors import BadInput

    raise BadInput(f"unknown report format {fmt!r}: expected one of html, md, json")


def _anchor(label: str, i: int, seen: set[str]) -> str:
    a = "rank-" + (_ANCHOR_BAD.sub("_", label)[:48] or str(i))
    if a in seen:
        a = f"{a}-{i}"
    seen.add(a)
    return a


def _classes(by_class: Any, total: float | None) -> list[dict[str, Any]]:
    m = mapping(by_class)
    out = []
    for c in CLASSES:
        v = num(m.get(c))
        if v is None or v <= 0:
            continue
        pct = v / total * 100 if total else 0.0
        out.append({"cls": c, "us": fmt_time_us(v), "pct": pct, "pct_text": fmt_pct(pct)})
    return out


def build_view(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Display strings for the page (and the markdown) from the untrusted document."""
    summary = mapping(doc.get("summary"))
    ranks = [r for r in seq(doc.get("ranks")) if isinstance(r, Mapping)]
    analyses = [a for a in seq(doc.get("analyses")) if isinstance(a, Mapping)]
    unit = text(summary.get("unit"), 80) or "per step"
    seen: set[str] = set()
    rows, sections = [], []
    max_step = max((num(r.get("step_us")) or 0.0 for r in ranks), default=0.0)
    strag = mapping(doc.get("straggler"))
    extra = num(strag.get("extra_us"))
    clear = bool(strag) and not strag.get("near_tie") and (extra is None or extra > 0)
    for i, r in enumerate(ranks):
        label = text(r.get("label"), 60) or f"rank {i}"
        anchor = _anchor(label, i, seen)
        step = num(r.get("step_us"))
        classes = _classes(r.get("by_class_us"), step if step else None)
        rows.append({
            "anchor": anchor, "label": label, "file": text(r.get("file"), 200),
            "steps": text(r.get("steps")), "step": fmt_time_us(step),
            "step_bar": (step or 0.0) / max_step * 100 if max_step else 0.0,
            "vs_median": fmt_signed_pct(r.get("vs_median_pct")),
            "own": fmt_time_us(r.get("own_us")), "busy": fmt_pct(_pct100(r.get("busy_pct"))),
            "collective": fmt_time_us(r.get("collective_us")), "wait": fmt_time_us(r.get("collective_wait_us")),
            "classes": classes, "device": text(r.get("device"), 80),
            "straggler": clear and strag.get("label") == r.get("label"),
            **rank_columns(r),
        })
        a = analyses[i] if i < len(analyses) else {}
        ops = []
        for o in [o for o in seq(a.get("ops")) if isinstance(o, Mapping)][:TOP_OPS]:
            ops.append({"name": short_name(o.get("name")) or "(unnamed)", "full": text(o.get("name"), 2000), "dims": fmt_dims(o.get("input_dims"), 120),
                        "types": fmt_types(o.get("input_types"), 60), "bound": bound_of(o),
                        "time": fmt_time_us(o.get("device_time_us")), "roof": fmt_pct(o.get("roof_pct")),
                        "count": text(o.get("count"))})
        kinds = [(text(k, 40), fmt_time_us(v)) for k, v in mapping(r.get("collective_by_kind_us")).items()
                 if num(v) is not None]
        sections.append({
            "anchor": anchor, "label": label, "file": text(r.get("file"), 200),
            "verdict": text(r.get("verdict"), 600), "device": text(r.get("device"), 80),
            "ops": ops, "kinds": kinds,
            "warnings": [text(w, 400) for w in seq(a.get("warnings"))[:10]],
        })
    straggler = None
    if strag:
        label = text(strag.get("label"), 60)
        ties = [text(t, 60) for t in seq(strag.get("ties"))]
        # the near-tie named slowest first, as the straggler text names them ("ties" is in rank order)
        tied = [text(t, 60) for t in seq(strag.get("tied"))] or [label, *ties]
        straggler = {
            "label": label, "near_tie": bool(strag.get("near_tie")) and bool(ties),
            "title": (f"Straggler: {label}" if clear else "No rank stands out" if extra is not None and extra <= 0
                      else f"No single straggler: the slowest ranks are {_named(tied)}, "
                      f"within {fmt_pct(strag.get('near_tie_pct')).replace('.0%', '%')} of each other"),
            "text": [text(t, 800) for t in seq(strag.get("text"))],
            "phases": [{"phase": text(p.get("phase"), 20), "source": text(p.get("source"), 200),
                        "label": text(p.get("label"), 60), "work": fmt_time_us(p.get("work_us")),
                        "median": fmt_time_us(p.get("median_us")), "extra": fmt_delta_us(p.get("extra_us")),
                        "pct": fmt_signed_pct(p.get("extra_pct")), "wait": fmt_time_us(p.get("wait_us")),
                        "ties": ", ".join(text(t, 60) for t in seq(p.get("ties"))[:8]),
                        "text": text(p.get("text"), 400)}
                       for p in seq(strag.get("phases")) if isinstance(p, Mapping)],
            "differ": [{"name": text(d.get("name"), 200), "cls": text(d.get("class"), 20),
                        "sigs": text(d.get("signatures")), "rank": fmt_time_us(d.get("rank_us")),
                        "range": f"{fmt_time_us(d.get('min_us'))} – {fmt_time_us(d.get('max_us'))}"}
                       for d in seq(strag.get("shapes_differ")) if isinstance(d, Mapping)],
            "differ_count": text(strag.get("shapes_differ_count")),
            "classes": [{"cls": text(c.get("class"), 20), "rank": fmt_time_us(c.get("rank_us")),
                         "median": fmt_time_us(c.get("median_us")), "delta": fmt_delta_us(c.get("delta_us"))}
                        for c in seq(strag.get("by_class")) if isinstance(c, Mapping)
                        and (num(c.get("rank_us")) or num(c.get("median_us")))],
            "ops": [{"sig": text(o.get("sig"), 300), "cls": text(o.get("class"), 20),
                     "rank": fmt_time_us(o.get("rank_us")), "median": fmt_time_us(o.get("median_us")),
                     "delta": fmt_delta_us(o.get("delta_us")), "pct": fmt_signed_pct(o.get("delta_pct"))}
                    for o in seq(strag.get("ops")) if isinstance(o, Mapping) and (num(o.get("delta_us")) or 0) > 0],
        }
    tool = mapping(doc.get("tool"))
    facts = [("ranks", text(summary.get("ranks"))), ("times", unit),
             ("median step", fmt_time_us(summary.get("median_step_us")))]
    if num(summary.get("spread_pct")) is not None:
        facts.append(("spread", fmt_pct(summary.get("spread_pct"))))
    if num(summary.get("collective_wait_us_total")) is not None:
        facts.append(("collective wait (all ranks)", fmt_time_us(summary.get("collective_wait_us_total"))))
    devices = [text(d, 80) for d in seq(summary.get("devices"))]
    if devices:
        facts.append(("devices", ", ".join(devices[:4]) + (" …" if len(devices) > 4 else "")))
    if text(doc.get("ran")):
        facts.append(("ran", text(doc.get("ran"), 200)))
    failed = [{"file": text(f.get("file"), 200), "error": text(f.get("error"), 400)}
              for f in seq(doc.get("failed")) if isinstance(f, Mapping)]
    warning = text(summary.get("warning"), 1200)
    first = levers(doc)
    headline = warning or (first[0]["title"] + "." if first else straggler["text"][0] if straggler and straggler["text"]
                           else f"{len(ranks)} rank analysed." if len(ranks) == 1 else f"{len(ranks)} ranks analysed.")
    return {"tool": f"{text(tool.get('name')) or 'traceana'} {text(tool.get('version'))}".strip(),
            "first": first, "waits": waits_view(doc), "any_classes": any(r["classes"] for r in rows),
            "facts": facts, "headline": headline, "unit": unit, "rows": rows, "sections": sections,
            "straggler": straggler, "failed": failed, "classes": CLASSES, "warning": warning,
            "unmatched": fmt_int(unmatched) if (unmatched := num(summary.get("collectives_unmatched"))) else ""}


def _named(labels: list[str], most: int = 8) -> str:
    """'rank 3, rank 5 and rank 7' (at most `most` names, then how many more)."""
    shown = labels[:most]
    if len(labels) > most:
        return ", ".join(shown) + f" and {len(labels) - most} more"
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _pct100(v: Any) -> float | None:
    """A share that cannot exceed 100% (GPU busy of a window), held to it for a hand-edited file."""
    n = num(v)
    return None if n is None else max(0.0, min(n, 100.0))


def render_ranks_html(doc: Mapping[str, Any]) -> str:
    from traceana.render.templates import environment

    return environment().get_template("ranks.html.j2").render(view=build_view(doc))


# ----------------------------------------------------------------------------- markdown


def _md(s: str) -> str:
    """Untrusted text as inert markdown (render/md.py's md_text, uncut: build_view cut it)."""
    return md_text(s, None)


def render_ranks_markdown(doc: Mapping[str, Any], budget: int = SHORT_CHARS) -> str:
    """The cross-rank report as markdown for a PR comment: the headline, the straggler's
    explanation and the rank table first; the per-phase, per-op and per-rank detail inside
    <details>, cut to whole rows so the whole comment stays within `budget` characters (a
    64-rank run would otherwise post ~50 KB). The JSON form keeps everything."""
    v = build_view(doc)
    tool = f"<sub>{_md(v['tool'])}</sub>"
    for tight in range(3):  # the head and the failures take at most 60% of the budget: shorter texts if not
        head, failed = _md_head(v, tight)
        if len("\n".join(head)) + len(failed) + len(tool) <= 0.6 * budget:
            break
    s = v["straggler"]
    rank_head = (f"| rank | file | step ({_md(v['unit'])}) | vs median | own time | GPU busy | collectives "
                 "| waited | caused | comm bytes | peak memory | projected step |\n"
                 "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for r in v["rows"]:
        mark = " **straggler**" if r["straggler"] else ""
        rows.append(f"| {_md(r['label'])}{mark} | {_md(r['file'])} | {r['step']} | {r['vs_median']} | {r['own']} | "
                    f"{r['busy']} | {r['collective']} | {r['wait']} | {r['caused']} | {r['comm_bytes']} | "
                    f"{r['peak_mem']} | {_md(r['projected'])} |")
    # the fixed parts first; the rank table and the detail share what is left, in that order
    fixed = "\n".join(head).strip() + "\n\n" + (failed + "\n\n" if failed else "") + tool
    left = budget - len(fixed) - len(MD_MARKER) - 16
    if len(rows) > FOLD_RANKS:  # many ranks: the straggler text names the ones that matter
        table = fold(f"All {len(rows)} ranks", rows, left // 2, head=rank_head, more=_more("ranks"))
    else:
        table = _rows_within(rank_head, rows, left, "ranks")
    left -= len(table) + 2
    blocks: list[str] = []
    w = v["waits"]
    if w and w["top"]:
        blocks.append(fold("Who waited for whom: the collectives with the most waiting", [
            f"| {_md(t['kind'])} | {t['step']} | {_md(t['phase'])} | {_md(t['late'])} | {t['lead']} | {t['wait']} | "
            f"{_md(t['most'])} | {_md(t['what'])} |" for t in w["top"]], left,
            head="| collective | step | phase | arrived last | after the next | total wait | waited most "
                 "| what it did more |\n|---|---:|---|---|---:|---:|---|---|", more=_more("collectives")))
        left -= len(blocks[-1]) + 2
    if w and (w["notes"] or w["mismatches"]):
        notes = [f"- {_md(n)}" for n in w["notes"]] + [f"- **Mismatch:** {_md(x)}" for x in w["mismatches"]]
        blocks.append(fold("How the collectives were matched", notes, left, head="", more=_more("notes")))
        left -= len(blocks[-1]) + 2
    if s and s["phases"]:
        blocks.append(fold("By phase (GPU work of the kernels launched in it)", [
            f"| {_md(p['phase'])} | {_md(p['label'])} | {p['work']} | {p['median']} | {p['extra']} ({p['pct']}) "
            f"| {p['wait']} | {_md(p['ties']) or '—'} |" for p in s["phases"]], left,
            head="| phase | most work | its work | median rank | extra | its wait | within the tie margin |\n"
                 "|---|---|---:|---:|---:|---:|---|", more=_more("phases")))
        left -= len(blocks[-1]) + 2
    if s and s["ops"]:
        blocks.append(fold(f"Where {_md(s['label'])}'s extra time goes", [
            f"| {_md(o['sig'])} | {_md(o['cls'])} | {o['rank']} | {o['median']} | {o['delta']} ({o['pct']}) |"
            for o in s["ops"][:8]], left,
            head="| op signature | class | this rank | median rank | extra |\n|---|---|---:|---:|---:|",
            more=_more("ops")))
        left -= len(blocks[-1]) + 2
    if s and s["differ"]:
        blocks.append(fold(f"Ops whose shapes differ between ranks (not compared; {s['differ_count']})", [
            f"| {_md(d['name'])} | {_md(d['cls'])} | {_md(d['sigs'])} | {d['rank']} | {d['range']} |"
            for d in s["differ"][:8]], left,
            head="| op | class | signatures | this rank | range over ranks |\n|---|---|---:|---:|---|",
            more=_more("ops")))
        left -= len(blocks[-1]) + 2
    sections = []
    for sec in v["sections"]:
        lines = [f"**{_md(sec['label'])}** — {_md(sec['file'])}", ""]
        if sec["verdict"]:
            lines += [md_text(sec["verdict"], None, line_start=True), ""]
        if sec["ops"]:
            lines += ["| op | input dims | bound | device time | % of roof |", "|---|---|---|---:|---:|"]
            lines += [f"| {_md(o['name'])} | {_md(o['dims'])} | {o['bound']} | {o['time']} | {o['roof']} |"
                      for o in sec["ops"]]
        sections.append("\n".join(lines).rstrip())
    blocks.append(fold("Each rank's headline and top ops", sections, left, sep="\n\n", more=_more("ranks")))
    body = "\n\n".join(b for b in [table, *blocks] if b)
    out = "\n".join(head).strip() + "\n\n" + body + "\n\n" + (failed + "\n\n" if failed else "") + tool
    return stamp_markdown(out)


def _md_head(v: Mapping[str, Any], tight: int) -> tuple[list[str], str]:
    """The markdown's first lines (facts, warning, Do this first, the straggler's lines) and the failures'
    section; `tight` 1 and 2 cut the texts shorter (a long warning, many long op names, many failures)."""
    head = ["# traceana cross-rank report", ""]
    head.append(" · ".join(f"**{_md(k)}** {_md(val)}" for k, val in v["facts"] if val))
    head.append("")
    if v["warning"]:
        head += [f"> **Warning:** {_md(_cut(v['warning'], (1200, 600, 300)[tight]))}", ""]
    if v["first"]:
        head += ["## Do this first", ""]
        for i, lv in enumerate(v["first"], 1):
            body = _md(_cut(lv["text"], (700, 400, 0)[tight]))
            head += [f"{i}. **{_md(lv['title'])}.** {body + ' ' if body else ''}*Fix:* "
                     f"{_md(_cut(lv['fix'], (360, 240, 160)[tight]))}"]
        head.append("")
    s = v["straggler"]
    if s:
        head += [f"## {_md(s['title'])}", ""]
        for t in s["text"][:(2 if v["first"] else None, 1, 0)[tight]]:
            head.append(f"> {md_text(_cut(t, (800, 400, 0)[tight]), None, line_start=True)}")
    failed = ""
    if v["failed"]:
        most = (20, 10, 5)[tight]
        items = [f"- {md_text(f['file'], None, line_start=True)}: {_md(_cut(f['error'], 300))}" for f in v["failed"]]
        failed = "## Rank files that could not be analysed\n\n" + "\n".join(items[:most])
        if len(items) > most:
            failed += f"\n- … and {len(items) - most} more (the JSON form lists them all)"
    return head, failed


def _cut(s: str, n: int) -> str:
    """At most n characters, cut after a whole sentence when one ends in the last third ("" for n 0)."""
    if n <= 0:
        return ""
    if len(s) <= n:
        return s
    k = s.rfind(". ", 0, n)
    return s[:k + 1] if k > n * 2 // 3 else s[:n - 1].rstrip() + "…"


def _more(what: str):
    return lambda n: f"… {n} more {what} in the JSON or HTML form (`traceana report DIR/ -o x.json`)."


def _rows_within(header: str, rows: list[str], budget: int, what: str) -> str:
    """The table with as many whole rows as fit in `budget`, and a line saying how many did not."""
    out = [header]
    used = len(header) + 130
    for i, r in enumerate(rows):
        if used + len(r) + 1 > budget:
            out.append("")
            out.append(_more(what)(len(rows) - i))
            break
        out.append(r)
        used += len(r) + 1
    return "\n".join(out)
