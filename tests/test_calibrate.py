"""`traceana calibrate`: the arithmetic of every figure, the GPU plan without a GPU, and a real
--quick run on this machine's CPU."""

from __future__ import annotations

import datetime as dt
import json
from types import SimpleNamespace

import pytest

from traceana.measure.calibrate import SCHEMA, gemm, memory, stats, timing
from traceana.measure.calibrate.machine import Machine, cpu_caches, datasheet, parse_size
from traceana.measure.calibrate.run import assemble, plan
from traceana.measure.calibrate.table import lines
from traceana.cli import main

MiB = 2**20


def test_gemm_flops():
    assert gemm.gemm_flops(64, 128, 32) == 524288  # 2*M*N*K = 2*64*128*32 = 524288
    assert gemm.gemm_flops(1024, 1024, 1024) == 2 * 1024**3  # 2,147,483,648


def test_stream_bytes():
    assert memory.copy_bytes(1000) == 8000  # read 1000 x 4 B + write 1000 x 4 B
    assert memory.triad_bytes(1000) == 12000  # read b and c, write a: 3 x 1000 x 4 B
    # a 1 GiB working set split over triad's 3 arrays: 2**30 // 12 = 89,478,485 elements each
    assert memory.elements("triad", 2**30) == 89478485
    assert memory.elements("copy", 2**30) == 2**30 // 8


def test_working_sets():
    # 4 x a 480 MiB LLC = 1920 MiB (under the 4096 MiB full cap)
    assert memory.dram_working_set(480 * MiB, "full", None) == 1920 * MiB
    assert memory.dram_working_set(480 * MiB, "quick", None) == 1024 * MiB  # the quick cap
    assert memory.dram_working_set(480 * MiB, "full", 2048 * MiB) == 512 * MiB  # a quarter of 2 GiB free
    assert memory.dram_working_set(None, "full", None) == 256 * MiB  # the floor
    assert memory.cache_working_set("cpu", 2 * MiB) == 1 * MiB  # half of one core's 2 MiB L2
    assert memory.cache_working_set("cuda", 50 * MiB) == 25 * MiB  # half the GPU's L2


def test_figure_median_spread_and_datasheet():
    f = stats.figure([9.0, 10.0, 12.0], "GB/s", "x", work=8.0, datasheet=20.0)
    assert f["value"] == 10.0  # the median
    assert f["spread_pct"] == pytest.approx(30.0)  # (12 - 9) / 10 = 30%
    assert f["pct_of_datasheet"] == pytest.approx(50.0)  # 10 / 20
    assert f["repeats"] == 3 and f["samples"] == [9.0, 10.0, 12.0]
    assert stats.figure([5.0], "us", "y")["pct_of_datasheet"] is None
    # 2e9 FLOPs x 5 calls in 0.01 s = 1e12 FLOP/s = 1 TFLOP/s
    assert stats.rates([0.01], 2e9, 5, 1e12) == [pytest.approx(1.0)]
    assert stats.per_call_us([0.002], 1000) == [pytest.approx(2.0)]  # 2 ms / 1000 calls = 2 µs
    with pytest.raises(ValueError):
        stats.figure([], "us", "z")


class FakeClock:
    """Every call takes `per_call` seconds."""

    def __init__(self, per_call: float) -> None:
        self.per_call, self.calls = per_call, []

    def time(self, fn, iters):
        self.calls.append(iters)
        return self.per_call * iters


def test_repeat_sizes_each_repeat_to_min_time():
    clock = FakeClock(0.004)
    t = timing.repeat(clock, lambda: None, 3, 0.1)
    assert t.iters == 25  # ceil(0.1 / 0.004)
    assert clock.calls == [1, 1, 25, 25, 25]  # warm-up, probe, 3 repeats
    assert t.seconds == [pytest.approx(0.1)] * 3
    assert timing.iters_for(0.0, 0.1, 500) == 500
    assert timing.iters_for(1.0, 0.1, 500) == 1


def test_cuda_clock_uses_events_and_converts_ms():
    log = []

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing
            self.t = None

        def record(self):
            self.t = len(log)
            log.append("record")

        def synchronize(self):
            log.append("event-sync")

        def elapsed_time(self, other):
            return 2.5  # ms, as torch.cuda.Event reports

    cuda = SimpleNamespace(Event=Event, synchronize=lambda: log.append("sync"))
    secs = timing.CudaClock(cuda).time(lambda: log.append("call"), 2)
    assert secs == pytest.approx(0.0025)  # 2.5 ms
    assert log == ["sync", "record", "call", "call", "record", "event-sync"]


def test_gpu_gemm_keys_by_capability():
    assert gemm.gpu_keys("cuda", (7, 5), True) == ["fp64", "fp32", "fp16_tc"]  # Turing: no TF32 / bf16
    assert gemm.gpu_keys("cuda", (8, 0), True) == ["fp64", "fp32", "tf32_tc", "bf16_tc", "fp16_tc"]
    assert gemm.gpu_keys("cuda", (9, 0), True)[-1] == "fp8_tc"  # Hopper with torch._scaled_mm
    assert "fp8_tc" not in gemm.gpu_keys("cuda", (9, 0), False)
    assert gemm.gpu_keys("rocm", (9, 4), True) == ["fp64", "fp32", "bf16_tc", "fp16_tc", "fp8_tc"]


def test_cache_sizes_from_sysfs(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "64K"),
                                             (2, "Unified", "2048K"), (3, "Unified", "491520K")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert cpu_caches(str(tmp_path)) == {1: 48 * 1024, 2: 2 * MiB, 3: 480 * MiB}
    assert parse_size("1G") == 2**30 and parse_size("x") is None
    assert cpu_caches(str(tmp_path / "absent")) == {}


def _h100(gpus: int) -> Machine:
    key, sheet = datasheet({"name": "NVIDIA H100 80GB HBM3", "numSms": 132, "totalGlobalMem": 80 * 2**30,
                            "computeMajor": 9, "computeMinor": 0})
    return Machine("cuda", "NVIDIA H100 80GB HBM3", "2.13.0", 8, "CUDA runtime 12.8", 0, gpus, (9, 0),
                   50 * MiB, 50 * MiB, 80 * 2**30, key, sheet)


def test_gpu_plan_without_a_gpu():
    """The GPU's steps and datasheet figures are planned from its properties; measuring them
    needs a GPU (nothing is run here)."""
    m = _h100(2)
    assert m.table_key and m.datasheet["gemm.bf16_tc"] > 500  # H100 SXM: ~989 dense bf16 TFLOP/s
    steps = plan(SimpleNamespace(_scaled_mm=object()), m, FakeClock(1.0), "quick", 3)
    keys = [s.key for s in steps]
    assert keys == ["gemm.fp64", "gemm.fp32", "gemm.tf32_tc", "gemm.bf16_tc", "gemm.fp16_tc", "gemm.fp8_tc",
                    "dram.copy", "dram.triad", "cache.copy", "launch.latency", "h2d.pinned", "h2d.pageable",
                    "d2h.pinned", "d2h.pageable", "peer.copy"]
    assert "peer.copy" not in [s.key for s in plan(SimpleNamespace(), _h100(1), FakeClock(1.0), "quick", 3)]
    cpu = Machine("cpu", "x", "2.13.0", 2, l2_bytes=2 * MiB, llc_bytes=8 * MiB)
    assert [s.key for s in plan(SimpleNamespace(), cpu, FakeClock(1.0), "quick", 3)] == [
        "gemm.fp64", "gemm.fp32", "gemm.bf16", "dram.copy", "dram.triad", "cache.copy", "dispatch.overhead"]


def test_assemble_and_table_for_a_gpu_profile():
    m = _h100(1)
    fig = stats.figure([600.0, 620.0, 610.0], "TFLOP/s", "M=N=K=8192", datasheet=m.datasheet["gemm.bf16_tc"])
    p = assemble(m, "full", {"gemm.bf16_tc": fig}, {"gemm.fp8_tc": "RuntimeError: no"}, 12.3456,
                 dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc))
    assert p["schema"] == SCHEMA == "traceana.profile/1"
    assert p["date"] == "2025-01-02T03:04:05Z" and p["duration_s"] == 12.346
    assert p["device"]["kind"] == "cuda" and p["device"]["capability"] == "9.0"
    text = "\n".join(lines(p))
    pct = 610.0 / m.datasheet["gemm.bf16_tc"] * 100
    assert f"{pct:.0f}%" in text and "skipped gemm.fp8_tc" in text and "unknown (CPU)" not in text


def test_calibrate_quick_on_this_cpu(tmp_path, capsys):
    out = tmp_path / "cpu.json"
    assert main(["calibrate", "--quick", "-o", str(out)]) == 0
    p = json.loads(out.read_text())
    assert p["schema"] == "traceana.profile/1"
    assert p["device"]["kind"] == "cpu" and p["device"]["threads"] >= 1 and p["device"]["torch"]
    for key in ("gemm.fp64", "gemm.fp32", "gemm.bf16", "dram.copy", "dram.triad", "cache.copy", "dispatch.overhead"):
        f = p["figures"][key]
        assert f["value"] > 0 and f["repeats"] == 3 and len(f["samples"]) == 3 and f["size"]
        assert f["spread_pct"] >= 0 and f["unit"] in ("TFLOP/s", "GB/s", "us")
        assert set(f) >= {"value", "unit", "spread_pct", "size", "repeats"}
    assert p["figures"]["gemm.fp32"]["unit"] == "TFLOP/s" and p["figures"]["dram.copy"]["unit"] == "GB/s"
    printed = capsys.readouterr().out
    assert "unknown (CPU)" in printed and "need a GPU" in printed and "profile written to" in printed


def test_calibrate_bad_output_is_one_line(tmp_path, capsys):
    assert main(["calibrate", "--quick", "-o", str(tmp_path / "nope" / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("traceana: ") and "does not exist" in err[0]
    assert main(["calibrate", "--device", "tpu"]) == 2


def test_unsteady_figures_are_measured_again_then_marked():
    from traceana.measure.calibrate.run import _steady
    from traceana.measure.calibrate.stats import figure

    runs = iter([[1.0, 2.0, 3.0], [1.9, 2.0, 2.1]])  # spreads (3-1)/2 = 100%, then (2.1-1.9)/2 = 10%
    got = _steady(lambda: figure(next(runs), "GB/s", "s"))
    assert got["spread_pct"] == pytest.approx(10.0) and got["retries"] == 1 and "unstable" not in got
    noisy = iter([[1.0, 2.0, 3.0], [1.0, 2.0, 4.0], [1.0, 2.0, 3.5]])  # 100%, 150%, 125%: keep the first
    bad = _steady(lambda: figure(next(noisy), "GB/s", "s"))
    assert bad["spread_pct"] == pytest.approx(100.0) and bad["retries"] == 2 and bad["unstable"] is True
    assert "unstable: repeats disagree by 100%" in bad["note"]
    steady = _steady(lambda: figure([2.0, 2.0, 2.1], "GB/s", "s"))  # 5%: measured once
    assert "retries" not in steady
