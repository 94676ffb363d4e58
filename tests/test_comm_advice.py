"""Communication findings (diagnose/comm_advice.py): transfer, wait and unsplit time each get their own
finding, saving and advice, and the advice follows the run's context. Ledger-shaped inputs with the
numbers written out; the real ledger of hta/rank0 last."""

from __future__ import annotations

import re

import pytest

from tests.analyses import analysis
from traceana.diagnose.comm_advice import MIN_SHARE, SHORT_CALL_US, comm_findings

GRADIENT = re.compile(r"gradient|DDP|FSDP|backward|bucket", re.I)


def ledger(exposed=0.0, xfer=0.0, wait=0.0, span=100_000.0) -> dict:
    return {"span_us": span, "communication": {
        "total_us": exposed + 1000.0, "exposed_us": exposed, "overlapped_us": 1000.0,
        "transfer_us": xfer + 200.0, "wait_us": wait + 800.0, "exposed_transfer_us": xfer,
        "exposed_wait_us": wait, "unsized_us": exposed - xfer - wait}}


def row(i, algo, transfer, wait, count=10, sized=True, cause=None, issued_by=None):
    return {"id": f"op{i}", "name": "record_param_comms", "bound": "communication", "count": count,
            "mean_time_us": (transfer or 0.0) + (wait or 0.0),
            "device_time_us": ((transfer or 0.0) + (wait or 0.0)) * count,
            "cause": cause, "comm": {"algorithm": algo, "sized": sized, "transfer_us": transfer, "wait_us": wait,
                                     "issued_by": issued_by}}


def ctx(mode, *par, ep_kind=None):
    ev = {"EP": [{"rule": "all-to-all", "kind": ep_kind}]} if ep_kind else {}
    return {"mode": mode, "parallelism": list(par), "evidence": ev, "record_shapes": True}


def by_kind(found):
    return {f["kind"]: f for f in found}


def test_transfer_and_wait_get_their_own_saving():
    # span 100 ms; exposed 30 ms = 12 ms transfer + 18 ms wait
    rows = [row(1, "all_reduce", 1000.0, 1500.0), row(2, "all_to_all", 200.0, 300.0)]
    f = by_kind(comm_findings(ledger(30_000.0, 12_000.0, 18_000.0), rows, ctx("training", "DP")))
    assert set(f) == {"comm_exposed", "comm_wait"}
    # overlap can hide the transfer, no more: saving = the exposed transfer, 12 ms
    assert f["comm_exposed"]["saving_us"] == 12_000.0 and "12.00 ms" in f["comm_exposed"]["title"]
    # transfer by collective over all calls: all_reduce 1000 x 10 = 10 ms, all_to_all 200 x 10 = 2 ms
    assert "all_reduce 10.00 ms, all_to_all 2.000 ms" in f["comm_exposed"]["text"]
    assert "DDP" in f["comm_exposed"]["text"] and "FSDP" not in f["comm_exposed"]["text"]
    # the wait is imbalance: no saving on one rank, and the cross-rank report is named
    w = f["comm_wait"]
    assert w["saving_us"] == 0.0 and "`traceana report DIR/`" in w["text"] and "phase" in w["text"]
    assert w["ops"] == ["op1", "op2"] and "op1 all_reduce: 1.500 ms of 2.500 ms per call" in w["text"]
    assert {x["group"] for x in f.values()} == {"communication"} and all(x["fix"] for x in f.values())


def test_parts_under_one_percent_of_the_span_get_nothing():
    rows = [row(1, "all_reduce", 100.0, 100.0)]
    # exposed 3 ms: transfer 0.9 ms (0.9% < 1%) gives no finding, wait 2.1 ms does
    f = by_kind(comm_findings(ledger(3_000.0, 900.0, 2_100.0), rows, ctx("training", "DP")))
    assert set(f) == {"comm_wait"} and MIN_SHARE == 0.01
    assert comm_findings(ledger(500.0, 200.0, 300.0), rows, ctx("training", "DP")) == []  # 0.5% exposed


def test_inference_never_gets_gradient_advice():
    rows = [row(1, "all_reduce", 30.0, 10.0, count=1000)]
    f = by_kind(comm_findings(ledger(40_000.0, 30_000.0, 10_000.0), rows, ctx("inference", "TP")))
    assert not GRADIENT.search(f["comm_exposed"]["text"] + f["comm_wait"]["text"])
    assert "next GEMM" in f["comm_exposed"]["text"]  # tensor-parallel inference: overlap with the next matmul
    # and without parallelism known, nothing about DDP either
    g = comm_findings(ledger(40_000.0, 30_000.0, 10_000.0), rows, ctx("inference"))
    assert not any(GRADIENT.search(x["text"]) for x in g)


@pytest.mark.parametrize("context,algo,says,never", [
    (ctx("training", "FSDP"), "all_gather", "prefetch the next all-gather", "DDP"),
    (ctx("training", "TP"), "reduce_scatter", "async TP", "DDP"),
    (ctx("training", "EP", ep_kind="experts"), "all_to_all", "two-batch overlap", "low_latency"),
    (ctx("inference", "EP", ep_kind="experts"), "all_to_all", "low_latency_dispatch", "gradient"),
    (ctx("training", "EP", ep_kind="embedding tables"), "all_to_all", "TrainPipelineSparseDist", "two-batch"),
    (ctx("training", "PP"), "send_recv", "more micro-batches", "DDP"),
    (ctx("training", "DP"), "all_to_all", "asynchronously on their own stream", "DDP"),  # DP but no all-reduce
])
def test_advice_follows_the_parallelism(context, algo, says, never):
    rows = [row(1, algo, 500.0, 100.0)]
    f = by_kind(comm_findings(ledger(6_000.0, 5_000.0, 1_000.0), rows, context))
    assert says in f["comm_exposed"]["text"] and never not in f["comm_exposed"]["text"]


def test_short_collectives_wait_on_latency():
    # 1000 calls of 20 µs (< 50 µs): their wait is mostly a collective's fixed latency
    rows = [row(1, "all_reduce", 2.0, 18.0, count=1000)]
    w = by_kind(comm_findings(ledger(20_000.0, 2_000.0, 18_000.0), rows, ctx("training", "DP")))["comm_wait"]
    assert SHORT_CALL_US == 50.0 and "fewer, larger collectives" in w["text"]


def test_unsplit_time_says_what_was_not_recorded():
    rows = [row(1, "all_reduce", None, None, sized=False, cause="shapes_not_recorded", issued_by="c10d::allreduce_"),
            row(2, "all_to_all", None, None, sized=True)]  # sized, but across hosts with no network figure
    rows[0]["device_time_us"] = 5_000.0
    f = by_kind(comm_findings(ledger(10_000.0, 0.0, 0.0), rows, ctx("training", "DP")))
    u = f["comm_unsized"]
    # still a lever: overlap (or fewer, larger collectives) can recover at most the exposed unsized time,
    # 10 ms exposed - 0 transfer - 0 wait = 10 ms; a guess about what the trace did not record: low confidence
    assert set(f) == {"comm_unsized"} and u["saving_us"] == 10_000.0 and u["ops"] == ["op1", "op2"]
    assert u["confidence"] == "low" and u["estimated"] is True
    assert "10.00 ms with nothing else on the GPU (10.0% of the span)" in u["title"]
    # exposed vs overlapped (the ledger's 10 ms and 1 ms), the parallelism, what to try
    assert "10.00 ms of it ran with nothing else on the GPU (exposed), 1.000 ms under other kernels" in u["text"]
    assert "parallelism DP" in u["text"] and "fewer, larger collectives" in u["text"]
    assert "op1 all_reduce (issued by c10d::allreduce_) 5.000 ms" in u["text"]
    assert "--network-gbps" in u["text"] and "`traceana report DIR/`" in u["text"]
    assert "record_shapes=True" not in u["text"]  # the trace recorded shapes: never ask for them


def test_rank0_first_lever_is_not_communication():
    """hta/rank0: 185 ms of exposed collective time, of which 4.0 ms is transfer (0.33% of the span: no
    transfer finding), 30.95 ms wait (saving 0) and 150.35 ms unsplit (the DDP all-reduces' sizes): a lever of
    at most those 150.35 ms, low confidence, so the sync stalls (424.5 ms, 98.3 ms, high / medium) lead."""
    a = analysis("hta/rank0.json.gz")
    c = a["ledger"]["communication"]
    assert c["exposed_us"] == pytest.approx(185317.0)
    assert c["exposed_transfer_us"] == pytest.approx(4022.75) and c["exposed_wait_us"] == pytest.approx(30948.25)
    f = by_kind(comm_findings(a["ledger"], a["ops"], a["context"], a["kernels"]))
    assert set(f) == {"comm_wait", "comm_unsized"}
    assert f["comm_wait"]["saving_us"] == 0.0
    # 185,317 - 4,022.75 - 30,948.25 = 150,346 µs exposed with no size: the unsized lever's cap
    assert f["comm_unsized"]["saving_us"] == pytest.approx(185317.0 - 4022.75 - 30948.25)
    assert f["comm_unsized"]["saving_us"] <= c["exposed_us"]
    assert "by kernel name: send-recv 100%" in f["comm_unsized"]["text"]  # NCCL's SendRecv kernels
    assert [p["kind"] for p in a["plan"]][:2] == ["sync_stall", "sync_stall"]
    assert "embedding lookups spread unevenly" in f["comm_wait"]["text"]  # EP: sharded embedding tables
    assert "op1 all_reduce (issued by c10d::allreduce_) 126.56 ms" in f["comm_unsized"]["text"]
    # the analysis' own findings are these (findings.comm_findings is comm_advice's)
    kinds = {x["kind"]: x for x in a["findings"]}
    assert kinds["comm_wait"]["saving_us"] == 0.0 and "comm_exposed" not in kinds


@pytest.mark.parametrize("rel", ["hta/rank0.json.gz", "hta/sampled_rank-0.json.gz", "hta/control.json.gz",
                                 "hta/df_index_resolver.json.gz", "tracelens/mi300/resnet_act_checkpoint.json.gz",
                                 "tracelens/vllm_decode_full/graph_execution.json.gz",
                                 "tracelens/sglang_decode/sglang_Qwen3-8B_decode.json.gz"])
def test_shared_traces_advice_fits_their_context(rel):
    a = analysis(rel)
    ctx_, par = a["context"], set(a["context"]["parallelism"])
    for f in (x for x in a["findings"] if x.get("group") == "communication"):
        text = f["title"] + " " + f["text"]
        if ctx_["mode"] != "training":
            assert not GRADIENT.search(text), (rel, f["kind"])
        if "FSDP" not in par:
            assert "FSDP" not in text, (rel, f["kind"])
        if "DP" not in par:
            assert "DDP" not in text, (rel, f["kind"])
        if f["kind"] == "comm_wait":
            assert f["saving_us"] == 0.0
        if f["kind"] == "comm_unsized":  # a lever no larger than its source: the exposed unsized time
            assert 0.0 < f["saving_us"] <= a["ledger"]["communication"]["exposed_unsized_us"] + 1e-6
