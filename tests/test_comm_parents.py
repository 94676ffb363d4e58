"""Collectives that recorded nothing get their message from the op that issued them (TorchRec's
All2All_Pooled_Req ...); the rest are opaque as `comm_unsized`, with what to change."""

from __future__ import annotations

import pytest

from tests import synth as s
from tests.analyses import analysis
from traceana.analysis import Options, analyze
from traceana.link.attribute import CAUSE_KEYS, link
from traceana.load import load_trace

NCCL = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"


def _events():
    return [
        s.op("All2All_Pooled_Req", 10, 100, ext=1, dims=[[8192, 8816]]),  # issues the forward all_to_all
        s.op("record_param_comms", 20, 50, ext=2),  # old torch: no args, no shapes
        s.launch(25, corr=1, ext=2),
        s.kernel(NCCL, 200, 1000, corr=1, stream=20),
        s.op("All2All_Pooled_Wait", 300, 100, ext=3, dims=[[1]]),  # a wait: its tensor is a placeholder
        s.op("record_param_comms", 310, 50, ext=4),
        s.launch(320, corr=2, ext=4),
        s.kernel(NCCL, 1300, 500, corr=2, stream=20),
        s.op("aten::mul", 500, 20, ext=5, dims=[[4], [4]]),  # the trace did record shapes
        s.launch(505, corr=3, ext=5),
        s.kernel("mul_kernel", 2000, 3, corr=3),
    ]


def test_message_from_the_issuing_op(tmp_path):
    path = s.write(tmp_path, s.trace(_events(), distributedInfo={"backend": "nccl", "rank": 0, "world_size": 8}))
    tr = load_trace(path)
    assert tr.warnings == []
    causes = [CAUSE_KEYS[c] if c >= 0 else None for c in link(tr).gpu_cause.tolist()]
    assert causes == [None, "comm_unsized", None]  # the Wait's placeholder [1] is never used as a message
    a = analyze(path, Options())
    row = next(r for r in a["ops"] if r["name"] == "record_param_comms" and r["bound"] == "communication")
    s_bytes = 8192 * 8816 * 4  # S = one rank's input = 288,882,688 B
    assert row["comm"]["msg_bytes"] == s_bytes and row["comm"]["algorithm"] == "all_to_all"
    assert row["bytes"] == pytest.approx(s_bytes * 7 / 8)  # (n-1)/n * S = 252,772,352 B sent per rank
    assert row["comm"]["busbw_gbps"] == pytest.approx(252772352 / 1e6)  # bytes / (1000 us * 1e3) = 252.8 GB/s
    assert row["estimated"] and any("All2All_Pooled_Req" in n for n in row["notes"])
    # the one that stays unsized is still a communication row: its cause stays in coverage
    unsized = next(r for r in a["ops"] if r["cause"] == "comm_unsized")
    assert unsized["bound"] == "communication" and unsized["comm"]["sized"] is False
    assert unsized["reason"].startswith("size not recorded") and "torch 2.1" in unsized["reason"]
    assert a["coverage"]["opaque_by_cause"]["comm_unsized"] == unsized["device_time_us"]


def test_without_any_shapes_the_cause_stays_no_shapes(tmp_path):
    ev = [e for e in _events() if e["name"] not in ("All2All_Pooled_Req", "All2All_Pooled_Wait")]
    for e in ev:
        e["args"].pop("Input Dims", None)
        e["args"].pop("Input type", None)
    tr = load_trace(s.write(tmp_path, s.trace(ev)))
    assert {CAUSE_KEYS[c] for c in link(tr).gpu_cause.tolist()} == {"no_shapes"}


def test_control_all_to_alls_are_costed():
    a = analysis("hta/control.json.gz")
    a2a = sorted((r for r in a["ops"] if r.get("comm") and r["comm"]["algorithm"] == "all_to_all"
                  and r["name"] == "record_param_comms" and r["estimated"]), key=lambda r: -r["device_time_us"])
    # forward: All2All_Pooled_Req [8192, 8816] fp32 = 288,882,688 B; backward: the gradient [1024, 70904]
    # = 290,422,784 B (B_local = 8192 / 8 ranks; 70904 = every rank's pooled widths)
    assert [r["comm"]["msg_bytes"] for r in a2a[:2]] == [288882688, 290422784]
    assert all(r["comm"]["group_size"] == 8 and r["count"] == 6 for r in a2a[:2])
    t = a["coverage"]["device_time_us"]
    assert sum(r["device_time_us"] for r in a2a[:2]) / t == pytest.approx(0.184, abs=0.002)  # 11.4% + 7.0%
