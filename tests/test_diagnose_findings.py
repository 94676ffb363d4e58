"""Findings on the seed trace (published T4 times): the story and its arithmetic, ranked by saving."""

from __future__ import annotations

import pytest

from tests.analyses import analysis
from tests.conftest import SAMPLES
from traceana.analysis import analyze
from traceana.diagnose.findings import memory_finding


@pytest.fixture(scope="module")
def t4():
    return analyze(str(SAMPLES / "t4_seed_pow_mul.json"))


def _find(a, kind, name=None):
    return next(f for f in a["findings"] if f["kind"] == kind and (name is None or name in f["title"]))


def test_ranked_by_saving_and_top_is_the_seed_story(t4):
    s = [f["saving_us"] for f in t4["findings"]]
    assert s == sorted(s, reverse=True)
    top = [(f["kind"], f["title"].split()[0]) for f in t4["findings"][:4]]
    assert top[0] == ("tensor_core_dtype", "aten::mm")
    assert ("memory_bound", "aten::mul_") in top and ("memory_bound", "aten::pow") in top
    assert ("fusion", "Fuse") in top


def test_mm_dtype_finding_states_the_t4_limits(t4):
    f = _find(t4, "tensor_core_dtype")
    t = f["text"]
    assert "no TF32 tensor cores" in t and "8.1 TFLOP/s" in t and "65 TFLOP/s" in t
    assert "135.74 ms" in t  # 1,099,511,627,776 FLOP / 8.1e12 FLOP/s = 135.74 ms
    assert "230.21 ms" in t and "59.0%" in t  # 135.74 / 230.208 ms
    assert "16.92 ms" in t  # 1,099,511,627,776 / 65e12 = 16.92 ms, best case on fp16 tensor cores
    assert "torch.float16" in t  # T4 has no bf16 tensor cores
    # at the same 58.97% of the 65 TFLOP/s roof: 16,915.6 / 0.58965 = 28,687.5 µs;
    # saving 230,208 - 28,687.5 = 201,520.5 µs
    assert f["saving_us"] == pytest.approx(201_520.5, abs=1.0)


def test_pow_is_memory_bound_and_its_flops_do_not_matter(t4):
    f = _find(t4, "memory_bound", "aten::pow")
    t = f["text"]
    assert "536,870,912 B" in t  # read 8192*8192*4 + write 8192*8192*4
    assert "1.678 ms" in t and "320 GB/s" in t  # 536,870,912 B / 320 GB/s = 1,677.7 µs
    assert "2.167 ms" in t and "77.4%" in t  # 1,677.7 / 2,167 µs
    assert "irrelevant" in t
    # 2,167 µs measured - 1,677.72 µs at the bandwidth roof - 2 µs launch floor (T4 default) = 487.28 µs
    assert f["saving_us"] == pytest.approx(2167 - 1677.72 - 2.0, abs=0.01)
    g = _find(t4, "memory_bound", "aten::mul_")
    assert "1.678 ms" in g["text"] and "76.8%" in g["text"]  # 1,677.7 / 2,184 µs
    assert g["saving_us"] == pytest.approx(2184 - 1677.72 - 2.0, abs=0.05)  # minus the 2 µs launch floor


def test_findings_link_to_ops(t4):
    ids = {r["id"] for r in t4["ops"]}
    for f in t4["findings"]:
        assert set(f["ops"]) <= ids
        assert f["text"] and f["title"]


def _copy_row(i, n_bytes, us, direction="HtoD", memory="Pinned", gbps=31.5, link="PCIe 4.0 x16"):
    return {"id": f"op{i}", "name": "aten::copy_", "input_dims": [[n_bytes // 4], [n_bytes // 4], []],
            "input_types": ["int", "int", "Scalar"], "dtype": "int32", "count": 1, "bound": "host_link",
            "mean_time_us": us, "device_time_us": us, "bytes": n_bytes, "flops": 0,
            "copy": {"direction": direction, "memory": memory, "link": link, "link_gbps": gbps, "bytes": n_bytes,
                     "time_us": us, "gbps": n_bytes / (us * 1e3), "events": 1},
            "kernels": [{"name": f"Memcpy {direction} ({memory} -> Device)", "time_us": us, "count": 1}]}


def test_host_copy_is_judged_against_the_link_not_dram():
    from traceana.diagnose.findings import copy_finding

    row = _copy_row(1, 7_962_624, 1626.8, "DtoH", "Pageable", 63.0, "PCIe 5.0 x16")
    f = copy_finding([row], {"dram_gbps": 3350.0})
    assert f["kind"] == "host_copy" and "pin_memory" in f["text"] and "3350" not in f["text"]
    # 7,962,624 B / 1,626.8 µs = 4.89 GB/s, 7.8% of PCIe 5.0 x16's 63 GB/s per direction
    assert "4.89 GB/s (8% of the 63 GB/s PCIe 5.0 x16)" in f["title"]
    # at 63 GB/s: 7,962,624 / 63e3 = 126.39 µs; saving 1,626.8 - 126.39 = 1,500.4 µs
    assert f["saving_us"] == pytest.approx(1626.8 - 7_962_624 / 63e3)


def test_fp32_gemm_on_tf32_kernels_is_held_to_the_tf32_roof():
    from traceana.diagnose.findings import compute_finding

    flops = 2 * 64 * 4096 * 2798  # = 1,466,957,824
    row = {"id": "op1", "name": "aten::mm", "input_dims": [[64, 4096], [4096, 2798]], "dtype": "fp32",
           "family": "gemm", "count": 5, "flops": flops, "device_time_us": 685.0,
           "compute_time_us": flops / 19.5e6, "peak_tflops": 19.5, "peak_dtype": "fp32", "roof_pct": 54.9,
           "achieved_tflops": 0.0107, "flops_expr": "2*M*N*K", "peak_why": "fp32 CUDA-core roof",
           "kernels": [{"name": "cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align1", "time_us": 685.0, "count": 5}]}
    f = compute_finding(row, {"peak_tflops": {"fp32": 19.5, "tf32_tc": 156.0, "bf16_tc": 312.0}})
    # 5 x 1,466,957,824 FLOP / 156 TFLOP/s = 47.02 µs: 6.9% of the measured 685 µs
    assert "6.9% of 156 TFLOP/s (tf32_tc)" in f["title"]
    # held to 80% of that roof (the default achievable share: no arch in this device dict), not 100%:
    # 685 - 47.02 / 0.80 = 685 - 58.77 = 626.23 µs
    assert f["saving_us"] == pytest.approx(685.0 - 5 * flops / 156e6 / 0.80)
    assert f["achievable_fraction"] == pytest.approx(0.80)
    assert "312 TFLOP/s (2.0x)" in f["text"]  # bf16 tensor cores


def test_coverage_findings_survive_the_cap():
    """30 memory-bound ops fill the 25 ranked findings; the 20% opaque time is still said."""
    from traceana.diagnose.findings import MAX_FINDINGS, find

    rows = [{"id": f"op{i}", "name": f"aten::op{i}", "input_dims": [[1024]], "dtype": "fp32", "count": 1,
             "bound": "memory", "device_time_us": 100.0, "mean_time_us": 100.0, "bytes": 4096.0, "flops": 0,
             "memory_time_us": 10.0, "roof_pct": 10.0, "achieved_gbps": 41.0, "kernels": []} for i in range(30)]
    rows.append({"id": "op30", "name": "aten::cat", "bound": "opaque", "cause": "shapes_not_recorded",
                 "device_time_us": 750.0, "count": 1, "kernels": []})
    total = 30 * 100.0 + 750.0  # opaque share 750 / 3750 = 20%
    out = find(rows, {"dram_gbps": 320.0, "peak_tflops": {"fp32": 8.1}}, total, extra=[])
    assert len(out) == MAX_FINDINGS + 1 and out[-1]["kind"] == "opaque_time"
    assert "(20.0%)" in out[-1]["title"]


def test_a_gather_far_below_the_roof_is_bound_by_its_access_pattern():
    row = {"id": "op2", "name": "torch::autograd::CppNode<SplitLookupFunction_rowwise_adagrad_Op>",
           "input_dims": [[8192, 8720]], "dtype": "fp32", "family": "index", "count": 6, "bound": "memory",
           "mean_time_us": 9579.0, "device_time_us": 57474.0, "bytes": 852103844.0, "flops": 1.156e9,
           "memory_time_us": 548.0, "roof_pct": 5.7, "achieved_gbps": 89.0, "peak_tflops": 19.5, "kernels": []}
    f = memory_finding(row, {"dram_gbps": 1555.0})
    assert "access pattern" in f["text"] and "element-wise op over the same tensors would take as long" not in f["text"]
    row["roof_pct"], row["family"] = 77.0, "pointwise"  # a streaming op near the roof keeps the seed's story
    assert "would take about as long" in memory_finding(row, {"dram_gbps": 1555.0})["text"]


def test_host_copies_of_one_op_are_one_finding():
    from traceana.diagnose.findings import find

    rows = [_copy_row(1, 55_599_168, 7334.0), _copy_row(2, 55_539_892, 7331.0),
            _copy_row(3, 55_539_892, 7000.0, "DtoH")]  # the other direction: its own finding
    out = [f for f in find(rows, {"dram_gbps": 1555.0, "peak_tflops": {}}, 30000.0, extra=[])
           if f["kind"] == "host_copy"]
    assert len(out) == 2
    htod = next(f for f in out if "HtoD" in f["title"])
    assert htod["ops"] == ["op1", "op2"] and "2 signatures" in htod["title"]
    # 111,139,060 B at 31.5 GB/s = 3,528.2 µs; saving 14,665 - 3,528.2 = 11,136.8 µs
    assert htod["saving_us"] == pytest.approx(7334 + 7331 - (55_599_168 + 55_539_892) / 31.5e3)


def test_compute_bound_fix_names_the_kernel_choice_then_fp8():
    from traceana.diagnose.advice import compute_fix
    # a bf16 GEMM at 34.9% of its roof on a device with fp8 tensor cores, in an inference run
    fix = compute_fix({"family": "gemm"}, "fp8_tc", 34.9, {"mode": "inference"})
    assert fix.startswith("Tune the GEMM kernel per shape (PYTORCH_TUNABLEOP_ENABLED=1")
    assert fix.endswith("Or fp8: 2x the tensor-core peak (fp8 weight and activation quantization).")
    # near its roof (>= FAR_FROM_ROOF_PCT = 60%), training: only the dtype is left
    assert compute_fix({"family": "gemm"}, "fp8_tc", 75.0, {"mode": "training"}) == (
        "Use fp8: 2x the tensor-core peak (torchao float8 or Transformer Engine).")
    assert "FA3 on Hopper" in compute_fix({"family": "attention"}, None, 9.6, None)
    assert compute_fix({"family": "gemm"}, None, 80.0, None).startswith("Do fewer FLOPs")


def test_sglang_prefill_gemm_lever_says_tune_then_fp8():
    a = analysis("tracelens/sglang/sglang_Qwen3-8B_prefilldecode.json.gz")
    p = a["plan"][0]
    # aten::mm bf16 on MI300X at 34.9% of 1307.4 TFLOP/s: far from the roof, and the MI300X has fp8
    assert p["kind"] == "compute_bound" and "34.9%" in p["title"]
    assert "PYTORCH_TUNABLEOP_ENABLED=1" in p["fix"] and "fp8 weight and activation quantization" in p["fix"]


def test_copies_hidden_under_kernels_save_nothing():
    """hta/control (A100): pinned HtoD copies run 46.90 ms at 8.38 GB/s against a 31.5 GB/s link (floor
    12.47 ms), but of the device's 53,498 µs of memcpy only 18,762 µs ran with nothing else on the GPU:
    18,762 / 53,498 = 35.07% exposed. A faster copy under a kernel shortens nothing, so the saving is
    46.90 ms x 0.3507 = 16.45 ms, not 46.90 - 12.47 = 34.43 ms; the fix does not say "pin" to pinned copies."""
    a = analysis("hta/control.json.gz")
    (f,) = [f for f in a["findings"] if f["kind"] == "host_copy" and "HtoD from Pinned" in f["title"]]
    assert f["saving_us"] == pytest.approx(46_900 * 18_762 / 53_498, rel=1e-3)
    assert "Only 35% of the device's copy time ran with nothing else on the GPU" in f["text"]
    assert f["fix"] == "Overlap the copies with compute: non_blocking=True on a side stream, ahead of use."
