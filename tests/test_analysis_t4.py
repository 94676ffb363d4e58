"""The seed case, end to end: sample_traces/t4_seed_pow_mul.json (published T4 times)."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES
from traceana.analysis import analyze


@pytest.fixture(scope="module")
def t4():
    return analyze(str(SAMPLES / "t4_seed_pow_mul.json"))


def _op(a, name):
    return next(o for o in a["ops"] if o["name"] == name)


def test_device_is_t4(t4):
    d = t4["device"]
    assert d["key"] == "t4" and d["name"] == "Tesla T4"
    assert d["dram_gbps"] == 320.0 and d["peak_tflops"]["fp32"] == 8.1


def test_pow_is_memory_bound_at_77_percent(t4):
    pow_ = _op(t4, "aten::pow")
    assert pow_["bytes"] == 536_870_912  # read 8192*8192*4 + write 8192*8192*4
    assert pow_["memory_time_us"] == pytest.approx(1677.72, abs=0.01)  # 536,870,912 B / 320e9 B/s
    assert pow_["roof_pct"] == pytest.approx(77.42, abs=0.01)  # 1677.72 / 2167 µs
    assert pow_["bound"] == "memory"
    assert pow_["achieved_gbps"] == pytest.approx(247.75, abs=0.01)  # 536,870,912 B / 2167 µs


def test_mul_inplace_is_memory_bound(t4):
    mul = _op(t4, "aten::mul_")
    # in place: the 8192x8192 fp32 buffer is read once and written once; the 0-dim double
    # operand (the Python scalar 0.5) is passed by value and costs no DRAM traffic
    assert mul["bytes"] == 536_870_912
    assert mul["flops"] == 67_108_864  # 8192*8192 multiplies
    assert mul["roof_pct"] == pytest.approx(76.82, abs=0.01)  # 1677.72 / 2184 µs
    assert mul["bound"] == "memory"


def test_mm_is_compute_bound_at_59_percent(t4):
    mm = _op(t4, "aten::mm")
    assert mm["flops"] == 1_099_511_627_776  # 2*M*N*K = 2*8192^3
    assert mm["compute_time_us"] == pytest.approx(135742.18, abs=0.01)  # 1.0995e12 / 8.1e12 s
    assert mm["roof_pct"] == pytest.approx(58.96, abs=0.01)  # 135,742.18 / 230,208 µs
    assert mm["bound"] == "compute"
    assert mm["peak_dtype"] == "fp32"
    assert "no TF32" in mm["peak_why"]


def test_fill_and_sum_are_memory_bound(t4):
    fill = _op(t4, "aten::fill_")
    assert fill["bytes"] == 268_435_456  # write 8192*8192*4, nothing read
    assert fill["bound"] == "memory"
    assert fill["roof_pct"] == pytest.approx(73.52, abs=0.01)  # 838.86 µs / 1141 µs
    s = _op(t4, "aten::sum")
    assert s["bytes"] == 268_435_460  # read 8192*8192*4 + write one fp32
    assert s["bound"] == "memory"
    assert s["roof_pct"] == pytest.approx(84.60, abs=0.01)  # 838.86 µs / 991.583 µs


def test_pow_explanation_shows_the_arithmetic(t4):
    pow_id = _op(t4, "aten::pow")["id"]
    ex = next(e for e in t4["explanations"] if e["op"] == pow_id)
    text = "\n".join(ex["lines"])
    assert "536,870,912" in text
    assert "320 GB/s" in text
    assert "1.678 ms" in text
    assert "77.4%" in text
    assert "memory-bound" in text


def test_coverage_is_complete(t4):
    c = t4["coverage"]
    # 1141 + 230208 + 2184 + 991.583 + 2167 µs: every kernel is on a modelled op
    assert c["device_time_us"] == pytest.approx(236_691.583)
    assert c["modeled_time_us"] == pytest.approx(236_691.583)
    assert c["opaque_time_us"] == 0 and c["unmodeled_time_us"] == 0
