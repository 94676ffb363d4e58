"""What every format says first (render/first.py): the device line, the ledger's sentence and
terms, "Do this first" (the plan, each lever with its saving and the span after it), findings
grouped into cards ordered by saving; and the markdown PR comment built from them (at most
8,000 characters on every shared trace, the diff too). Browser checks of the same page are in
test_browser.py (test_first_screen_at_1280x900)."""

from __future__ import annotations

import html
import re

import pytest

from tests.analyses import analysis
from tests.mdlint import problems
from traceana.render import first
from traceana.render.html import build_view, render_html
from traceana.render.markdown import SHORT_CHARS, render_markdown
from traceana.units import kernel_names

SHARED = {"rank0": "hta/rank0.json.gz", "qwen": "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
          "vllm": "tracelens/vllm_decode_full/graph_execution.json.gz",
          "resnet": "kineto/worker0.1623143089861.pt.trace.json.gz"}


def _finding(i: int, kind: str, saving: float, group: str | None = None, **kw) -> dict:
    f = {"id": f"f{i}", "kind": kind, "title": f"{kind} finding {i}", "saving_us": saving, "lever": saving > 0,
         "confidence": "high", "text": f"Arithmetic of {i}: 2*3 = 6. Then advice {i}.", "ops": []}
    if group:
        f["group"] = group
    return {**f, **kw}


def ledger_analysis() -> dict:
    """A primary device of 1,000 µs over 4 steps (median 240 µs): 600 µs of kernels, 100 of
    exposed communication, 300 idle in a sync stall; three levers and twelve findings."""
    findings = [
        _finding(1, "sync_stall", 300.0, "sync:to_host", fix="Copy to pinned memory with non_blocking=True."),
        _finding(2, "memory_bound", 50.0, "memory_bound"),
        _finding(3, "memory_bound", 40.0, "memory_bound"),
        _finding(4, "fusion", 120.0),  # no group: grouped by kind
        _finding(5, "gemm_shape", 0.0, "gemm_shape"),  # a note: last
        *[_finding(6 + i, f"kind{i}", 10.0 - i) for i in range(8)],
    ]
    return {
        "schema": "traceana.analysis/1",
        "trace": {"file": "t.json"},
        "device": {"name": "NVIDIA H100 80GB HBM3", "key": "h100_sxm", "dram_gbps": 3350.0,
                   "peak_tflops": {"bf16_tc": 989.4, "fp32": 66.9}},
        "ops": [{"id": "op0", "name": "aten::mm", "peak_dtype": "bf16_tc", "flops": 1e9, "count": 2,
                 "device_time_us": 400.0, "bound": "compute"},
                {"id": "op1", "name": "aten::add", "peak_dtype": "fp32", "flops": 1e6, "count": 9,
                 "device_time_us": 200.0, "bound": "memory"}],
        "ledger": {"device": 0, "span_us": 1000.0, "busy_us": 700.0, "idle_us": 300.0, "steps": 4, "step_us": 240.0,
                   "sentence": "Of the 1.000 ms span: idle 300.0 µs (30.0%: sync stalls).",
                   "terms": [{"key": "compute", "group": "work", "us": 400.0, "label": "kernels: compute-bound",
                              "meaning": "kernels of compute-bound ops"},
                             {"key": "memory", "group": "work", "us": 200.0, "label": "kernels: memory-bound"},
                             {"key": "comm_wait", "group": "communication", "us": 100.0,
                              "label": "communication: waiting for other ranks"},
                             {"key": "sync", "group": "idle", "us": 300.0, "label": "idle: sync stall"}],
                   "communication": {"total_us": 150.0, "exposed_us": 100.0, "overlapped_us": 50.0},
                   "idle": {"stalls": [{"call": "cudaMemcpyAsync (synchronous DtoH)", "op": "aten::to", "count": 4,
                                        "idle_us": 300.0, "per_step_us": 75.0, "blocked_us": 320.0}],
                            "largest": []}},
        "plan": [{"finding": 0, "kind": "sync_stall", "title": "aten::to stalls the GPU", "saving_us": 300.0,
                  "confidence": "high", "span_after_us": 700.0, "span_now_us": 1000.0},
                 {"finding": 3, "kind": "fusion", "title": "Fuse add → mul", "saving_us": 120.0,
                  "confidence": "medium", "span_after_us": 580.0, "span_now_us": 1000.0}],
        "findings": findings,
    }


def test_plan_levers_carry_saving_span_after_and_step_after():
    p1, p2 = first.plan(ledger_analysis())
    assert p1["title"] == "aten::to stalls the GPU" and p1["fix"] == "Copy to pinned memory with non_blocking=True."
    assert p1["saving"] == "300.0 µs" and p1["after"] == "700.0 µs"
    assert p1["after_pct"] == "30.0%"  # (1000 - 700) / 1000
    assert p1["step_after"] == "165.0 µs"  # median step 240 - (1000 - 700) / 4 steps = 240 - 75
    assert p2["after"] == "580.0 µs" and p2["after_pct"] == "42.0%"  # this lever and the one above
    assert p2["step_after"] == "135.0 µs"  # 240 - 420 / 4
    assert p2["fix"] == "Arithmetic of 4: 2*3 = 6."  # no fix given: the first sentence of the text


def test_findings_are_grouped_and_ordered_by_saving():
    cs = first.cards(ledger_analysis())
    assert [c["key"] for c in cs[:3]] == ["sync:to_host", "fusion", "memory_bound"]
    mem = cs[2]
    assert mem["count"] == 2 and mem["saving"] == "90.0 µs"  # 50 + 40, the larger finding's title first
    assert mem["title"] == "memory_bound finding 2"
    assert cs[-1]["key"] == "gemm_shape" and cs[-1]["note"] and cs[-1]["saving"] == ""
    assert [c["saving_us"] for c in cs] == sorted((c["saving_us"] for c in cs), reverse=True)


def test_terms_and_device_line():
    a = ledger_analysis()
    ts = first.terms(a)
    assert [(t["key"], t["pct"]) for t in ts] == [("compute", "40.0%"), ("memory", "20.0%"), ("comm_wait", "10.0%"),
                                                 ("sync", "30.0%")]
    assert sum(t["us"] for t in ts) == a["ledger"]["span_us"]  # each µs once
    # the roof most FLOPs ran against: 2 x 1e9 on bf16 tensor cores vs 9 x 1e6 on fp32
    assert first.device_line(a) == ("NVIDIA H100 80GB HBM3 (h100_sxm) · bf16 tensor 989 TFLOP/s · DRAM 3,350 GB/s · "
                                    "GPU 0 span 1.000 ms, 4 steps (median 240.0 µs)")


def test_html_first_screen_and_cards():
    a = ledger_analysis()
    v = build_view(a)
    assert [p["href"] for p in v["plan"]] == ["#f-f1", "#f-f4"]  # each lever links to its card
    assert len(v["cards"]) == first.CARDS_BEFORE_FOLD == 8 and len(v["more_cards"]) == 12 - 8
    page = render_html(a)
    head = page.split('<main>')[0]
    assert head.index('class="devline"') < head.index('class="verdict"') < head.index('id="plan"')
    assert "saves up to 300.0 µs" in head and "<strong>700.0 µs</strong> (30.0% shorter)" in head
    assert "show 4 more</summary>" in page
    # the terms table and the idle table: the ledger's numbers, each term once
    assert page.count("idle: sync stall</td>") == 2  # where the time went, and idle by cause
    assert "<td>cudaMemcpyAsync (synchronous DtoH)</td><td>aten::to</td>" in page
    assert 'id="time"' not in page  # no second busy-by-bound figure beside the ledger


def test_markdown_headline_of_a_ledger_analysis():
    md = render_markdown(ledger_analysis())
    assert len(md) <= SHORT_CHARS and problems(md) == []
    order = [md.index(x) for x in ("**Device:**", "**Where the time went:**", "### Do this first", "### Top 2 of",
                                   "<details><summary>Where the time went", "<details><summary>Findings")]
    assert order == sorted(order)
    assert ("1. **aten::to stalls the GPU** — saves up to 300.0 µs; span after it: 700.0 µs (30.0% shorter), "
            "median step 240.0 µs → ≈ 165.0 µs; high confidence \\") in md


@pytest.mark.parametrize("key", list(SHARED))
def test_shared_traces_first_screen_reads_the_ledger(key):
    a = analysis(SHARED[key])
    md = render_markdown(a)
    assert len(md) <= SHORT_CHARS and problems(md) == []
    assert first.sentence(a) and "**Where the time went:** " in md
    page = render_html(a)
    # every term once in the terms table, with the ledger's time; the sentence heads the page
    table = page.split('class="cov terms"')[1].split("</table>")[0]
    for t in first.terms(a):
        assert f"{html.escape(t['label'], quote=False)}</td><td class=\"num\">{t['time']}</td>" in table
    assert html.escape(first.sentence(a), quote=False) in page.split("<main>")[0]
    levers = first.plan(a)
    assert 1 <= len(levers) <= 3 and page.split('id="plan"')[1].split("</section>")[0].count("<li>") == len(levers)
    if key == "rank0":  # the sync stall behind aten::to leads
        assert levers[0]["title"].startswith("aten::to")


def test_shared_diff_markdown_fits():
    from traceana.compare.runs import diff_analyses
    from traceana.render.diff_markdown import render_diff_markdown

    d = diff_analyses(analysis("hta/control.json.gz"), analysis("hta/test.json.gz"))
    md = render_diff_markdown(d)
    assert len(md) <= SHORT_CHARS and problems(md) == []
    assert 60_000 < len(render_diff_markdown(d, long=True)) < 65_000  # the long form keeps today's detail


def test_colliding_kernel_names_are_told_apart_by_template_arguments():
    names = ["cutlass::gemm::kernel::GemmKernel<cutlass::gemm::threadblock::MmaPipelined<"
             "cutlass::gemm::GemmShape<128, 128, 8>, float>, cutlass::epilogue::Epilogue<float, 4>, true>",
             "cutlass::gemm::kernel::GemmKernel<cutlass::gemm::threadblock::MmaPipelined<"
             "cutlass::gemm::GemmShape<64, 64, 8>, float>, cutlass::epilogue::Epilogue<float, 4>, true>",
             "cutlass::gemm::kernel::GemmKernel<cutlass::gemm::threadblock::MmaPipelined<"
             "cutlass::gemm::GemmShape<128, 128, 8>, float>, cutlass::epilogue::Epilogue<float, 4>, false>",
             "aten::mm", "aten::mm"]
    labels = kernel_names(names)
    assert labels == ["GemmKernel<MmaPipelined<GemmShape<128, 128, 8>, …>, …, true>",
                      "GemmKernel<MmaPipelined<GemmShape<64, 64, 8>, …>, …, true>",
                      "GemmKernel<MmaPipelined<GemmShape<128, 128, 8>, …>, …, false>",
                      "aten::mm", "aten::mm"]  # equal in full: the shape column tells them apart
    for label in labels:  # never cut inside a template: every '<' closed
        assert label.count("<") == label.count(">")


def test_lambda_kernels_are_named_after_their_function():
    names = ["void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::"
             "{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::{lambda(c10::BFloat16)#1}, "
             "std::array<char*, 2ul> >(int, at::native::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}, "
             "std::array<char*, 2ul>)",
             "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
             "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"]
    assert kernel_names(names) == ["vectorized_elementwise_kernel<…, silu_kernel::lambda(BFloat16), …>",
                                   "vectorized_elementwise_kernel<…, FillFunctor<float>, …>"]


def test_shared_traces_have_no_colliding_names_in_their_tables():
    for rel in ("hta/rank0.json.gz", "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"):
        ops = analysis(rel)["ops"]
        labels = kernel_names([o["name"] for o in ops])
        by_label: dict[str, set[str]] = {}
        for o, label in zip(ops, labels):
            by_label.setdefault(label, set()).add(o["name"])
        assert all(len(v) == 1 for v in by_label.values())  # one label, one kernel
        assert all(lb.count("<") == lb.replace("->", "").count(">") for lb in labels)
        assert not any(re.search(r"<[^<>]*…$", lb) for lb in labels)


def test_device_line_roof_from_kernel_names_when_no_op_is_costed():
    # a trace without shapes costs no op: the roof named is that of the matrix kernels' time, read from
    # their names (12.79 ms bf16 GEMMs + 3.86 ms bf16 flash attention on tensor cores = 16.65 ms on bf16_tc,
    # against 0.0035 ms of an fp32 CUTLASS GEMM on CUDA cores), never the device's highest peak (int8 1,979)
    from traceana.render.first import device_line

    a = {"device": {"name": "NVIDIA H100 80GB HBM3", "key": "h100_sxm", "dram_gbps": 3350,
                    "peak_tflops": {"fp32": 67, "tf32_tc": 494.7, "bf16_tc": 989.4, "fp16_tc": 989.4,
                                    "fp8_tc": 1978.9, "int8_tc": 1978.9}},
         "ops": [{"name": "aten::mm", "opaque": True, "flops": None, "count": 241}],
         "kernels": {"rows": [
             {"class": "gemm", "dtype": "bf16", "math": "bf16", "tensor_cores": True, "time_us": 12789.9},
             {"class": "attention", "dtype": "bf16", "math": "bf16", "tensor_cores": True, "time_us": 3855.5},
             {"class": "elementwise", "dtype": "bf16", "math": None, "tensor_cores": None, "time_us": 13147.8},
             {"class": "gemm", "dtype": "fp32", "math": None, "tensor_cores": False, "time_us": 3.5}]}}
    assert "bf16 tensor 989 TFLOP/s" in device_line(a)
