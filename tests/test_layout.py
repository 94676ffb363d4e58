"""NCHW<->NHWC conversion kernels around convolutions -> channels_last (traceana/diagnose/layout.py).

On shared traces: MIOpen's batched_transpose kernels around its NHWC implicit-GEMM convolutions (MI300X
ResNet, MI210 GPU-only trace) and cuDNN 9's nchwToNhwcKernel / nhwcToNchwKernel around a bf16 CUTLASS NHWC
convolution (H100 ViT patch embedding). On real model code: a transformers ResNet recorded in bf16 on CPU,
once with PyTorch's default NCHW tensors and once in channels_last, each re-shaped as a CUDA trace whose
convolutions run the way cuDNN runs a bf16 convolution (`cudnn_nhwc` below, after the H100 trace): an NHWC
tensor-core kernel, with the input and filter converted in and the output converted back when the recorded
strides say NCHW. The NCHW run gets the finding, the channels_last run does not.
"""

from __future__ import annotations

import gzip
import json
import math

import pytest

from tests.analyses import analysis
from tests.recorded import LAUNCH_LATENCY_US, STREAM, device_row, kernel_time_us

# cuDNN 9's kernels for a bf16 convolution on NCHW tensors (tracelens/h100 Falconsai, aten::cudnn_convolution)
TO_NHWC = ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, "
           "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, __nv_bfloat16 const*, "
           "__nv_bfloat16*)")
TO_NCHW = ("void cudnn::engines_precompiled::nhwcToNchwKernel<__nv_bfloat16, __nv_bfloat16, float, true, false, "
           "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nhwc2nchw_params_t<float>, __nv_bfloat16 const*, "
           "__nv_bfloat16*)")
FPROP = ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8>"
         "(cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8::Params)")
CONV_OPS = ("aten::_convolution", "aten::convolution", "aten::mkldnn_convolution", "aten::cudnn_convolution")


def _is_channels_last(dims, strides) -> bool:
    n, c, h, w = dims
    return list(strides) == [h * w * c, 1, w * c, c]


def _out_dims(args) -> list[int]:
    """[N, K, Ho, Wo] of a 2-D convolution from its recorded input, weight and stride / padding / dilation."""
    (n, _, h, w), (k, _, r, s) = args["Input Dims"][0], args["Input Dims"][1]
    conc = args["Concrete Inputs"]
    st, pad, dil = (json.loads(conc[i]) for i in (3, 4, 5))
    return [n, k, (h + 2 * pad[0] - dil[0] * (r - 1) - 1) // st[0] + 1, (w + 2 * pad[1] - dil[1] * (s - 1) - 1) // st[1] + 1]


def _free_window(op: dict, cpu: list[dict]) -> tuple[float, float]:
    """Where a launch of this convolution lands in its innermost convolution op and no child of it (the
    recorder puts launches at the op's end, where the CPU implementation's own children may run): the
    time after that op's last child, or before its first one when that is longer."""
    inner = [e for e in cpu if e["tid"] == op["tid"] and e["name"] in CONV_OPS and op["ts"] <= e["ts"]
             and e["ts"] + e["dur"] <= op["ts"] + op["dur"]]
    conv = max(inner, key=lambda e: e["ts"])  # the deepest: nested ops start later
    start, end = conv["ts"], conv["ts"] + conv["dur"]
    kids = [e for e in cpu if e["tid"] == op["tid"] and e is not conv and start <= e["ts"] < end]
    if not kids:
        return start, end
    first, last = min(e["ts"] for e in kids), max(e["ts"] + e["dur"] for e in kids)
    return max(((start, first), (last, end)), key=lambda w: w[1] - w[0])


def cudnn_nhwc(doc: dict) -> tuple[dict, float]:
    """The GPU-shaped trace with each convolution run as cuDNN runs a bf16 one: the NHWC tensor-core kernel,
    plus, when the input's recorded strides are NCHW, nchwToNhwc for the input and the filter before it and
    nhwcToNchw for the output after it, each its own launch (within the recorded one's time, so in the same op)
    and its own kernel on the stream
    (read + write of the tensor at the recorder's time model); the stream's later kernels move back by the time
    added. Returns the trace and the conversions' total time."""
    row = device_row()
    ev = doc["traceEvents"]
    ops = {e["args"]["External id"]: e for e in ev if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    launches = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
    kernels = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy")), key=lambda e: e["ts"])
    cpu = [e for e in ev if e.get("cat") == "cpu_op"]
    corr = max(launches) + 1
    added = 0.0
    timeline = []  # (kernel event, its launch)
    for k in kernels:
        op = ops.get(k["args"]["External id"])
        if op is None or op["name"] not in CONV_OPS:
            timeline.append((k, launches[k["args"]["correlation"]]))
            continue
        a = op["args"]
        k["name"] = FPROP
        launch = launches[k["args"]["correlation"]]
        if _is_channels_last(a["Input Dims"][0], a["Input Strides"][0]):
            timeline.append((k, launch))
            continue
        item = 2  # bf16
        pre = [(TO_NHWC, math.prod(a["Input Dims"][0]) * item), (TO_NHWC, math.prod(a["Input Dims"][1]) * item)]
        post = [(TO_NCHW, math.prod(_out_dims(a)) * item)]
        # the four launches in stream order, inside the innermost convolution op but in none of its children
        lo, hi = _free_window(op, cpu)
        lo, hi = lo + 0.1 * (hi - lo), hi - 0.1 * (hi - lo)  # clear of the window's edges
        q = (hi - lo) / 4
        slots = [lo, lo + q, lo + 3 * q]
        launch["ts"], launch["dur"] = lo + 2 * q, 0.8 * q
        made = []
        for i, (name, nbytes) in enumerate(pre + post):
            la = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": launch["pid"],
                  "tid": launch["tid"], "ts": slots[i], "dur": 0.8 * q,
                  "args": {"External id": a["External id"], "cbid": 211, "correlation": corr}}
            dur = kernel_time_us(2 * nbytes, 0.0, "c10::BFloat16", row)  # read + write, no arithmetic
            added += dur
            made.append(({"ph": "X", "cat": "kernel", "name": name, "pid": k["pid"], "tid": STREAM, "ts": 0.0,
                          "dur": dur, "args": {"External id": a["External id"], "device": 0, "context": 1,
                                               "stream": STREAM, "correlation": corr}}, la))
            ev.extend(made[-1])
            corr += 1
        timeline.extend(made[:len(pre)] + [(k, launch)] + made[len(pre):])
    free = -math.inf
    for k, la in timeline:  # the stream runs in order: each kernel after its launch and the previous kernel
        k["ts"] = max(la["ts"] + LAUNCH_LATENCY_US, free)
        free = k["ts"] + k["dur"]
    return doc, added


def _resnet(memory_format: str):
    def setup():
        import torch
        import transformers
        cfg = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")
        model = transformers.ResNetModel(cfg).eval().to(torch.bfloat16)
        pix = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
        if memory_format == "channels_last":
            model = model.to(memory_format=torch.channels_last)
            pix = pix.to(memory_format=torch.channels_last)

        def run():
            with torch.no_grad():
                model(pixel_values=pix)
        return run
    return setup


def _cudnn_trace(recorded_trace, tmp_path, memory_format):
    path = recorded_trace.custom(f"resnet_bf16_{memory_format}", _resnet(memory_format))
    with gzip.open(path, "rt") as f:
        doc, added = cudnn_nhwc(json.load(f))
    out = tmp_path / f"resnet_{memory_format}_cudnn.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)
    return str(out), added


def _layout(a):
    return [f for f in a["findings"] if f["kind"] == "layout"]


def test_recorded_resnet_nchw_gets_channels_last(recorded_trace, tmp_path):
    from traceana.analysis import analyze
    path, added = _cudnn_trace(recorded_trace, tmp_path, "nchw")
    a = analyze(path)
    (f,) = _layout(a)
    # 6 convolutions of the transformers ResNet (embedder 3->16 7x7/2, 4 3x3 in two basic blocks, one 1x1 shortcut)
    # each ran nchwToNhwc x2 + nhwcToNchw x1; the embedder's input [2, 3, 32, 32] bf16 is 2*3*32*32*2 = 12,288 B,
    # read + written = 24,576 B at 0.8 x 1555 GB/s = 0.0198 µs + 2 µs fixed per kernel (the recorder's time model)
    assert f["saving_us"] == pytest.approx(added)
    assert "nchwToNhwcKernel x12" in f["text"] and "nhwcToNchwKernel x6" in f["text"]
    # the innermost convolution op is the CPU build's (mkldnn_convolution where oneDNN takes bf16, else
    # _convolution's own path; on a GPU cudnn_convolution): read it from the rows, 6 calls in all
    (inner,) = {r["name"] for r in a["ops"] if r["id"] in set(f["ops"])}
    assert "convolution" in inner and f"{inner} (6 calls)" in f["text"]
    assert f["fix"].startswith("Run the model and its inputs in channels_last")
    assert f["group"] == "layout" and f["ops"]
    conv_rows = {r["id"] for r in a["ops"] if r["name"] == inner}
    assert set(f["ops"]) == conv_rows  # the conversions run inside the convolution ops
    # the conversions' time over the device time
    assert f"({added / a['coverage']['device_time_us'] * 100:.1f}%)" in f["title"]


def test_recorded_resnet_channels_last_has_no_conversions(recorded_trace, tmp_path):
    from traceana.analysis import analyze
    path, added = _cudnn_trace(recorded_trace, tmp_path, "channels_last")
    assert added == 0.0  # every convolution's input was NHWC in memory: cuDNN converts nothing
    assert _layout(analyze(path)) == []


def test_miopen_batched_transposes_on_mi300_resnet():
    """ResNet training on MI300X (bf16, NCHW): MIOpen's NHWC implicit-GEMM solvers (igemm_*_nhwc_bf16) run
    batched_transpose kernels around each convolution: 705 inside aten::miopen_convolution /
    aten::convolution_backward and 210 more that the trace links to no op (launched before the profiled
    window) but that run next to a convolution kernel on their stream (CK's kernel_batched_gemm_xdlops_bwd_weight
    included: a convolution's weight gradient run as a batched GEMM): 5.216 ms, 5.2% of device time."""
    a = analysis("tracelens/mi300/resnet_act_checkpoint.json.gz")
    (f,) = _layout(a)
    assert f["saving_us"] == pytest.approx(5216.249, abs=0.01)
    assert "915 layout-conversion kernels" in f["text"] and "210 with no op recorded" in f["text"]
    assert "aten::miopen_convolution (99 calls), aten::convolution_backward (60 calls)" in f["text"]
    assert "transpose_NCHW2CNHW" not in f["text"]  # MIOpen's CNHW transposes are another layout
    assert f["estimated"] is True


def test_cudnn_conversions_on_h100_vit_patch_embedding():
    """Falconsai ViT on H100: the patch embedding (aten::cudnn_convolution, [4, 3, 224, 224] bf16 NCHW with a
    [768, 3, 16, 16] filter) runs cuDNN's nchwToNhwcKernel twice (10.464 + 10.4 µs), the CUTLASS NHWC fprop
    kernel and nhwcToNchwKernel once (2.208 µs): 23.072 µs of conversions, 1.9% of the 1.221 ms of device time."""
    a = analysis("tracelens/h100/Falconsai_nsfw_image_detection__1016002.json.gz")
    (f,) = _layout(a)
    assert f["saving_us"] == pytest.approx(10.464 + 10.4 + 2.208)
    assert "aten::cudnn_convolution (1 call)" in f["text"] and "nhwc_align8" in f["text"]
    assert f["estimated"] is False


def test_below_the_share_no_finding_on_kineto_resnet():
    """ResNet-50 on V100 (2021, fp32): cuDNN converted around 6 of its convolution calls (453 + 105 µs), 0.09%
    of device time: under 0.5%, no finding."""
    assert _layout(analysis("kineto/worker0.1623143089861.pt.trace.json.gz")) == []

