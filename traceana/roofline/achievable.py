"""What share of a datasheet compute peak a real kernel can reach: the bar compute-bound savings are set against.

No GEMM runs at 100% of the datasheet peak: clocks drop under sustained tensor-core load (the peak assumes
the boost clock), and tile / wave quantization and the epilogue cost a little of every shape. A saving
measured against 100% promises time no kernel can recover. So a compute-bound op's saving is its measured
time above the time at an *achievable* fraction of the peak:

  * with a device profile (`--profile`, `traceana calibrate`): the profile's measured roof (judge.py's
    `achievable` model), not this table;
  * else the largest share of the same roof that an op of this trace already reaches (this machine has
    shown it; at most 100%);
  * else the default for the device's architecture below, from the best GEMM throughput measured on that
    architecture with the vendor library (Maximum Achievable Matmul FLOPS: a search over matmul shapes
    for the fastest, bf16, dense; `mamf-finder.py` in Stas Bekman's ML Engineering book, results table of
    compute/accelerator/README.md, 2025). Parts not measured there take DEFAULT: the measured NVIDIA parts
    reach 73-87%.

The figure and where it comes from are named in each compute-bound lever's arithmetic.
"""

from __future__ import annotations

# (fragment of the device table's arch or key, fraction, source); the first match wins
BY_ARCH: tuple[tuple[str, float, str], ...] = (
    ("ga100", 0.85, "A100 SXM 271 of 312 TFLOP/s (86.9%), A100 PCIe 253 (81.1%)"),
    ("hopper", 0.80, "H100 SXM 795 of 989 TFLOP/s (80.3%), GH200 829 (83.8%)"),
    ("gb100", 0.75, "B200 1745 of 2250 TFLOP/s (77.6%), B300 78.6%, GB200 72.9%"),
    ("blackwell ultra", 0.75, "B200 1745 of 2250 TFLOP/s (77.6%), B300 78.6%, GB200 72.9%"),
    ("gfx950", 0.68, "MI355X 1565 of 2300 TFLOP/s (68.0%)"),
    ("cdna4", 0.68, "MI355X 1565 of 2300 TFLOP/s (68.0%)"),
    ("gfx942", 0.55, "MI300X 668-782 of 1300 TFLOP/s (51.4-60.1%, by ROCm version), MI325X 785 (60.4%)"),
    ("cdna3", 0.55, "MI300X 668-782 of 1300 TFLOP/s (51.4-60.1%, by ROCm version), MI325X 785 (60.4%)"),
    ("gfx90a", 0.75, "MI250X, one GCD: 147 of 191.5 TFLOP/s (76.7%)"),
    ("cdna2", 0.75, "MI250X, one GCD: 147 of 191.5 TFLOP/s (76.7%)"),
)
DEFAULT = 0.80
DEFAULT_WHY = "no measurement published for this architecture; the measured NVIDIA parts reach 73-87%"
# an op of the trace counts as showing the achievable share when it holds at least this share of device time
SHOWN_MIN_SHARE = 0.005


def default_fraction(device: dict) -> tuple[float, str]:
    """(fraction of the datasheet compute peak reachable on this device, where the figure comes from)."""
    where = f"{device.get('arch') or ''} {device.get('key') or ''} {device.get('name') or ''}".lower()
    for frag, frac, why in BY_ARCH:
        if frag in where:
            return frac, f"{frac * 100:.0f}%, the default for {device.get('arch') or frag}: {why}"
    return DEFAULT, f"{DEFAULT * 100:.0f}%, the default: {DEFAULT_WHY}"


def shown_by_trace(rows: list[dict], total_us: float) -> dict[str, tuple[float, str]]:
    """Per compute roof (peak_dtype): the largest share of it a compute-bound op of this trace reaches (at
    most 1.0), and which op. Ops measured over their roof, or too small to be steady, do not count."""
    out: dict[str, tuple[float, str]] = {}
    for r in rows:
        pct, key = r.get("roof_pct"), r.get("peak_dtype")
        if (r.get("bound") != "compute" or r.get("over_roof") or pct is None or not key or total_us <= 0
                or r["device_time_us"] < SHOWN_MIN_SHARE * total_us):
            continue
        frac = min(pct / 100.0, 1.0)
        if frac > out.get(key, (0.0, ""))[0]:
            out[key] = (frac, f"{r['id']} ({r['name']}) reaches {pct:.1f}% of it in this trace")
    return out


def fraction(device: dict, peak_dtype: str | None, shown: dict[str, tuple[float, str]]) -> tuple[float, str]:
    """The achievable fraction of a roof: the larger of the architecture's default and what this trace shows."""
    frac, why = default_fraction(device)
    got = shown.get(peak_dtype or "")
    if got and got[0] > frac:
        return got[0], f"{got[0] * 100:.1f}%, the most this device shows: {got[1]} (above the {why})"
    return frac, why
