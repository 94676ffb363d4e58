"""Traces without shapes keep their kernel-work levers: each shared trace, copied with its shapes removed (the
args "Input Dims", "Input type", "Input Strides", "Concrete Inputs" of every event, and the top-level
record_shapes flag: what torch.profiler writes with record_shapes off), still holds in its first three levers
a kernel-work lever (fusion, dtype, memory- or compute-bound) when the shaped trace has one there, now read
from the kernel account; a shared trace recorded without shapes gets one where its kernels call for it."""

from __future__ import annotations

import gzip

import msgspec
import pytest

from tests.analyses import analysis
from tests.conftest import shared_trace
from traceana.analysis import analyze

KERNEL_WORK = frozenset({"fusion", "tensor_core_dtype", "memory_bound", "compute_bound"})


def strip(src: str, dst) -> str:
    with gzip.open(src, "rb") as f:
        doc = msgspec.json.decode(f.read())
    doc.pop("record_shapes", None)
    for e in doc.get("traceEvents", []):
        a = e.get("args")
        if isinstance(a, dict):
            for k in ("Input Dims", "Input type", "Input Strides", "Concrete Inputs"):
                a.pop(k, None)
    with gzip.open(dst, "wb", compresslevel=1) as f:
        f.write(msgspec.json.encode(doc))
    return str(dst)


_STRIPPED: dict[str, dict] = {}


@pytest.fixture(scope="module")
def stripped(tmp_path_factory):
    """The analysis of shared trace REL with its shapes stripped (each stripped and analysed once)."""
    def get(rel: str) -> dict:
        if rel not in _STRIPPED:
            out = tmp_path_factory.mktemp("noshape") / "t.json.gz"
            _STRIPPED[rel] = analyze(strip(shared_trace(rel), out))
        return _STRIPPED[rel]
    return get


def first_three(a: dict) -> list[tuple[str, str | None]]:
    return [(p["kind"], a["findings"][p["finding"]].get("group")) for p in a["plan"][:3]]


@pytest.mark.parametrize("rel,lever", [
    # Qwen 0.5B bf16 inference, H100: the shaped fusion lever (residual add + RMSNorm, rotary) -> ATen element-wise
    # chains from the kernel names
    ("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", ("fusion", "fusion")),
    # the same on MI300X (shaped: compute-bound attention and mm, then fusion)
    ("tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", ("fusion", "fusion")),
    # OWLv2: attention written out as bmm -> softmax -> bmm (shaped: the unfused-attention lever) -> GEMM -> softmax
    # -> GEMM kernels
    ("tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz", ("fusion", "attention")),
    # ResNet50 training on V100, fp32 cuDNN convolutions (shaped: 20 signatures on faster tensor cores) -> fp32 kernels
    # on CUDA cores: fp16 autocast (Volta: no TF32)
    ("kineto/worker0.1623143089861.pt.trace.json.gz", ("tensor_core_dtype", "tensor_core_dtype")),
    # SGLang Qwen3-8B on MI300X, bf16 hipBLASLt GEMMs compute-bound (shaped) -> bf16 GEMM kernels: fp8
    ("tracelens/sglang/sglang_Qwen3-8B_prefilldecode.json.gz", ("tensor_core_dtype", "fp8")),
])
def test_stripped_traces_keep_their_kernel_work_lever(rel, lever, stripped):
    shaped = analysis(rel)
    assert {k for k, _ in first_three(shaped)} & KERNEL_WORK  # the shaped trace has one in its first three
    a = stripped(rel)
    assert a["trace"]["record_shapes"] is False
    assert lever in first_three(a)
    f = a["findings"][next(p["finding"] for p in a["plan"][:3] if (p["kind"], a["findings"][p["finding"]].get("group"))
                           == lever)]
    assert f["confidence"] == "low" and f["estimated"] is True  # read from kernel names, said as such
    # a lever from kernel names never claims more than the kernels' own time
    assert 0.0 < f["saving_us"] <= a["kernels"]["uncovered_us"]


def test_owlv2_attention_saving_is_the_softmax_time(stripped):
    a = stripped("tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz")
    (f,) = [f for f in a["findings"] if f.get("group") == "attention"]
    soft = sum(t["time_us"] for r in a["kernels"]["rows"] if r["class"] == "reduction" for t in r["top"]
               if "SoftMax" in t["name"] or "softmax" in t["name"])
    # 180 softmax kernels between two GEMMs; their time (262.42 ms cunn_SoftMaxForward + 0.12 ms softmax_warp_forward)
    # and the element-wise steps between (0.29 ms) are the saving: the GEMMs' work stays in a fused kernel
    assert "180 softmax kernels" in f["text"] and "cunn_SoftMaxForward" in f["text"]
    assert soft <= f["saving_us"] <= 1.01 * soft


def test_a_trace_recorded_without_shapes_gets_kernel_levers():
    """hta/df_index_resolver: DDP training on V100, recorded without shapes: fp32 volta_sgemm kernels are 40% of
    kernel time (fp16 autocast), NCCL all-reduce 36% (the communication lever, its size unknown)."""
    a = analysis("hta/df_index_resolver.json.gz")
    kinds = [p["kind"] for p in a["plan"]]
    assert "tensor_core_dtype" in kinds and "comm_unsized" in kinds
    f = next(f for f in a["findings"] if f["kind"] == "tensor_core_dtype")
    assert "fp16 tensor cores" in f["title"] and "volta_sgemm" in f["text"]
    c = next(f for f in a["findings"] if f["kind"] == "comm_unsized")
    assert c["saving_us"] <= a["ledger"]["communication"]["exposed_unsized_us"] + 1e-6
    assert "record_shapes=True" in c["text"] and "all-reduce" in c["text"]
