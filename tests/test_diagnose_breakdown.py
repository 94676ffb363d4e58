"""Timeline breakdown: categories sum to each device's span, overlaps counted once by priority."""

from __future__ import annotations

import numpy as np
import pytest

from tests import synth
from tests.conftest import SAMPLES
from traceana.analysis import analyze
from traceana.diagnose.breakdown import CATEGORIES, PRIORITY, device_breakdown, union_us


def _cat(name):
    return PRIORITY.index(name)


def test_union_counts_overlaps_once():
    ts = np.array([0.0, 5.0, 20.0])
    end = np.array([10.0, 12.0, 25.0])
    # [0, 12) and [20, 25): 12 + 5 = 17
    assert union_us(ts, end) == pytest.approx(17.0)
    assert union_us(np.zeros(0), np.zeros(0)) == 0.0


def test_priority_attributes_overlap_to_the_first_category():
    # compute kernel [0, 100) on one stream, an NCCL collective [50, 150) on another,
    # a memcpy [200, 220); nothing runs in [150, 200)
    ts = np.array([0.0, 50.0, 200.0])
    end = np.array([100.0, 150.0, 220.0])
    cat = np.array([_cat("compute"), _cat("communication"), _cat("memcpy")], dtype=np.int8)
    b = device_breakdown(ts, end, cat)["by_category"]
    assert b["compute"] == pytest.approx(100.0)
    assert b["communication"] == pytest.approx(50.0)  # only [100, 150) is exposed
    assert b["memcpy"] == pytest.approx(20.0)
    assert b["idle"] == pytest.approx(50.0)  # [150, 200)
    assert sum(b.values()) == pytest.approx(220.0)  # the span: 0 .. 220
    assert set(b) == set(CATEGORIES)


def test_analysis_breakdown_on_synthetic_two_stream_trace(tmp_path):
    ev = [
        synth.op("aten::mm", 0, 20, 1, dims=[[64, 64], [64, 64]], types=["float", "float"]),
        synth.launch(1, 11),
        synth.kernel("volta_sgemm_128x64_nn", 10, 100, 11, stream=7),
        synth.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 60, 100, 12, stream=20),
        synth.kernel("Memcpy DtoH (Device -> Pinned)", 200, 10, 13, stream=7, cat="gpu_memcpy"),
    ]
    a = analyze(synth.write(tmp_path, synth.trace(ev)))
    dev = a["breakdown"]["devices"][0]
    b = dev["by_category"]
    assert dev["span_us"] == pytest.approx(200.0)  # 10 .. 210
    assert b["communication"] == pytest.approx(50.0)  # [110, 160): the part the GEMM does not hide
    assert b["memcpy"] == pytest.approx(10.0)
    assert b["idle"] == pytest.approx(40.0)  # [160, 200)
    assert sum(b.values()) == pytest.approx(dev["span_us"])
    assert dev["streams"] == 2


def test_t4_breakdown_sums_to_span():
    a = analyze(str(SAMPLES / "t4_seed_pow_mul.json"))
    dev = a["breakdown"]["devices"][0]
    b = dev["by_category"]
    assert b["compute"] == pytest.approx(230_208.0)  # the mm
    assert b["memory"] == pytest.approx(6_483.583)  # 1141 + 2184 + 991.583 + 2167 µs
    # four 1.088 µs gaps between back-to-back kernels: 4 x 1.088 = 4.352 µs
    assert b["idle"] == pytest.approx(4.352, abs=1e-3)
    assert sum(b.values()) == pytest.approx(dev["span_us"])
    assert dev["span_us"] == pytest.approx(236_695.935, abs=1e-3)  # 236,691.583 busy + 4.352 idle


def test_t4_utilisation_is_flops_over_span():
    a = analyze(str(SAMPLES / "t4_seed_pow_mul.json"))
    u = a["utilisation"]
    flops = sum(r["flops"] * r["count"] for r in a["ops"] if r["flops"] is not None)
    assert u["flops"] == pytest.approx(flops)
    span = a["breakdown"]["devices"][0]["span_us"]
    # e.g. the mm alone: 1,099,511,627,776 FLOP / 236,695.9 µs = 4.645 TFLOP/s of the 8.1 fp32 roof
    assert u["achieved_tflops"] == pytest.approx(flops / (span * 1e6))
    assert u["by_dtype"]["fp32"]["pct_of_peak"] == pytest.approx(u["by_dtype"]["fp32"]["achieved_tflops"] / 8.1 * 100)
    assert u["bandwidth_pct"] == pytest.approx(u["achieved_gbps"] / 320 * 100)
