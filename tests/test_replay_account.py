"""Replayed and compiled kernels with no capture trace: the account (traceana/diagnose/replay_account.py)."""

from __future__ import annotations

import pytest

from tests import synth
from tests.conftest import shared_trace
from traceana.analysis import Options, analyze
from traceana.diagnose.replay_account import SGLANG, VLLM

GEMM = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align4>(Params)"


def _nested_replay(tmp_path):
    """A cudaGraphLaunch inside torch.compile's region replaying a CUTLASS GEMM (60 µs), an Inductor
    kernel (30 µs), a device-to-device copy of 1,000,000 B (20 µs) and a fill of 4,096 B (1 µs)."""
    ev = [synth.op("Torch-Compiled Region: 0/0", 95.0, 200.0, ext=1, dims=[], types=[])]
    ev += synth.graph_replay([(GEMM, 60.0), ("triton_poi_fused_add_mul_0", 30.0)], 100, 100.0, name="cudaGraphLaunch")
    ev.append(synth.kernel("Memcpy DtoD (Device -> Device)", 200.0, 20.0, 100, cat="gpu_memcpy",
                           extra={"bytes": 1_000_000}))
    ev.append(synth.kernel("Memset (Device)", 225.0, 1.0, 100, cat="gpu_memset", extra={"bytes": 4096}))
    return synth.write(tmp_path, synth.trace(ev), "replay.json")


def test_account_by_class_and_kernel_with_copies_judged(tmp_path):
    a = analyze(_nested_replay(tmp_path))  # Tesla T4: DRAM 320 GB/s
    acc = a["coverage"]["opaque_account"]
    assert acc["run"] == "torch.compile" and acc["causes"] == ["graph_replay"]
    assert acc["time_us"] == 111.0 and acc["pct"] == 100.0  # 60 + 30 + 20 + 1 µs, all of the device time
    assert acc["by_class"]["gemm"]["pct"] == pytest.approx(60 / 111 * 100)  # 54.05%
    assert acc["by_class"]["memcpy/memset"] == {"time_us": 21.0, "count": 2, "pct": pytest.approx(21 / 111 * 100)}
    details = {k["name"]: k["detail"] for k in acc["kernels"]}
    assert details[GEMM] == "a GEMM kernel, tile 256x128 (CUTLASS 2 / cuBLAS)"
    assert details["triton_poi_fused_add_mul_0"] == "a Triton pointwise kernel from Inductor fusing add, mul"
    dtod, fill = acc["copies"]
    # 1e6 B in 20 µs = 50 GB/s; read and written: 2e6 B / 320 GB/s = 6.25 µs of the 20 µs = 31.25% of the roof
    assert dtod["direction"] == "DtoD" and dtod["gbps"] == 50.0 and dtod["traffic_bytes"] == 2_000_000
    assert dtod["roof_pct"] == pytest.approx(31.25)
    # a fill writes its bytes once: 4096 B / 320 GB/s = 0.0128 µs of 1 µs = 1.28%
    assert fill["direction"] == "memset" and fill["roof_pct"] == pytest.approx(1.28)
    rows = {r["name"]: r for r in a["ops"]}
    assert rows["Memcpy DtoD (Device -> Device)"]["copy_judged"]["roof_pct"] == pytest.approx(31.25)
    assert rows[GEMM]["reason"].startswith("CUDA/HIP graph replay") and "tile 256x128" in rows[GEMM]["reason"]
    # torch.compile with graphs: capture the graphs (traceana record keeps it), or no graphs, and benchmark_kernel
    assert "reduce-overhead" in acc["recipe"] and "traceana record" in acc["recipe"]
    assert "benchmark_kernel = True" in acc["recipe"]
    assert a["coverage"]["opaque_advice"]["graph_replay"] == acc["recipe"]
    assert any(w.startswith("100.0% of device time ran in kernels replayed from CUDA/HIP graphs") for w in a["warnings"])


@pytest.mark.parametrize("rel, run, recipe, pct, gemm", [
    # vLLM on MI300X: 96.9% replayed, GEMMs 74.5% of the device time (two triton_kernels matmul_ogs MoE GEMMs 65.6%;
    # _finalize_matmul_scatter_bf16, 1.3%, sums the experts' outputs: a reduction, not a GEMM)
    ("tracelens/vllm_decode_full/graph_execution.json.gz", "vllm", VLLM, 96.9, 74.5),
    # SGLang (sgl_hip kernels; it also runs vLLM's paged-attention enum, so SGLang's marks win): 98.8% replayed
    ("tracelens/sglang_decode/sglang_Qwen3-8B_decode.json.gz", "sglang", SGLANG, 98.8, 59.1),
])
def test_engine_runs_without_capture_get_the_engines_recipe(rel, run, recipe, pct, gemm):
    a = analyze(shared_trace(rel), Options(find_capture=False))
    acc = a["coverage"]["opaque_account"]
    assert acc["run"] == run and acc["recipe"] == recipe
    assert round(acc["pct"], 1) == pct and round(acc["by_class"]["gemm"]["pct"], 1) == gemm
    assert acc["kernels"][0]["pct"] >= acc["kernels"][1]["pct"]
    if run == "vllm":
        assert "--profiler-config.capture_torch_profiler=true" in recipe and "--enforce-eager" in recipe
    else:
        assert "--enable-profile-cuda-graph" in recipe and "--disable-cuda-graph" in recipe


def test_compiled_function_regions_replaying_graphs():
    a = analyze(shared_trace("hta/rank0.json.gz"))
    acc = a["coverage"]["opaque_account"]
    # CompiledFunction / CompiledFunctionBackward regions launching cudaGraphLaunch: 23.4% of device time
    assert acc["run"] == "torch.compile" and round(acc["pct"], 1) == 23.4
    assert round(acc["by_class"]["gemm"]["pct"], 1) == 21.8
    assert "torch 2.0 name" in {k["name"]: k["detail"] for k in acc["kernels"]}["triton__0d1d2d"]


def test_compiled_region_without_graphs(tmp_path):
    # torch 2.0 style: AOTAutograd's CompiledFunction launches its Triton kernels with no op of their own
    ev = [synth.op("CompiledFunction", 100.0, 100.0, ext=1, dims=[], types=[])]
    for i, (name, dur) in enumerate((("triton_poi_fused_add_relu_0", 30.0), ("triton__0d1d2d", 10.0),
                                     ("triton_poi_fused_add_relu_0", 30.0))):
        ev += [synth.launch(105.0 + 20 * i, 10 + i, ext=1), synth.kernel(name, 110.0 + 30 * i, dur, 10 + i, ext=1)]
    a = analyze(synth.write(tmp_path, synth.trace(ev), "compiled.json"))
    acc = a["coverage"]["opaque_account"]
    assert acc["causes"] == ["compiled"] and acc["run"] == "torch.compile"
    # one row per kernel name, one call per run: 2 runs of 30 µs, 1 of 10 µs
    rows = {r["name"]: r for r in a["ops"]}
    assert rows["triton_poi_fused_add_relu_0"]["count"] == 2 and rows["triton__0d1d2d"]["count"] == 1
    assert acc["kernels"][0]["pct"] == pytest.approx(60 / 70 * 100)  # 85.7% of the 70 µs
    # no graph replayed: record the Triton launches with their shapes, and Inductor's estimates
    assert "benchmark_kernel = True" in acc["recipe"] and "reduce-overhead" not in acc["recipe"]
