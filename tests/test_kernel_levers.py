"""The kernel account (analysis["kernels"]) and the levers read from kernel names when ops or shapes are
missing (traceana/diagnose/kernel_levers.py), on small traces with every number written out, then on a
model trace recorded on CPU with its shapes stripped."""

from __future__ import annotations

import gzip
import json

import pytest

from tests import synth as s
from traceana.analysis import analyze
from traceana.diagnose.kernel_dtypes import F_CUDA_CORES

V100 = {"id": 0, "name": "Tesla V100-SXM2-16GB", "computeMajor": 7, "computeMinor": 0, "numSms": 80,
        "totalGlobalMem": 16945512448, "warpSize": 32}
A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0, "numSms": 108,
        "totalGlobalMem": 85899345920, "warpSize": 32}
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "computeMinor": 0, "numSms": 132,
        "totalGlobalMem": 85520809984, "warpSize": 32}

SGEMM = "volta_sgemm_128x64_nn"
AMPERE_SGEMM = "ampere_sgemm_128x64_nn"
TF32 = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align4>(Params)"
HGEMM = "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn"
BF16_GEMM = "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT"
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3> >(int)")
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int)")
SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, "
           "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)")
BF16_BMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)"


def kernels_trace(tmp_path, kernels, props, name="t.json"):
    """One op with no shapes per kernel (aten::op_i), each launching its kernel; kernels back to back on
    stream 7 with 1 µs between: [(kernel name, µs)]."""
    ev, t = [], 0.0
    for i, (k, dur) in enumerate(kernels, 1):
        ev += [s.op(f"aten::op_{i}", t, 5, ext=i), s.launch(t + 1, corr=i, ext=i),
               s.kernel(k, t + 10, dur, corr=i, ext=i)]
        t += dur + 11
    return analyze(s.write(tmp_path, s.trace(ev, props=(props,)), name))


def of(a, kind, group=None):
    return [f for f in a["findings"] if f["kind"] == kind and (group is None or f.get("group") == group)]


def test_the_account_by_class_dtype_library(tmp_path):
    a = kernels_trace(tmp_path, [(SGEMM, 600.0), (HGEMM, 300.0), (ADD, 100.0)], V100)
    acc = a["kernels"]
    assert acc["total_us"] == 1000.0 and acc["uncovered_us"] == 1000.0  # no shapes: nothing costed
    # GEMM time 600 + 300 = 900; on tensor cores only the fp16 one: 300
    assert acc["matrix_us"] == 900.0 and acc["tensor_core_us"] == 300.0
    assert acc["by_class"] == {"gemm": 900.0, "elementwise": 100.0}
    rows = [(r["class"], r["dtype"], r["library"], r["tensor_cores"], r["time_us"])
            for r in acc["rows"]]
    assert rows == [("gemm", "fp32", "cuBLAS", False, 600.0), ("gemm", "fp16", "cuBLAS", True, 300.0),
                    ("elementwise", "fp32", "ATen", None, 100.0)]
    assert acc["rows"][0]["pct"] == pytest.approx(60.0) and acc["rows"][0]["top"][0]["name"] == SGEMM
    # the first screen's sentence: 90% GEMM, mostly fp32 (600 of 900 < 80%); 300 / 900 = 33% on tensor cores
    assert acc["sentence"] == ("Kernel time by kernel name: 90% gemm (mostly fp32, CUDA cores, cuBLAS), "
                               "10% elementwise (fp32, ATen); 33% of the matrix-kernel time on tensor cores.")


def test_fp32_gemms_on_volta_get_fp16_autocast_not_tf32(tmp_path):
    a = kernels_trace(tmp_path, [(SGEMM, 1000.0), (ADD, 20.0)], V100)
    (f,) = of(a, "tensor_core_dtype")
    # V100: fp32 15.7 TFLOP/s, fp16 tensor cores 125; the same work at 90% of the fp32 roof and the achievable 80% of
    # the fp16 one (roofline/achievable.py: no measurement published for Volta, the default):
    # 1000 x (15.7 x 0.9) / (125 x 0.8) = 141.3 µs -> saving 858.7 µs
    after = 1000.0 * (15.7 * F_CUDA_CORES) / (125.0 * 0.8)
    assert f["saving_us"] == pytest.approx(1000.0 - after) and after == pytest.approx(141.3, abs=1e-3)
    assert f["achievable_fraction"] == 0.8
    # were the GEMM memory-bound, fp16 would halve its bytes: 1000 - 1000 x 0.5 = 500 µs, said beside the estimate
    assert f["saving_if_memory_bound_us"] == pytest.approx(500.0) and "500.0 µs" in f["text"]
    assert "float16" in f["text"] and "GradScaler" not in f["text"]  # inference: no loss scaling advice
    assert "no TF32 tensor cores" in f["text"] and "allow_tf32" not in f["text"]
    assert f["confidence"] == "low" and f["estimated"] and f["lever"]
    assert a["plan"][0]["kind"] == "tensor_core_dtype"


def test_fp32_gemms_on_ampere_get_tf32_unless_the_trace_already_runs_it(tmp_path):
    a = kernels_trace(tmp_path, [(AMPERE_SGEMM, 1000.0)], A100)
    (f,) = of(a, "tensor_core_dtype")
    # A100: fp32 19.5, TF32 156 at the GA100's achievable 85%: 1000 x (19.5 x 0.9) / (156 x 0.85) = 132.353 µs
    # -> saving 867.647
    assert f["saving_us"] == pytest.approx(1000.0 - 1000.0 * 19.5 * 0.9 / (156.0 * 0.85))
    # TF32 keeps fp32 in memory: a memory-bound GEMM would gain nothing
    assert f["saving_if_memory_bound_us"] == 0.0 and "TF32 would gain nothing" in f["text"]
    assert "set_float32_matmul_precision('high')" in f["fix"]
    # with a TF32 GEMM in the trace the flag is on: the fp32 ones stayed fp32 (the library's choice): autocast
    b = kernels_trace(tmp_path, [(AMPERE_SGEMM, 1000.0), (TF32, 100.0)], A100, "b.json")
    simt = next(f for f in of(b, "tensor_core_dtype") if "fp32 GEMM" in f["title"])
    # bf16 312 at 85%: 1000 x (19.5 x 0.9) / (312 x 0.85) = 66.176 -> saving 933.824
    assert simt["saving_us"] == pytest.approx(1000.0 - 1000.0 * 19.5 * 0.9 / (312.0 * 0.85))
    assert "already run TF32" in simt["text"] and "bfloat16" in simt["text"]
    tf32 = next(f for f in of(b, "tensor_core_dtype") if "tf32 GEMM" in f["title"])
    assert tf32["saving_us"] == pytest.approx(100.0 - 100.0 * 156.0 / 312.0)  # both tensor cores: the peaks' ratio


def test_fp32_gemms_beside_bf16_ones_are_told_to_join_the_autocast_region(tmp_path):
    # an A100 run whose GEMMs mostly run bf16 (autocast on) but 200 µs of them stayed fp32 on CUDA cores (with no
    # TF32 GEMM in the trace): TF32 first (no code change), and the text says the run already multiplies bf16
    a = kernels_trace(tmp_path, [(BF16_GEMM, 800.0), (AMPERE_SGEMM, 200.0)], A100)
    f = next(f for f in of(a, "tensor_core_dtype") if "fp32 GEMM" in f["title"])
    assert "already multiplies bf16" in f["text"] and "set_float32_matmul_precision" in f["fix"]
    # on a V100 (no TF32) with fp16 GEMMs: not "use autocast", but move these into its region
    b = kernels_trace(tmp_path, [(HGEMM, 800.0), (SGEMM, 200.0)], V100, "b.json")
    g = next(f for f in of(b, "tensor_core_dtype") if "fp32 GEMM" in f["title"])
    assert "already multiplies fp16" in g["text"] and g["fix"].startswith("Move these fp32 matmuls into the run's fp16")
    # 200 x (15.7 x 0.9) / (125 x 0.8) = 28.26 µs after: saving 171.74 µs, as without the 16-bit GEMMs
    assert g["saving_us"] == pytest.approx(200.0 - 200.0 * 15.7 * 0.9 / (125.0 * 0.8))


T4 = {"id": 0, "name": "Tesla T4", "computeMajor": 7, "computeMinor": 5, "numSms": 40, "totalGlobalMem": 15843721216,
      "warpSize": 32}


def test_turing_fp16_gemms_are_fp16_not_tf32(tmp_path):
    # turing_s1688gemm_fp16: fp16 inputs (the type after the MMA core), fp32 accumulate and output: Turing has no
    # TF32. 800 µs of them beside 200 µs of volta_sgemm on a T4: the account says fp16 on tensor cores, and the
    # fp32 GEMM is told to join the run's fp16 autocast (not that "the GEMM kernels already run TF32")
    a = kernels_trace(tmp_path, [("turing_s1688gemm_fp16_128x128_ldg8_f2f_tn", 800.0), (SGEMM, 200.0)], T4)
    assert a["kernels"]["sentence"].startswith("Kernel time by kernel name: 100% gemm (fp16, tensor cores, cuBLAS); "
                                               "80% of the matrix-kernel time on tensor cores")
    (f,) = of(a, "tensor_core_dtype")
    assert "TF32" not in f["text"].split("Estimate")[0].replace("no TF32", "")
    assert "already multiplies fp16" in f["text"]
    # 200 x (8.1 x 0.9) / (65 x 0.8) = 28.04 µs after: saving 171.96 µs
    assert f["saving_us"] == pytest.approx(200.0 - 200.0 * 8.1 * 0.9 / (65.0 * 0.8))
    from traceana.render.first import device_line
    assert "fp16 tensor 65.0 TFLOP/s" in device_line(a)  # the roof most matrix time ran on
    assert any(p["title"].startswith("Launch overhead: 1 short gap between kernels:") for p in a["plan"])


def test_bf16_on_a_gpu_without_bf16_tensor_cores_gets_fp16(tmp_path):
    # a bf16 GEMM on a T4 (a cuBLAS template kernel on CUDA cores: Turing has no bf16 tensor cores), 1000 µs: fp16
    # tensor cores take the same work at 65 TFLOP/s: 1000 x (8.1 x 0.9) / (65 x 0.8) = 140.19 µs after
    bf16 = ("void gemmk1_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
            "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16> >(int)")
    a = kernels_trace(tmp_path, [(bf16, 1000.0)], T4)
    (f,) = of(a, "tensor_core_dtype")
    assert "bf16 (CUDA-core)" in f["title"] and "no bf16 tensor cores" in f["text"]
    assert f["fix"].startswith("Use fp16, not bf16, on this GPU")
    assert f["saving_us"] == pytest.approx(1000.0 - 1000.0 * 8.1 * 0.9 / (65.0 * 0.8))
    # bf16 -> fp16 moves as many bytes: a memory-bound GEMM would gain nothing
    assert f["saving_if_memory_bound_us"] == 0.0


def test_a_costed_bf16_matmul_on_turing_is_told_fp16(tmp_path):
    # with shapes: a 4096^3 bf16 mm on a T4 runs at the fp32 roof (no bf16 tensor cores): 2 x 4096^3 = 1.374e11
    # FLOPs / 8.1 TFLOP/s = 16.97 ms at least, measured 40 ms: compute-bound; the faster roof is fp16's, not bf16's
    k = ("void gemmk1_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
         "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16> >(int)")
    ev = [s.op("aten::mm", 0, 50, ext=1, dims=[[4096, 4096], [4096, 4096]], types=["c10::BFloat16", "c10::BFloat16"]),
          s.launch(10, corr=1, ext=1), s.kernel(k, 20, 40000, corr=1, ext=1)]
    a = analyze(s.write(tmp_path, s.trace(ev, props=(T4,))))
    (f,) = [f for f in a["findings"] if f["kind"] == "compute_bound"]
    assert "no bf16 tensor cores" in f["fix"] and "dtype=torch.float16" in f["fix"] and "bf16 / fp16" not in f["fix"]


def test_fp16_gemm_is_no_fp32_gemm(tmp_path):
    # ampere_fp16_s16816gemm_fp16: fp16 inputs, fp32 accumulate (the s): no fp32 -> bf16 advice on an A100
    a = kernels_trace(tmp_path, [(HGEMM, 1000.0)], A100)
    assert of(a, "tensor_core_dtype") == []  # A100 has no fp8 tensor cores either


def test_bf16_gemms_on_hopper_get_fp8(tmp_path):
    a = kernels_trace(tmp_path, [(BF16_GEMM, 800.0), (ADD, 200.0)], H100)
    (f,) = of(a, "tensor_core_dtype", "fp8")
    # H100 bf16 989.4, fp8 1978.9 TFLOP/s: 800 x 989.4 / 1978.9 = 399.98 µs -> saving 400.02
    assert f["saving_us"] == pytest.approx(800.0 - 800.0 * 989.4 / 1978.9)
    assert "quantization" in f["text"]  # inference: the serving engines' fp8
    # a run that already quantizes its GEMMs gets none
    ogs = "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1"
    b = kernels_trace(tmp_path, [(BF16_GEMM, 800.0), (ogs, 400.0)], H100, "b.json")
    assert of(b, "tensor_core_dtype", "fp8") == []


def test_tiny_gemms_stay_at_the_per_kernel_floor(tmp_path):
    # 200 bf16 GEMMs of 2 µs (a batch-1 model's) and a 300 µs add: 400 of 700 µs in GEMMs. fp8 would halve each
    # (x 989.4 / 1978.9 = 1.0 µs), but none drops below the H100's 1.5 µs per-kernel floor: 200 x 1.5 = 300 µs after,
    # saving 100 µs (the peaks' ratio alone would say 200)
    a = kernels_trace(tmp_path, [(BF16_GEMM, 2.0)] * 200 + [(ADD, 300.0)], H100)
    (f,) = of(a, "tensor_core_dtype", "fp8")
    assert a["device"]["launch_floor_us"] == 1.5
    assert f["saving_us"] == pytest.approx(400.0 - 200 * 1.5)
    assert "1.5 µs per-kernel floor" in f["text"]
    # its source: the 400 µs of all 200 GEMM ops (not only the 50 ids listed in ops)
    assert len(f["ops"]) == 50 and f["source_term"]["us"] == pytest.approx(400.0)


def test_element_wise_chains_get_fusion(tmp_path):
    # add 100, mul 50 | GEMM 300 | add 30, mul 20: two chains; fused, each keeps its longest kernel:
    # (150 - 100) + (50 - 30) = 70 µs
    a = kernels_trace(tmp_path, [(ADD, 100.0), (MUL, 50.0), (BF16_GEMM, 300.0), (ADD, 30.0), (MUL, 20.0)], H100)
    (f,) = of(a, "fusion", "fusion")
    assert f["saving_us"] == pytest.approx(70.0)
    assert "4 ATen element-wise" in f["text"] and "2 chains" in f["text"] and "torch.compile" in f["fix"]


def test_unfused_attention_from_kernel_names(tmp_path):
    # bmm 100 -> softmax 300 -> bmm 100: the softmax's time goes in a fused attention kernel, the GEMMs' stays
    a = kernels_trace(tmp_path, [(BF16_BMM, 100.0), (SOFTMAX, 300.0), (BF16_BMM, 100.0)], H100)
    (f,) = of(a, "fusion", "attention")
    assert f["saving_us"] == pytest.approx(300.0)
    assert "scaled_dot_product_attention" in f["fix"] and "1 softmax kernel" in f["text"]
    assert of(a, "fusion", "fusion") == []  # the softmax is not counted twice


def test_a_dominating_kernel_outside_any_op_is_named_first(tmp_path):
    # the user's train.py(12) calls a custom kernel's launcher: no op around the launch, 900 of 1000 µs
    ev = [{"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": 1, "tid": 1, "ts": 0, "dur": 50,
           "args": {"Python id": 1, "Python parent id": 0}},
          {"ph": "X", "cat": "python_function", "name": "torch/cuda/launcher.py(88): launch", "pid": 1, "tid": 1,
           "ts": 5, "dur": 20, "args": {"Python id": 2, "Python parent id": 1}},
          s.launch(10, corr=1),
          s.kernel("my_matmul_kernel", 20, 900, corr=1, extra={"grid": [64, 2, 1], "block": [256, 1, 1]}),
          s.op("aten::add", 60, 10, ext=2), s.launch(62, corr=2, ext=2), s.kernel(ADD, 930, 100, corr=2, ext=2)]
    a = analyze(s.write(tmp_path, s.trace(ev, props=(A100,))))
    row = next(r for r in a["ops"] if r["name"] == "my_matmul_kernel")
    assert row["cause"] == "outside_op" and row["launch_site"] == "train.py:12 (step)"  # the user's frame
    (f,) = of(a, "outside_op_kernel")
    # 900 / 1000 = 90% of device time; grid 64 x 2 x 1 = 128 blocks
    assert "90.0% of device time" in f["text"] and "from train.py:12 (step)" in f["text"]
    assert "grid of 128 blocks" in f["text"] and "torch.matmul" in f["text"] and f["saving_us"] == 0.0
    # named first: what its name says (a GEMM), its share, its launch site and its grid against the A100's 108 SMs
    assert a["kernels"]["sentence"].startswith("my_matmul_kernel (gemm), launched outside any op, takes 90% of device "
                                               "time (from train.py:12 (step); grid of 128 blocks (1.2 per SM of "
                                               "108)).")
    # its tensor-core use is not in its name: not counted as CUDA cores; 900 of 900 µs of matrix time = 100%
    assert a["kernels"]["sentence"].endswith("0% of the matrix-kernel time on tensor cores, 100% in kernels whose "
                                             "names do not say.")
    # and it heads "do this first", saving nothing (nothing costs it)
    p = a["plan"][0]
    assert p["kind"] == "outside_op_kernel" and p["saving_us"] == 0.0 and "torch.matmul" in p["fix"]


def test_a_collective_outside_any_op_is_left_to_the_communication_lever(tmp_path):
    # a custom all-reduce launched from Python (no op around it) takes 900 of 1000 µs: the communication lever
    # speaks for it; no "time it against the library kernel of its class" note
    ev = [s.launch(10, corr=1), s.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, "
                                         "ncclWork*)", 20, 900, corr=1),
          s.op("aten::add", 60, 10, ext=2), s.launch(62, corr=2, ext=2), s.kernel(ADD, 930, 100, corr=2, ext=2)]
    a = analyze(s.write(tmp_path, s.trace(ev, props=(A100,))))
    assert of(a, "outside_op_kernel") == []
    assert not a["kernels"]["sentence"].startswith("ncclDevKernel")
    assert a["plan"][0]["kind"].startswith("comm")


def _strip(src: str, dst) -> str:
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    doc.pop("record_shapes", None)  # what torch.profiler writes when record_shapes is off: no flag, no shapes
    for e in doc["traceEvents"]:
        a = e.get("args")
        if isinstance(a, dict):
            for k in ("Input Dims", "Input type", "Input Strides", "Concrete Inputs"):
                a.pop(k, None)
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)
    return str(dst)


def test_recorded_training_without_record_shapes(recorded_trace, tmp_path):
    """BERT training recorded on CPU (shaped as an A100 run: fp32 matmuls as ampere_sgemm kernels), its shapes
    stripped as a profile without record_shapes=True leaves it: the kernel account still sees every kernel, and
    the fp32 GEMMs get TF32 (the shaped trace costs them and gets its dtype findings from the ops)."""
    shaped = analyze(recorded_trace("bert_train"))
    path = _strip(recorded_trace("bert_train"), tmp_path / "noshape.json.gz")
    a = analyze(path)
    assert a["trace"]["record_shapes"] is False
    acc = a["kernels"]
    assert acc["total_us"] == pytest.approx(shaped["kernels"]["total_us"]) and acc["uncovered_us"] == pytest.approx(
        acc["total_us"])  # every kernel is there, none costed
    gemm = next(r for r in acc["rows"] if r["class"] == "gemm" and r["dtype"] == "fp32")
    assert gemm["library"] == "cuBLAS" and gemm["tensor_cores"] is False
    (f,) = [f for f in of(a, "tensor_core_dtype") if "fp32 GEMM" in f["title"]]
    with gzip.open(path, "rt") as fh:
        durs = [e["dur"] for e in json.load(fh)["traceEvents"]
                if e.get("cat") == "kernel" and e["name"].startswith("ampere_sgemm_")]
    # A100: fp32 -> TF32, each kernel x (19.5 x 0.9) / (156 x 0.85) but never below the per-kernel floor: these
    # tiny GEMMs (2 µs fixed cost each in the time model) are mostly at it already
    floor = a["device"]["launch_floor_us"]
    after = sum(max(d * 19.5 * 0.9 / (156.0 * 0.85), min(d, floor)) for d in durs)
    assert f["saving_us"] == pytest.approx(sum(durs) - after, rel=1e-9)
    assert f["saving_us"] < 0.5 * sum(durs)  # the floor keeps most of their time
    assert "GradScaler" not in f["text"]  # TF32 needs no loss scaling
    assert shaped["kernels"]["uncovered_us"] < 0.1 * shaped["kernels"]["total_us"]  # shaped: the ops cover them


def test_the_account_in_the_api_and_on_the_first_screen(tmp_path):
    import traceana
    from traceana.render import render

    ev, t = [], 0.0
    for i, (k, dur) in enumerate([(SGEMM, 600.0), (HGEMM, 300.0), (ADD, 100.0)], 1):
        ev += [s.op(f"aten::op_{i}", t, 5, ext=i), s.launch(t + 1, corr=i, ext=i),
               s.kernel(k, t + 10, dur, corr=i, ext=i)]
        t += dur + 11
    path = s.write(tmp_path, s.trace(ev, props=(V100,)))
    a = traceana.analyze(path)
    df = a.kernel_account
    assert list(df["class"]) == ["gemm", "gemm", "elementwise"]
    assert list(df["time_us"]) == [600.0, 300.0, 100.0]
    assert list(df["tensor_cores"]) == [False, True, None] and df["top"][0] == (SGEMM,)
    assert df.attrs["tensor_core_us"] == 300.0
    assert df.attrs["sentence"].startswith("Kernel time by kernel name: 90% gemm")
    md = render(a.raw, "md")
    assert "Kernel time by kernel name: 90% gemm (mostly fp32, CUDA cores, cuBLAS)" in md
