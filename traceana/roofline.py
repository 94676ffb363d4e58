"""Roofline stage: set each signature's measured time against the device's roofs.

roofline time = max(FLOPs / peak FLOP/s, bytes / DRAM bandwidth); % of roof = roofline
time / measured time. The compute roof is the op's own dtype, on tensor cores (matrix units)
only for matrix work, and for fp32 GEMMs only when the kernel name shows TF32.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceana.cost.types import Cost

# An op is latency-bound when it is far under both roofs and its kernels are tiny: launch
# and fixed per-kernel costs, not FLOPs or bytes, set its time.
LATENCY_ROOF_PCT = 30.0
LATENCY_KERNEL_US = 10.0

_MATRIX_KEY = {"bf16": "bf16_tc", "fp16": "fp16_tc", "fp8": "fp8_tc", "fp6": "fp6_tc", "fp4": "fp4_tc",
               "int8": "int8_tc", "uint8": "int8_tc"}
# Kernel-name fragments that mean an fp32-input GEMM ran on TF32 tensor cores (cuBLAS/CUTLASS
# "s1688"/"s16816" tensor-op kernels, "tf32" in sm80+ xmma names, "xf32" on ROCm).
TF32_HINTS = ("tf32", "xf32", "s1688", "s16816", "tensorop_s")
PEAK_LABEL = {
    "fp64": "fp64", "fp64_tc": "fp64 tensor cores", "fp32": "fp32 (CUDA cores / vector)",
    "tf32_tc": "tf32 tensor cores", "bf16_tc": "bf16 tensor cores", "fp16_tc": "fp16 tensor cores",
    "fp8_tc": "fp8 tensor cores", "fp6_tc": "fp6 tensor cores", "fp4_tc": "fp4 tensor cores",
    "int8_tc": "int8 tensor cores", "fp16": "fp16 (non-tensor)",
    "bf16": "bf16 (non-tensor)",
}


@dataclass(frozen=True)
class Peak:
    key: str | None  # column of the device table, e.g. "bf16_tc"
    tflops: float | None
    why: str


def choose_peak(peaks: dict[str, float], cost: Cost, kernel_names: tuple[str, ...] = ()) -> Peak:
    """The compute roof for this op, and a sentence saying why it applies."""
    dt = cost.dtype
    if cost.matrix:
        if dt == "fp32":
            joined = " ".join(kernel_names).lower()
            if any(h in joined for h in TF32_HINTS):
                if "tf32_tc" in peaks:
                    return Peak("tf32_tc", peaks["tf32_tc"], "fp32 matrix op whose kernel name shows TF32 tensor cores")
            if "tf32_tc" not in peaks:
                return _have(peaks, "fp32", "fp32 matrix op; this device has no TF32 tensor-core figure, "
                             "so the fp32 CUDA-core roof applies")
            return _have(peaks, "fp32", "fp32 matrix op whose kernel name shows no TF32 (allow_tf32 off): "
                         "fp32 CUDA-core roof")
        if dt == "fp64":
            if "fp64_tc" in peaks:
                return Peak("fp64_tc", peaks["fp64_tc"], "fp64 matrix op: fp64 tensor-core roof")
            return _have(peaks, "fp64", "fp64 matrix op: fp64 roof")
        key = _MATRIX_KEY.get(dt)
        if key and key in peaks:
            return Peak(key, peaks[key], f"{dt} matrix op: {PEAK_LABEL[key]} roof")
        if key and dt in ("bf16", "fp16") and dt in peaks:
            return Peak(dt, peaks[dt], f"{dt} matrix op, but this device lists no {dt} tensor-core "
                        f"figure: non-tensor {dt} roof")
        if key:
            return _have(peaks, "fp32", f"{dt} matrix op, but this device lists no {PEAK_LABEL[key]} "
                         "figure: fp32 roof used")
        return _have(peaks, "fp32", f"{dt} matrix op: fp32 roof used")
    if dt == "fp64":
        return _have(peaks, "fp64", "fp64 element-wise work: fp64 roof")
    if dt in ("fp16", "bf16") and dt in peaks:
        return Peak(dt, peaks[dt], f"{dt} element-wise work: non-tensor {dt} roof")
    if dt in ("fp16", "bf16"):
        return _have(peaks, "fp32", f"{dt} element-wise work: no non-tensor {dt} figure for this device, "
                     "fp32 roof used (these ops compute in fp32 anyway)")
    if dt == "fp32":
        return _have(peaks, "fp32", "fp32 element-wise work: fp32 roof")
    return _have(peaks, "fp32", f"{dt} work compared against the fp32 roof")


def _have(peaks: dict[str, float], key: str, why: str) -> Peak:
    if key in peaks:
        return Peak(key, peaks[key], why)
    return Peak(None, None, f"{why} — but the device table has no {PEAK_LABEL.get(key, key)} figure "
                "(pass --peak-tflops)")


COMM_WHY = ("collective: no DRAM or compute roof applies; achieved GB/s is its bus bandwidth (bytes each "
            "rank sends / time), to compare with the interconnect's")


@dataclass(frozen=True)
class Verdict:
    mean_us: float
    compute_us: float | None
    memory_us: float | None
    roofline_us: float | None
    roof_pct: float | None
    intensity: float | None
    achieved_tflops: float | None
    achieved_gbps: float | None
    bound: str  # compute | memory | latency | unknown | communication
    peak: Peak


def judge(cost: Cost, mean_us: float, kernel_us: float, peaks: dict[str, float],
          dram_gbps: float | None, kernel_names: tuple[str, ...] = ()) -> Verdict:
    """Roofline verdict for one signature: mean_us per call, kernel_us mean per GPU event."""
    if cost.family == "comm":  # a collective: no DRAM or compute roof; judged by its bus bandwidth
        gbps = cost.bytes / (mean_us * 1e3) if mean_us > 0 else None
        return Verdict(mean_us, None, None, None, None, None, None, gbps, "communication",
                       Peak(None, None, COMM_WHY))
    peak = choose_peak(peaks, cost, kernel_names)
    compute_us = cost.flops / (peak.tflops * 1e6) if peak.tflops else None
    memory_us = cost.bytes / (dram_gbps * 1e3) if dram_gbps else None
    if cost.flops == 0 and memory_us is not None:
        compute_us = 0.0
    intensity = cost.flops / cost.bytes if cost.bytes > 0 else None
    achieved_tflops = cost.flops / (mean_us * 1e6) if mean_us > 0 else None
    achieved_gbps = cost.bytes / (mean_us * 1e3) if mean_us > 0 else None
    known = [t for t in (compute_us, memory_us) if t is not None]
    if compute_us is None and cost.flops > 0 and cost.matrix:
        roof = None  # a matrix op without its compute roof cannot be judged
    else:
        roof = max(known) if known else None
    pct = roof / mean_us * 100.0 if roof is not None and mean_us > 0 else None
    if roof is None:
        bound = "unknown"
    elif pct is not None and pct < LATENCY_ROOF_PCT and kernel_us <= LATENCY_KERNEL_US:
        bound = "latency"
    elif compute_us is not None and (memory_us is None or compute_us >= memory_us):
        bound = "compute"
    else:
        bound = "memory"
    return Verdict(mean_us, compute_us, memory_us, roof, pct, intensity, achieved_tflops, achieved_gbps,
                   bound, peak)
