"""One deviceProperties entry -> Hardware: the fields that identify a device (name, compute
capability, SM / CU count, memory size, vendor, clock, memory bus, gfx target), each read only when
the trace records it as a number (or a number in text); anything else stays None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from traceana.numbers import ascii_int
from traceana.roofline.devices.borrow import clock_mhz, dram_from_props, gfx_target


class Hardware(msgspec.Struct, frozen=True):
    """The fields of one deviceProperties entry that identify a device."""

    name: str
    cc: tuple[int, int] | None
    sms: int | None
    mem_gib: float | None
    vendor: str | None
    clock_mhz: float | None = None  # clockRate, when the trace records it
    dram_gbps: float | None = None  # from memoryClockRate x memoryBusWidth, when recorded
    gfx: str | None = None  # gcnArchName's target (ROCm), when recorded

    @property
    def unit(self) -> str:
        return "CUs" if self.vendor == "AMD" else "SMs"

    def describe(self) -> str:
        parts = [f"cc {self.cc[0]}.{self.cc[1]}" if self.cc else "no cc"]
        parts.append(f"{self.sms} {self.unit}" if self.sms is not None else f"no {self.unit}")
        parts.append(f"{self.mem_gib:.1f} GiB" if self.mem_gib is not None else "no memory size")
        return ", ".join(parts)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return ascii_int(value.strip())
    return None


def _vendor(name: str, warp_size: int | None, major: int | None = None) -> str | None:
    lowered = name.lower()
    if any(word in lowered for word in ("nvidia", "tesla", "geforce", "quadro", "titan")):
        return "NVIDIA"
    if any(word in lowered for word in ("amd", "radeon", "instinct")):
        return "AMD"
    # 64-wide wavefronts are AMD (GCN, CDNA); no NVIDIA part has a warp other than 32. A warp of 32 is
    # NVIDIA's or an RDNA part's, and RDNA's gfx10/gfx11/gfx12 report computeMajor 10 and up: with a
    # major of 9 or less (gfx9 and older are all 64-wide) it can only be NVIDIA's.
    if warp_size == 64:
        return "AMD"
    if warp_size == 32 and major is not None and 0 < major <= 9:
        return "NVIDIA"
    return None


def read_hardware(props: Mapping[str, Any] | None) -> Hardware:
    props = props or {}
    raw_name = props.get("name")
    name = raw_name.strip(" \t\r\n\x00") if isinstance(raw_name, str) else ""
    major, minor = _as_int(props.get("computeMajor")), _as_int(props.get("computeMinor"))
    mem = _as_int(props.get("totalGlobalMem"))
    sms = _as_int(props.get("numSms"))
    gfx = gfx_target(props)  # a gfx target is ROCm's: AMD, whatever the name and warp say
    return Hardware(
        name=name,
        cc=(major, minor or 0) if major is not None else None,
        sms=sms if sms and sms > 0 else None,
        mem_gib=mem / 2**30 if mem and mem > 0 else None,
        vendor="AMD" if gfx else _vendor(name, _as_int(props.get("warpSize")), major),
        clock_mhz=clock_mhz(props),
        dram_gbps=dram_from_props(props),
        gfx=gfx,
    )
