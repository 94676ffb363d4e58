"""One voice: traceana/units.py formats every number, shape, dtype and kernel name the reports
show, and the rendered reports of the shared traces carry none of the old slips ("1 calls",
"0 FLOPs FLOPs", "(fp32 (CUDA cores / vector))", c10:: dtypes, "1 op signatures")."""

from __future__ import annotations

import html
import json
import re

import pytest

from tests.analyses import analysis
from traceana import units as u
from traceana.render.views import fmt_time_us
from traceana.render.html import render_html
from traceana.render.markdown import render_markdown
from traceana.roofline.judge import PEAK_LABEL


def test_times_sizes_counts_and_rates():
    assert u.us(2167.0) == "2.167 ms"  # 2167 µs / 1000
    assert u.us(230_210.0) == "230.21 ms"
    assert u.us(8.3) == "8.30 µs" and u.us(504.3) == "504.3 µs" and u.us(2_300_000) == "2.30 s"
    assert u.us(0.00725) == "0.00725 µs"  # three significant digits below 0.1 µs
    assert u.us(None) == u.MISSING == "—"
    assert fmt_time_us is u.us  # the renderers' name for it is the same function
    assert u.nbytes(268_435_456) == "268,435,456 B (256 MiB)"  # 2**28 B = 256 MiB
    assert u.bytes_iec(55_599_168) == "53.0 MiB"  # 55,599,168 / 2**20 = 53.02
    assert u.si(51.6e9) == "51.6 G" and u.si(0) == "0"
    assert u.flops(0) == "0 FLOPs" and u.flops(1) == "1 FLOP" and u.flops(67_108_864) == "67,108,864 FLOPs"
    assert u.rate_tflops(8.1) == "8.10 TFLOP/s" and u.rate_tflops(0.312) == "312 GFLOP/s"
    assert u.rate_gbps(3350) == "3,350 GB/s" and u.rate_gbps(12.04) == "12.0 GB/s"


def test_plurals_agree():
    assert u.plural(1, "call") == "1 call" and u.plural(2, "call") == "2 calls"
    assert u.plural(1024, "kernel") == "1,024 kernels"
    assert u.plural(1, "launch", "launches") == "1 launch" and u.plural(3, "launch", "launches") == "3 launches"
    assert u.plural(1, "op signature") == "1 op signature"


def test_dims_and_dtypes():
    assert u.dims([[8192, 8192], [8192], []]) == "8192×8192, 8192, ()"
    assert u.dims([[16, 559, 16, 64], [], [], [], []], collapse=True) == "16×559×16×64, ()\u00a0×4"
    assert u.dims([[[2, 3], [4, 5]], []]) == "[2×3, 4×5], ()"  # a TensorList argument
    assert u.dtype("c10::BFloat16") == "bf16" and u.dtype("c10::Half") == "fp16" and u.dtype("float") == "fp32"
    assert u.dtype("c10::Float8_e4m3fn") == "fp8 e4m3"
    # distinct tensor dtypes in order; Scalar arguments are not tensors
    assert u.dtypes(["c10::BFloat16", "c10::BFloat16", "Scalar", "float"]) == "bf16, fp32"
    assert u.op_label("aten::mm", [[8192, 8192], [8192, 8192]], "bf16") == "aten::mm (8192×8192, 8192×8192; bf16)"


@pytest.mark.parametrize("name, short", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
     "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int, "
     "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
     "at::detail::Array<char*, 2>)", "vectorized_elementwise_kernel"),
    ("cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>",
     "cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4"),
    ("void cutlass::device_kernel<flash::FlashAttnFwdSm90<cutlass::bfloat16_t, 128>>(flash::Params)",
     "FlashAttnFwdSm90"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 8, false, false>(float*, int)",
     "softmax_warp_forward"),
    ("void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)", "reduce_kernel"),
    ("ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_nn"),
    ("aten::mm", "aten::mm"),
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
    ("nccl:all_reduce", "nccl:all_reduce"),
    ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
])
def test_kernel_names_shortened_to_the_readable_part(name, short):
    assert u.kernel_name(name) == short


def test_peak_labels_have_no_nested_parentheses():
    assert u.peak_name("bf16_tc") == "bf16 tensor" and u.peak_name("fp32") == "fp32 vector"
    assert all("(" not in v for v in PEAK_LABEL.values())


def test_speed_changes():
    assert u.speed(1350, 1000) == "1.35× faster"  # 1350 / 1000
    assert u.speed(1000, 1200) == "1.20× slower"  # 1200 / 1000
    assert u.speed(1000, 1001) == "same" and u.speed(0, 10) == ""
    assert u.signed_us(-1200) == "−1.200 ms" and u.signed_us(56) == "+56.0 µs"


# ---------------------------------------------------------------- the reports of the shared traces

#: What a report must never say (looked for in visible text: a title attribute keeps the full
#: kernel name, template arguments and all, on hover).
BAD = {
    "singular with a plural noun": re.compile(
        r"(?<![\d,.])1 (calls|kernels|launches|gaps|op signatures|signatures|events|steps|launch calls)\b"),
    "unit said twice": re.compile(r"FLOPs? FLOPs?"),
    "nested parentheses in a roof label": re.compile(r"\((?:fp|bf|tf|int)\d+[^()]*\([^()]*\)\)"),
    "C++ dtype": re.compile(r"c10::(BFloat16|Half|Float8)"),
    "C++ kernel signature": re.compile(r"\bvoid [\w:]+<"),
}
SHARED = ["tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "hta/rank0.json.gz", "hta/control.json.gz",
          "hta/triton_example.json.gz", "tracelens/mi210/gpu_only_trace.json.gz",
          "tracelens/mi300/resnet_act_checkpoint.json.gz"]


def visible(page: str) -> str:
    """The page without its attributes' values (hover titles, the table filter's search keys) and
    without the timeline's full kernel names (the hover's small print under the short name, as a
    title attribute's)."""
    block = re.compile(r'(<script type="application/json" id="data">)(.*?)(</script>)', re.S)
    m = block.search(page)
    if m:
        data = json.loads(m.group(2))
        ((data.get("timeline") or {}).get("kernels") or {}).pop("full", None)
        page = page[:m.start(2)] + json.dumps(data, ensure_ascii=False) + page[m.end(2):]
    return html.unescape(re.sub(r' (title|data-search)="[^"]*"', "", page))


@pytest.mark.parametrize("rel", SHARED)
def test_shared_trace_reports_speak_with_one_voice(rel):
    a = analysis(rel)
    for fmt, text in (("md", render_markdown(a)), ("html", visible(render_html(a)))):
        for what, pattern in BAD.items():
            m = pattern.search(text)
            assert m is None, (rel, fmt, what, text[max(m.start() - 120, 0):m.end() + 40])


def test_qwen_ops_table_reads_as_people_write():
    a = analysis("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    page = render_html(a)
    md = render_markdown(a)
    # the top op: aten::mm of [8944, 1024] x [1024, 2816] in bf16, 48 calls
    top = a["ops"][0]
    assert top["name"] == "aten::mm" and top["input_dims"][:2] == [[8944, 1024], [1024, 2816]]
    assert '<td class="dims">8944×1024, 1024×2816</td>' in page
    assert '<td class="dtypes">bf16</td>' in page
    assert "| aten::mm | 8944×1024, 1024×2816 | bf16 |" in md
    # an sm90 cuBLAS kernel with no op: its name in the cell, the whole name first in the title
    kernel = next(o for o in a["ops"] if o["name"].startswith("void ") or "<" in o["name"])
    short = u.kernel_name(kernel["name"])
    assert "<" not in short and len(short) < len(kernel["name"])
    assert f'<td class="name" title="{html.escape(kernel["name"])}' in page
    assert f">{html.escape(short)}</td>" in page
    # every header says its unit
    for header in ("FLOP /call", "bytes /call", "TFLOP/s", "GB/s", "roof used (TFLOP/s)", "% of roof"):
        assert f"<button type=\"button\">{header}</button>" in page
    # the compute roof cell: the peak and which one, 989 TFLOP/s bf16 tensor cores on H100
    assert "989 bf16 tensor</td>" in page


def test_num_takes_numbers_and_nothing_else():
    """units.num: the fast paths for exact float / int give what the general path gives."""
    import numpy as np

    assert u.num(2.5) == 2.5 and u.num(3) == 3.0 and type(u.num(3)) is float
    assert u.num(-0.0) == 0.0 and u.num(np.float64(1.5)) == 1.5  # (np.float64 is a float; np.int64 no int)
    for bad in (float("nan"), float("inf"), -float("inf"), 10**400, True, False, None, "1", [1], np.float64("nan"),
                np.int64(7)):
        assert u.num(bad) is None, bad


def test_lazy_patterns_compile_on_first_use():
    """traceana.lazy_re: nothing compiled at import; the first use compiles and hands the pattern's own
    methods to the stand-in, so later calls are the compiled pattern's."""
    import re

    from traceana import lazy_re

    rx = lazy_re.compile(r"(?P<m>\d+)x(?P<n>\d+)", re.IGNORECASE)
    assert "search" not in vars(rx)  # not compiled until used
    m = rx.search("tile 128X64")
    assert m and (m.group("m"), m.group("n")) == ("128", "64")
    assert vars(rx)["search"] == rx.compiled().search  # later calls: the pattern's own bound method
    assert rx.pattern == r"(?P<m>\d+)x(?P<n>\d+)" and rx.flags & re.IGNORECASE and rx.groups == 2
    assert rx.sub("<t>", "a 1x2 b 3x4") == "a <t> b <t>" and [g.group() for g in rx.finditer("1x2,3x4")] == ["1x2", "3x4"]
    other = lazy_re.compile(r"a+")
    assert other.fullmatch("aaa") and not other.fullmatch("ab") and other.split("xaay") == ["x", "y"]
