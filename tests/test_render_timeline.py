"""The report's first picture (traceana/render/timeline.py): stacked bars per device, the step timeline's data."""

from __future__ import annotations

import json
import re

import pytest

from tests.analyses import analysis
from traceana.render.views import fmt_time_us
from traceana.render.views import fmt_pct
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


def _page_timeline(a: dict) -> dict:
    page = render_html(a)
    block = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    return json.loads(block)["timeline"]


def _interval(t: dict, corr: int) -> tuple[dict, int]:
    (hit,) = [(lane, i) for lane in t["lanes"] for i, c in enumerate(lane["corr"]) if c == corr]
    return hit


def test_qwen_hover_names_the_kernel_its_op_and_its_launch():
    a = analysis("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    t = _page_timeline(a)
    # correlation 692104: the flash attention kernel, 1428625766429.453 .. +119.647 µs on stream 7, launched by
    # cudaLaunchKernel at 1428625764923.494 on thread 25286 inside aten::_flash_attention_forward
    lane, i = _interval(t, 692104)
    k = lane["kernel"][i]
    assert t["kernels"]["short"][k] == "flash_fwd_kernel"
    assert t["kernels"]["full"][k].startswith("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel")
    # the window starts at the step's first kernel, 1428625731933.096: 1428625766429.453 - 1428625731933.096 = 34496.357
    assert a["timeline"]["start_us"] == 1428625731933.096
    assert lane["start"][i] == 34496.36 and lane["dur"][i] == 119.65 and lane["n"][i] == 1 and lane["stream"] == "7"
    op = t["ops"][str(lane["op"][i])]
    row = a["ops"][lane["op"][i]]
    assert op["name"] == row["name"] == "aten::_flash_attention_forward"
    assert op["bound"] == row["bound"] == "memory" and op["roof"] == fmt_pct(row["roof_pct"]) == "19.4%"
    assert op["verdict"] == "memory, 19.4% of roof"
    # the link: launched at 1428625764923.494 - 1428625731933.096 = 32990.398 on thread 25286, the only one drawn
    assert lane["launch"][i] == 32990.4 and t["calls"][lane["call"][i]] == "cudaLaunchKernel"
    (th,) = t["threads"]
    assert lane["thread"][i] == 0 and th["thread"] == "25286/25286" and th["tid"] == "25286"
    # 1,699 kernels in the window; 1,198 launched from that thread, the other 501 have no launch in the trace
    assert th["launched"] == "1,198" and sum(x == -1 for x in lane["thread"]) == 501 == 1699 - 1198
    assert sum(c == -1 for c in lane["call"]) == 501
    # the thread's outermost op around the launch: aten::scaled_dot_product_attention, 1428625764882.633 for
    # 54.971 µs: 1428625764882.633 - 1428625731933.096 = 32949.537
    ops = th["ops"]
    j = max(x for x, s in enumerate(ops["start"]) if s <= lane["launch"][i])
    assert t["cpu_names"][ops["name"][j]] == "aten::scaled_dot_product_attention"
    assert (ops["start"][j], ops["dur"][j]) == (32949.54, 54.97)
    # the CPU range: the step's 47.15 ms, from 36.92 µs before the first kernel
    assert t["cpu_range"] == [-36.92, 47114.48] and t["notes"] == []


def test_rank0_draws_both_launching_threads_and_links_a_collective_to_the_backward_thread():
    a = analysis("hta/rank0.json.gz")
    t = _page_timeline(a)
    # the step's annotation lives on thread 4515 (drawn first); the backward thread 25556 launched the rest
    assert [th["thread"] for th in t["threads"]] == ["4515/4515", "4515/25556"]
    assert [th["launched"] for th in t["threads"]] == ["1,313", "966"]  # 1,313 + 966 = 2,279: every drawn kernel
    assert sum(len(lane["start"]) for lane in t["lanes"]) == 2279
    lane, i = _interval(t, 884534)
    assert t["kernels"]["short"][lane["kernel"][i]].startswith("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t")
    assert t["ops"][str(lane["op"][i])]["name"] == "record_param_comms"
    assert lane["stream"] == "84" and lane["thread"][i] == 1  # launched from the backward thread
    assert [t["cpu_names"][n] for n in t["threads"][0]["annotations"]["name"]][:5] == [
        "## ModelGenerationCoordinator ##", "## zero_grad ##", "## copy_batch_to_gpu ##", "## wait_for_batch ##",
        "## forward ##"]


def test_hostile_kernel_op_and_thread_names_stay_data():
    evil = "</script><img src=x onerror=alert(1)>"
    a = {"ops": [{"name": evil, "bound": "memory", "roof_pct": 50.0}],
         "timeline": {"dur_us": 10.0, "categories": ["memory"], "gap_causes": [], "kernels": [f"void {evil}<int>()"],
                      "cpu_names": [evil], "cpu_range": [-5, 10],
                      "threads": [{"thread": f"1/{evil}", "launched": 1,
                                   "ops": {"start": [-5], "dur": [4], "name": [0], "n": [1]}}],
                      "lanes": [{"stream": evil, "events": 1, "busy_us": 2.0, "start": [0], "dur": [2], "op": [0],
                                 "cat": [0], "n": [1], "kernel": [0], "corr": [5], "call": [0], "thread": [0],
                                 "launch": [-3]}], "calls": [evil]}}
    page = render_html(a)
    assert "<img" not in page
    block = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    assert "</" not in block
    t = json.loads(block)["timeline"]
    assert t["kernels"]["full"] == [f"void {evil}<int>()"] and t["cpu_names"] == [evil]
    assert t["threads"][0]["thread"] == f"1/{evil}" and t["lanes"][0]["stream"] == evil[:19] + "…"  # cut to 20
    assert t["lanes"][0]["thread"] == [0] and t["lanes"][0]["launch"] == [-3] and t["calls"] == [evil]


def test_link_columns_out_of_range_or_missing_read_as_none():
    a = {"timeline": {"dur_us": 10.0, "categories": ["memory"], "kernels": ["k"], "calls": ["cudaLaunchKernel"],
                      "threads": [],
                      "lanes": [{"stream": 1, "start": [0, 5], "dur": [1, 1], "op": [-1, -1], "cat": [0, 0],
                                 "kernel": [0, 7], "corr": [1, 2], "call": [0, 0], "thread": [0, -1], "launch": [1, 2]},
                                {"stream": 2, "start": [0], "dur": [1], "op": [-1], "cat": [0]}]}}
    t = timeline_data(a, [], [], set())
    one, two = t["lanes"]
    assert one["kernel"] == [0, -1] and one["thread"] == [-1, -1]  # no thread 0 is drawn
    assert one["call"] == [0, 0] and one["launch"] == [1, 2]  # launched, on a thread not drawn
    assert two["kernel"] == [-1] and two["corr"] == [-1] and two["thread"] == [-1] and two["launch"] == [0.0]


def test_many_long_kernel_names_keep_the_page_bounded():
    # 20,000 drawn kernels, each with its own 300-character name, and 10,000 CPU ops with their own names
    n = 20_000
    names = [f"void kernel_{i}<" + "x" * 300 + ">()" for i in range(n)]
    a = {"timeline": {"dur_us": float(n), "categories": ["memory"], "kernels": names,
                      "cpu_names": [f"aten::op_{i}" for i in range(10_000)],
                      "threads": [{"thread": "1/1", "launched": n,
                                   "ops": {"start": list(range(10_000)), "dur": [0.5] * 10_000,
                                           "name": list(range(10_000)), "n": [1] * 10_000}}],
                      "lanes": [{"stream": 7, "start": list(range(n)), "dur": [0.5] * n, "op": [-1] * n, "cat": [0] * n,
                                 "n": [1] * n, "kernel": list(range(n)), "corr": list(range(n)), "call": [-1] * n,
                                 "thread": [0] * n,
                                 "launch": list(range(n))}]}}
    t = timeline_data(a, [], [], set())
    # the first 5,000 names are kept (the other kernels' hover shows their op), each full name cut to
    # max(80, min(400, 400,000 / 5,000 = 80)) = 80 characters: 400,000 characters in all
    assert len(t["kernels"]["full"]) == len(t["kernels"]["short"]) == 5_000
    assert {len(f) for f in t["kernels"]["full"]} == {80}
    lane = t["lanes"][0]
    assert lane["kernel"][4_999] == 4_999 and lane["kernel"][5_000] == -1
    assert len(json.dumps(t)) < 2_500_000  # 20,000 x 7 columns of short numbers + 5,000 x (80 + <= 100) characters
    assert len(t["threads"][0]["ops"]["start"]) == 10_000 and len(t["cpu_names"]) == 10_000
