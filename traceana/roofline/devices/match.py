"""deviceProperties entry -> Device: which table row (if any) the trace ran on, and its peaks.

Order of lookup, first hit wins:
  1. `key` (the user's `--device KEY`): that row, whatever the trace says;
  2. the table's name_regex over the reported name (case-insensitive);
  3. aliases.csv: names without a row, with optional numSms / memory conditions;
  4. hardware: computeMajor.computeMinor + numSms (CUs on ROCm) + totalGlobalMem against the
     rows; exactly one row must fit. This is how ROCm's "" and "AMD Radeon Graphics" names are
     resolved (gfx90a 104 CUs -> mi210, 110 -> mi250x_gcd; gfx942 304 CUs 192/256 GB -> mi300x /
     mi325x; gfx950 256 CUs -> mi355x), and an unknown NVIDIA name twins a known part.
  5. borrowing (borrow.py): a device of a known architecture (compute capability, gfx target)
     that fits no row gets the nearest row of that architecture, its peaks scaled by SMs (and
     clock when recorded), named in Device.borrowed ("peaks borrowed from NVIDIA RTX A5000, scaled
     to 48 SMs"). A MIG slice ("... MIG 1g.10gb") is its parent's row scaled to its SMs and memory.
  6. otherwise (unknown architecture) an unknown Device: no peaks, and notes saying what to pass.
Then `peak_tflops` / `bandwidth_gbps` overrides are merged on top.

A blank table cell stays None: nothing here turns "not confirmed" into a number.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from traceana.roofline.devices.borrow import (
    Borrowed,
    borrow,
    clock_mhz,
    dram_from_props,
    gfx_target,
    nearest,
    same_architecture,
)
from traceana.roofline.devices.sanity import checked_bandwidth, checked_peaks
from traceana.roofline.devices.table import (
    DTYPES,
    UNKNOWN_TARGET,
    Alias,
    is_consumer,
    DeviceRow,
    load_aliases,
    load_rows,
    rows_by_key,
)
from traceana.errors import BadInput
from traceana.numbers import ascii_int

GENERIC_NAMES = frozenset({"", "amd radeon graphics"})
# "NVIDIA A100-SXM4-80GB MIG 1g.10gb": a MIG slice of the part before " MIG"
MIG_SUFFIX = re.compile(r"\s+MIG\s+(\d+)g\.(\d+)gb$", re.IGNORECASE)
# Reported memory (GiB) over the row's nominal GB: drivers reserve a few percent (T4: 0.92).
MEM_RATIO = (0.85, 1.05)
HOWTO = (
    "pass --peak-tflops (one number for every dtype, or e.g. fp32=19.5,bf16_tc=312) and "
    "--bandwidth-gbps, or --device KEY (list the keys with `traceana devices`)"
)
# Extra words for rows found by hardware, where the same figures cover more than one product.
_HARDWARE_NOTES: Mapping[str, str] = MappingProxyType(
    {
        "mi210": "MI210 or one MI250 GCD: the same per-die peaks (104 CUs at 1700 MHz, 64 GB, "
        "1638 GB/s)",
        "mi250x_gcd": "one GCD of an MI250X: ROCm shows each die as its own device; peaks are per GCD",
        "mi300x": "MI300X and MI325X share the compute; the 192 GB memory says MI300X (5.3 TB/s)",
        "mi325x": "MI300X and MI325X share the compute; the 256 GB memory says MI325X (6 TB/s)",
    }
)


@dataclass(frozen=True)
class Device:
    """The device a trace ran on, as far as traceana can tell.

    sms / mem_gb are what the trace reports (memory as totalGlobalMem in GiB) when it reports
    them, else the row's. peak_tflops holds only known values (dense TFLOP/s; int8_tc in TOPS).
    notes are warnings for the report.
    """

    name: str
    key: str | None
    vendor: str | None
    arch: str | None
    sms: int | None
    mem_gb: float | None
    dram_gbps: float | None
    peak_tflops: dict[str, float]
    source: str
    notes: tuple[str, ...] = ()
    # set when the peaks are not a row's own: "peaks borrowed from NVIDIA RTX A5000, scaled to 48 SMs"
    borrowed: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "borrowed": self.borrowed,
            "name": self.name,
            "key": self.key,
            "vendor": self.vendor,
            "arch": self.arch,
            "sms": self.sms,
            "mem_gb": self.mem_gb,
            "dram_gbps": self.dram_gbps,
            "peak_tflops": dict(self.peak_tflops),
            "source": self.source,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class _Hardware:
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


@dataclass
class _Match:
    """An identification before overrides: a row (or None) and how it was found."""

    hw: _Hardware
    row: DeviceRow | None
    source: str
    notes: list[str] = field(default_factory=list)
    blank: tuple[str, ...] = ()
    borrowed: Borrowed | None = None  # the row's figures scaled to this device (borrow.py)


# ---------------------------------------------------------------------------------------------
# public API


def device_rows() -> tuple[DeviceRow, ...]:
    """The table rows, for listing."""
    return load_rows()


def match_device(
    props: Mapping[str, Any] | None,
    *,
    key: str | None = None,
    peak_tflops: Mapping[str, float] | None = None,
    bandwidth_gbps: float | None = None,
) -> Device:
    """Identify the device of one deviceProperties entry (None: the trace has none).

    key forces a table row (unknown key: BadInput). peak_tflops merges over the row's peaks
    ({"all": x} sets every dtype, then specific dtypes win); bandwidth_gbps replaces dram_gbps.
    """
    peaks_override = checked_peaks(peak_tflops, DTYPES)
    bandwidth = checked_bandwidth(bandwidth_gbps)
    hw = _hardware(props if isinstance(props, Mapping) else None)
    if key is not None:
        match = _by_key(key, hw, props is not None)
    elif not isinstance(props, Mapping):
        match = _Match(hw, None, "no table row: the trace has no deviceProperties",
                       ["no deviceProperties in the trace (a CPU-only run, or a trace written "
                        "without them): the GPU is unknown"])
    else:
        match = _identify(hw)
    return _build(match, peaks_override, bandwidth)


# ---------------------------------------------------------------------------------------------
# reading deviceProperties


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


def _vendor(name: str, warp_size: int | None) -> str | None:
    lowered = name.lower()
    if any(word in lowered for word in ("nvidia", "tesla", "geforce", "quadro", "titan")):
        return "NVIDIA"
    if any(word in lowered for word in ("amd", "radeon", "instinct")):
        return "AMD"
    # 64-wide wavefronts are AMD CDNA; no NVIDIA part has a warp other than 32.
    return "AMD" if warp_size == 64 else None


def _hardware(props: Mapping[str, Any] | None) -> _Hardware:
    props = props or {}
    raw_name = props.get("name")
    name = raw_name.strip(" \t\r\n\x00") if isinstance(raw_name, str) else ""
    major, minor = _as_int(props.get("computeMajor")), _as_int(props.get("computeMinor"))
    mem = _as_int(props.get("totalGlobalMem"))
    sms = _as_int(props.get("numSms"))
    return _Hardware(
        name=name,
        cc=(major, minor or 0) if major is not None else None,
        sms=sms if sms and sms > 0 else None,
        mem_gib=mem / 2**30 if mem and mem > 0 else None,
        vendor=_vendor(name, _as_int(props.get("warpSize"))),
        clock_mhz=clock_mhz(props),
        dram_gbps=dram_from_props(props),
        gfx=gfx_target(props),
    )


# ---------------------------------------------------------------------------------------------
# identification


def _by_key(key: str, hw: _Hardware, has_props: bool) -> _Match:
    wanted = key.strip().lower()
    row = rows_by_key().get(wanted)
    if row is None:
        close = difflib.get_close_matches(wanted, list(rows_by_key()), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise BadInput(f"unknown device key {key!r}{hint}; list the keys with `traceana devices`")
    source = f"table row {row.key} chosen with --device {row.key}"
    notes: list[str] = []
    if has_props:
        source += f" (the trace reports {hw.name!r})"
        natural = _identify(hw).row
        if natural is not None and natural.key != row.key:
            notes.append(f"the trace's device {hw.name!r} would match row {natural.key}; "
                         f"--device {row.key} overrides it")
    return _checked(_Match(hw, row, source, notes), refit=False, scale=False)


def _identify(hw: _Hardware) -> _Match:
    if hw.name.lower() not in GENERIC_NAMES:
        for row in load_rows():
            if row.pattern.search(hw.name):
                source = f"table row {row.key} (name {hw.name!r} matched {row.name_regex})"
                return _checked(_Match(hw, row, source))
        for alias in load_aliases():
            if alias.pattern.search(hw.name) and _conditions_hold(alias, hw):
                return _from_alias(alias, hw)
        mig = MIG_SUFFIX.search(hw.name)
        if mig:
            found = _mig(hw, hw.name[:mig.start()])
            if found is not None:
                return found
    return _by_hardware(hw)


def _mig(hw: _Hardware, parent: str) -> _Match | None:
    """A MIG slice: its parent's row, compute scaled to the slice's SMs and bandwidth to its share of
    the memory (MIG gives each slice whole memory controllers, so bandwidth goes with memory)."""
    row = next((r for r in load_rows() if r.pattern.search(parent)), None)
    if row is None:
        return None
    dram = hw.dram_gbps
    if dram is None and row.dram_gbps and hw.mem_gib and row.mem_gb:
        dram = round(row.dram_gbps * min(hw.mem_gib / row.mem_gb * 2**30 / 1e9, 1.0), 1)
    got = borrow(row, hw.name, hw.sms, None, dram, hw.unit)
    note = (f"{hw.name!r} is a MIG slice of {row.label}: {got.phrase} ({got.arithmetic}); DRAM "
            + (f"{dram:g} GB/s, the slice's share of {row.dram_gbps:g} by memory "
               f"({hw.mem_gib:.1f} GiB of {row.mem_gb:g} GB)" if dram is not None else "unknown"))
    source = f"table row {row.key} for MIG slice {hw.name!r}, scaled"
    return _Match(hw, row, source, [note], borrowed=got)


def _conditions_hold(alias: Alias, hw: _Hardware) -> bool:
    if alias.sms is not None and hw.sms != alias.sms:
        return False
    if alias.min_mem_gb is not None and (hw.mem_gib is None or hw.mem_gib < alias.min_mem_gb):
        return False
    if alias.max_mem_gb is not None and (hw.mem_gib is None or hw.mem_gib >= alias.max_mem_gb):
        return False
    return True


def _from_alias(alias: Alias, hw: _Hardware) -> _Match:
    conditions = alias.conditions()
    how = f"name {hw.name!r} matched {alias.name_regex}" + (f" with {conditions}" if conditions else "")
    if alias.target == UNKNOWN_TARGET:
        return _Match(hw, None, f"no table row: aliases.csv maps it to unknown ({how})", [alias.note])
    row = rows_by_key()[alias.target]
    source = f"table row {row.key} via aliases.csv ({how})"
    return _checked(_Match(hw, row, source, [alias.note], alias.blank))


def _candidates(hw: _Hardware) -> list[DeviceRow]:
    """Rows whose cc, SM/CU count and (when reported) memory size fit the hardware."""
    out = []
    for row in load_rows():
        if row.cc != hw.cc or row.sms is None or row.sms != hw.sms:
            continue
        if hw.vendor is not None and row.vendor != hw.vendor:
            continue
        if hw.name.lower() not in GENERIC_NAMES and row.consumer != is_consumer(hw.name):
            continue  # a GeForce never twins a professional part (half-rate FP32 accumulate), nor back
        if hw.mem_gib is not None and not _mem_fits(hw.mem_gib, row.mem_gb):
            continue
        out.append(row)
    return out


def _mem_fits(mem_gib: float, nominal_gb: float | None) -> bool:
    return nominal_gb is not None and MEM_RATIO[0] <= mem_gib / nominal_gb <= MEM_RATIO[1]


def _by_hardware(hw: _Hardware) -> _Match:
    if hw.name == "":
        what = "the device name is empty (ROCm <= 6.0 leaves it blank)"
    elif hw.name.lower() in GENERIC_NAMES:
        what = f"{hw.name!r} is ROCm's generic name (the device is missing from amdgpu.ids)"
    else:
        what = f"the name {hw.name!r} matches no table row or alias"
    if hw.cc is None or hw.sms is None:
        reason = f"{what}, and the trace lacks computeMajor/numSms to identify it by hardware"
        return _Match(hw, None, f"no table row: name {hw.name!r} and no cc/numSms", [reason])
    found = _candidates(hw)
    if not found:
        lent = _borrow(hw, what)
        if lent is not None:
            return lent
        arch = f"compute capability {hw.cc[0]}.{hw.cc[1]}"
        reason = (f"{what}, and its hardware ({hw.describe()}) fits no row; no row has its architecture "
                  f"({arch}) to borrow figures from")
        source = f"no table row: name {hw.name!r} has no row or alias and its architecture has no row"
        return _Match(hw, None, source, [reason])
    if len(found) > 1:
        return _among(hw, what, found)
    row = found[0]
    if hw.name.lower() in GENERIC_NAMES:
        note = f"{what}: identified by hardware ({hw.describe()}) as row {row.key}"
    else:
        note = (f"{what}: its hardware ({hw.describe()}) fits row {row.key} only, so that row's figures are "
                f"borrowed ({_figures(row)}); this part's clocks and bandwidth may differ")
    notes = [note]
    if row.key in _HARDWARE_NOTES:
        notes.append(_HARDWARE_NOTES[row.key])
    if hw.mem_gib is None:
        notes.append("the trace has no memory size, so memory was not checked")
    source = f"table row {row.key} by hardware ({hw.describe()} fits only this row)"
    match = _checked(_Match(hw, row, source, notes), refit=False)
    if hw.clock_mhz or hw.dram_gbps:  # the trace's own clock and memory bus: the row's figures scaled to them
        got = borrow(row, hw.name, hw.sms, hw.clock_mhz, hw.dram_gbps, hw.unit)
        if got.factor != 1.0 or hw.dram_gbps:
            match.borrowed = got
            match.notes.append(f"{got.phrase} ({got.arithmetic}); {got.dram_how}")
    return match


def _among(hw: _Hardware, what: str, found: list[DeviceRow]) -> _Match:
    """Several rows fit the hardware (parts that differ only in clocks or memory speed: MI350X and
    MI355X, MI300X and MI325X without a memory size). The figures they all agree on are this part's and
    are used (borrowed from the row whose memory size is closest, then the first in the table); the ones
    they disagree on are left blank, and the note names both, so the device line never carries a figure
    the trace cannot vouch for. When they share no figure (L40 / L40S / RTX 6000 Ada), the device stays
    unknown. --device KEY picks one."""
    mem = hw.mem_gib
    row = min(found, key=lambda r: abs(math.log(mem / r.mem_gb)) if mem and r.mem_gb else 0.0)
    keys = ["dram_gbps", *[d for d in DTYPES if any(d in r.peak_tflops for r in found)]]
    values = {k: [r.dram_gbps if k == "dram_gbps" else r.peak_tflops.get(k) for r in found] for k in keys}
    differ = [k for k in keys if len(set(values[k])) > 1]
    same = [f"{k} {_fmt(values[k][0])}" for k in keys if k not in differ and values[k][0] is not None]
    apart = [f"{k} " + " / ".join(f"{_fmt(v)} ({r.key})" for v, r in zip(values[k], found)) for k in differ]
    rows = ", ".join(r.key for r in found)
    if not same:  # they share no figure: the nearest by product line and memory lends its own
        lent = _borrow(hw, what, found)
        assert lent is not None  # found is non-empty and the hardware has SMs
        lent.notes.append(f"its hardware ({hw.describe()}) fits rows {rows}, which share no figure: "
                          f"pass --device {' or --device '.join(r.key for r in found)} to use one part's figures")
        return lent
    note = (f"{what}: its hardware ({hw.describe()}) fits rows {rows}. Borrowed from row {row.key}, the figures "
            f"they share: {', '.join(same) or 'none'}. Left blank, the figures they differ in: {'; '.join(apart)}. "
            f"Pass --device {' or --device '.join(r.key for r in found)} to use one part's figures")
    source = (f"table row {row.key} by hardware ({hw.describe()} fits {rows}; the figures they differ in are "
              "left blank)")
    return _checked(_Match(hw, row, source, [note], tuple(differ)), refit=False)


def _borrow(hw: _Hardware, what: str, rows: list[DeviceRow] | None = None) -> _Match | None:
    """The nearest row of the device's architecture, its peaks scaled to the device (borrow.py)."""
    pool = rows if rows is not None else same_architecture(load_rows(), hw.cc, hw.vendor, hw.gfx)
    row = nearest(pool, hw.name, hw.sms, hw.mem_gib)
    if row is None:
        return None
    got = borrow(row, hw.name, hw.sms, hw.clock_mhz, hw.dram_gbps, hw.unit)
    arch = f"gfx target {hw.gfx}" if hw.gfx and hw.gfx in row.arch.lower() else f"compute capability {row.cc_text}"
    note = (f"{what}: {got.phrase} ({row.key}, the nearest {arch} row, {row.sms} {hw.unit}"
            + (f" at {row.boost_mhz:g} MHz" if row.boost_mhz else "") + f"; peaks {got.arithmetic}). "
            + f"{got.dram_how}. Pass --peak-tflops / --bandwidth-gbps with this part's own figures if known")
    if "gtx" in hw.name.lower():
        note += ". A GTX part has no tensor cores: the tensor-core peaks are left out"
    source = f"table row {row.key} borrowed for {hw.name or 'an unnamed device'!r} ({hw.describe()}), scaled"
    return _Match(hw, row, source, [note], borrowed=got)


def _figures(row: DeviceRow) -> str:
    """The figures a row lends: its DRAM bandwidth and peaks, in one phrase."""
    peaks = ", ".join(f"{d} {_fmt(row.peak_tflops[d])}" for d in DTYPES if d in row.peak_tflops)
    return f"DRAM {_fmt(row.dram_gbps)} GB/s" + (f"; peaks {peaks} TFLOP/s" if peaks else "; no peaks")


def _fmt(value: float | None) -> str:
    return "blank" if value is None else f"{value:g}"


def _checked(match: _Match, *, refit: bool = True, scale: bool = True) -> _Match:
    """Warn when the trace's SM count or memory disagrees with the row.

    With refit, an SM mismatch that the hardware resolves to exactly one other row switches to
    it ("AMD Instinct MI250X / MI250" with 104 CUs per die is an MI250, i.e. the mi210 figures).
    Otherwise, with scale, the row's peaks are scaled to the reported SMs (a cut-down variant under
    the same name, a partition): per-SM throughput is the architecture's, the SM count the part's.
    """
    hw, row = match.hw, match.row
    if row is None:
        return match
    if row.sms is not None and hw.sms is not None and hw.sms != row.sms:
        found = _candidates(hw) if refit else []
        if len(found) == 1 and found[0].key != row.key:
            alt = found[0]
            match.notes.append(
                f"the name matches row {row.key} ({row.sms} {hw.unit}), but the trace reports "
                f"{hw.sms} {hw.unit}; the hardware ({hw.describe()}) fits row {alt.key} only, "
                "so that row is used")
            if alt.key in _HARDWARE_NOTES:
                match.notes.append(_HARDWARE_NOTES[alt.key])
            match.source = (f"table row {alt.key} by hardware (name {hw.name!r} matched "
                            f"{row.name_regex}, but numSms {hw.sms} != {row.sms})")
            match.row = row = alt
        elif scale:
            got = borrow(row, hw.name, hw.sms, None, None, hw.unit)
            match.borrowed = got
            match.notes.append(
                f"the trace reports {hw.sms} {hw.unit}, row {row.key} has {row.sms}: a variant with fewer "
                f"or more SMs, a MIG slice or a partition; {got.phrase} ({got.arithmetic}); the "
                f"bandwidth is the row's {_fmt(row.dram_gbps)} GB/s and may differ: pass --bandwidth-gbps")
        else:
            match.notes.append(
                f"the trace reports {hw.sms} {hw.unit}, row {row.key} has {row.sms}: a MIG slice, "
                "a partition or a cut-down part gets only a share of these peaks and of the "
                "bandwidth; pass --peak-tflops / --bandwidth-gbps with its own figures")
    if ("dram_gbps" not in match.blank and hw.mem_gib is not None and row.mem_gb is not None
            and not _mem_fits(hw.mem_gib, row.mem_gb)):
        match.notes.append(
            f"the trace reports {hw.mem_gib:.1f} GiB of memory, row {row.key} is a {row.mem_gb:g} GB "
            "part: its bandwidth may differ (pass --bandwidth-gbps)")
    return match


# ---------------------------------------------------------------------------------------------
# overrides and the final Device


def _build(match: _Match, peaks_override: dict[str, float] | None, bandwidth: float | None) -> Device:
    hw, row, lent = match.hw, match.row, match.borrowed
    own = lent.peaks if lent is not None else (row.peak_tflops if row else {})
    peaks = {d: v for d, v in own.items() if d not in match.blank}
    dram = (lent.dram_gbps if lent is not None else row.dram_gbps if row else None)
    dram = dram if "dram_gbps" not in match.blank else None
    notes = list(match.notes)
    if row is not None and not peaks and not peaks_override and not match.blank:
        notes.append(f"row {row.key} has no FLOP/s peaks (source: {row.source}): memory-bound "
                     "verdicts still work; compute roofs need --peak-tflops DTYPE=TFLOPS")
    if row is not None and dram is None and bandwidth is None and "dram_gbps" not in match.blank:
        notes.append(f"row {row.key} has no DRAM bandwidth: pass --bandwidth-gbps")

    source, overridden = match.source, []
    if peaks_override:
        if "all" in peaks_override:
            peaks = {d: peaks_override["all"] for d in DTYPES}
        peaks.update({d: v for d, v in peaks_override.items() if d != "all"})
        overridden.append(f"peaks overridden by --peak-tflops ({', '.join(sorted(peaks_override))})")
    if bandwidth is not None:
        dram = bandwidth
        overridden.append("bandwidth overridden by --bandwidth-gbps")
    if overridden:
        source = f"{source}; {' and '.join(overridden)}"
    if row is None and not peaks and not dram:
        notes.append("unknown device, so no roofline: " + HOWTO)
    elif row is None and not peaks:
        notes.append("unknown device: no FLOP/s peaks, so compute roofs need --peak-tflops")
    elif row is None and not dram:
        notes.append("unknown device: no DRAM bandwidth, so memory roofs need --bandwidth-gbps")

    return Device(
        name=hw.name,
        key=row.key if row else None,
        vendor=row.vendor if row else hw.vendor,
        arch=row.arch if row else None,
        sms=hw.sms if hw.sms is not None else (row.sms if row else None),
        mem_gb=round(hw.mem_gib, 1) if hw.mem_gib is not None else (row.mem_gb if row else None),
        dram_gbps=dram,
        peak_tflops={d: peaks[d] for d in DTYPES if d in peaks},
        source=source,
        notes=tuple(notes),
        borrowed=lent.phrase if lent is not None else None,
    )
