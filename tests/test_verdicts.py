"""Verdicts that hold: one time model for the bound, over-roof ops flagged, estimates said,
savings combined once (issue 12 items 3-6). Expected values written with their arithmetic."""

from __future__ import annotations

import pytest

from tests.analyses import analysis
from tests.conftest import all_shared_traces
from traceana.cost import Cost
from traceana.diagnose.projection import annotate, project
from traceana.render.markdown import render_markdown
from traceana.roofline.judge import judge, launch_floor

A100 = {"fp32": 19.5, "tf32_tc": 156.0, "bf16_tc": 312.0}
A100_BW = 2039.0


def _ew(nbytes: float, family: str = "pointwise") -> Cost:
    """An fp32 element-wise op moving nbytes (FLOPs: one per 8 bytes, irrelevant)."""
    return Cost(flops=nbytes / 8, bytes=nbytes, family=family, dtype="fp32", matrix=False,
                flops_expr="n", bytes_expr="n")


# ---------------------------------------------------------------- the time model


def test_bound_moves_smoothly_with_size_no_cliff_at_10us():
    # 2 µs floor per kernel; bytes / 2039 GB/s. Measured = 1.25 x the model each time, so every op
    # is explained (80% of its time) and only the largest term decides the bound.
    verdicts = []
    for nbytes in (1e5, 2e6, 4e6, 8e6, 3.2e7, 1.28e8):
        roof = nbytes / (A100_BW * 1e3)  # 1e5 B -> 0.049 µs ... 1.28e8 B -> 62.8 µs
        mean = 1.25 * (2.0 + roof)
        verdicts.append(judge(_ew(nbytes), mean, mean, A100, A100_BW, floor_us=2.0))
    assert [v.bound for v in verdicts] == ["latency", "latency", "latency", "memory", "memory", "memory"]
    # 4e6 B: 1.96 µs of bytes < 2 µs floor -> latency; 8e6 B: 3.92 µs > 2 µs -> memory, with a kernel of
    # 1.25 x 5.92 = 7.4 µs, well under the old 10 µs cut: the verdict no longer depends on kernel length
    assert verdicts[3].mean_us == pytest.approx(1.25 * (2 + 8e6 / 2.039e6))
    for v in verdicts:
        assert v.model_pct == pytest.approx(80.0)  # model / measured = 1 / 1.25
        assert v.floor_us == 2.0


def test_far_below_both_roofs_is_not_memory_bound():
    # 4 MB in 200 µs: 1.96 µs at 2039 GB/s + 2 µs floor = 3.96 µs, 1.98% of the time
    v = judge(_ew(4e6), 200.0, 200.0, A100, A100_BW, floor_us=2.0, blocks=8, sms=108)
    assert v.bound == "underutilised" and v.model_pct == pytest.approx(3.96 / 200 * 100, rel=1e-3)
    assert v.limiter.startswith("grid too small") and "8 thread block(s) for 108 SMs" in v.limiter
    # the same op with a full grid: the trace cannot say what bounds it, and says so
    v = judge(_ew(4e6), 200.0, 200.0, A100, A100_BW, floor_us=2.0, blocks=4096, sms=108)
    assert v.bound == "underutilised" and v.limiter.startswith("not visible in the trace")
    # a gather: the access pattern
    v = judge(_ew(4e6, family="index"), 200.0, 200.0, A100, A100_BW, floor_us=2.0)
    assert v.limiter.startswith("scattered access")


def test_launch_floor_defaults_and_override():
    assert launch_floor("Hopper GH100", "NVIDIA")[0] == 1.5
    assert launch_floor("Ampere GA100", "NVIDIA")[0] == 2.0
    assert launch_floor(None, None)[0] == 2.0
    us, why = launch_floor("Hopper GH100", "NVIDIA", 4.0)
    assert us == 4.0 and "--launch-floor-us" in why


def test_the_floor_never_claims_more_than_was_measured():
    # 3 kernels x 2 µs = 6 µs of floor, but the call took 4 µs: the floor is capped at 4 µs
    v = judge(_ew(1e3), 4.0, 4.0 / 3, A100, A100_BW, kernels=3, floor_us=2.0)
    assert v.floor_us == 4.0 and v.bound == "latency"


# ---------------------------------------------------------------- over the roof


def test_over_roof_reasons():
    # 1 MiB moved in 0.3 µs: 1,048,576 B / 2039 GB/s = 0.514 µs, 171% of the roof; 1 MiB < 40 MiB L2
    v = judge(_ew(2**20), 0.3, 0.3, A100, A100_BW, floor_us=0.0, l2_bytes=40 * 2**20)
    assert v.roof_pct == pytest.approx(2**20 / 2.039e6 / 0.3 * 100)
    assert v.over_roof["reason"] == "l2" and "fits in the 40 MiB L2" in v.over_roof["text"]
    # the same without an L2 size: the byte model over-counts
    assert judge(_ew(2**20), 0.3, 0.3, A100, A100_BW, floor_us=0.0).over_roof["reason"] == "model"
    # an fp32 conv on Winograd kernels, 2e9 FLOPs in 50 µs = 40 TFLOP/s against 19.5: 205%
    conv = Cost(flops=2e9, bytes=1e6, family="conv", dtype="fp32", matrix=True, flops_expr="", bytes_expr="")
    v = judge(conv, 50.0, 50.0, A100, A100_BW, ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",))
    assert v.roof_pct == pytest.approx(2e9 / 19.5e6 / 50 * 100) and v.over_roof["reason"] == "algorithm"
    assert judge(_ew(2**20), 2.0, 2.0, A100, A100_BW).over_roof is None  # 0.514 / 2 = 25.7%


def test_no_op_above_its_roof_lacks_over_roof_on_any_shared_trace():
    rels = all_shared_traces()
    if not rels:
        pytest.skip("../shared/traces not present")
    for rel in rels:
        a = analysis(rel)
        for op in a["ops"]:
            if (op.get("roof_pct") or 0) > 100.0:
                assert op.get("over_roof") and op["over_roof"]["reason"], (rel, op["name"], op["roof_pct"])
                # ... and no finding is built on it
                assert not any(op["id"] in f["ops"] and f["kind"] in ("memory_bound", "compute_bound")
                               for f in a["findings"]), (rel, op["name"])


def test_kineto_resnet_winograd_convolutions_are_flagged():
    a = analysis("kineto/worker0.1623143089861.pt.trace.json.gz")
    conv = [o for o in a["ops"] if o["name"].startswith("aten::cudnn_convolution") and o.get("over_roof")]
    assert conv and all(o["over_roof"]["reason"] == "algorithm" for o in conv)
    assert "Winograd" in conv[0]["over_roof"]["text"]


# ---------------------------------------------------------------- estimates and projection


def test_estimated_findings_say_so_on_rank0():
    a = analysis("hta/rank0.json.gz")
    dtype = next(f for f in a["findings"] if f["kind"] == "tensor_core_dtype")
    # 117.85 ms of GEMM kernels with no shapes: the dtype is read from kernel names, the saving is a guess
    assert dtype["estimated"] is True and dtype["confidence"] == "low"
    assert all(f["confidence"] in ("high", "medium", "low") and isinstance(f["lever"], bool) for f in a["findings"])
    md = render_markdown(a)
    assert "low confidence, estimated" in md


def test_projection_counts_each_microsecond_once_on_qwen_h100():
    a = analysis("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    p = a["projection"]
    levers = [f for f in a["findings"] if f["lever"]]
    assert p["levers"] == len(levers)
    assert p["claimed_us"] == pytest.approx(sum(f["saving_us"] for f in levers))
    # the findings claim more than the combination recovers: they overlap
    span_saved = p["span_now_us"] - p["span_after_us"]
    assert p["claimed_us"] > span_saved > 0
    assert 0 <= p["after_us"] < p["now_us"] and p["idle_after_us"] >= 0
    assert p["now_us"] == pytest.approx(a["breakdown"]["devices"][0]["busy_us"])


def test_projection_is_never_negative_on_any_shared_trace():
    for rel in all_shared_traces():
        p = analysis(rel)["projection"]
        assert p["after_us"] >= 0 and p["idle_after_us"] >= 0 and p["after_us"] <= p["now_us"] + 1e-6, rel


def test_overlapping_findings_compose_multiplicatively():
    rows = [{"id": "op1", "device_time_us": 100.0}, {"id": "op2", "device_time_us": 50.0}]
    findings = [
        {"kind": "memory_bound", "title": "a", "ops": ["op1"], "saving_us": 60.0},
        {"kind": "fusion", "title": "b", "ops": ["op1", "op2"], "saving_us": 75.0},
        {"kind": "opaque_time", "title": "c", "ops": ["op2"], "saving_us": 0.0},
    ]
    annotate(findings, rows)
    assert [f["title"] for f in findings] == ["a", "b", "c"]  # 60 x 1.0 > 75 x 0.6 = 45; the note last
    assert findings[2]["lever"] is False
    p = project(findings, rows, busy_us=150.0, idle_us=0.0)
    # op1: 100 x (1 - 0.6) = 40, then fusion takes 75 x 100/150 = 50 µs of its 100 µs: 40 x (1 - 0.5) = 20
    # op2: 50 x (1 - 25/50) = 25; after = 20 + 25 = 45 µs (summing the claims, 135 µs, would say 15)
    assert p["after_us"] == pytest.approx(45.0)
    assert p["claimed_us"] == pytest.approx(135.0)
