"""The markdown report as a PR comment: at most 8,000 characters for every shared trace (the long
form, --long, under 65,000), tables that keep their columns whatever the op names, closed
<details> and fences, the headline order of both forms."""

from __future__ import annotations

import re

import pytest

from tests.analyses import analysis
from tests.conftest import all_shared_traces
from tests.mdlint import pipes, problems
from traceana.output.ownership import stamp_markdown
from traceana.render.markdown import MAX_CHARS, SHORT_CHARS, render_markdown

HOSTILE = [
    "aten::evil|name",
    "k`tick`s``x```",
    "<script>alert(1)</script>",
    "two\nlines\r\nand\ttab",
    "</details><details>",
    "a\\|b",  # a backslash before a pipe: the pipe must still be escaped
    "&lt;already&gt; & <b>bold</b>",
    "- list | # heading | > quote",
    "[link](javascript:alert(1))",
    "\u2028sep\u2029",
]


def _op(i: int, name: str, t: float) -> dict:
    return {"id": f"op{i}", "name": name, "input_dims": [[i % 7 + 1, 3], []], "input_types": ["float|`x", ""],
            "count": 2, "device_time_us": t, "mean_time_us": t / 2, "flops": 1e6, "bytes": 4e6,
            "intensity": 0.25, "achieved_tflops": 0.5, "achieved_gbps": 900.0, "roofline_time_us": t / 4,
            "roof_pct": 50.0, "bound": "memory", "peak_dtype": "fp32"}


def hostile_analysis(n_ops: int = 40) -> dict:
    ops = [_op(i, HOSTILE[i % len(HOSTILE)] + f" #{i}", 1000.0 - i) for i in range(n_ops)]
    return {
        "schema": "traceana.analysis/1",
        "trace": {"file": "evil|`<file>`\n.json", "steps": 2},
        "device": {"name": "GPU|<x>`", "key": "k|y", "peak_tflops": {"fp32|`": 10.0, "fp16_tc": 100.0},
                   "dram_gbps": 1000.0, "notes": ["note </details> | x"]},
        "coverage": {"device_time_us": 50000.0, "modeled_time_us": 40000.0, "opaque_time_us": 5000.0,
                     "unmodeled_time_us": 5000.0, "attributed_time_us": 50000.0,
                     "opaque_by_cause": {"no|shapes": 5000.0}, "unmodeled_by_op": {h: 10.0 for h in HOSTILE}},
        "breakdown": {"by_bound": {"memory": 40000.0, "unmodelled": 5000.0, "opaque": 5000.0}, "total_us": 50000.0},
        "ops": ops,
        "explanations": [{"op": "op0", "title": h, "lines": [h, "```", "````` five", h]} for h in HOSTILE],
        "findings": [{"kind": "x", "title": h, "text": h, "ops": ["op0"], "saving_us": 1234.0} for h in HOSTILE],
        "warnings": HOSTILE * 2,
    }


def _prose(md: str) -> str:
    """md without its fenced code blocks (where text is literal)."""
    return re.sub(r"^(`{3,})text\n.*?^\1$", "", md, flags=re.S | re.M)


@pytest.mark.parametrize("rel", all_shared_traces())
def test_every_shared_trace_fits_a_comment_and_lints_clean(rel):
    a = analysis(rel)
    md = render_markdown(a)
    # the file as written (the ownership marker line appended), in UTF-8 bytes: µ, × and … are 2-3 bytes
    # each, so a budget in characters let hta/rank0's comment reach 8,089 bytes
    assert len(stamp_markdown(md).encode("utf-8")) <= SHORT_CHARS == 8_000
    assert "traceana" in md.splitlines()[0]
    assert problems(md) == []
    long = render_markdown(a, long=True)
    assert len(long) < MAX_CHARS < 65_536
    assert problems(long) == []


@pytest.mark.parametrize("long", [False, True])
def test_hostile_names_cannot_break_the_markdown(long):
    md = render_markdown(hostile_analysis(), long=long)
    assert problems(md) == []
    prose = _prose(md)
    assert "<script" not in prose and "&lt;script&gt;" in prose
    # the only <details> tags are ours: one opening and one closing per folded block
    assert prose.count("<details><summary>") == prose.count("\n</details>") == prose.count("</details>")
    assert "<b>" not in prose
    assert re.search(r"(?<!\\)\[link(?<!\\)\]\(", prose) is None  # brackets escaped: no link
    top_rows = [ln for ln in md.splitlines() if ln.startswith("| aten::evil")]
    full_rows = [ln for ln in md.splitlines() if re.match(r"\| \d+ \| aten::evil", ln)]
    assert top_rows and all(pipes(r) == 7 for r in top_rows)  # 6 columns
    assert (full_rows and all(pipes(r) == 14 for r in full_rows)) or not long  # 13 columns (the long form's table)
    assert "\\|" in md  # the pipe in "aten::evil|name" is escaped, not a cell border
    assert "\u2028" not in md and "\r" not in md


def test_huge_hostile_analysis_stays_under_the_limit_with_every_block_closed():
    a = hostile_analysis(5000)
    for op in a["ops"]:
        op["name"] = (op["name"] + "|`<&") * 40
    a["warnings"] = ["<&|`" * 500] * 500
    md = render_markdown(a, long=True)
    assert len(md) < MAX_CHARS
    assert problems(md) == []
    assert "more op signatures do not fit" in md
    short = render_markdown(a)
    assert len(short) <= SHORT_CHARS and problems(short) == []


def test_long_form_headline_order_and_content():
    a = hostile_analysis()
    md = render_markdown(a, long=True)
    lines = md.splitlines()
    assert lines[0].startswith("# traceana: ")
    assert lines[2].startswith("**Where the time went:** ")
    order = [md.index(h) for h in ("**Device:**", "**Peaks:**", "## Time by bound", "## Findings",
                                   "## Top 15 of 40 op signatures", "## Coverage", "## Warnings", "## Details")]
    assert order == sorted(order)
    assert "(saves up to 1.234 ms)" in md  # 1234 µs / 1000 = 1.234 ms
    # memory 40000 / 50000 total = 80.0%
    assert "| memory | 40.00 ms | 80.0% |" in md
    # three warnings above the fold, the other 2 * 10 + 1 device note - 3 = 18 folded
    assert "<details><summary>18 more warnings</summary>" in md
    assert "<details><summary>All 40 op signatures</summary>" in md


@pytest.mark.parametrize("long", [False, True])
def test_image_link_is_escaped(long):
    md = render_markdown(hostile_analysis(3), image="charts/a b)(<x>.svg", long=long)
    assert "![roofline chart](<charts/a%20b%29%28%3Cx%3E.svg>)" in md
    assert problems(md) == []


def test_empty_and_small_analyses():
    for long in (False, True):
        assert render_markdown({}, long=long).startswith("# traceana: trace")
        assert problems(render_markdown({}, long=long)) == []
    a = hostile_analysis(3)
    md = render_markdown(a, long=True)
    assert "All 3 op signatures" not in md  # the top table already shows every op
