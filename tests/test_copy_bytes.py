"""Host copies judged from their own recorded bytes when no shapes were recorded (traceana/link/copies.py).

A memcpy event carries what it moved (`bytes`) and, in its name, which memory it read or wrote
(CUPTI's `Memcpy HtoD (Pageable -> Device)`); neither needs the op's shapes. So a copy under an op that
recorded no shapes, or under no op at all, is held to the host link like any other, and pageable memory
still gets its fix. Tested on shared traces with their shapes taken away (what record_shapes=False
leaves: no Input Dims / types / strides / Concrete Inputs), on a copy the trace links to no op, and on
real model code recorded without shapes.
"""

from __future__ import annotations

import msgspec.structs
import gzip
import json

import pytest

from tests.analyses import analysis
from tests.conftest import shared_trace
from traceana.analysis import analyze, analyze_trace
from traceana.load import load_trace

SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def _without_shapes(rel: str) -> dict:
    """The analysis of shared trace REL as if it had been recorded with record_shapes=False."""
    t = load_trace(shared_trace(rel))
    n = len(t.ops)
    ops = msgspec.structs.replace(t.ops, dims=[b""] * n, types=[b""] * n, strides=[b""] * n, concrete=[b""] * n)
    return analyze_trace(msgspec.structs.replace(t, ops=ops, record_shapes=False))


def _copy_rows(a: dict, key: str) -> list[dict]:
    return [r for r in a["ops"] if r.get("copy") and f"{r['copy']['direction']} ({r['copy']['memory']})" == key]


def test_pageable_copies_without_shapes_on_kineto_resnet():
    """ResNet-50 on V100 (PCIe 3.0 x16, 15.75 GB/s per direction): the input batches go host-to-device from
    pageable memory, 12 copies of 115,607,040 B in all (6 x 19,267,584 B images + 6 x 256 B labels), 11.492 ms.
    With no shapes recorded they are still held to the link: 115,607,040 B / 15.75 GB/s = 7,340.1 µs, so
    11,492 - 7,340.1 = 4,151.9 µs above the link's floor, and the fix is to pin the memory."""
    a = _without_shapes("kineto/worker0.1623143089861.pt.trace.json.gz")
    (row,) = _copy_rows(a, "HtoD (Pageable)")
    assert row["name"] == "aten::copy_" and row["bound"] == "host_link" and not row["opaque"]
    assert row["copy"]["events"] == 12 and row["count"] == 12
    assert row["copy"]["bytes"] * row["count"] == pytest.approx(115_607_040)
    assert "judged from their own recorded bytes" in row["notes"][-1]
    (f,) = [f for f in a["findings"] if f["kind"] == "host_copy"]
    assert f["saving_us"] == pytest.approx(11_492 - 115_607_040 / 15.75e3)  # 4,151.9 µs
    assert "Pageable" in f["title"] and "pin_memory" in f["text"]


def test_an_ops_copies_are_grouped_apart_from_its_kernels_on_rank0():
    """hta/rank0 without shapes: aten::copy_ ran 1,130 device-to-device copies, 35 pinned host-to-device ones
    (21.073 ms), 45 pageable HtoD (82 µs), 30 pageable DtoH (80 µs) and element-wise copy kernels, 47.303 ms in
    all. Grouped as one they were opaque (the host copies under half); grouped per host-copy name, the pinned
    HtoD row is held to PCIe 4.0 x16 (31.5 GB/s): 253,534,084 B / 31.5 GB/s = 8,048.7 µs,
    21,073 - 8,048.7 = 13,024.3 µs above the floor."""
    a = _without_shapes("hta/rank0.json.gz")
    (row,) = _copy_rows(a, "HtoD (Pinned)")
    assert row["device_time_us"] == pytest.approx(21_073) and row["copy"]["events"] == 35
    (f,) = [f for f in a["findings"] if f["kind"] == "host_copy"]
    assert f["saving_us"] == pytest.approx(21_073 - 253_534_084 / 31.5e3)
    # the device-to-device copies stay with the op's kernels: opaque, nothing to hold them to without shapes
    (rest,) = [r for r in a["ops"] if r["name"] == "aten::copy_" and r["opaque"]]
    assert rest["device_time_us"] == pytest.approx(47_303 - 21_073 - 82 - 80)  # less the 3 host-copy rows
    assert any("DtoD" in k["name"] for k in rest["kernels"]) and rest["bound"] == "opaque"
    # the copies' time is costed, not opaque: coverage counts it once
    c = a["coverage"]
    assert c["opaque_time_us"] + c["modeled_time_us"] + c["unmodeled_time_us"] == pytest.approx(c["device_time_us"])


def test_a_copy_with_no_op_on_hta_test():
    """hta/test: one pinned host-to-device copy ran with no launch in the trace (before the profiled window):
    no op, so no shapes, but its 29,952 B in 3 µs are held to the V100's PCIe 3.0 x16 like the others."""
    a = analysis("hta/test.json.gz")
    (row,) = [r for r in a["ops"] if r["name"] == "Memcpy HtoD (Pinned -> Device)"]
    assert row["bound"] == "host_link" and row["opaque"] is False and row["cause"] is None
    assert row["copy"]["bytes"] == pytest.approx(row["copies"]["HtoD (Pinned)"]["bytes"])
    assert row["roofline_time_us"] == pytest.approx(row["copy"]["bytes"] / 15.75e3)


def _strip_shapes(path: str, out) -> str:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        for k in SHAPE_ARGS:
            (e.get("args") or {}).pop(k, None)
    doc.pop("record_shapes", None)
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)
    return str(out)


def _bert_steps():
    """Two training steps of a transformers BERT that log the loss with .item() (a 4-byte device-to-host
    copy into pageable memory, `Memcpy DtoH (Device -> Pageable)` in the recorder's CUDA trace)."""
    import torch
    import transformers
    cfg = transformers.BertConfig(vocab_size=1000, max_position_embeddings=64, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=128)
    model = transformers.BertModel(cfg).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ids = torch.randint(0, 1000, (2, 32), generator=torch.Generator().manual_seed(0))

    def run():
        for _ in range(2):
            loss = model(input_ids=ids).last_hidden_state.pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            print(f"loss {loss.item():.4f}", end="\r")
    return run


def test_recorded_item_copies_without_shapes(recorded_trace, tmp_path):
    """Real training code that logs loss.item(), recorded with and without shapes: the two 4-byte DtoH copies
    into pageable memory are held to the A100's PCIe 4.0 x16 from their recorded bytes either way, with the
    same numbers (4 B per call / 31.5 GB/s = 0.000127 µs of link time)."""
    path = recorded_trace.custom("bert_train_item", _bert_steps)
    rows = {}
    for label, p in (("shapes", path), ("no shapes", _strip_shapes(path, tmp_path / "noshapes.json.gz"))):
        a = analyze(p)
        assert a["trace"]["record_shapes"] is (label == "shapes")
        (r,) = [r for r in a["ops"] if r.get("copy") and r["copy"]["direction"] == "DtoH"]
        assert r["name"] == "aten::_local_scalar_dense" and r["bound"] == "host_link"
        assert r["copy"]["memory"] == "Pageable" and r["copy"]["bytes"] == 4.0 and r["count"] == 2
        rows[label] = r
    for k in ("roofline_time_us", "device_time_us", "roof_pct"):
        assert rows["shapes"][k] == pytest.approx(rows["no shapes"][k])
    assert rows["no shapes"]["roofline_time_us"] == pytest.approx(4 / 31.5e3)
    assert "record_shapes was off" in rows["no shapes"]["notes"][-1]
