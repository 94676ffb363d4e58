"""The one place numbers, names and shapes become text: every renderer (html, markdown, svg,
diff, cross-rank, the terminal) and every sentence the diagnosis writes formats through here,
so one value reads the same everywhere.

Pure functions, no state. Inputs may be untrusted (a hand-edited saved analysis): anything
that is not a finite number formats as MISSING.
"""

from __future__ import annotations

import math
from typing import Any

#: What a missing or non-numeric value shows as.
MISSING = "—"


def num(value: Any) -> float | None:
    """A finite number, or None (null, NaN, inf, booleans and strings are not numbers)."""
    kind = type(value)  # the common cases first: every cell of every table passes through here
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int:
        try:
            return float(value)  # (finite whenever it does not overflow)
        except OverflowError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an int beyond float's range (a hand-edited saved analysis)
        return None
    return value if math.isfinite(value) else None


def text(value: Any, limit: int | None = None) -> str:
    """A display string for an untrusted value; "" for null; cut to `limit` characters."""
    if value is None:
        return ""
    out = value if isinstance(value, str) else str(value)
    if limit is not None and len(out) > limit:
        out = out[: max(limit - 1, 0)] + "…"
    return out


# ---------------------------------------------------------------- times


def us(t: Any) -> str:
    """A duration given in microseconds: '0.00725 µs' (three significant digits below 0.1 µs),
    '8.30 µs', '504.3 µs', '1.059 ms', '12.34 ms', '230.21 ms', '2.30 s'."""
    v = num(t)
    if v is None:
        return MISSING
    a = abs(v)
    if a < 1000:
        if a < 0.1 and a > 0:
            return f"{v:.3g} µs"
        return f"{v:.2f} µs" if a < 10 else f"{v:,.1f} µs"
    if a < 1_000_000:
        ms = v / 1000
        return f"{ms:.3f} ms" if a < 10_000 else f"{ms:,.2f} ms"
    return f"{v / 1_000_000:,.2f} s"


def ms(t: Any) -> str:
    """A duration given in microseconds, always in milliseconds (savings): '1.059 ms'."""
    v = num(t)
    if v is None:
        return MISSING
    m = v / 1000
    return f"{m:,.3f} ms" if abs(m) < 10 else f"{m:,.1f} ms"


def signed_us(t: Any) -> str:
    """A change of duration: '+1.234 ms', '−56.0 µs', '0'."""
    v = num(t)
    if v is None:
        return MISSING
    if v == 0:
        return "0"
    return ("+" if v > 0 else "−") + us(abs(v))


def signed_pct(p: Any) -> str:
    """A relative change in percent: '+12.3%', '−4.0%', '0.0%'."""
    v = num(p)
    if v is None:
        return MISSING
    if round(abs(v), 1) == 0:
        return "0.0%"
    return ("+" if v > 0 else "−") + f"{abs(v):.1f}%"


def speed(base_us: Any, head_us: Any) -> str:
    """How a duration changed, as a speed: '1.35× faster', '1.20× slower', 'same'; "" when either
    side is unknown or zero (a new or vanished op has no speed ratio)."""
    b, h = num(base_us), num(head_us)
    if b is None or h is None or b <= 0 or h <= 0:
        return ""
    ratio = b / h if b >= h else h / b
    if ratio < 1.005:
        return "same"
    word = "faster" if b > h else "slower"
    return f"{ratio:.2f}× {word}" if ratio < 10 else f"{ratio:,.1f}× {word}"


# ---------------------------------------------------------------- sizes, counts, rates


def nbytes(b: Any) -> str:
    """Bytes with the exact count and a binary unit: '536,870,912 B (512 MiB)'."""
    v = num(b)
    if v is None:
        return MISSING
    exact = f"{v:,.0f} B"
    return exact if abs(v) < 1024 else f"{exact} ({bytes_iec(v)})"


def bytes_iec(b: Any) -> str:
    """Binary units, as tensor sizes are usually thought of: '512 MiB', '1.50 GiB', '640 B'."""
    v = num(b)
    if v is None:
        return MISSING
    a, unit = abs(v), "B"
    for u in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if a < 1024:
            break
        a /= 1024
        v /= 1024
        unit = u
    if unit == "B":
        return f"{v:,.0f} B"
    if v == int(v):
        return f"{int(v)} {unit}"
    body = f"{v:.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}"
    return f"{body} {unit}"


def sig(value: Any) -> str:
    """About three significant digits, thousands separators, no exponent above 1."""
    v = num(value)
    if v is None:
        return MISSING
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.001:
        return f"{v:.3g}"
    return f"{v:.2e}"


def si(value: Any, unit: str = "") -> str:
    """Decimal SI prefixes (k, M, G, T, P, E): '67.1 M', '1.10 T', '0'."""
    v = num(value)
    if v is None:
        return MISSING
    a, prefix = abs(v), ""
    for p in ("k", "M", "G", "T", "P", "E"):
        if a < 1000:
            break
        a /= 1000
        v /= 1000
        prefix = p
    if a >= 100:
        body = f"{v:.0f}"
    elif a >= 10:
        body = f"{v:.1f}"
    else:
        body = f"{v:.2f}" if a >= 1 else "0" if v == 0 else f"{v:.3g}"
    return f"{body} {prefix}{unit}".rstrip()


def integer(value: Any) -> str:
    """An integer with thousands separators: '1,234'."""
    v = num(value)
    return MISSING if v is None else f"{round(v):,}"


def count(n: Any) -> str:
    """A FLOP or byte count: exact below 1e10 ('67,108,864'), else three digits ('1.10e+12')."""
    v = num(n)
    if v is None:
        return MISSING
    return f"{v:,.0f}" if abs(v) < 1e10 else f"{v:.3g}"


def plural(n: Any, word: str, many: str | None = None) -> str:
    """A count and its noun, agreeing: '1 call', '2 calls', '1,024 kernels', '1 op signature'.
    `many` is the plural when it is not word + 's' ('1 copy', '3 copies')."""
    v = num(n)
    if v is None:
        return f"{MISSING} {many or word + 's'}"
    return f"{round(v):,} {word if round(v) == 1 else (many or word + 's')}"


def flops(n: Any) -> str:
    """A FLOP count with its unit, once: '67,108,864 FLOPs', '1 FLOP', '0 FLOPs'."""
    v = num(n)
    if v is None:
        return MISSING
    return f"{count(v)} FLOP" if v == 1 else f"{count(v)} FLOPs"


def pct(x: Any) -> str:
    """A percentage already scaled to 0..100: '59.0%'."""
    v = num(x)
    return MISSING if v is None else f"{v:.1f}%"


def rate_tflops(x: Any) -> str:
    """A compute rate: '8.10 TFLOP/s', '989 TFLOP/s', '312 GFLOP/s' (below 1 TFLOP/s)."""
    v = num(x)
    if v is None:
        return MISSING
    if abs(v) >= 1 or v == 0:
        return f"{sig(v)} TFLOP/s"
    return f"{sig(v * 1000)} GFLOP/s"


def rate_gbps(x: Any) -> str:
    """A bandwidth: '3,350 GB/s', '76.8 GB/s'."""
    v = num(x)
    return MISSING if v is None else f"{sig(v)} GB/s"


# ---------------------------------------------------------------- shapes and dtypes


def dims(d: Any, limit: int | None = 200, collapse: bool = False) -> str:
    """Recorded input dims, one tensor each, as `8192×8192, 8192` (a 0-d tensor or a
    non-tensor argument is `()`); nested lists (TensorList arguments) are bracketed.
    `collapse`: a run of three or more `()` is written once with its count, `() ×11`."""

    def one(x: Any, depth: int) -> str:
        if isinstance(x, (list, tuple)):
            if not x:
                return "()"
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x):
                return "×".join(text(v) for v in x)
            if depth > 3:
                return "[…]"
            return "[" + ", ".join(one(v, depth + 1) for v in x) + "]"
        return text(x)

    if not isinstance(d, (list, tuple)):
        return ""
    parts = [one(x, 1) for x in d]
    if collapse:
        runs: list[str] = []
        i = 0
        while i < len(parts):
            j = i
            while j < len(parts) and parts[j] == "()":
                j += 1
            if j - i >= 3:
                runs.append(f"()\u00a0×{j - i}")
                i = j
            else:
                runs.append(parts[i])
                i += 1
        parts = runs
    return text(", ".join(parts), limit)


#: Profiler dtype strings (C++ type names) as people write them.
DTYPE_NAMES: dict[str, str] = {
    "float": "fp32", "double": "fp64", "c10::Half": "fp16", "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8 e4m3", "c10::Float8_e5m2": "fp8 e5m2", "c10::Float8_e4m3fnuz": "fp8 e4m3 fnuz",
    "c10::Float8_e5m2fnuz": "fp8 e5m2 fnuz", "c10::Float8_e8m0fnu": "fp8 e8m0", "c10::Float4_e2m1fn_x2": "fp4 e2m1",
    "long int": "int64", "long": "int64", "int": "int32", "short int": "int16", "short": "int16",
    "signed char": "int8", "unsigned char": "uint8", "bool": "bool", "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128", "c10::complex<c10::Half>": "complex32", "unsigned short": "uint16",
    "unsigned int": "uint32", "unsigned long": "uint64", "c10::qint8": "qint8", "c10::quint8": "quint8",
    "c10::qint32": "qint32",
}
#: Type strings of arguments that are not tensors (left out of a dtype list).
NON_TENSOR_TYPES = frozenset({"", "Scalar", "ScalarList", "GenericList", "Int", "Bool", "Device", "None",
                              "String", "TensorList"})


def dtype(t: Any) -> str:
    """One dtype as people write it: 'c10::BFloat16' -> 'bf16', 'float' -> 'fp32'; a name that
    is already short or unknown stays as it is (without a 'c10::' prefix)."""
    s = text(t, 60).strip()
    if s in DTYPE_NAMES:
        return DTYPE_NAMES[s]
    return s[5:] if s.startswith("c10::") else s


def dtypes(types: Any, limit: int | None = 120) -> str:
    """The distinct tensor dtypes of an op's inputs, in order: 'bf16', 'fp32, int64'."""
    if not isinstance(types, (list, tuple)):
        return ""
    out = dict.fromkeys(dtype(t) for t in types if text(t).strip() not in NON_TENSOR_TYPES)
    return text(", ".join(x for x in out if x), limit)


#: Device-table peak columns, named for a reader: 'bf16_tc' -> 'bf16 tensor'.
PEAK_NAMES: dict[str, str] = {
    "fp64": "fp64 vector", "fp64_tc": "fp64 tensor", "fp32": "fp32 vector", "tf32_tc": "tf32 tensor",
    "bf16_tc": "bf16 tensor", "fp16_tc": "fp16 tensor", "fp8_tc": "fp8 tensor", "fp6_tc": "fp6 tensor",
    "fp4_tc": "fp4 tensor", "int8_tc": "int8 tensor", "fp16": "fp16 vector", "bf16": "bf16 vector",
}


def peak_name(key: Any) -> str:
    """A compute roof's name: 'bf16 tensor', 'fp32 vector' (CUDA cores / SIMD units)."""
    k = text(key, 40)
    return PEAK_NAMES.get(k, k.replace("_tc", " tensor").replace("_", " "))


# ---------------------------------------------------------------- kernel names

def kernel_name(name: Any, limit: int = 80) -> str:
    """The readable core of a C++ kernel name (cxx_names.kernel_name)."""
    from traceana.cxx_names import kernel_name as readable

    return readable(name, limit)


def kernel_names(names: list[Any], limit: int = 80) -> list[str]:
    """kernel_name of each name, names that would read the same told apart (cxx_names.kernel_names)."""
    from traceana.cxx_names import kernel_names as told_apart

    return told_apart(names, limit)


def op_label(name: Any, input_dims: Any = None, dtype_: Any = None) -> str:
    """An op signature in one line: 'aten::mm (8192×8192, 8192×8192; bf16)', kernel names
    shortened; the parenthesis is left out when neither shapes nor dtype are known."""
    inner = "; ".join(x for x in (dims(input_dims), text(dtype_, 40)) if x)
    head = kernel_name(name) or "(unnamed op)"
    return f"{head} ({inner})" if inner else head
