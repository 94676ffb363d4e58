"""The report's first picture (traceana/render/timeline.py): stacked bars per device, the step timeline's data."""

from __future__ import annotations

import json
import re

import pytest

from tests.analyses import analysis
from traceana.render.views import fmt_time_us
from traceana.render.first import ledger
from traceana.render.html import render_html
from traceana.render.timeline import anatomy_bars, timeline_data, window_text


def test_the_primary_bar_is_the_ledger_and_fills_the_span():
    a = analysis("hta/rank0.json.gz")
    (dev,) = anatomy_bars(a)["devices"]
    led = ledger(a)
    span = led["span_us"]
    widths = {s["key"]: float(s["width"]) for s in dev["segments"]}
    assert sum(widths.values()) == pytest.approx(100.0, abs=0.01)  # the terms add up to the span
    for t in led["terms"]:  # each term once, its share of the span
        if t["us"] > 0:
            assert widths[t["key"]] == pytest.approx(t["us"] / span * 100, abs=1e-3)
    assert dev["primary"] and dev["span"] == fmt_time_us(span)
    big = max(led["terms"], key=lambda t: t["us"])
    title = next(s["title"] for s in dev["segments"] if s["key"] == big["key"])
    assert title.startswith(f"{big['label']}: {fmt_time_us(big['us'])} ({big['us'] / span * 100:.1f}% of the span)")


LEDGER = {"device": 0, "span_us": 100.0, "busy_us": 60.0, "idle_us": 40.0, "sentence": "Busy 60.0%.",
          "terms": [{"key": "compute", "group": "work", "us": 60.0, "share": 0.6, "label": "kernels: compute",
                     "meaning": "kernels of compute-bound ops"},
                    {"key": "sync", "group": "idle", "us": 40.0, "share": 0.4, "label": "idle: blocking sync",
                     "meaning": "the CPU waited in a blocking call"}],
          "communication": {"total_us": 0.0, "exposed_us": 0.0, "overlapped_us": 0.0}}


def test_other_devices_take_the_breakdown_and_their_own_idle_causes():
    a = {
        "ledger": LEDGER,
        "breakdown": {"devices": [
            {"device": 0, "span_us": 100.0, "streams": 1, "by_category": {"compute": 60.0, "idle": 40.0}},
            {"device": 1, "span_us": 200.0, "streams": 2, "by_category": {"memory": 150.0, "memcpy": 10.0,
                                                                          "idle": 40.0}},
            {"device": 2, "span_us": 50.0, "streams": 1, "by_category": {"memory": 30.0, "idle": 20.0}}]},
        "timeline": {"idle_by_device": [{"device": 1, "idle_by_cause": {"stream_wait": 30.0, "launch_gaps": 10.0}}]},
    }
    bars = anatomy_bars(a)
    d0, d1, d2 = bars["devices"]
    # the primary: the ledger's terms, 60 and 40 of its 100 µs span
    assert [(s["key"], s["width"]) for s in d0["segments"]] == [("compute", "60.000"), ("sync", "40.000")]
    assert d0["segments"][1]["title"] == "idle: blocking sync: 40.0 µs (40.0% of the span); the CPU waited in a blocking call"
    # device 1: 150 + 10 + 30 + 10 = 200 µs; widths 75%, 5%, 15%, 5%
    assert [(s["key"], s["width"]) for s in d1["segments"]] == [
        ("memory", "75.000"), ("memcpy", "5.000"), ("launch_gaps", "5.000"), ("stream_wait", "15.000")]
    # device 2 has no idle causes in the analysis: one idle segment
    assert [s["key"] for s in d2["segments"]] == ["memory", "idle"]
    assert [x["label"] for x in bars["legend"]] == ["kernels: compute", "idle: blocking sync", "memory",
                                                    "memcpy (exposed)", "idle: launch gaps",
                                                    "idle: waiting on a dependency", "idle"]


def test_timeline_data_is_checked_column_by_column():
    ops = [{"name": "aten::mm", "bound": "compute", "roof_pct": 61.0, "input_dims": [[8, 8], [8, 8]],
            "input_types": ["c10::BFloat16", "c10::BFloat16"], "mean_time_us": 12.0},
           {"name": "</script><script>alert(1)</script>", "bound": "memory", "over_roof": {"reason": "l2"}}]
    a = {"timeline": {
        "dur_us": 100.0, "categories": ["compute", "memory"], "gap_causes": ["host_wait"],
        "lanes": [
            {"stream": 7, "events": 3, "busy_us": 30.0, "start": [0, 10, 20], "dur": [5, 5, 5], "op": [0, 1, 9],
             "cat": [0, 1, 5], "n": [1, 1, 1]},
            {"stream": 8, "start": [0, 1], "dur": [1], "op": [0, 0], "cat": [0, 0]},  # a short column: dropped
            {"stream": 9, "start": [0, "x"], "dur": [1, 1], "op": [0, 0], "cat": [0, 0]},  # not a number: dropped
        ],
        "gaps": {"start": [5], "dur": [5], "cause": [0]}, "window": {"cpu_start_us": -3.0, "cpu_dur_us": 90.0}}}
    t = timeline_data(a, ops, ["op1", "op2"], {"op1"})
    (lane,) = t["lanes"]
    assert lane["op"] == [0, 1, -1] and lane["cat"] == [0, 1, -1]  # out of range: none
    assert sorted(t["ops"]) == ["0", "1"]
    assert t["ops"]["0"]["verdict"] == "compute, 61.0% of roof" and t["ops"]["0"]["row"] is True
    assert t["ops"]["1"]["verdict"] == "memory (over the roof: fits in L2)" and t["ops"]["1"]["row"] is False
    assert t["cpu"] == [-3.0, 90.0] and t["gaps"]["cause"] == [0]
    assert timeline_data({"timeline": {"dur_us": 5, "lanes": "nope"}}, ops, ["a", "b"], set()) is None
    # through the page: the hostile name is in the JSON block, which cannot close its script element
    page = render_html({"ops": ops, **a})
    block = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    assert "</" not in block and json.loads(block)["timeline"]["ops"]["1"]["name"].startswith("</script>")


def test_window_words():
    a = analysis("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    assert window_text(a).startswith("ProfilerStep#6, the only step (47.15 ms on the CPU): the GPU work launched")
    a = analysis("hta/rank0.json.gz")
    assert f"5 steps from {fmt_time_us(209748.0)} to {fmt_time_us(216483.0)}" in window_text(a)
    busiest = {"timeline": {"dur_us": 775.0, "events": 30, "aggregated": True, "intervals": 10, "bucket_us": 2.5,
                            "mixed": False, "window": {"kind": "busiest", "busy_us": 100.0}}}
    assert window_text(busiest) == (f"No ProfilerStep annotations: the busiest {fmt_time_us(775.0)} of the span "
                                    f"(GPU busy {fmt_time_us(100.0)} of it), 30 events; drawn as 10 intervals: "
                                    "kernels shorter than 2.50 µs merged into buckets of one category.")


def test_a_saved_analysis_without_a_timeline_still_renders():
    a = analysis("hta/rank0.json.gz")
    del a["timeline"]
    page = render_html(a)
    assert 'id="anatomy"' in page and 'id="tl-canvas"' not in page
    assert '"timeline":null' in page
