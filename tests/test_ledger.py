"""The ledger: each µs of the primary device's span once, with its cause; every view reads it."""

from __future__ import annotations

import pytest

from tests import synth
from tests.analyses import analysis
from tests.conftest import SAMPLES, all_shared_traces
from traceana.analysis import analyze
from traceana.diagnose import ledger as lg
from traceana.diagnose.findings import launch_findings
from traceana.link.attribute import link
from traceana.load import load_trace


def _terms(a: dict) -> dict:
    return {t["key"]: t["us"] for t in a["ledger"]["terms"]}


def test_union_counts_overlaps_once():
    import numpy as np

    # [0, 12) and [20, 25): 12 + 5 = 17
    assert lg.union_us(np.array([0.0, 5.0, 20.0]), np.array([10.0, 12.0, 25.0])) == pytest.approx(17.0)


def test_work_hides_communication_and_copies(tmp_path):
    ev = [
        synth.op("aten::mm", 0, 20, 1, dims=[[64, 64], [64, 64]], types=["float", "float"]),
        synth.launch(1, 11),
        synth.kernel("volta_sgemm_128x64_nn", 10, 100, 11, stream=7),              # [10, 110)
        synth.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 60, 100, 12, stream=20),  # [60, 160)
        synth.kernel("Memcpy DtoH (Device -> Pinned)", 200, 10, 13, stream=7, cat="gpu_memcpy"),
    ]
    a = analyze(synth.write(tmp_path, synth.trace(ev)))
    led, t = a["ledger"], _terms(a)
    assert led["span_us"] == pytest.approx(200.0)  # 10 .. 210
    # the collective is exposed only in [110, 160): 50 µs; unsized (no record_param_comms) so unsplit
    assert t["comm_unsized"] == pytest.approx(50.0) and led["communication"]["total_us"] == pytest.approx(100.0)
    assert led["communication"]["overlapped_us"] == pytest.approx(50.0)  # 100 - 50
    assert t["copies"] == pytest.approx(10.0)
    # idle [160, 200): the memcpy (correlation 13) has no launch -> nothing issued
    assert t["no_work"] == pytest.approx(40.0)
    assert sum(t.values()) == pytest.approx(led["span_us"])
    dev = a["breakdown"]["devices"][0]
    assert dev["by_category"]["communication"] == pytest.approx(50.0) and dev["streams"] == 2


def _idle_events(second_stream=False):
    ev = [
        synth.launch(1, 1), synth.kernel("k1", 10, 10, 1),      # K1 [10, 20)
        synth.launch(60, 2), synth.kernel("k2", 70, 10, 2),     # launched at 60 > 20: host dispatch [20, 70)
        synth.launch(61, 3), synth.kernel("k3", 140, 10, 3),    # launched at 61 <= 80: dependency wait [80, 140)
        synth.kernel("k4", 190, 10, 4),                          # no launch: nothing issued [150, 190)
        synth.launch(195, 5), synth.kernel("k5", 210, 5, 5),    # 10 µs gap [200, 210): launch gap
    ]
    if second_stream:
        ev += [synth.launch(25, 6), synth.kernel("k6", 30, 35, 6, stream=8)]  # [30, 65) on stream 8
    return ev


def _account(tmp_path, events):
    tr = load_trace(synth.write(tmp_path, synth.trace(events)))
    ln = link(tr)
    import numpy as np

    ev_row = np.full(len(tr.gpu), -1)
    return lg.accounts(tr, ln, ev_row, [])[0]


def test_idle_gaps_by_cause(tmp_path):
    acc = _account(tmp_path, _idle_events())
    assert acc.idle_by_cause() == pytest.approx({"sync": 0.0, "host_dispatch": 50.0, "stream_wait": 60.0,
                                                 "no_work": 40.0, "launch_gaps": 10.0, "graph_launch": 0.0})
    assert acc.by_category["idle"] == pytest.approx(160.0)  # 50 + 60 + 40 + 10
    assert acc.span_us == pytest.approx(205.0)  # 10 .. 215


def test_device_idle_needs_every_stream_idle(tmp_path):
    acc = _account(tmp_path, _idle_events(second_stream=True))
    # stream 8 runs [30, 65): idle only [20, 30) (k6 launched at 25 > 20: host dispatch, 10 µs: a launch gap)
    # and [65, 70) (k2 launched at 60 <= 65: 5 µs, a launch gap), then as before
    assert acc.idle_by_cause() == pytest.approx({"sync": 0.0, "host_dispatch": 0.0, "stream_wait": 60.0,
                                                 "no_work": 40.0, "launch_gaps": 25.0,  # 10 + 5 + 10
                                                 "graph_launch": 0.0})


def test_blocking_copy_charges_the_gap_to_the_op_behind_it(tmp_path):
    # aten::item -> _local_scalar_dense -> cudaMemcpyAsync DtoH that returns only after its copy ends (at
    # 300): the GPU finishes k1 at 110 and idles until the next kernel at 330, launched at 320.
    ev = [
        synth.op("aten::mul", 0, 5, 1, dims=[[1024], [1024]]), synth.launch(1, 1),
        synth.kernel("vectorized_elementwise_kernel", 10, 100, 1),            # [10, 110)
        synth.op("aten::item", 20, 285, 2, dims=[[]]),
        synth.op("aten::_local_scalar_dense", 21, 283, 3, dims=[[]]),
        synth.launch(22, 2, name="cudaMemcpyAsync", dur=280),                  # [22, 302)
        synth.kernel("Memcpy DtoH (Device -> Pageable)", 110, 2, 2, cat="gpu_memcpy"),  # [110, 112)
        synth.op("aten::add", 318, 5, 4, dims=[[1024], [1024]]), synth.launch(320, 3),
        synth.kernel("vectorized_elementwise_kernel", 330, 10, 3),            # [330, 340)
    ]
    a = analyze(synth.write(tmp_path, synth.trace(ev)))
    led = a["ledger"]
    # idle [112, 330) = 218 µs: the call held until 302, + one 30 µs launch gap -> 220 > 218: all sync
    assert led["idle"]["by_cause"]["sync"] == pytest.approx(218.0)
    (stall,) = led["idle"]["stalls"]
    assert stall["op"] == "aten::item" and stall["kind"] == "scalar" and stall["call"] == "cudaMemcpyAsync"
    assert stall["direction"] == "DtoH" and stall["memory"] == "Pageable"
    f = a["findings"][0]
    assert f["kind"] == "sync_stall" and f["saving_us"] == pytest.approx(218.0)
    assert "aten::item" in f["title"] and "on the GPU" in f["fix"]
    assert a["plan"][0]["kind"] == "sync_stall"
    # the plan's span after it: 330 µs span (10 .. 340) - 218 µs idle = 112 µs
    assert a["plan"][0]["span_after_us"] == pytest.approx(112.0)


def test_launch_finding_adds_short_gaps_and_the_fixed_per_kernel_cost():
    rows = [{"id": "op1", "name": "aten::add", "bound": "latency", "count": 100, "kernel_count": 1,
             "device_time_us": 300.0, "roofline_time_us": 0.5}]
    facts = {"kernels": 150, "kernel_us": 900.0, "launches": 150, "launch_us": 1200.0, "lat_launches": 100,
             "lat_launch_us": 800.0, "short_gaps": 120, "short_us": 240.0, "short_median_us": 2.0,
             "short_limit_us": 30.0, "kernel_floor_us": 2.5, "kernel_floor_pct": 5, "lat_exposed_us": 300.0}
    (f,) = launch_findings(rows, 10_000.0, facts)
    # the fixed cost of 100 kernels x 2.5 µs (the device's shortest kernels) = 250 µs; plus 240 µs of
    # short gaps = 490 µs — the gaps and the per-kernel cost, never the kernels' work
    assert f["saving_us"] == pytest.approx(490.0) and f["idle_us"] == pytest.approx(240.0)
    assert "100 kernels x 2.50 µs" in f["text"]
    # the same kernels hidden under another stream but for 120 µs: fewer kernels save at most that
    (h,) = launch_findings(rows, 10_000.0, {**facts, "lat_exposed_us": 120.0})
    assert h["saving_us"] == pytest.approx(360.0)  # 240 + min(250, 120)
    assert "8.00 µs per launch" in f["text"] and "6.00 µs per kernel" in f["text"]  # 1200/150, 900/150
    assert "CUDA graphs" in f["title"]
    assert launch_findings([], 1e9, facts) == []  # 240 µs of 1e9 µs: under 0.5%
    # a graph replay is told nothing about CUDA graphs
    (g,) = launch_findings(rows, 10_000.0, facts, {"graph_replay": True})
    assert "CUDA graph" not in g["title"] and "reduce-overhead" not in g["text"] and "fuse" in g["text"].lower()
    assert "graph's scheduling" in g["text"] and "one at a time" not in g["fix"]


def test_t4_ledger_sums_to_span():
    a = analyze(str(SAMPLES / "t4_seed_pow_mul.json"))
    t, led = _terms(a), a["ledger"]
    assert t["compute"] == pytest.approx(230_208.0)  # the mm
    assert t["memory"] == pytest.approx(6_483.583)  # 1141 + 2184 + 991.583 + 2167 µs
    # four 1.088 µs gaps between back-to-back kernels: 4 x 1.088 = 4.352 µs
    assert t["launch_gaps"] == pytest.approx(4.352, abs=1e-3)
    assert led["span_us"] == pytest.approx(236_695.935, abs=1e-3)  # 236,691.583 busy + 4.352 idle
    assert sum(t.values()) == pytest.approx(led["span_us"])


def test_rank0_first_lever_is_the_blocking_copy_in_aten_to():
    a = analysis("hta/rank0.json.gz")
    led = a["ledger"]
    assert led["span_us"] == 1231461.0 and led["idle_us"] == 793037.0 and led["steps"] == 5
    stall = led["idle"]["stalls"][0]
    # aten::to -> cudaMemcpyAsync of a DtoH copy into pageable memory: 20 calls that idled the GPU, blocking
    # the CPU 737.9 ms in all;
    # the GPU sat idle during them: 424,524 µs, 424,524 / 5 steps = 84,904.8 µs per step
    assert stall["op"] == "aten::to" and stall["direction"] == "DtoH" and stall["memory"] == "Pageable"
    assert stall["count"] == 20 and stall["blocked_us"] == pytest.approx(737918.0)
    assert stall["idle_us"] == pytest.approx(424524.0) and stall["per_step_us"] == pytest.approx(84904.8)
    first = a["findings"][0]
    assert first["kind"] == "sync_stall" and "aten::to" in first["title"]
    assert a["plan"][0]["finding"] == 0 and led["lever"] == "sync"
    assert "aten::to" in led["sentence"]


def test_every_shared_trace_has_a_ledger_that_adds_up():
    for rel in all_shared_traces():
        a = analysis(rel)
        led = a["ledger"]
        if led is None:
            assert a["trace"]["gpu_events"] == 0, rel
            continue
        t = _terms(a)
        assert sum(t.values()) == pytest.approx(led["span_us"], rel=1e-9), rel
        c = led["communication"]
        assert c["total_us"] >= c["exposed_us"] - 1e-6, rel
        assert c["exposed_us"] == pytest.approx(t.get("comm_transfer", 0) + t.get("comm_wait", 0)
                                                + t.get("comm_unsized", 0)), rel
        idle = led["idle"]["by_cause"]
        assert sum(idle.values()) == pytest.approx(led["idle_us"]), rel
        dev = next(d for d in a["breakdown"]["devices"] if d["device"] == led["device"])
        assert dev["span_us"] == pytest.approx(led["span_us"]) and dev["by_category"]["idle"] == pytest.approx(
            led["idle_us"]), rel
        assert a["breakdown"]["idle"]["by_cause"] == idle, rel
        tl = a.get("timeline")
        if tl:
            prim = next(d for d in tl["idle_by_device"] if d["device"] == led["device"])
            assert prim["idle_by_cause"] == pytest.approx(idle), rel


def test_kineto_resnet_waits_for_a_single_process_dataloader():
    a = analysis("kineto/worker0.1623143089861.pt.trace.json.gz")
    led = a["ledger"]
    idle = led["idle"]["by_cause"]
    # 379.46 ms of the 996.48 ms span the next work was launched only after the GPU went idle: 38.1%
    assert idle["host_dispatch"] == pytest.approx(379456.0) and led["steps"] == 6
    act = led["idle"]["host_activity"]
    # 285.2 ms of it with the launching thread inside the DataLoader's __next__ (num_workers=0: a
    # _SingleProcessDataLoaderIter), 33.0 ms in zero_grad
    assert act["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"] == pytest.approx(285214.0)
    assert sum(act.values()) == pytest.approx(idle["host_dispatch"])
    f = a["findings"][0]
    assert f["kind"] == "host_dispatch" and "DataLoader" in f["title"] and "num_workers" in f["text"]
    # the plan: the 20 fp32 convolution signatures are one lever (autocast), ranked by their savings together
    # (171.7 ms x weight 1 against the DataLoader's 285.2 ms x 0.6 = 171.1 ms), then the DataLoader
    assert [p["kind"] for p in a["plan"][:2]] == ["tensor_core_dtype", "host_dispatch"]
    assert "DataLoader" in a["plan"][1]["title"]


def _logging_loop_trace(tmp_path, sync_waits: bool) -> str:
    """A real training loop — a tiny transformers BERT, SGD, 3 steps — that logs loss.item() every step,
    recorded on CPU and re-shaped as a CUDA run (tests/recorded.py) on a host 1000x faster than this one, so the
    GPU, not the host, sets the pace whatever the load on this machine while recording."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from tests import recorded

    cfg = transformers.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg)
    # SGD: Adam's single-tensor step reads its (host-side) step counts with .item(), which the re-shaping
    # cannot tell from a device read
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    ids = torch.randint(0, 500, (4, 128), generator=torch.Generator().manual_seed(0))
    log = []

    def run():
        for _ in range(3):
            loss = model(input_ids=ids).last_hidden_state.pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            log.append(loss.item())  # the host reads the loss: a sync every step

    run()
    doc = recorded.gpu_shaped(recorded.record(run), host_speedup=1000.0, sync_waits=sync_waits)
    return recorded.write(doc, tmp_path / f"loop_{sync_waits}.pt.trace.json.gz")


def test_recorded_loss_item_each_step_is_a_sync_stall(tmp_path):
    a = analyze(_logging_loop_trace(tmp_path, sync_waits=True))
    led = a["ledger"]
    stalls = led["idle"]["stalls"]
    # three loss.item() calls: aten::item -> _local_scalar_dense -> cudaMemcpyAsync DtoH + cudaStreamSynchronize;
    # each holds the host until the GPU has drained the step's queue, then the next step is launched late
    assert stalls and stalls[0]["op"] == "aten::item" and stalls[0]["kind"] == "scalar"
    assert 1 <= stalls[0]["count"] <= 3  # the synchronize of up to three reads (the first may find the GPU idle)
    assert led["idle"]["by_cause"]["sync"] == pytest.approx(sum(s["idle_us"] for s in stalls))
    assert led["idle"]["by_cause"]["sync"] > 0
    # the GPU sets the pace here, so each read costs only the drain-to-relaunch gap (~5-9 µs: the 5 µs
    # wake-up + dispatch); whether that reaches the finding's 0.5% of the span depends on how fast the
    # recording CPU ran, so the finding is built against a span the stall is 0.5% of (its words are tested)
    from traceana.diagnose.stalls import stall_findings

    (f,) = stall_findings(stalls, min(led["span_us"], stalls[0]["idle_us"] / 0.005), led["steps"])
    assert "aten::item" in f["title"] and f["saving_us"] == pytest.approx(stalls[0]["idle_us"])
    assert "on the GPU" in f["fix"]
    # the same loop with the host not waiting in its syncs: no stall
    b = analyze(_logging_loop_trace(tmp_path, sync_waits=False))
    assert b["ledger"]["idle"]["by_cause"]["sync"] == pytest.approx(0.0, abs=1e-6)
    assert not any(f["kind"] == "sync_stall" for f in b["findings"])


def test_sglang_decode_waits_on_an_event_not_on_the_cpu():
    """SGLang decode on MI300X: the step's first kernel is launched 42.6 µs into the span, right after a
    hipStreamWaitEvent, and starts 463.26 ms later; the CPU meanwhile sits in a blocking copy
    (hipMemcpyWithStream, 463.06 ms, under the engine's execute_... annotation). The GPU waited on a
    dependency the trace does not show running — not on the CPU: no "CPU sets the pace" lever."""
    a = analysis("tracelens/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    idle = a["ledger"]["idle"]["by_cause"]
    # gap 463.30 ms: its launch call returned 42.6 + 4.7 - 4.2 = 43.1 µs into it, and the kernel waited
    # the other 463.26 ms -> stream_wait
    assert idle["stream_wait"] == pytest.approx(463_300, abs=5) and idle["host_dispatch"] < 600
    assert not any(f["kind"] == "host_dispatch" for f in a["findings"])
    (f,) = [f for f in a["findings"] if f["kind"] == "stream_wait"]
    assert f["saving_us"] == 0 and not f["lever"] and f["wait_call"] == "hipStreamWaitEvent"
    assert "463.26 ms before it started" in f["text"] and "hipMemcpyWithStream (463.06 ms)" in f["text"]
    assert all(p["kind"] != "stream_wait" for p in a["plan"])


def test_launch_calls_that_take_milliseconds_are_first_launches():
    """TraceLens's normalization-layer test on MI300X: 9 hipLaunchKernel calls of 100-330 ms each (a
    kernel's first launch loading its code object) hold 988.8 ms of the 1.07 s span. The kernel starts
    when its launch call returns: host dispatch, named as slow launches, with the warm-up fix."""
    a = analysis("tracelens/perf_model/normalization_layer_test.json.gz")
    idle = a["ledger"]["idle"]
    assert idle["by_cause"]["stream_wait"] == 0
    assert idle["host_activity"]["kernel launch calls that themselves took milliseconds"] == pytest.approx(988_800,
                                                                                                          abs=100)
    (f,) = [f for f in a["findings"] if f["kind"] == "host_dispatch" and f["cause"] == "warmup"]
    assert f["title"].startswith("The GPU waits for slow kernel launches (first launches loading their code)")
    assert f["fix"] == "Profile after warm-up steps (torch.profiler.schedule(wait=1, warmup=1, active=3))."
    # the warm-up lever claims the idle inside the slow launches only, not the other 78.2 ms of host dispatch
    # (1066.96 - 988.80: the instance / batch norms' own dispatch, a finding of their own)
    assert f["saving_us"] == pytest.approx(idle["host_activity"]["kernel launch calls that themselves took "
                                                                 "milliseconds"])
    assert f["source_term"]["term"] == "idle.host_dispatch"
    assert f["source_term"]["term_us"] == pytest.approx(idle["by_cause"]["host_dispatch"])
