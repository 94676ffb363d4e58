"""One account of the step: every figure that appears in two places is the same number (issue 21 item 1).

The ledger is computed once; the terminal, markdown (PR comment and long form), HTML, JSON and the API all
show its numbers, formatted by one function, so each is checked for the same text on every shared trace.
"""

from __future__ import annotations

import pytest
from markupsafe import escape

from tests.analyses import analysis
from tests.conftest import all_shared_traces
from traceana.render.views import fmt_time_us
from traceana.render import render
from traceana.render.first import plan, terms
from traceana.render.html import render_html
from traceana.render.md import md_text
from traceana.render.terminal import report_summary, term_text


@pytest.mark.parametrize("rel", all_shared_traces() or ["(no shared traces)"])
def test_one_quantity_has_one_number_everywhere(rel):
    if rel == "(no shared traces)":
        pytest.skip("../shared/traces is absent")
    a = analysis(rel)
    led = a.get("ledger")
    if not led:
        assert a["trace"]["gpu_events"] == 0
        return
    page, md, long_md = render_html(a), render(a, "md"), render(a, "md", long=True)
    term = report_summary(a, "out.html")
    # the sentence of where the time went, verbatim in every format
    assert term_text(led["sentence"]) in term, rel
    said = md_text(led["sentence"], None)
    assert said in md and said in long_md, rel
    assert str(escape(led["sentence"])) in page, rel
    # the header's span is the ledger's span (never the trace's CPU+GPU extent)
    span = f"span {fmt_time_us(led['span_us'])}"
    assert span in term and span in md and span in page, rel
    assert a["projection"]["span_now_us"] == pytest.approx(led["span_us"]), rel
    # every term of the account: the same time in the HTML's table and the long markdown
    for t in terms(a):
        assert t["time"] in page and t["time"] in long_md, (rel, t["key"])
    # Do this first: each lever's saving is its finding's, shown alike in the terminal, markdown and HTML
    for p, shown in zip(a["plan"], plan(a)):
        f = a["findings"][p["finding"]]
        mine = [a["findings"][i] for i in p["findings"]]
        assert p["kind"] == f["kind"] and all(g.get("group") == f.get("group") for g in mine), rel
        if len(mine) == 1:
            assert p["saving_us"] == f["saving_us"], rel
        else:  # one lever of several findings: together, each µs once, never more than their sum
            assert f["saving_us"] <= p["saving_us"] + 1e-6 <= sum(g["saving_us"] for g in mine) + 2e-6, rel
        assert p["span_now_us"] == pytest.approx(led["span_us"]), rel
        assert shown["saving"] == fmt_time_us(p["saving_us"])
        assert shown["saving"] in term and shown["saving"] in md and shown["saving"] in page, rel
    # the breakdown's primary device and the timeline's idle are the ledger's numbers
    dev = next(d for d in a["breakdown"]["devices"] if d["device"] == led["device"])
    comm = led["communication"]
    assert dev["by_category"]["communication"] == pytest.approx(comm["exposed_us"]), rel
    assert comm["total_us"] >= comm["exposed_us"] - 1e-6, rel
    assert dev["by_category"]["idle"] == pytest.approx(led["idle_us"]), rel
