"""Samples of one measurement -> one profile figure (pure: no torch, no clocks)."""

from __future__ import annotations

from statistics import median


def spread_pct(values: list[float]) -> float:
    """(max - min) / median x 100: how far the repeats disagree, in % of the reported value."""
    mid = median(values)
    return (max(values) - min(values)) / mid * 100.0 if mid > 0 else 0.0


def figure(values: list[float], unit: str, size: str, *, work: float | None = None,
           datasheet: float | None = None, note: str | None = None) -> dict:
    """One figure of the profile: the median of the repeats, their spread, the size used.

    values: one number per repeat, already in `unit`; work: FLOPs or bytes of one timed call
    (None for latencies); datasheet: the spec figure in the same unit, when known."""
    if not values:
        raise ValueError("a figure needs at least one repeat")
    value = median(values)
    out = {"value": value, "unit": unit, "spread_pct": spread_pct(values), "size": size,
           "repeats": len(values), "samples": list(values)}
    if work is not None:
        out["work"] = work
    out["datasheet"] = datasheet
    out["pct_of_datasheet"] = value / datasheet * 100.0 if datasheet else None
    if note:
        out["note"] = note
    return out


def rates(seconds: list[float], work: float, iters: int, scale: float) -> list[float]:
    """Throughput of each repeat in the figure's unit: work x iters / seconds / scale
    (scale 1e12 for TFLOP/s, 1e9 for GB/s)."""
    return [work * iters / s / scale for s in seconds if s > 0]


def per_call_us(seconds: list[float], iters: int) -> list[float]:
    """Time of one call in µs for each repeat: seconds / iters x 1e6."""
    return [s / iters * 1e6 for s in seconds]
