"""Matching collectives across ranks on small synthetic GPU runs whose arithmetic is exact: by sequence
number, by order, by time when a rank's trace lacks a call, p2p by peer, DeepEP kernels by order.

Each rank: one ProfilerStep, four NCCL all-reduces issued 1,000 µs apart (c10d::allreduce_ holding a
record_param_comms with the group "0" and its Seq, launching the kernel). A rank issues a call `late` µs
after the others; everyone leaves together, 100 µs after the last arrival. So at a call where rank 1 is
400 µs late, rank 0's kernel runs 500 µs (waiting 400) and rank 1's 100 µs.
"""

from __future__ import annotations

import json

import pytest

from tests import synth as s
from traceana.ranks.cross_rank import cross_rank
from traceana.ranks.executor import analyze_rank

NCCL_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
NCCL_P2P = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"


def _rank(r: int, lates: dict[int, dict[int, float]], drop=(), seq=True, p2p=None, deep_ep=0, world=2) -> dict:
    ev = [s.annotation("ProfilerStep#1", 0, 20_000)]
    ext = corr = 1
    for k in range(4):
        t = 1_000.0 * (k + 1)
        last = t + max(lates.get(q, {}).get(k, 0.0) for q in range(world))
        arrive = t + lates.get(r, {}).get(k, 0.0)
        if k in drop:
            continue
        args = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
                "Group size": world, "Process Group Name": "0"}
        if seq:
            args["Seq"] = k
        rpc = s.op("record_param_comms", arrive - 18, 25, ext + 1)
        rpc["args"].update(args)
        ev += [s.op("c10d::allreduce_", arrive - 20, 30, ext), rpc, s.launch(arrive - 15, corr, ext=ext + 1),
               s.kernel(NCCL_AR, arrive, last + 100 - arrive, corr, stream=20)]
        ext, corr = ext + 2, corr + 1
    if p2p is not None:  # rank 0 sends to rank 1, which receives `p2p` µs late
        t = 6_000.0
        arrive = t + (p2p if r == 1 else 0.0)
        name, peer = ("send", {"Dst Rank": 1}) if r == 0 else ("recv", {"Src Rank": 0})
        rpc = s.op("record_param_comms", arrive - 18, 25, ext + 1)
        rpc["args"].update({"Collective name": name, "In msg nelems": 64, "Out msg nelems": 64, "dtype": "Float",
                            "Process Group Name": "0", **peer})
        ev += [s.op(f"c10d::{'send' if r == 0 else 'recv_'}", arrive - 20, 30, ext), rpc,
               s.launch(arrive - 15, corr, ext=ext + 1), s.kernel(NCCL_P2P, arrive, t + p2p + 100 - arrive, corr, stream=21)]
        ext, corr = ext + 2, corr + 1
    for k in range(deep_ep):  # DeepEP's dispatch kernels: no op around them, one call each
        t = 8_000.0 + 1_000.0 * k
        arrive = t + (250.0 if r == 1 else 0.0)
        ev += [s.launch(arrive - 5, corr), s.kernel("void deep_ep::intranode::dispatch<8, 768>(int4*, float*)", arrive,
                                                      t + 250 + 50 - arrive, corr, stream=22)]
        corr += 1
    return s.trace(ev, distributedInfo={"backend": "nccl", "rank": r, "world_size": world})


def _report(tmp_path, docs) -> dict:
    analyses = []
    for r, doc in enumerate(docs):
        p = tmp_path / f"rank{r}.json"
        p.write_text(json.dumps(doc))
        analyses.append(analyze_rank(str(p))["analysis"])
    return cross_rank(analyses)


def test_matched_by_sequence_number_despite_a_missing_call(tmp_path):
    lates = {1: {2: 400.0}}
    doc = _report(tmp_path, [_rank(0, lates, drop=(1,)), _rank(1, lates)])
    c = doc["collectives"]
    # rank 0's trace lacks Seq 1: the three others are matched by their Seq, Seq 1 is left over
    assert c["methods"] == {"pg:0": "seq"} and (c["matched"], c["unmatched_calls"]) == (3, 1)
    r0, r1 = doc["ranks"]
    # at Seq 2 rank 1 arrived 400 µs after rank 0: rank 0 waited 400 µs (one step: per step = in all)
    assert (r0["collective_wait_us"], r1["collective_wait_us"]) == (400.0, 0.0)
    assert (r0["wait_caused_us"], r1["wait_caused_us"]) == (0.0, 400.0)
    assert r1["caused_by_phase_us"] == {"unknown": 400.0}  # no phase recorded
    top = c["top"][0]
    assert (top["kind"], top["group"], top["late"], top["lead_us"]) == ("all_reduce", "pg:0", "rank 1", 400.0)
    assert c["mismatch_count"] == 0


def test_without_sequence_numbers_a_missing_call_is_matched_by_time(tmp_path):
    lates = {1: {2: 400.0}}
    doc = _report(tmp_path, [_rank(0, lates, drop=(1,), seq=False), _rank(1, lates, seq=False)])
    c = doc["collectives"]
    # by order, rank 0's 2nd call (Seq 2, ends 3,500) would meet rank 1's 2nd (ends 2,100): rank 1 leaving
    # before rank 0 arrived, in 2 of 3 pairs: matched again by time, the same 3 collectives as by Seq
    assert c["methods"] == {"pg:0": "time"} and (c["matched"], c["unmatched_calls"]) == (3, 1)
    assert [r["collective_wait_us"] for r in doc["ranks"]] == [400.0, 0.0]


def test_a_size_mismatch_names_the_rank(tmp_path):
    docs = [_rank(r, {}, world=3) for r in range(3)]
    for e in docs[1]["traceEvents"]:
        if e["name"] == "record_param_comms" and e["args"]["Seq"] == 3:
            e["args"]["In msg nelems"] = 2048  # rank 1 all-reduces twice the elements at Seq 3
    c = _report(tmp_path, docs)["collectives"]
    assert c["mismatch_count"] == 1
    (m,) = c["mismatches"]
    # two ranks say 1,024 elements, rank 1 says 2,048: rank 1 is named
    assert (m["what"], m["common"], m["odd"]) == ("size", "1,024 elements", [{"rank": 1, "value": "2,048 elements"}])


def test_send_and_recv_are_matched_by_peer(tmp_path):
    doc = _report(tmp_path, [_rank(0, {}, p2p=300.0), _rank(1, {}, p2p=300.0)])
    c = doc["collectives"]
    # 4 all-reduces and the send/recv pair (rank 0 -> rank 1): no kind mismatch between send and recv
    assert (c["matched"], c["unmatched_calls"], c["mismatch_count"]) == (5, 0, 0)
    top = c["top"][0]
    # the receiver posted its recv 300 µs late: the sender's kernel waited 300 µs for it
    assert (top["kind"], top["late"], top["wait_us"]) == ("recv", "rank 1", 300.0)


def test_deep_ep_kernels_are_matched_in_order(tmp_path):
    doc = _report(tmp_path, [_rank(0, {}, deep_ep=3), _rank(1, {}, deep_ep=3)])
    c = doc["collectives"]
    # 3 dispatch kernels a rank on their own stream, no op around them: matched by order, rank 1 250 µs late
    # at each: rank 0 waited 3 x 250 = 750 µs
    assert c["methods"]["stream:22"] == "order" and c["matched"] == 4 + 3
    assert [r["collective_wait_us"] for r in doc["ranks"]] == pytest.approx([750.0, 0.0])
    assert {t["kind"] for t in c["top"]} == {"dispatch"}


def _stepped(r: int, late_steps: tuple[int, ...], lag: float) -> dict:
    """3 ProfilerSteps of 5,000 µs; in each, two all-reduces 1,000 and 2,000 µs after the step's start. Rank 1
    enters the steps in `late_steps` `lag` µs late (its first all-reduce there with it); everyone leaves each
    all-reduce 100 µs after the last arrival, so the second of the step finds everyone in time."""
    ev, corr = [], 1
    for n in range(3):
        start = 5_000.0 * n + (lag if r == 1 and n in late_steps else 0.0)
        ev.append(s.annotation(f"ProfilerStep#{n + 1}", start, 5_000.0 * (n + 1) - 100 - start))
        last = 5_000.0 * n + 1_000 + (lag if n in late_steps else 0.0)
        for k, arrive in enumerate((start + 1_000, last + 100 + 900)):
            leave = (last + 100) if k == 0 else arrive + 100
            ev += [s.launch(arrive - 5, corr), s.kernel(NCCL_AR, arrive, leave - arrive, corr, stream=20)]
            corr += 1
    return s.trace(ev, distributedInfo={"backend": "nccl", "rank": r, "world_size": 2})


def test_a_late_step_start_is_its_own_lever(tmp_path):
    doc = _report(tmp_path, [_stepped(0, (1, 2), 700.0), _stepped(1, (1, 2), 700.0)])
    c = doc["collectives"]
    # steps 2 and 3: rank 1 entered 700 µs late and arrived 700 µs late at the step's first all-reduce;
    # the lag is all its interval held: rank 0's 2 x 700 = 1,400 µs of waiting is charged to the step start
    r1 = next(r for r in doc["ranks"] if r["rank"] == 1)
    assert r1["caused_by_phase_us"] == {"step start": pytest.approx(1_400.0 / 3)}  # per step, 3 steps
    skew = c["step_skew"]
    # lags: step 1 0, steps 2 and 3 700: median 700 µs; its wait 1,400 / 3 = 466.7 µs per step
    assert (skew["label"], skew["lag_median_us"], skew["lag_max_us"]) == ("rank 1", 700.0, 700.0)
    assert skew["caused_us"] == pytest.approx(1_400.0 / 3)
    lever = next(x for x in doc["first"] if x["kind"] == "step_start")
    assert lever["title"] == "rank 1 enters the step late: 0.700 ms after the earliest rank (median over 3 steps)"
    assert r1["step_start_lag_us"] == 700.0
