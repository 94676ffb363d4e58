"""`traceana diff`: signature matching, per-step normalisation, deltas, directories, renderers.

Synthetic analyses carry the arithmetic; the real pair is hta/control (A100) -> hta/test
(V100), the same recsys pipeline on two GPUs, 6 ProfilerSteps each.
"""

from __future__ import annotations

import html.parser
import json

import pytest

from tests.analyses import analysis, saved
from tests.conftest import shared_trace
from tests.mdlint import problems
from traceana.cli import main
from traceana.compare.runs import collapse_ops, diff_analyses, merge_analyses
from traceana.render.diff_html import render_diff_html
from traceana.render.diff_markdown import render_diff_markdown
from traceana.render.markdown import MAX_CHARS


def op(name, t, dims=((4, 4),), types=("float",), count=1, roof=None, bound="memory", **kw):
    row = {"name": name, "input_dims": [list(d) for d in dims], "input_types": list(types),
           "count": count, "device_time_us": t, "roofline_time_us": roof, "bound": bound,
           "roof_pct": (100.0 * roof * count / t) if roof is not None else None}
    row.update(kw)
    return row


def doc(ops, steps=0, device="NVIDIA A100-SXM4-80GB", key="a100", by_bound=None, cov=None):
    total = sum(o["device_time_us"] for o in ops)
    return {"schema": "traceana.analysis/1", "trace": {"file": "t.json", "steps": steps},
            "device": {"name": device, "key": key, "peak_tflops": {"fp32": 19.5}, "dram_gbps": 1555.0},
            "coverage": cov or {"device_time_us": total, "modeled_time_us": total, "unmodeled_time_us": 0.0},
            "breakdown": {"by_bound": by_bound or {"memory": total}, "total_us": total},
            "ops": ops, "findings": [], "warnings": []}


# ------------------------------------------------------------------ the pure diff


def test_per_step_deltas_and_totals():
    base = doc([op("aten::mm", 4000.0), op("aten::add", 1000.0)], steps=2)
    head = doc([op("aten::mm", 6600.0), op("aten::add", 1500.0)], steps=3)
    d = diff_analyses(base, head)
    assert d["normalisation"]["per"] == "step"
    mm = next(r for r in d["ops"] if r["name"] == "aten::mm")
    assert mm["base_us"] == pytest.approx(2000.0)  # 4000 µs / 2 steps
    assert mm["head_us"] == pytest.approx(2200.0)  # 6600 µs / 3 steps
    assert mm["delta_pct"] == pytest.approx(10.0)  # (2200 - 2000) / 2000 = 10%
    add = next(r for r in d["ops"] if r["name"] == "aten::add")
    assert add["delta_pct"] == pytest.approx(0.0)  # 1000 / 2 = 500 = 1500 / 3
    # total: (5000 / 2 = 2500) -> (8100 / 3 = 2700): (2700 - 2500) / 2500 = 8%
    assert d["total"]["base_us"] == pytest.approx(2500.0)
    assert d["total"]["delta_pct"] == pytest.approx(8.0)
    assert d["by_bound"]["memory"]["delta_pct"] == pytest.approx(8.0)
    # shares: mm head 2200 / 2700 = 81.48% of head time
    assert mm["head"]["share_pct"] == pytest.approx(81.48, abs=0.01)
    assert d["summary"] == {"matched": 2, "exact": 2, "new": 0, "vanished": 0, "slower": 1, "faster": 0,
                            "roof_changed": 0}
    assert d["device_note"] is None
    json.dumps(d, allow_nan=False)


def test_totals_when_a_side_has_no_steps():
    d = diff_analyses(doc([op("aten::mm", 4000.0)], steps=2), doc([op("aten::mm", 4000.0)], steps=0))
    assert d["normalisation"]["per"] == "run"
    assert "head has no ProfilerStep" in d["normalisation"]["note"]
    assert d["total"]["delta_pct"] == 0.0  # (4000 - 4000) / 4000


def test_matching_tiers_new_vanished_and_ambiguity():
    base = doc([op("aten::mm", 100.0, dims=((8, 8), (8, 8))),
                op("aten::bmm", 50.0, dims=((2, 4, 4),)),           # shape changes, unique -> "shape"
                op("aten::cat", 30.0, types=("float",)),            # dtype changes, unique -> "name"
                op("aten::copy_", 20.0, dims=((1,),)), op("aten::copy_", 10.0, dims=((2,),)),
                op("aten::gone", 5.0)])
    head = doc([op("aten::mm", 120.0, dims=((8, 8), (8, 8))),
                op("aten::bmm", 80.0, dims=((4, 4, 4),)),
                op("aten::cat", 30.0, types=("c10::Half",)),
                op("aten::copy_", 25.0, dims=((3,),)), op("aten::copy_", 15.0, dims=((4,),)),  # ambiguous
                op("aten::fresh", 7.0)])
    d = diff_analyses(base, head)
    how = {r["name"]: r["match"] for r in d["ops"]}
    assert how == {"aten::mm": "exact", "aten::bmm": "shape", "aten::cat": "name"}
    bmm = next(r for r in d["ops"] if r["name"] == "aten::bmm")
    assert bmm["head_input_dims"] == [[4, 4, 4]] and bmm["input_dims"] == [[2, 4, 4]]
    assert sorted(r["name"] for r in d["new"]) == ["aten::copy_", "aten::copy_", "aten::fresh"]
    assert sorted(r["name"] for r in d["vanished"]) == ["aten::copy_", "aten::copy_", "aten::gone"]
    # by name, copy_ sums its signatures: (20 + 10 = 30) -> (25 + 15 = 40)
    copy = next(r for r in d["by_name"] if r["name"] == "aten::copy_")
    assert (copy["base_us"], copy["head_us"], copy["delta_us"]) == (30.0, 40.0, 10.0)
    # largest |delta| first: bmm +30, mm +20, cat 0
    assert [r["name"] for r in d["ops"]] == ["aten::bmm", "aten::mm", "aten::cat"]


def test_rows_of_one_signature_are_summed_and_roof_recomputed():
    rows = [op("aten::mm", 100.0, count=2, roof=20.0, concrete_inputs=["", "1"]),
            op("aten::mm", 300.0, count=1, roof=20.0, concrete_inputs=["", "2"])]
    (g,) = collapse_ops(rows)
    assert g["count"] == 3 and g["device_time_us"] == 400.0
    assert g["roofline_total_us"] == pytest.approx(60.0)  # 20 * 2 + 20 * 1
    assert g["roof_pct"] == pytest.approx(15.0)  # 60 / 400 = 15%


def test_roof_change_and_devices():
    base = doc([op("aten::mm", 100.0, roof=60.0)])  # 60 / 100 = 60% of roof
    head = doc([op("aten::mm", 100.0, roof=45.0)], device="Tesla V100-SXM2-16GB", key="v100")  # 45%
    d = diff_analyses(base, head)
    (mm,) = d["ops"]
    assert mm["roof_delta_pp"] == pytest.approx(-15.0) and mm["roof_changed"]  # 45 - 60; |-15| > 10
    assert not diff_analyses(base, head, roof_threshold=20.0)["ops"][0]["roof_changed"]
    assert d["device_note"].startswith("Different devices: base ran on NVIDIA A100-SXM4-80GB, head on Tesla V100")


def test_merge_sums_per_signature_and_steps():
    a = doc([op("aten::mm", 100.0, roof=50.0), op("aten::add", 10.0)], steps=2)
    b = doc([op("aten::mm", 300.0, roof=50.0)], steps=3)
    m = merge_analyses([a, b], "runs/")
    assert m["trace"]["steps"] == 5  # 2 + 3
    mm = next(o for o in m["ops"] if o["name"] == "aten::mm")
    assert mm["count"] == 2 and mm["device_time_us"] == 400.0
    assert mm["roof_pct"] == pytest.approx(25.0)  # (50 + 50) / 400
    assert m["breakdown"]["total_us"] == 410.0 and m["coverage"]["device_time_us"] == 410.0


def test_renderers_escape_hostile_names():
    evil = "aten::x|`<script>`\n</details>"
    d = diff_analyses(doc([op(evil, 100.0), op("gone|<b>", 5.0)]),
                      doc([op(evil, 150.0), op("new|`x`", 5.0)], device="dev|<i>", key=None))
    md = render_diff_markdown(d)
    assert problems(md) == [] and len(md) < MAX_CHARS
    assert "<script" not in md and "<b>" not in md and "<i>" not in md
    page = render_diff_html(d)
    assert "<script" not in page and "&lt;script&gt;" in page
    parser = html.parser.HTMLParser()
    parser.feed(page)


# ------------------------------------------------------------------ the real pair, CLI


def test_cli_diff_real_pair_markdown(tmp_path, capsys):
    base = shared_trace("hta/control.json.gz")
    head = shared_trace("hta/test.json.gz")
    out = tmp_path / "d.md"
    assert main(["diff", base, head, "-o", str(out), "--fail-on", "time-regression=1%"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("traceana: --fail-on time-regression=1%: device time per step grew")
    md = out.read_text()
    assert md.startswith("# traceana diff: control.json.gz → test.json.gz")
    assert "Different devices: base ran on NVIDIA A100-PG509-200, head on Tesla V100-SXM2-16GB" in md
    assert "**Device time per step:**" in md and "6 ProfilerStep annotations" in md
    assert "## Biggest changes:" in md and "| record\\_param\\_comms | — | — |" in md
    assert "## Gates: 1 of 1 tripped" in md
    assert len(md) < MAX_CHARS and problems(md) == []
    # the numbers in the headline come from the analyses: total per step and its change
    c, t = analysis("hta/control.json.gz"), analysis("hta/test.json.gz")
    b_step = c["breakdown"]["total_us"] / c["trace"]["steps"]
    h_step = t["breakdown"]["total_us"] / t["trace"]["steps"]
    assert h_step > b_step * 1.01  # the V100 run is slower per step: HEAD=test regresses
    # a regression reads as one: the time it added, how many times slower, and the percentage
    assert (f"**+{(h_step - b_step) / 1000:.2f} ms ({h_step / b_step:.2f}× slower, "
            f"+{100 * (h_step - b_step) / b_step:.1f}%)**") in md


def test_cli_diff_non_regressing_direction_exits_0(tmp_path):
    base = saved("hta/test.json.gz", tmp_path)
    head = saved("hta/control.json.gz", tmp_path)
    out = tmp_path / "d.json"
    assert main(["diff", base, head, "-o", str(out), "-q", "--fail-on", "time-regression=1%"]) == 0
    d = json.loads(out.read_text())
    assert d["schema"] == "traceana.diff/1" and d["total"]["delta_pct"] < 0
    assert d["gates"] == [{"spec": "time-regression=1%", "ok": True, "messages": []}]
    assert d["summary"]["matched"] > 100 and d["summary"]["exact"] > 100


def test_cli_diff_directories_and_self(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for d in (a, b):
        saved("hta/sampled_rank-0.json.gz", d)
        saved("hta/sampled_rank-1.json.gz", d)
    out = tmp_path / "d.json"
    assert main(["diff", str(a), str(b), "-o", str(out), "-q", "--fail-on", "time-regression=0%",
                 "--fail-on", "op-regression=0%"]) == 0
    d = json.loads(out.read_text())
    r0, r1 = analysis("hta/sampled_rank-0.json.gz"), analysis("hta/sampled_rank-1.json.gz")
    assert d["base"]["steps"] == r0["trace"]["steps"] + r1["trace"]["steps"]
    # files are named by the traces the saved analyses came from
    assert d["base"]["label"] == "a/" and d["base"]["files"] == ["sampled_rank-0.json.gz",
                                                                 "sampled_rank-1.json.gz"]
    assert d["total"]["delta_us"] == 0 and d["new"] == [] and d["vanished"] == []
    per_step = (r0["breakdown"]["total_us"] + r1["breakdown"]["total_us"]) / d["base"]["steps"]
    assert d["total"]["base_us"] == pytest.approx(per_step)


def test_cli_diff_html_and_bad_inputs(tmp_path, capsys):
    t4 = str(tmp_path / "x.json")
    assert main(["report", str(shared_or_sample()), "-o", t4, "-q"]) == 0
    out = tmp_path / "d.html"
    assert main(["diff", t4, t4, "-o", str(out), "-q"]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "traceana diff" in page and "<script" not in page
    assert main(["diff", t4, str(tmp_path / "missing.json"), "-o", str(tmp_path / "e.md")]) == 2
    assert main(["diff", str(out), t4, "-o", str(tmp_path / "e.md")]) == 2  # an HTML file is not a trace
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["diff", str(empty), t4, "-o", str(tmp_path / "e.md")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "no .json or .json.gz files" in err


def shared_or_sample():
    from tests.conftest import SAMPLES

    return SAMPLES / "t4_seed_pow_mul.json"
