"""Hardware -> Match: which table row a device is, and how that was found (lookup steps 1-5 of
match.py: --device KEY, the name against the rows and aliases.csv, the hardware against the rows, a
MIG slice or a row of the same architecture borrowed and scaled). A Match holds the row, the source
sentence and the notes; match.py merges the overrides and builds the Device.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType

import msgspec

from traceana.errors import BadInput
from traceana.roofline.devices.borrow import Borrowed, borrow, nearest, same_architecture
from traceana.roofline.devices.properties import Hardware
from traceana.roofline.devices.table import (
    DTYPES,
    UNKNOWN_TARGET,
    Alias,
    has_no_tensor_cores,
    is_consumer,
    DeviceRow,
    load_aliases,
    load_rows,
    rows_by_key,
)

GENERIC_NAMES = frozenset({"", "amd radeon graphics"})
# Laptop parts: "NVIDIA GeForce RTX 4090 Laptop GPU", "Quadro RTX 5000 with Max-Q Design", "RTX A2000 Mobile"
MOBILE = re.compile(r"\b(laptop|mobile|max-q)\b", re.IGNORECASE)
# "NVIDIA A100-SXM4-80GB MIG 1g.10gb": a MIG slice of the part before " MIG"
MIG_SUFFIX = re.compile(r"\s+MIG\s+(\d+)g\.(\d+)gb$", re.IGNORECASE)
# Reported memory (GiB) over the row's nominal GB: drivers reserve a few percent (T4: 0.92).
MEM_RATIO = (0.85, 1.05)
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


class Match(msgspec.Struct):
    """An identification before overrides: a row (or None) and how it was found."""

    hw: Hardware
    row: DeviceRow | None
    source: str
    notes: list[str] = msgspec.field(default_factory=list)
    blank: tuple[str, ...] = ()
    borrowed: Borrowed | None = None  # the row's figures scaled to this device (borrow.py)


def by_key(key: str, hw: Hardware, has_props: bool) -> Match:
    wanted = key.strip().lower()
    row = rows_by_key().get(wanted)
    if row is None:
        import difflib  # (only for the hint)

        keys = list(rows_by_key())  # the keys it begins (h100: h100_sxm, h100_pcie), then the look-alikes
        starts = [k for k in keys if k.startswith(wanted)] if wanted else []
        close = (starts + [k for k in difflib.get_close_matches(wanted, keys, n=3) if k not in starts])[:3]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise BadInput(f"unknown device key {key!r}{hint}; list the keys with `traceana devices`")
    source = f"table row {row.key} chosen with --device {row.key}"
    notes: list[str] = []
    if has_props:
        source += f" (the trace reports {hw.name!r})"
        natural = identify(hw).row
        if natural is not None and natural.key != row.key:
            notes.append(f"the trace's device {hw.name!r} would match row {natural.key}; "
                         f"--device {row.key} overrides it")
    return _checked(Match(hw, row, source, notes), refit=False, scale=False)


def identify(hw: Hardware) -> Match:
    match = _identify(hw)
    if match.row is not None and MOBILE.search(hw.name) and not MOBILE.search(match.row.label):
        measured_bus = hw.dram_gbps is not None  # memoryClockRate x memoryBusWidth: this part's own bandwidth
        match.notes.append(
            f"{hw.name!r} is a laptop part: under its power limit it holds lower clocks than "
            f"{match.row.label}'s boost" + ("" if measured_bus else ", often on a narrower memory bus") + ", so "
            + ("these peaks are upper bounds" if measured_bus else "these peaks and this bandwidth are upper bounds")
            + " and % of roof reads low; pass --peak-tflops / --bandwidth-gbps with its own figures")
    return match


def _identify(hw: Hardware) -> Match:
    if hw.name.lower() not in GENERIC_NAMES:
        for row in load_rows():
            if row.pattern.search(hw.name):
                source = f"table row {row.key} (name {hw.name!r} matched {row.name_regex})"
                return _checked(Match(hw, row, source))
        for alias in load_aliases():
            if alias.pattern.search(hw.name) and _conditions_hold(alias, hw):
                return _from_alias(alias, hw)
        mig = MIG_SUFFIX.search(hw.name)
        if mig:
            found = _mig(hw, hw.name[:mig.start()])
            if found is not None:
                return found
    return _by_hardware(hw)


def _mig(hw: Hardware, parent: str) -> Match | None:
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
    return Match(hw, row, source, [note], borrowed=got)


def _conditions_hold(alias: Alias, hw: Hardware) -> bool:
    if alias.sms is not None and hw.sms != alias.sms:
        return False
    if alias.min_mem_gb is not None and (hw.mem_gib is None or hw.mem_gib < alias.min_mem_gb):
        return False
    if alias.max_mem_gb is not None and (hw.mem_gib is None or hw.mem_gib >= alias.max_mem_gb):
        return False
    return True


def _from_alias(alias: Alias, hw: Hardware) -> Match:
    conditions = alias.conditions()
    how = f"name {hw.name!r} matched {alias.name_regex}" + (f" with {conditions}" if conditions else "")
    if alias.target == UNKNOWN_TARGET:
        return Match(hw, None, f"no table row: aliases.csv maps it to unknown ({how})", [alias.note])
    row = rows_by_key()[alias.target]
    source = f"table row {row.key} via aliases.csv ({how})"
    return _checked(Match(hw, row, source, [alias.note], alias.blank))


def _candidates(hw: Hardware) -> list[DeviceRow]:
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


def _by_hardware(hw: Hardware) -> Match:
    if hw.name == "":  # (ROCm <= 6.0 leaves an AMD device's name blank; elsewhere the trace was stripped)
        what = "the device name is empty" + (" (ROCm <= 6.0 leaves it blank)" if hw.vendor != "NVIDIA" else "")
    elif hw.name.lower() in GENERIC_NAMES:
        what = f"{hw.name!r} is ROCm's generic name (the device is missing from amdgpu.ids)"
    else:
        what = f"the name {hw.name!r} matches no table row or alias"
    if hw.cc is None or hw.sms is None:
        reason = f"{what}, and the trace lacks computeMajor/numSms to identify it by hardware"
        return Match(hw, None, f"no table row: name {hw.name!r} and no cc/numSms", [reason])
    found = _candidates(hw)
    if not found:
        lent = _borrow(hw, what)
        if lent is not None:
            return lent
        arch = f"compute capability {hw.cc[0]}.{hw.cc[1]}"
        reason = (f"{what}, and its hardware ({hw.describe()}) fits no row; no row has its architecture "
                  f"({arch}) to borrow figures from")
        source = f"no table row: name {hw.name!r} has no row or alias and its architecture has no row"
        return Match(hw, None, source, [reason])
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
    match = _checked(Match(hw, row, source, notes), refit=False)
    if hw.clock_mhz or hw.dram_gbps:  # the trace's own clock and memory bus: the row's figures scaled to them
        got = borrow(row, hw.name, hw.sms, hw.clock_mhz, hw.dram_gbps, hw.unit)
        if got.factor != 1.0 or hw.dram_gbps:
            match.borrowed = got
            match.notes.append(f"{got.phrase} ({got.arithmetic}); {got.dram_how}")
    return match


def _among(hw: Hardware, what: str, found: list[DeviceRow]) -> Match:
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
    return _checked(Match(hw, row, source, [note], tuple(differ)), refit=False)


def _borrow(hw: Hardware, what: str, rows: list[DeviceRow] | None = None) -> Match | None:
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
    if has_no_tensor_cores(hw.name):
        note += (". This part has no tensor cores (a GeForce GTX or MX, or an NVIDIA T400-T2000): the tensor-core "
                 "peaks are left out")
    source = f"table row {row.key} borrowed for {hw.name or 'an unnamed device'!r} ({hw.describe()}), scaled"
    return Match(hw, row, source, [note], borrowed=got)


def _figures(row: DeviceRow) -> str:
    """The figures a row lends: its DRAM bandwidth and peaks, in one phrase."""
    peaks = ", ".join(f"{d} {_fmt(row.peak_tflops[d])}" for d in DTYPES if d in row.peak_tflops)
    return f"DRAM {_fmt(row.dram_gbps)} GB/s" + (f"; peaks {peaks} TFLOP/s" if peaks else "; no peaks")


def _fmt(value: float | None) -> str:
    return "blank" if value is None else f"{value:g}"


def _checked(match: Match, *, refit: bool = True, scale: bool = True) -> Match:
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
