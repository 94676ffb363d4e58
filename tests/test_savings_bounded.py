"""A saving is never larger than its source: every lever names the ledger term it comes from and is capped
by it, on every shared trace and on traces recorded from real model code; the plan's span after never drops
below the critical stream's own time. Plus the arithmetic of each cap."""

from __future__ import annotations

import pytest

from tests import synth
from tests.analyses import analysis
from tests.conftest import SAMPLES, all_shared_traces, shared_trace
from tests.savings_checks import check, check_advice
from traceana.analysis import analyze, analyze_parts

# ----------------------------------------------------------------------------- every trace


@pytest.mark.parametrize("rel", all_shared_traces())
def test_every_shared_trace_keeps_savings_within_their_source(rel):
    a, parts = analyze_parts(shared_trace(rel))
    check(a, parts.trace, rel)


def test_t4_sample_keeps_savings_within_their_source():
    a, parts = analyze_parts(str(SAMPLES / "t4_seed_pow_mul.json"))
    check(a, parts.trace, "t4")


RECORDED = ("bert", "bloom", "deberta", "gpt2_sdpa", "llama", "t5", "vit", "videomae", "resnet", "bert_train",
            "llama_train", "resnet_train", "vit_train")


@pytest.mark.parametrize("key", RECORDED)
def test_every_recorded_trace_keeps_savings_within_their_source(recorded_trace, key):
    a, parts = analyze_parts(recorded_trace(key))
    check(a, parts.trace, key)


def test_recorded_train_step_keeps_savings_within_their_source(recorded_trace):
    a, parts = analyze_parts(recorded_trace.train_step_gpu())
    check(a, parts.trace, "train_step_gpu")


# ----------------------------------------------------------------------------- host causes, each its own idle


def _host_causes_trace(tmp_path) -> str:
    """Five host-dispatch gaps, each with the launching thread (tid 1) somewhere else:
      [100, 2120)  2020 µs inside the DataLoader's __next__ (an annotation [100, 2100))
      [2220, 3320) 1100 µs inside cudaFree [2300, 3300) (begun after the GPU went idle: not a sync stall)
      [3420, 4720) 1300 µs inside cudaStreamCreate [3500, 4700)
      [4820, 6410) 1590 µs inside k5's own launch call [4900, 6400) (a first launch loading its code)
      [6500, 7820) 1320 µs inside cuModuleLoadData [6600, 7800)
    each ended by a kernel launched 10 µs before it starts."""
    ev = [synth.launch(-10, 1), synth.kernel("k1", 0, 100, 1),
          synth.annotation("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 100, 2000),
          synth.launch(2110, 2, dur=5), synth.kernel("k2", 2120, 100, 2),
          synth.launch(2300, 90, name="cudaFree", dur=1000),
          synth.launch(3310, 3, dur=5), synth.kernel("k3", 3320, 100, 3),
          synth.launch(3500, 91, name="cudaStreamCreateWithPriority", dur=1200),
          synth.launch(4710, 4, dur=5), synth.kernel("k4", 4720, 100, 4),
          synth.launch(4900, 5, dur=1500), synth.kernel("k5", 6410, 90, 5),
          synth.launch(6600, 92, name="cuModuleLoadData", dur=1200),
          synth.launch(7810, 6, dur=5), synth.kernel("k6", 7820, 80, 6)]
    return synth.write(tmp_path, synth.trace(ev))


def test_each_host_cause_claims_only_its_own_idle(tmp_path):
    a = analyze(_host_causes_trace(tmp_path))
    led = a["ledger"]
    # idle 2020 + 1100 + 1300 + 1590 + 1320 = 7330 µs, all host dispatch; span 0 .. 7900
    assert led["idle"]["by_cause"]["host_dispatch"] == pytest.approx(7330.0)
    assert led["span_us"] == pytest.approx(7900.0)
    by = {f["cause"]: f for f in a["findings"] if f["kind"] == "host_dispatch"}
    # the DataLoader lever claims the idle inside its frames, not the 7330 µs of all host dispatch
    assert by["data_loading"]["saving_us"] == pytest.approx(2020.0)
    assert "DataLoader" in by["data_loading"]["title"]
    # cudaFree and stream creation are causes of their own, with their own advice — not warm-up
    assert by["allocator"]["saving_us"] == pytest.approx(1100.0) and "empty_cache" in by["allocator"]["text"]
    assert by["setup"]["saving_us"] == pytest.approx(1300.0) and "once, before the loop" in by["setup"]["text"]
    # warm-up: the slow launch and the module load, 1590 + 1320 = 2910 µs
    assert by["warmup"]["saving_us"] == pytest.approx(2910.0) and "warm-up" in by["warmup"]["fix"]
    for f in by.values():
        assert f["source_term"]["term"] == "idle.host_dispatch"
        assert f["source_term"]["term_us"] == pytest.approx(7330.0)
    # the causes partition the term: 2020 + 1100 + 1300 + 2910 = 7330
    assert sum(f["saving_us"] for f in by.values()) == pytest.approx(7330.0)
    check(a)


# ----------------------------------------------------------------------------- graph launches


GRAPH_CALLS_US = (400.0, 1200.0, 2000.0, 2800.0)


def _graph_decode_trace(tmp_path) -> str:
    """Four decode steps, each one cudaGraphLaunch [T, T+L) whose kernels start while it submits them: kernel A
    [T+20, T+120), then the GPU waits for the rest of the submission, kernel B [T+L-50, T+L+100); between steps
    300 µs of Python (an annotation) before the next launch at T+L+400."""
    ev, t = [], 0.0
    for i, length in enumerate(GRAPH_CALLS_US):
        c = 10 + i
        ev += [synth.launch(t, c, name="cudaGraphLaunch", dur=length),
               synth.kernel("decode_gemm_kernel", t + 20, 100, c), synth.kernel("decode_attn_kernel", t + length - 50,
                                                                                150, c)]
        if i < len(GRAPH_CALLS_US) - 1:
            ev.append(synth.annotation("prepare_inputs", t + length + 100, 300))
        t += length + 400
    return synth.write(tmp_path, synth.trace(ev))


def test_graph_launch_host_time_is_its_own_idle_cause(tmp_path):
    a = analyze(_graph_decode_trace(tmp_path))
    led = a["ledger"]
    idle = led["idle"]["by_cause"]
    # inside each call the GPU waits L - 170 µs (from T+120 to T+L-50): 230 + 1030 + 1830 + 2630 = 5720 µs; each
    # gap between steps [T+L+100, T'+20) holds the next call's first 20 µs: 3 x 20 = 60 µs -> 5780 µs
    assert idle["graph_launch"] == pytest.approx(5780.0)
    # the rest of the gaps between steps: 3 x 300 µs of Python
    assert idle["host_dispatch"] == pytest.approx(900.0)
    # span 20 .. 4800 + 2800 + 100 = 7700: 7680 µs = 1000 busy + 5780 + 900
    assert led["span_us"] == pytest.approx(7680.0)
    calls = led["idle"]["graph_calls"]
    # the calls' host time measured: 400 + 1200 + 2000 + 2800 = 6400 µs, median (1200 + 2000) / 2 = 1600 µs
    assert calls["graph_launches"] == 4 and calls["graph_launch_us"] == pytest.approx(6400.0)
    assert calls["graph_launch_min_us"] == pytest.approx(400.0)
    assert calls["graph_launch_max_us"] == pytest.approx(2800.0)
    assert calls["graph_launch_median_us"] == pytest.approx(1600.0)
    (g,) = [f for f in a["findings"] if f["kind"] == "graph_launch"]
    assert g["saving_us"] == pytest.approx(5780.0) and g["source_term"]["term"] == "idle.graph_launch"
    assert "warm-up" in g["text"] and "instead of capturing" in g["text"] and "fewer graphs per step" in g["text"]
    assert "6.400 ms of host time (400.0 µs to 2.800 ms each, median 1.600 ms)" in g["text"]
    assert a["plan"][0]["kind"] == "graph_launch"
    # the run replays graphs: the host-dispatch lever proposes no CUDA graphs or torch.compile
    (h,) = [f for f in a["findings"] if f["kind"] == "host_dispatch"]
    assert "CUDA graph" not in h["fix"] and "torch.compile" not in h["text"]
    check(a)


def test_sglang_decode_graph_launch_idle_is_measured_inside_the_call():
    """SGLang decode on MI300X: one hipGraphLaunch of 1572.6 µs whose kernels start while it submits them; the
    GPU waits inside it twice: 273.7 µs mid-call, and 14.0 µs of a 50.8 µs gap the call began 36.8 µs into."""
    a = analysis("tracelens/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    idle = a["ledger"]["idle"]
    assert idle["by_cause"]["graph_launch"] == pytest.approx(273.7 + 14.0, abs=0.2)
    assert not any(k.startswith("inside hipGraphLaunch") for k in idle["host_activity"])
    calls = idle["graph_calls"]
    assert calls["graph_launches"] == 1 and calls["graph_launch_us"] == pytest.approx(1572.6, abs=0.1)
    assert calls["graph_launch_call"] == "hipGraphLaunch"
    check_advice(a, "sglang_decode")


@pytest.mark.parametrize("rel", ["tracelens/vllm_decode_full/graph_execution.json.gz",
                                 "tracelens/vllm_piecewise/graph_execution.json.gz",
                                 "tracelens/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
                                 "tracelens/sglang/sglang_Qwen3-8B_prefilldecode.json.gz", "hta/rank0.json.gz"])
def test_graph_replay_runs_are_not_told_to_use_graphs(rel):
    a = analysis(rel)
    if a["context"]["graph_replay"]:
        for f in a["findings"]:
            assert "CUDA graphs (torch.compile" not in (f.get("fix") or "") + (f.get("text") or ""), f["title"]
    check_advice(a, rel)


# ----------------------------------------------------------------------------- the caps, with their arithmetic


def test_kineto_dataloader_lever_claims_only_the_dataloader_frames():
    a = analysis("kineto/worker0.1623143089861.pt.trace.json.gz")
    by = {f["cause"]: f for f in a["findings"] if f["kind"] == "host_dispatch"}
    # 379.456 ms of host-dispatch idle: 285.214 ms with the thread in the DataLoader's __next__, 33.011 ms in
    # zero_grad, and 61.231 ms dispatching ops (conv2d 30.2, batch_norm 10.9, relu_ 7.0, ...): 285214 + 33011 +
    # 61231 = 379456
    assert by["data_loading"]["saving_us"] == pytest.approx(285_214.0)
    assert by["optimizer"]["saving_us"] == pytest.approx(33_011.0)
    assert by["dispatch"]["saving_us"] == pytest.approx(61_231.0)
    assert a["ledger"]["idle"]["by_cause"]["host_dispatch"] == pytest.approx(285_214.0 + 33_011.0 + 61_231.0)
    (p,) = [p for p in a["plan"] if "DataLoader" in p["title"]]
    assert p["source_term"] == {"term": "idle.host_dispatch", "us": 285_214.0, "term_us": 379_456.0}


def test_rank0_launch_lever_is_the_gaps_plus_the_measured_per_kernel_cost():
    a = analysis("hta/rank0.json.gz")
    (f,) = [f for f in a["findings"] if f["kind"] == "launch_bound"]
    # 21.368 ms of launch gaps + 5,410 latency-bound kernels x 3.00 µs (the 5th percentile of the A100's kernel
    # durations) = 21368 + 16230 = 37598 µs; the source: 21368 gaps + 19101 µs of exposed latency-bound kernels
    assert f["saving_us"] == pytest.approx(21_368.0 + 5_410 * 3.0)
    assert f["idle_us"] == pytest.approx(21_368.0)
    assert f["source_term"] == {"term": "idle.launch_gaps + kernels.latency", "us": 40_469.0, "term_us": 40_469.0}
    assert "5,410 kernels x 3.00 µs" in f["text"]
    # 23% of the GPU time is replayed from graphs: the launches outside them can join them, no generic advice
    assert "graphs the run already replays" in f["fix"]


def test_compute_bound_saving_is_against_the_achievable_share_of_the_peak():
    a = analysis("tracelens/sglang/sglang_Qwen3-8B_prefilldecode.json.gz")
    row = next(r for r in a["ops"] if r["id"] == "op1")
    (f,) = [f for f in a["findings"] if f["kind"] == "compute_bound" and f["ops"] == ["op1"]]
    floor = row["count"] * row["flops"] / (row["peak_tflops"] * 1e6)  # 36 x 3.09e12 / 1307.4 TFLOP/s = 85.15 ms
    # MI300X (CDNA3 gfx942): 55% of the datasheet bf16 peak is achievable (MAMF 51.4-60.1%); at 100% the lever
    # claimed 158.4 ms. 243.64 ms - 85.15 / 0.55 - 36 x 2 µs = 243.64 - 154.82 - 0.07 = 88.75 ms
    assert f["achievable_fraction"] == pytest.approx(0.55)
    assert f["saving_us"] == pytest.approx(row["device_time_us"] - floor / 0.55 - row["count"] * row["launch_floor_us"])
    assert f["saving_us"] == pytest.approx(88_752.0, abs=1.0)
    assert "achievable 55%, the default for CDNA3 gfx942" in f["text"]


def test_achievable_fraction_per_architecture_and_what_the_trace_shows():
    from traceana.roofline import achievable as ach

    assert ach.default_fraction({"arch": "Hopper GH100"})[0] == 0.80  # H100 SXM 795 / 989 = 80.3%
    assert ach.default_fraction({"arch": "Ampere GA100"})[0] == 0.85  # A100 SXM 271 / 312 = 86.9%, PCIe 81.1%
    assert ach.default_fraction({"arch": "CDNA3 gfx942"})[0] == 0.55  # MI300X 51.4-60.1%
    assert ach.default_fraction({"arch": "Blackwell GB100"})[0] == 0.75  # B200 1745 / 2250 = 77.6%
    f, why = ach.default_fraction({"arch": "Turing TU104"})  # not measured: the default
    assert f == 0.80 and "default" in why
    # an op of the trace at 92% of the same roof: this device shows it can do better than the default
    rows = [{"id": "op1", "name": "aten::mm", "bound": "compute", "roof_pct": 92.0, "peak_dtype": "bf16_tc",
             "device_time_us": 500.0}, {"id": "op2", "name": "aten::mm", "bound": "compute", "roof_pct": 99.0,
                                        "peak_dtype": "bf16_tc", "device_time_us": 1.0}]  # 0.1%: too small to count
    shown = ach.shown_by_trace(rows, 1000.0)
    assert ach.fraction({"arch": "Hopper GH100"}, "bf16_tc", shown)[0] == pytest.approx(0.92)
    assert ach.fraction({"arch": "Hopper GH100"}, "fp8_tc", shown)[0] == 0.80


def test_span_after_never_drops_below_the_critical_stream():
    from traceana.diagnose.projection import project

    rows = [{"id": "op1", "device_time_us": 80.0}, {"id": "op2", "device_time_us": 60.0}]
    # stream A runs op1 for 80 µs, stream B op2 for 60 µs beside it: busy (the union) 100 µs, idle 50 µs
    streams = [{"op1": 80.0}, {"op2": 60.0}]
    levers = [{"lever": True, "saving_us": 50.0, "idle_us": 50.0, "ops": []},     # all the idle
              {"lever": True, "saving_us": 60.0, "idle_us": 0.0, "ops": ["op2"]}]  # all of op2
    p = project(levers, rows, 100.0, 50.0, streams)
    # busy 100 - 60 x (100 / 140) = 57.1 µs left, idle 0: the model alone would say 57.1 µs — but stream A still
    # runs op1's 80 µs, so the span after is 80 µs
    assert p["floor_us"] == pytest.approx(80.0)
    assert p["span_after_us"] == pytest.approx(80.0)
    # with op1 halved too, the critical stream keeps 40 µs and the model's own figure holds
    p = project(levers + [{"lever": True, "saving_us": 40.0, "idle_us": 0.0, "ops": ["op1"]}], rows, 100.0, 50.0,
                streams)
    assert p["floor_us"] == pytest.approx(40.0)  # 80 x (1 - 40 / 80)
    assert p["span_after_us"] == pytest.approx(max(100.0 - 100.0 * 100 / 140, 40.0))


def test_plan_carries_step_after_and_every_renderer_reads_it():
    from traceana.render.first import plan
    from traceana.render.views import fmt_time_us

    a = analysis("kineto/worker0.1623143089861.pt.trace.json.gz")
    p = a["plan"][0]
    led = a["ledger"]
    # 6 steps: the median step less the span's saving spread over them
    assert p["step_us"] == pytest.approx(led["step_us"])
    assert p["step_after_us"] == pytest.approx(led["step_us"] - (p["span_now_us"] - p["span_after_us"]) / 6)
    assert plan(a)[0]["step_after"] == fmt_time_us(p["step_after_us"])
    a["plan"][0]["step_after_us"] = 1234.0  # the renderer shows the plan's figure, not one of its own
    assert plan(a)[0]["step_after"] == fmt_time_us(1234.0)
