"""Roofline stage: set each signature's measured time against the device's roofs.

roofline time = max(FLOPs / peak FLOP/s, bytes / DRAM bandwidth); % of roof = roofline
time / measured time. The compute roof is the op's own dtype, on tensor cores (matrix units)
only for matrix work, and for fp32 GEMMs only when the kernel name shows TF32.

One time model sets the bound (docs/cost-model.md, "The time model"):

    model time per call = kernels per call x launch floor + max(FLOPs / peak, bytes / bandwidth)

The launch floor is the fixed cost of any kernel on the device (an empty kernel's duration on
the GPU timeline; per-architecture default below, `--launch-floor-us` overrides it). The
largest term names the bound: `latency` when the floor outweighs the roofline time, else
`compute` or `memory`. Sizes change the terms continuously, so the verdict moves with them (no
threshold on kernel length). When the model explains less than a tenth of the measured time,
neither roof nor the floor bounds the op and it is `underutilised`, with what is known of the
limiter (a grid with fewer blocks than SMs, a scattered access pattern). An op measured faster
than its roof carries `over_roof` with the reason, and no finding is built on it.
"""

from __future__ import annotations


from traceana.cost.types import Cost
from traceana.link.kernel_names import parse
from traceana.units import PEAK_NAMES

import msgspec

# Below this share of its measured time explained by the model (floor + roofline time), neither
# roof nor launch overhead bounds an op: it is underutilised.
EXPLAINED_MIN = 0.10
# Launch floor defaults, µs per kernel: the shortest kernels of the shared traces run 1.1-1.6 µs
# on H100 (the 5th percentile of bert, OWLv2 and Qwen inference), 2-3 µs on A100 and V100 (whose
# traces round to whole µs), 1.7-2.1 µs on MI300X and 1.9-3.4 µs on MI210/MI250.
FLOOR_BY_ARCH = (("hopper", 1.5), ("blackwell", 1.5), ("ampere", 2.0), ("volta", 2.0), ("turing", 2.0),
                 ("ada", 2.0), ("cdna", 2.0), ("gfx9", 2.0))
DEFAULT_FLOOR_US = 2.0
# Families whose kernels gather or scatter rows: far under the bandwidth roof, the access pattern
# (not the byte count) is the likely limiter.
SCATTERED_FAMILIES = ("index", "embedding", "tbe")

_MATRIX_KEY = {"bf16": "bf16_tc", "fp16": "fp16_tc", "fp8": "fp8_tc", "fp6": "fp6_tc", "fp4": "fp4_tc",
               "int8": "int8_tc", "uint8": "int8_tc"}
# Low-precision matrix ops on a device without that tensor-core type: the next wider type it runs
_WIDER = {"fp4": ("fp6_tc", "fp8_tc", "bf16_tc", "fp16_tc"), "fp6": ("fp8_tc", "bf16_tc", "fp16_tc"),
          "fp8": ("bf16_tc", "fp16_tc")}
#: A compute roof's name in sentences ("bf16 tensor cores", "fp32 vector units"), from units.PEAK_NAMES.
PEAK_LABEL = {k: v.replace(" tensor", " tensor cores").replace(" vector", " vector units")
              for k, v in PEAK_NAMES.items()}


class Peak(msgspec.Struct, frozen=True):
    key: str | None  # column of the device table, e.g. "bf16_tc"
    tflops: float | None
    why: str


def choose_peak(peaks: dict[str, float], cost: Cost, kernel_names: tuple[str, ...] = ()) -> Peak:
    """The compute roof for this op, and a sentence saying why it applies."""
    dt = cost.dtype
    if cost.matrix:
        if dt == "fp32":
            # the kernel-name grammar: fp32 operands on tensor cores (cuBLAS / CUTLASS s1688 / s16816 tensor-op
            # kernels, f32f32_tf32f32 xmma kernels, AMD XF32)
            if any(parse(n).tf32 for n in kernel_names):
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
        for wider in _WIDER.get(dt, ()):
            if wider in peaks:  # no native fp4 / fp6 / fp8 tensor cores: kernels widen the operands
                return Peak(wider, peaks[wider], f"{dt} matrix op, but this device lists no {PEAK_LABEL[key]}: "
                            f"the operands are widened to the narrowest type its tensor cores run, "
                            f"{PEAK_LABEL[wider]} roof")
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


def launch_floor(arch: str | None, vendor: str | None = None, override_us: float | None = None) -> tuple[float, str]:
    """The per-kernel launch floor (µs) for a device, and where it comes from."""
    if override_us is not None:
        return override_us, f"{override_us:g} µs per kernel (--launch-floor-us)"
    a = (arch or "").lower()
    for key, us in FLOOR_BY_ARCH:
        if key in a:
            return us, f"{us:g} µs per kernel (default for {arch})"
    return DEFAULT_FLOOR_US, f"{DEFAULT_FLOOR_US:g} µs per kernel (default{' for ' + vendor if vendor else ''})"


class Verdict(msgspec.Struct, frozen=True):
    mean_us: float
    compute_us: float | None
    memory_us: float | None
    roofline_us: float | None
    roof_pct: float | None
    intensity: float | None
    achieved_tflops: float | None
    achieved_gbps: float | None
    bound: str  # compute | memory | latency | underutilised | unknown | communication
    peak: Peak
    floor_us: float | None = None  # launch floor per call (kernels per call x floor)
    model_us: float | None = None  # floor_us + roofline time
    model_pct: float | None = None  # model time / measured time
    limiter: str | None = None  # what bounds an underutilised op, as far as the trace shows
    over_roof: dict | None = None  # {"pct", "reason", "text"} when measured faster than the roof


def judge(cost: Cost, mean_us: float, kernel_us: float, peaks: dict[str, float],
          dram_gbps: float | None, kernel_names: tuple[str, ...] = (), *, kernels: float = 1.0,
          floor_us: float = DEFAULT_FLOOR_US, l2_bytes: float | None = None, blocks: float | None = None,
          sms: int | None = None) -> Verdict:
    """Roofline verdict for one signature: mean_us per call, kernel_us mean per GPU event,
    kernels GPU events per call, blocks the time-weighted median launch grid of its kernels."""
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
        return Verdict(mean_us, compute_us, memory_us, roof, pct, intensity, achieved_tflops, achieved_gbps,
                       "unknown", peak)
    fixed = min(max(kernels, 0.0) * floor_us, mean_us)  # the floor never claims more than was measured
    model = fixed + roof
    explained = model / mean_us if mean_us > 0 else 1.0
    limiter = None
    if explained < EXPLAINED_MIN:
        bound = "underutilised"
        limiter = _limiter(cost, kernel_us, blocks, sms)
    elif fixed > roof:
        bound = "latency"
    elif compute_us is not None and (memory_us is None or compute_us >= memory_us):
        bound = "compute"
    else:
        bound = "memory"
    over = over_roof(cost, pct, compute_us, memory_us, l2_bytes, kernel_names)
    return Verdict(mean_us, compute_us, memory_us, roof, pct, intensity, achieved_tflops, achieved_gbps,
                   bound, peak, fixed, model, explained * 100.0, limiter, over)


def _limiter(cost: Cost, kernel_us: float, blocks: float | None, sms: int | None) -> str:
    """What the trace shows about an op far below both roofs and well above the launch floor."""
    if blocks is not None and sms and blocks < sms:
        return (f"grid too small: its kernels launch {blocks:,.0f} thread block(s) for {sms} SMs, so most "
                "of the GPU sits idle; more parallel work per kernel (a larger batch, a split-K or "
                "split-reduction kernel) fills it")
    if cost.family in SCATTERED_FAMILIES:
        return ("scattered access: gathers and scatters touch rows spread over memory, so each byte costs "
                "a DRAM transaction far larger than itself; sort or deduplicate indices, or group rows")
    grid = (f"its kernels launch {blocks:,.0f} thread blocks, enough to fill the SMs, " if blocks is not None
            else "the trace records no launch grid, ")
    return (f"not visible in the trace ({grid}{kernel_us:,.1f} µs per kernel): typical causes are low occupancy "
            "(registers or shared memory per block), serial dependencies inside the kernel, strided or "
            "uncoalesced access, or a kernel waiting on another (a spin-wait or a host synchronisation); profile "
            "it with Nsight Compute / rocprof to see which")


# Kernel-name fragments of convolution algorithms that do fewer multiplies than a direct
# convolution (cuDNN / MIOpen Winograd and FFT kernels).
FEWER_FLOP_ALGOS = ("winograd", "fft")


def over_roof(cost: Cost, pct: float | None, compute_us: float | None, memory_us: float | None,
              l2_bytes: float | None, kernel_names: tuple[str, ...] = ()) -> dict | None:
    """Why an op measured faster than its roof (a fact about the model, not the GPU), or None."""
    if pct is None or pct <= 100.0:
        return None
    compute_side = compute_us is not None and (memory_us is None or compute_us > memory_us)
    algo = next((a for a in FEWER_FLOP_ALGOS if any(a in k.lower() for k in kernel_names)), None)
    if compute_side and algo:
        reason, text = "algorithm", (f"its kernels use a {'Winograd' if algo == 'winograd' else 'FFT'} algorithm, "
                                     "which does fewer multiplies than the direct convolution its FLOP count "
                                     "assumes; the FLOP rate is the direct-convolution equivalent")
    elif cost.estimated:
        reason, text = "estimate", ("its FLOP/byte count is an estimate (see its notes) and is likely too high; "
                                    "the % is not a measurement of the GPU")
    elif memory_us is not None and (compute_us is None or memory_us >= compute_us) and l2_bytes \
            and cost.bytes <= l2_bytes:
        reason, text = "l2", (f"its working set ({cost.bytes / 2**20:,.1f} MiB per call) fits in the "
                              f"{l2_bytes / 2**20:,.0f} MiB L2 cache: it is served from cache, not DRAM, so the "
                              "DRAM roof does not bind it")
    elif memory_us is not None and (compute_us is None or memory_us >= compute_us):
        reason, text = "model", ("the byte model counts more DRAM traffic than the kernel made (data reused "
                                 "through the caches, or inputs it does not read in full)")
    else:
        reason, text = "model", ("faster than the datasheet peak: the FLOP count includes work the kernel "
                                 "skips, or the kernel runs on a faster unit than the roof assumes")
    return {"pct": pct, "reason": reason, "text": f"{pct:.0f}% of the roof: {text}"}
