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

properties.py reads the deviceProperties entry; identify.py finds the row (steps 1-6); this module
merges the overrides and builds the Device.

A blank table cell stays None: nothing here turns "not confirmed" into a number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from traceana.roofline.devices.identify import Match, by_key, identify
from traceana.roofline.devices.properties import read_hardware
from traceana.roofline.devices.sanity import checked_bandwidth, checked_peaks
from traceana.roofline.devices.table import DTYPES, DeviceRow, load_rows

HOWTO = (
    "pass --peak-tflops (one number for every dtype, or e.g. fp32=19.5,bf16_tc=312) and "
    "--bandwidth-gbps, or --device KEY (list the keys with `traceana devices`)"
)


class Device(msgspec.Struct, frozen=True):
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
    hw = read_hardware(props if isinstance(props, Mapping) else None)
    if key is not None:
        match = by_key(key, hw, props is not None)
    elif not isinstance(props, Mapping):
        match = Match(hw, None, "no table row: the trace has no deviceProperties",
                      ["no deviceProperties in the trace (a CPU-only run, or a trace written "
                       "without them): the GPU is unknown"])
    else:
        match = identify(hw)
    return _build(match, peaks_override, bandwidth)


# ---------------------------------------------------------------------------------------------
# overrides and the final Device


def _build(match: Match, peaks_override: dict[str, float] | None, bandwidth: float | None) -> Device:
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
