"""Figures with physical sense: user-given peaks and bandwidths, and measured profile roofs.

Two tests, both with a wide margin:

* absolute: no single device does more than 1e5 TFLOP/s (100 PFLOP/s; the fastest in the table,
  GB300, does 15,000 dense FP4) or less than 1e-6 TFLOP/s (1 MFLOP/s, slower than any CPU core of
  this century), and no memory or link moves more than 1e6 GB/s (1 PB/s; HBM3e does 8,000) or less
  than 1e-3 GB/s (1 MB/s). A figure outside is a typo or a broken measurement, whatever the device;
* against the datasheet: a measured roof above 2x the device's datasheet peak cannot be (a
  datasheet peak is the hardware's ceiling; boost clocks above the reference add tens of percent,
  not 100), and one below 1/1000 of it was timed while something else ran or measured the wrong
  thing. calibrate's own checks (measure/calibrate/checks.py) catch figures that contradict each
  other; these catch figures that contradict the hardware.

Pure functions: numbers in, a reason (or None) out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from traceana.errors import BadInput

#: unit -> (lowest, highest) a single device's figure can be
ABSOLUTE = {"TFLOP/s": (1e-6, 1e5), "GB/s": (1e-3, 1e6), "us": (1e-3, 1e7)}
OVER_SHEET = 2.0  # a measured roof above 2x the datasheet's is impossible
UNDER_SHEET = 1e-3  # one below 1/1000 of it measured something else


def number(value: Any) -> float | None:
    """value as a finite positive float, else None."""
    if isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def out_of_range(value: float, unit: str) -> str | None:
    """Why `value` in `unit` is no figure of any single device (None: it could be)."""
    lo, hi = ABSOLUTE.get(unit, (0.0, math.inf))
    if value > hi:
        return f"{value:.3g} {unit} is more than any device does (at most {hi:g} {unit})"
    if value < lo:
        return f"{value:.3g} {unit} is less than any device does (at least {lo:g} {unit})"
    return None


def against_sheet(value: float, sheet: float | None, unit: str, what: str) -> str | None:
    """Why a measured `value` contradicts the datasheet's `sheet` for the same figure (None: it does not)."""
    if not sheet:
        return None
    if value > OVER_SHEET * sheet:
        return (f"{value:.3g} {unit} is {value / sheet:.3g}x the device's datasheet {what} of {sheet:g} {unit}: "
                f"no measurement beats the hardware by more than {OVER_SHEET:g}x")
    if value < UNDER_SHEET * sheet:
        return (f"{value:.3g} {unit} is under 1/{1 / UNDER_SHEET:g} of the device's datasheet {what} of "
                f"{sheet:g} {unit}: timed while something else ran, or not this device's figure")
    return None


def checked_peaks(peaks: Mapping[str, Any] | None, dtypes: tuple[str, ...]) -> dict[str, float] | None:
    """--peak-tflops as {dtype: TFLOP/s}; BadInput on an unknown dtype or a figure with no physical sense."""
    if not peaks:
        return None
    out = {}
    for dtype, value in peaks.items():
        if dtype != "all" and dtype not in dtypes:
            raise BadInput(f"--peak-tflops: unknown dtype {dtype!r}; use 'all' or one of {', '.join(dtypes)}")
        x = number(value)
        if x is None:
            raise BadInput(f"--peak-tflops: {dtype}={value!r} must be a positive number of TFLOP/s")
        why = out_of_range(x, "TFLOP/s")
        if why:
            raise BadInput(f"--peak-tflops: {dtype}={value!r}: {why}")
        out[dtype] = x
    return out


def checked_bandwidth(value: Any) -> float | None:
    """--bandwidth-gbps as GB/s; BadInput when it is not a positive number with physical sense."""
    if value is None:
        return None
    x = number(value)
    if x is None:
        raise BadInput(f"--bandwidth-gbps: {value!r} must be a positive number of GB/s")
    why = out_of_range(x, "GB/s")
    if why:
        raise BadInput(f"--bandwidth-gbps: {value!r}: {why}")
    return x
