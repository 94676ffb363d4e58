"""Human-readable numbers for explanations and reports (pure formatting, no state)."""

from __future__ import annotations


def us(t: float | None) -> str:
    """A duration given in microseconds: '8.3 µs', '1.678 ms', '2.30 s'."""
    if t is None:
        return "n/a"
    a = abs(t)
    if a < 1000:
        return f"{t:.3g} µs" if a < 10 else f"{t:.1f} µs"
    if a < 1_000_000:
        return f"{t / 1000:.3f} ms" if a < 10_000 else f"{t / 1000:.2f} ms"
    return f"{t / 1e6:.2f} s"


def nbytes(b: float | None) -> str:
    """Bytes with the exact count and a binary unit: '536,870,912 B (512 MiB)'."""
    if b is None:
        return "n/a"
    exact = f"{b:,.0f} B"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            v = b / scale
            return f"{exact} ({v:.3g} {unit})" if v != int(v) else f"{exact} ({int(v)} {unit})"
    return exact


def count(n: float | None) -> str:
    """A FLOP count: '67,108,864' or '1.10e+12'."""
    if n is None:
        return "n/a"
    return f"{n:,.0f}" if n < 1e10 else f"{n:.3g}"


def rate_tflops(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x >= 1:
        return f"{x:.3g} TFLOP/s"
    return f"{x * 1000:.3g} GFLOP/s"


def rate_gbps(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.0f} GB/s" if x >= 100 else f"{x:.3g} GB/s"


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}%"


def dims(d) -> str:
    """Input dims as written in the trace, compactly: '[8192, 8192], []'."""
    if not d:
        return "—"
    parts = []
    for x in d:
        parts.append("[" + ", ".join(str(v) for v in x) + "]" if isinstance(x, (list, tuple)) else str(x))
    return ", ".join(parts)
