"""Calibrate checks its figures against each other and against physical sense before writing
them; a figure that stays unstable or contradictory is marked unusable and `report --profile`
does not use it. All timings here are fake (no benchmark runs).

Before: on a busy 2-core machine `calibrate --quick` wrote fp32 GEMM = 0.0015 TFLOP/s (bf16
0.19, fp64 0.028) as a roof, and `report --profile` then judged `aten::mm` at 7,408% of it.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.conftest import SAMPLES
from traceana.analysis import Options, analyze
from traceana.measure.calibrate import gemm, stats
from traceana.measure.calibrate.checks import contradictions
from traceana.measure.calibrate.machine import Machine
from traceana.measure.calibrate.run import Prepared, Step, run
from traceana.roofline.device_profile import SCHEMA, load_profile

T4 = str(SAMPLES / "t4_seed_pow_mul.json")
MiB = 2**20


def fig(value: float, unit: str = "TFLOP/s", spread: float = 2.0) -> dict:
    lo, hi = value * (1 - spread / 200), value * (1 + spread / 200)
    return stats.figure([lo, value, hi], unit, "fake")


CPU_QUIET = {"gemm.fp64": fig(0.18), "gemm.fp32": fig(0.36), "gemm.bf16": fig(0.30),
             "dram.copy": fig(15.0, "GB/s"), "dram.triad": fig(16.0, "GB/s"), "cache.copy": fig(40.0, "GB/s"),
             "dispatch.overhead": fig(1.2, "us")}


def test_a_quiet_machines_figures_agree():
    assert contradictions(CPU_QUIET, "cpu") == {}


def test_fp32_far_below_fp64_and_below_what_dram_alone_feeds():
    figs = {**CPU_QUIET, "gemm.fp32": fig(0.0015), "gemm.bf16": fig(0.19), "gemm.fp64": fig(0.028)}
    bad = contradictions(figs, "cpu")
    assert set(bad) == {"gemm.fp32"}
    # 0.0015 < 0.028 / 2: fp32 is never under half the fp64 rate
    assert "under half the fp64 GEMM" in bad["gemm.fp32"]
    # DRAM alone, with no reuse from cache (one FLOP per fp32 element read: 4 B/FLOP), feeds
    # max(15, 16) GB/s / 4 B = 4 GFLOP/s = 0.004 TFLOP/s > 0.0015
    assert "0.004 TFLOP/s" in bad["gemm.fp32"]
    only_dram = {**CPU_QUIET, "gemm.fp64": fig(0.0019)}  # fp64: 8 B/FLOP -> 16 / 8 = 0.002 TFLOP/s
    assert set(contradictions(only_dram, "cpu")) == {"gemm.fp64"}
    ok = {**CPU_QUIET, "gemm.fp64": fig(0.0021)}
    assert contradictions(ok, "cpu") == {}


def test_copy_and_triad_must_agree_and_gpu_tensor_cores_beat_cuda_cores():
    figs = {**CPU_QUIET, "dram.copy": fig(5.0, "GB/s")}  # triad 16 is more than 2x copy 5: copy is the suspect
    assert set(contradictions(figs, "cpu")) == {"dram.copy"}
    gpu = {"gemm.fp64": fig(60.0), "gemm.fp32": fig(55.0), "gemm.tf32_tc": fig(400.0), "gemm.bf16_tc": fig(20.0),
           "gemm.fp16_tc": fig(700.0), "dram.copy": fig(2900.0, "GB/s"), "dram.triad": fig(3000.0, "GB/s"),
           "cache.copy": fig(9000.0, "GB/s"), "launch.latency": fig(2.0, "us")}
    bad = contradictions(gpu, "cuda")
    assert set(bad) == {"gemm.bf16_tc"}  # 20 < 55 / 2: a tensor-core GEMM under half the CUDA-core fp32 one
    assert contradictions({**gpu, "gemm.bf16_tc": fig(650.0)}, "cuda") == {}
    # a GPU's L2 copy under half its DRAM copy: the L2 figure is the suspect
    assert set(contradictions({**gpu, "gemm.bf16_tc": fig(650.0), "cache.copy": fig(1000.0, "GB/s")}, "cuda")) \
        == {"cache.copy"}


def _machine() -> Machine:
    return Machine("cpu", "Fake Xeon", "2.13.0", 2, l2_bytes=2 * MiB, llc_bytes=8 * MiB)


def _prepared(runs: dict[str, list[dict]]) -> tuple[Prepared, dict[str, int]]:
    """Steps whose run() returns the next figure of runs[key] (the last one again when exhausted)."""
    calls = {k: 0 for k in runs}

    def runner(key):
        def go():
            i = calls[key]
            calls[key] += 1
            return runs[key][min(i, len(runs[key]) - 1)]
        return go

    steps = [Step(k, k, runner(k)) for k in runs]
    return Prepared(_machine(), steps, "quick", 0.0), calls


def test_a_contradictory_figure_is_measured_again_and_kept_when_it_agrees():
    runs = {k: [v] for k, v in CPU_QUIET.items()}
    runs["gemm.fp32"] = [fig(0.0015), fig(0.35)]  # a busy core the first time, then quiet
    p, calls = _prepared(runs)
    prof = run(p)
    f = prof["figures"]["gemm.fp32"]
    assert f["value"] == pytest.approx(0.35) and "unusable" not in f and f["remeasured"] == 1
    assert calls["gemm.fp32"] == 2 and calls["gemm.fp64"] == 1  # only the suspect is measured again


def test_a_figure_that_stays_contradictory_is_unusable_and_report_profile_ignores_it(tmp_path):
    runs = {k: [v] for k, v in CPU_QUIET.items()}
    runs.update({"gemm.fp32": [fig(0.0015)], "gemm.bf16": [fig(0.19)], "gemm.fp64": [fig(0.028)]})
    p, calls = _prepared(runs)
    prof = run(p)
    f = prof["figures"]["gemm.fp32"]
    assert calls["gemm.fp32"] == 3  # measured, then again twice (RETRIES)
    assert f["value"] == pytest.approx(0.0015) and "under half the fp64 GEMM" in f["unusable"]
    assert "unusable" not in prof["figures"]["gemm.fp64"]
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(prof, indent=2, sort_keys=True))
    loaded = load_profile(str(path))
    assert "fp32" not in loaded.peaks() and loaded.peaks()["fp64"] == pytest.approx(0.028)
    assert loaded.as_dict()["unusable"] == {"gemm.fp32": f["unusable"]}


def test_an_unstable_figure_is_unusable():
    runs = {k: [v] for k, v in CPU_QUIET.items()}
    runs["dram.triad"] = [stats.figure([8.0, 16.0, 20.0], "GB/s", "fake")]  # spread (20-8)/16 = 75%, every time
    p, _ = _prepared(runs)
    f = run(p)["figures"]["dram.triad"]
    assert f["unstable"] is True and f["unusable"].startswith("unstable: repeats disagree by 75%")


def test_report_profile_does_not_use_an_unusable_figure(tmp_path):
    fig_ = lambda v, unit, **kw: {"value": v, "unit": unit, "spread_pct": 1.5, "size": "s", "repeats": 5, **kw}  # noqa: E731
    doc = {"schema": SCHEMA, "date": "2025-01-02T03:04:05Z", "mode": "quick",
           "device": {"name": "Tesla T4", "kind": "cuda", "torch": "2.13.0", "threads": 4},
           "figures": {"gemm.fp32": fig_(0.0015, "TFLOP/s", unusable="under half the fp64 GEMM"),
                       "dram.copy": fig_(240.0, "GB/s"),
                       "dram.triad": fig_(30.0, "GB/s", spread_pct=60.0, unstable=True)}}  # an old profile: unstable only
    p = tmp_path / "t4.json"
    p.write_text(json.dumps(doc))
    prof = load_profile(str(p))
    assert prof.peaks() == {} and prof.dram_gbps() == 240.0
    a = analyze(T4, Options(profile=prof))
    mm = next(r for r in a["ops"] if r["name"] == "aten::mm")
    # the fp32 roof stays the datasheet's 8.1 TFLOP/s: never the 0.0015 that put aten::mm at 7,408% of it
    assert mm["achievable"]["peak_tflops"] == 8.1 and mm["achievable_pct"] == pytest.approx(mm["roof_pct"])
    assert a["device"]["profile"]["unusable"] == {"dram.triad": "unstable: repeats disagree by 60%",
                                                  "gemm.fp32": "under half the fp64 GEMM"}
    out = tmp_path / "r.md"
    from traceana.cli import main

    assert main(["report", T4, "--profile", str(p), "-o", str(out), "-q"]) == 0
    assert "not used: dram.triad, gemm.fp32" in out.read_text()


def test_the_size_search_keeps_the_best_of_each_sizes_probes():
    """A noisy core slows some probes (never speeds them up): each size is judged by its best probe,
    so one slow probe at the right size does not send the figure to a small size."""
    # true rates: 256 -> 0.20, 512 -> 0.33, 1024 -> 0.36 TFLOP/s; the first probe at 1024 hit a busy core
    probes = {256: [0.20, 0.19, 0.20], 512: [0.33, 0.30, 0.32], 1024: [0.05, 0.36, 0.35]}
    assert gemm.pick_size(lambda n: probes[n], (256, 512, 1024)) == 1024
    # within 5% of the best, the larger size wins (closer to saturation, less timer noise)
    assert gemm.pick_size(lambda n: {256: [0.30], 512: [0.35], 1024: [0.34]}[n], (256, 512, 1024)) == 1024
    assert gemm.pick_size(lambda n: {256: [0.30], 512: [0.35], 1024: [0.30]}[n], (256, 512, 1024)) == 512


def test_the_size_search_stops_at_a_size_whose_one_call_fills_a_repeat():
    """A CPU without native bf16 multiplies at ~1.3 GFLOP/s: one 512^3 call takes
    2*512^3 / 1.3e9 = 0.206 s, more than a quick repeat's 0.08 s, so 1024 (8x that, 1.65 s per call,
    a warm-up and three probes: ~8 s) is never probed."""
    probed = []

    def probe(n):
        probed.append(n)
        return [0.0013]

    def call_s(n, tflops):
        return gemm.gemm_flops(n, n, n) / (tflops * 1e12)  # 512: 268435456 / 1.3e9 = 0.206 s

    assert gemm.pick_size(probe, (256, 512, 1024), call_s, 0.08) == 512
    assert probed == [256, 512]  # 256: 33554432 / 1.3e9 = 0.026 s < 0.08 s, so 512 is probed


def test_gemm_measure_probes_every_size_several_times():
    """gemm.measure with a stand-in torch and a fake clock whose time per call depends on the size."""
    seen = []

    class Clock:
        def time(self, fn, iters):
            n = fn()
            seen.append(n)
            return iters * gemm.gemm_flops(n, n, n) / {256: 0.2e12, 512: 0.3e12, 1024: 0.36e12}[n]

    fake = SimpleNamespace(backends=SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace())))
    orig = gemm._operands
    gemm._operands = lambda torch, key, n, device, rocm: (lambda: n)
    try:
        f = gemm.measure(fake, Clock(), "fp32", kind="cpu", device="cpu", mode="quick", repeats=3, min_s=0.08)
    finally:
        gemm._operands = orig
    assert f["size"].startswith("M=N=K=1024") and f["value"] == pytest.approx(0.36)
    # each ladder size: 1 warm-up + 1 sizing call + PROBES timed probes
    for n in (256, 512):
        assert seen.count(n) == 2 + gemm.PROBES
