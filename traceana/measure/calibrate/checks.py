"""Do a profile's figures make physical sense together? (pure: figures in, suspects out)

A busy machine only ever makes a throughput lower (another job takes the core or the memory bus
away for part of a repeat), so when two figures contradict each other the lower one, measured
while something else ran, is the suspect. The rules hold on every CPU and GPU, with a 2x margin:

- fp32 GEMM at least half the fp64 GEMM: no CPU or GPU does fp64 faster than fp32 (CPUs and
  consumer GPUs do fp32 2x to 64x faster; HPC GPUs at most as fast in their vector units);
- a GPU's tensor-core GEMM (tf32, bf16, fp16, fp8) at least half its CUDA-core fp32 GEMM;
- every GEMM at least the rate DRAM alone feeds it: with no reuse from cache, each multiply-add
  reads one element of A and one of B for its 2 FLOPs, one element per FLOP, so DRAM bandwidth /
  element size FLOP/s (fp32: 15 GB/s / 4 B = 3.75 GFLOP/s); any BLAS reuses its operands from
  cache and goes far faster, so a GEMM below it was timed while something else ran;
- DRAM copy and triad within 2x of each other (both stream arrays far beyond the caches);
- a GPU's L2 copy at least half its DRAM copy (a CPU's cache figure is one core against all
  cores' DRAM, so it has no such bound).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MARGIN = 2.0
#: bytes of one input element per GEMM figure
ELEMENT_BYTES = {"gemm.fp64": 8, "gemm.fp32": 4, "gemm.tf32_tc": 4, "gemm.bf16": 2, "gemm.bf16_tc": 2,
                 "gemm.fp16_tc": 2, "gemm.fp8_tc": 1}
TENSOR_CORE = ("gemm.tf32_tc", "gemm.bf16_tc", "gemm.fp16_tc", "gemm.fp8_tc")


def _v(figures: Mapping[str, Mapping[str, Any]], key: str) -> float | None:
    f = figures.get(key)
    v = f.get("value") if isinstance(f, Mapping) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def _g(x: float) -> str:
    return f"{x:.3g}"


def contradictions(figures: Mapping[str, Mapping[str, Any]], kind: str) -> dict[str, str]:
    """Figure key -> why its value contradicts another figure (the lower one of a pair is named)."""
    bad: dict[str, str] = {}

    def add(key: str, why: str) -> None:
        bad[key] = f"{bad[key]}; {why}" if key in bad else why
    fp64, fp32 = _v(figures, "gemm.fp64"), _v(figures, "gemm.fp32")
    if fp64 and fp32 and fp32 * MARGIN < fp64:
        add("gemm.fp32", f"fp32 GEMM {_g(fp32)} TFLOP/s is under half the fp64 GEMM's {_g(fp64)}: no CPU or GPU "
                            "does fp32 slower than fp64 (timed while something else ran?)")
    copy, triad = _v(figures, "dram.copy"), _v(figures, "dram.triad")
    if copy and triad and max(copy, triad) > MARGIN * min(copy, triad):
        low, high = ("dram.copy", "dram.triad") if copy < triad else ("dram.triad", "dram.copy")
        add(low, f"{low} {_g(min(copy, triad))} GB/s is under half {high}'s {_g(max(copy, triad))}: both "
                    "stream arrays far beyond the caches and agree within 2x on a quiet machine")
    if kind != "cpu":
        for key in TENSOR_CORE:
            tc = _v(figures, key)
            if tc and fp32 and tc * MARGIN < fp32:
                add(key, f"{key[5:]} tensor-core GEMM {_g(tc)} TFLOP/s is under half the CUDA-core fp32 "
                                    f"GEMM's {_g(fp32)}: tensor cores are never slower")
        l2 = _v(figures, "cache.copy")
        if l2 and copy and l2 * MARGIN < copy:
            add("cache.copy", f"L2 copy {_g(l2)} GB/s is under half the DRAM copy's {_g(copy)}")
    dram = max((v for k, v in (("dram.copy", copy), ("dram.triad", triad)) if v and k not in bad), default=None)
    if dram:
        for key, elem in ELEMENT_BYTES.items():
            v = _v(figures, key)
            floor = dram / elem / 1000.0  # GB/s / (B per FLOP) = GFLOP/s; / 1000 = TFLOP/s
            if v and v < floor:
                add(key, f"{key[5:]} GEMM {_g(v)} TFLOP/s is below the {_g(floor)} TFLOP/s DRAM alone "
                                    f"feeds a GEMM with no cache reuse ({_g(dram)} GB/s / {elem} B per FLOP)")
    return bad
