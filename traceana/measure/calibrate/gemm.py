"""GEMM throughput per dtype: the compute roofs.

FLOPs of one M x K by K x N product: 2 x M x N x K (a multiply and an add per term). Square
sizes from a ladder are probed (PROBES times each, judged by the fastest probe: a noisy core only
slows a probe down) and the fastest size is measured in full, so the figure is taken at a size
large enough to saturate the device (and names that size). On a CPU this is the BLAS
(oneDNN / MKL / OpenBLAS) torch uses, with the thread count recorded; on a GPU the keys follow
the device table's peaks: fp64, fp32 (CUDA cores: TF32 off), tf32_tc, bf16_tc, fp16_tc and
fp8_tc (torch._scaled_mm, e4m3 inputs, bf16 output; sm_89+ or ROCm).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traceana.measure.calibrate.stats import figure, rates
from traceana.measure.calibrate.timing import Clock, repeat

CPU_KEYS = ("fp64", "fp32", "bf16")
# figure key -> torch dtype name of the inputs
DTYPE = {"fp64": "float64", "fp32": "float32", "tf32_tc": "float32", "bf16": "bfloat16", "bf16_tc": "bfloat16",
         "fp16_tc": "float16", "fp8_tc": "float8_e4m3fn"}
CPU_SIZES = {"quick": (256, 512, 1024), "full": (256, 512, 1024, 2048)}
GPU_SIZES = {"quick": (2048, 4096), "full": (4096, 8192)}
GPU_FP64_SIZES = {"quick": (1024, 2048), "full": (2048, 4096)}


PROBES = 3  # timed probes per ladder size: a size is judged by its fastest
NEAR = 0.05  # a larger size within this fraction of the fastest is preferred


def pick_size(probe: Callable[[int], list[float]], ladder: tuple[int, ...],
              call_s: Callable[[int, float], float] | None = None, budget_s: float = float("inf")) -> int:
    """The size of the ladder to measure at: the one with the highest rate, each size judged by
    the best of its probes (a busy core only ever slows a probe down, so the best probe is the one
    least disturbed); a larger size within NEAR of that rate is preferred (nearer saturation, and
    its longer calls are less disturbed by timer and scheduler noise).

    The ladder stops climbing at a size whose one call (`call_s(n, rate)`) already lasts budget_s: a
    call that long keeps the device busy past any start-up cost, and the next size costs 8x as much
    (a CPU without native bf16 runs a 1024^3 bf16 product in seconds)."""
    best: dict[int, float] = {}
    for n in ladder:
        best[n] = max(probe(n), default=0.0)
        if call_s is not None and best[n] > 0 and call_s(n, best[n]) >= budget_s:
            break
    top = max(best.values(), default=0.0)
    return max((n for n in best if best[n] >= (1 - NEAR) * top), default=ladder[-1])


def gemm_flops(m: int, n: int, k: int) -> float:
    """2 x M x N x K: one multiply and one add per term of every output element."""
    return 2.0 * m * n * k


def gpu_keys(kind: str, capability: tuple[int, int] | None, has_scaled_mm: bool) -> list[str]:
    """The GEMM dtypes a GPU supports: tensor-core fp16 from sm_70, TF32 and bf16 from sm_80,
    fp8 from sm_89 (ROCm: bf16/fp16 always, fp8 on gfx94x, which torch reports as 9.4)."""
    major, minor = capability or (0, 0)
    keys = ["fp64", "fp32"]
    if kind == "rocm":
        keys += ["bf16_tc", "fp16_tc"]
        if has_scaled_mm and (major, minor) >= (9, 4):
            keys.append("fp8_tc")
        return keys
    if (major, minor) >= (8, 0):
        keys.append("tf32_tc")
    if (major, minor) >= (8, 0):
        keys.append("bf16_tc")
    if (major, minor) >= (7, 0):
        keys.append("fp16_tc")
    if has_scaled_mm and (major, minor) >= (8, 9):
        keys.append("fp8_tc")
    return keys


def sizes(kind: str, key: str, mode: str) -> tuple[int, ...]:
    if kind == "cpu":
        return CPU_SIZES[mode]
    return GPU_FP64_SIZES[mode] if key == "fp64" else GPU_SIZES[mode]


def _operands(torch: Any, key: str, n: int, device: str, rocm: bool) -> Callable[[], Any]:
    """A closure computing one n x n x n product of the key's dtype."""
    if key == "fp8_tc":
        f8 = getattr(torch, "float8_e4m3fnuz" if rocm else "float8_e4m3fn")
        a = torch.randn(n, n, device=device).to(f8)
        b = torch.randn(n, n, device=device).to(f8).t()  # _scaled_mm wants B column-major
        one = torch.ones((), device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    dt = getattr(torch, DTYPE[key])
    a = torch.randn(n, n, device=device, dtype=torch.float32).to(dt)
    b = torch.randn(n, n, device=device, dtype=torch.float32).to(dt)
    out = torch.empty(n, n, device=device, dtype=dt)
    return lambda: torch.mm(a, b, out=out)


def measure(torch: Any, clock: Clock, key: str, *, kind: str, device: str, mode: str, repeats: int,
            min_s: float, datasheet: float | None = None, threads: int | None = None) -> dict:
    """The figure gemm.<key>: TFLOP/s at the fastest size of the ladder."""
    tf32 = getattr(torch.backends.cuda.matmul, "allow_tf32", None) if kind != "cpu" else None
    try:
        if tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = key == "tf32_tc"
        def probe(n: int) -> list[float]:
            fn = _operands(torch, key, n, device, kind == "rocm")
            t = repeat(clock, fn, PROBES, min_s / (4 * PROBES))
            return rates(t.seconds, gemm_flops(n, n, n), t.iters, 1e12)

        n = pick_size(probe, sizes(kind, key, mode), lambda n, tflops: gemm_flops(n, n, n) / (tflops * 1e12), min_s)
        fn = _operands(torch, key, n, device, kind == "rocm")
        t = repeat(clock, fn, repeats, min_s)
    finally:
        if tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = tf32
    note = f"{threads} CPU thread(s)" if kind == "cpu" and threads else None
    return figure(rates(t.seconds, gemm_flops(n, n, n), t.iters, 1e12), "TFLOP/s",
                  f"M=N=K={n} ({t.iters} call(s) per repeat)", work=gemm_flops(n, n, n),
                  datasheet=datasheet, note=note)
