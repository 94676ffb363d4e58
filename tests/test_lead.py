"""The lead: where the time went, before any single op (issue 12 item 7), on real traces."""

from __future__ import annotations

import pytest

from tests.analyses import analysis
from tests.conftest import all_shared_traces
from traceana.render.markdown import render_markdown


def _parts_sum(lead: dict) -> float:
    return (lead["idle_us"] + lead["communication_exposed_us"] + lead["copies_exposed_us"]
            + sum(lead["work_by_bound"].values()))


def test_rank0_leads_with_idle_and_communication():
    a = analysis("hta/rank0.json.gz")
    lead = a["lead"]
    # span 1,231,461 µs = busy 438,424 + idle 793,037
    assert lead["span_us"] == 1231461.0 and lead["busy_us"] == 438424.0 and lead["idle_us"] == 793037.0
    assert lead["lever"] == "idle"
    assert lead["idle_by_cause"]["kernel_wait"] == 666794.0 and lead["idle_by_cause"]["host_wait"] == 13511.0
    # NCCL: 187,870 µs of the 438,424 µs busy = 42.9%; 185,317 µs of it with nothing else running
    assert lead["communication_us"] == 187870.0 and lead["communication_exposed_us"] == 185317.0
    assert _parts_sum(lead) == pytest.approx(lead["span_us"])
    assert lead["sentence"].startswith("GPU idle 64.4% of the 1.23 s span")
    first = a["findings"][0]
    assert first["kind"] == "comm_exposed" and first["saving_us"] == 185317.0
    assert "42.3% of busy time" in first["title"]  # 185,317 / 438,424
    md = render_markdown(a, long=True)
    head = md.split("## Findings")[0]
    assert "**Where the time went:** GPU idle 64.4%" in head and "| idle: kernel-wait | 666.79 ms | 54.1% |" in head
    assert "fp32 GEMM" not in head


def test_qwen_h100_leads_with_memory_bound_work_and_fusion():
    a = analysis("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    lead = a["lead"]
    assert lead["lever"] == "memory" and lead["communication_us"] == 0.0
    assert lead["work_by_bound"]["memory"] == pytest.approx(22717.2, abs=0.5)
    assert _parts_sum(lead) == pytest.approx(lead["span_us"])
    assert a["findings"][0]["kind"] == "fusion" and "rsqrt" in a["findings"][0]["title"]


def test_kineto_resnet_leads_with_the_host_bound_idle():
    a = analysis("kineto/worker0.1623143089861.pt.trace.json.gz")
    lead = a["lead"]
    # 379.87 ms of the 996.48 ms span the GPU waited for the CPU (the sample's DataLoader has
    # num_workers=0): the first finding says so
    assert lead["idle_by_cause"]["host_wait"] == pytest.approx(379870.0, abs=1)
    assert a["findings"][0]["kind"] == "idle_gap"
    assert _parts_sum(lead) == pytest.approx(lead["span_us"])


def test_every_shared_trace_has_a_lead_that_adds_up():
    for rel in all_shared_traces():
        a = analysis(rel)
        lead = a["lead"]
        if lead is None:
            assert a["trace"]["gpu_events"] == 0, rel
            continue
        assert _parts_sum(lead) == pytest.approx(lead["span_us"], rel=1e-6), rel
        assert lead["busy_us"] <= lead["span_us"] + 1e-6, rel
