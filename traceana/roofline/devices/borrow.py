"""Figures for a GPU the table has no row for, borrowed from the nearest row of its architecture.

A device's peak FLOP/s is its SM count x its clock x what one SM does per clock, and the last
term is fixed by the architecture: every part with the same compute capability (NVIDIA) or the
same gfx target (AMD) runs the same SM. So a part the table lacks gets the per-SM throughput of
the nearest row of its architecture, times its own SM count (numSms in deviceProperties; CUs on
ROCm) and, when the trace records its clock (clockRate, kHz), times its clock over the row's
boost clock. Nearest means, in order: the same product line (GeForce / Radeon RX parts accumulate
FP16 tensor products in FP32 at half the rate of professional parts, so a GeForce borrows from a
GeForce), the closest SM count, the closest memory size.

DRAM bandwidth does not scale with SMs: it is the memory clock x bus width, computed from
memoryClockRate (kHz, double data rate) and memoryBusWidth (bits) when the trace records them,
else the nearest row's figure, borrowed as it is and said so.

Pure: rows and numbers in, rows and numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import msgspec

from traceana.roofline.devices.table import DeviceRow, has_no_tensor_cores, is_consumer

TENSOR_KEYS = ("fp64_tc", "tf32_tc", "bf16_tc", "fp16_tc", "fp8_tc", "int8_tc", "fp6_tc", "fp4_tc")


class Borrowed(msgspec.Struct, frozen=True):
    """The figures of a device borrowed from `row`: peaks scaled by `factor`, and how."""

    row: DeviceRow
    peaks: dict[str, float]
    factor: float
    dram_gbps: float | None
    dram_how: str  # 'computed from ...' or 'borrowed unscaled from ...'
    phrase: str  # for the device line: "peaks borrowed from NVIDIA RTX A5000, scaled to 48 SMs"
    arithmetic: str  # "x 48/64 SMs = 0.75"


def gfx_target(props: Mapping[str, object]) -> str | None:
    """'gfx90a' from ROCm's gcnArchName ('gfx90a:sramecc+:xnack-'), when the trace records it."""
    raw = props.get("gcnArchName")
    if not isinstance(raw, str):
        return None
    head = raw.strip().split(":", 1)[0].lower()
    return head if head.startswith("gfx") and head[3:].isalnum() else None


def same_architecture(rows: Iterable[DeviceRow], cc: tuple[int, int] | None, vendor: str | None,
                      gfx: str | None) -> list[DeviceRow]:
    """Rows of the same architecture with an SM count: the same compute capability (and vendor);
    on AMD, where gfx906 / gfx908 / gfx90a all report 9.0, the rows of the same gfx target when the
    trace records it and the table has one (gfx1101 has none: the 11.0 rows, the same RDNA3 CU, stay)."""
    if cc is None:
        return []
    out = [r for r in rows if r.cc == cc and r.sms and (vendor is None or r.vendor == vendor)]
    if gfx is not None:
        out = [r for r in out if gfx in r.arch.lower().split()] or out
    return out


def nearest(rows: list[DeviceRow], name: str, sms: int | None, mem_gib: float | None) -> DeviceRow | None:
    """The row nearest to this device: same product line first, then SM count, then memory size."""
    if not rows or (sms is None and mem_gib is None):
        return None
    consumer = is_consumer(name)

    def distance(indexed: tuple[int, DeviceRow]) -> tuple[int, float, float, int]:
        i, r = indexed
        d_sms = abs(math.log(sms / r.sms)) if sms and r.sms else 0.0
        d_mem = abs(math.log(mem_gib / r.mem_gb)) if mem_gib and r.mem_gb else 0.0
        return (int(r.consumer != consumer), d_sms, d_mem, i)

    return min(enumerate(rows), key=distance)[1]


def dram_from_props(props: Mapping[str, object]) -> float | None:
    """Peak DRAM GB/s from memoryClockRate (kHz) and memoryBusWidth (bits), when both are recorded:
    2 transfers per clock (double data rate) x bus bytes. A100 40GB: 2 x 1215 MHz x 5120 / 8 = 1555."""
    clock, width = props.get("memoryClockRate"), props.get("memoryBusWidth")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in (clock, width)):
        return None
    gbps = 2 * float(clock) * 1e3 * float(width) / 8 / 1e9  # type: ignore[arg-type]
    return round(gbps, 1) if 1.0 <= gbps <= 1e5 else None


def clock_mhz(props: Mapping[str, object]) -> float | None:
    """The SM clock the trace records (clockRate, kHz, as cudaDeviceProp), in MHz."""
    v = props.get("clockRate")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 1e5 <= v <= 1e7:  # 100 MHz .. 10 GHz
        return float(v) / 1e3
    return None


def borrow(row: DeviceRow, name: str, sms: int | None, clock: float | None, dram: float | None,
           unit: str = "SMs") -> Borrowed:
    """`row`'s peaks scaled to this device's SMs (and clock), its DRAM figure when `dram` is None."""
    factor, parts = 1.0, []
    if sms and row.sms and sms != row.sms:
        factor *= sms / row.sms
        parts.append(f"{sms}/{row.sms} {unit}")
    if clock and row.boost_mhz and abs(clock - row.boost_mhz) > 0.5:
        factor *= clock / row.boost_mhz
        parts.append(f"{clock:g}/{row.boost_mhz:g} MHz")
    peaks = {k: round(v * factor, 3) for k, v in row.peak_tflops.items()}
    if has_no_tensor_cores(name):  # GTX 16xx, MX450, T400-T2000: Turing SMs built without tensor cores
        peaks = {k: v for k, v in peaks.items() if k not in TENSOR_KEYS}
    arithmetic = f"x {' x '.join(parts)} = {factor:.3g}" if parts else "unscaled (same SM count)"
    scaled = []
    if sms and row.sms and sms != row.sms:
        scaled.append(f"{sms} {unit}")
    if clock and row.boost_mhz and abs(clock - row.boost_mhz) > 0.5:
        scaled.append(f"{clock:g} MHz")
    phrase = f"peaks borrowed from {row.label}" + (f", scaled to {' and '.join(scaled)}" if scaled else "")
    if dram is not None:
        how = f"DRAM {dram:g} GB/s computed from the trace's memoryClockRate x memoryBusWidth"
    elif row.dram_gbps is not None:
        how = f"DRAM {row.dram_gbps:g} GB/s borrowed unscaled from {row.label} (this part's may differ)"
    else:
        how = f"no DRAM figure ({row.label} has none)"
    return Borrowed(row, peaks, factor, dram if dram is not None else row.dram_gbps, how, phrase, arithmetic)
