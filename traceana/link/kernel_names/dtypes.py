"""Element types as kernel names spell them, mapped to the names the rest of traceana uses
(fp64, fp32, tf32, fp16, bf16, fp8, fp6, fp4, int8, uint8, int32, int64, bool).

Three spellings:
  C++ types      in template arguments of demangled names (`c10::BFloat16`, `__nv_bfloat16`,
                 `cutlass::half_t`, `float`, `signed char`), and the identifiers of Itanium-mangled
                 ones (`14__hip_bfloat16`), plus the mangled builtin codes `DF16b` (std::bfloat16_t),
                 `DF16_` (_Float16) and `Dh` (half);
  words          `_`-separated tokens of plain names (`..._bf16`, `..._half`, `mxfp4`, MIOpen's
                 `naive_conv_fwd_nchw_float_double_float`);
  letter codes   the libraries' one-letter type codes: cuBLAS / cuDNN / CUTLASS `s` `d` `h` `i`
                 (sgemm, h884gemm, s16816gemm), Tensile `S D H B I X F8 B8`, cuBLASLt nvjet
                 `h t s d q` (per operand: nvjet_hsh, nvjet_tst).
"""

from __future__ import annotations

import re

from traceana import lazy_re

#: C++ type spellings (last identifier component; namespaces are not part of the match) -> dtype
CXX: dict[str, str] = {
    "double": "fp64",
    "float": "fp32", "float2": "fp32", "float4": "fp32", "tfloat32_t": "fp32", "float32_t": "fp32",
    "Half": "fp16", "half": "fp16", "__half": "fp16", "half_t": "fp16", "_Float16": "fp16", "__fp16": "fp16",
    "half2": "fp16", "__half2": "fp16", "float16_t": "fp16",
    "BFloat16": "bf16", "bfloat16": "bf16", "bfloat16_t": "bf16", "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16",
    "__hip_bfloat16": "bf16", "hip_bfloat16": "bf16", "bhalf_t": "bf16", "__nv_bfloat162": "bf16",
    "Float8_e4m3fn": "fp8", "Float8_e4m3fnuz": "fp8", "Float8_e5m2": "fp8", "Float8_e5m2fnuz": "fp8",
    "Float8_e8m0fnu": "fp8", "__nv_fp8_e4m3": "fp8", "__nv_fp8_e5m2": "fp8", "__hip_fp8_e4m3": "fp8",
    "__hip_fp8_e5m2": "fp8", "__hip_fp8_e4m3_fnuz": "fp8", "__hip_fp8_e5m2_fnuz": "fp8", "float_e4m3_t": "fp8",
    "float_e5m2_t": "fp8", "f8_t": "fp8", "bf8_t": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "Float4_e2m1fn_x2": "fp4", "__nv_fp4_e2m1": "fp4", "float_e2m1_t": "fp4",
    "signed char": "int8", "int8_t": "int8", "uint8_t": "uint8", "unsigned char": "uint8",
    "int": "int32", "unsigned int": "int32", "int32_t": "int32", "uint32_t": "int32",
    "long": "int64", "long long": "int64", "unsigned long": "int64", "int64_t": "int64", "uint64_t": "int64",
    "short": "int16", "bool": "bool",
}
# mangled builtin codes (Itanium): only the unambiguous multi-letter ones
_MANGLED = {"DF16b": "bf16", "DF16_": "fp16", "Dh": "fp16"}
_ALT = sorted(CXX, key=len, reverse=True)
# a type is a whole identifier: not preceded by a letter or "_" (digits may precede: the length prefix
# of a mangled identifier, "14__hip_bfloat16") and not followed by a letter, digit or "_"
_CXX_RX = lazy_re.compile(r"(?<![A-Za-z_])(" + "|".join(re.escape(t) for t in _ALT) + r")(?![A-Za-z0-9_])")
_MANGLED_RX = lazy_re.compile(r"(DF16b|DF16_|Dh)(?=[A-Z])")

FLOAT_ORDER = ("fp4", "fp6", "fp8", "bf16", "fp16", "tf32", "fp32", "fp64")  # narrowest first
INTS = ("int8", "uint8", "int16", "int32", "int64", "bool")

#: plain-name words -> dtype (whole `_`- or `x`-separated tokens only)
WORDS: dict[str, str] = {
    "fp64": "fp64", "f64": "fp64", "double": "fp64",
    "fp32": "fp32", "f32": "fp32", "float": "fp32", "float32": "fp32", "single": "fp32",
    "tf32": "tf32",
    "fp16": "fp16", "f16": "fp16", "half": "fp16", "float16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp8": "fp8", "f8": "fp8", "e4m3": "fp8", "e5m2": "fp8", "fp8e4m3": "fp8", "fp8e5m2": "fp8", "bf8": "fp8",
    "e4m3fn": "fp8", "e4m3fnuz": "fp8", "e5m2fnuz": "fp8", "mxfp8": "fp8",
    "fp6": "fp6", "mxfp6": "fp6",
    "fp4": "fp4", "mxfp4": "fp4", "nvfp4": "fp4", "e2m1": "fp4",
    "int8": "int8", "i8": "int8", "s8": "int8", "u8": "uint8", "uint8": "uint8", "int4": "int4", "i4": "int4",
}
_WORD_SPLIT = lazy_re.compile(r"[_x]")

#: cuBLAS / cuDNN / CUTLASS legacy one-letter precision codes (sgemm, h884gemm, d884gemm, igemm)
BLAS_LETTER = {"s": "fp32", "d": "fp64", "h": "fp16", "i": "int32", "c": "fp32", "z": "fp64"}
#: Tensile / hipBLASLt type codes (DataType, DestDataType, ComputeDataType)
TENSILE = {"S": "fp32", "D": "fp64", "H": "fp16", "B": "bf16", "I": "int32", "I8": "int8", "X": "fp32",
           "F8": "fp8", "B8": "fp8", "F8N": "fp8", "B8N": "fp8", "C": "fp32", "Z": "fp64"}
TENSILE_TOKEN = lazy_re.compile(r"F8N|B8N|F8|B8|I8|[SDHBIXCZ]")
#: cuBLASLt nvjet operand codes (nvjet_hsh: fp16 in, fp32 accumulate, fp16 out; nvjet_tst: bf16)
NVJET = {"h": "fp16", "t": "bf16", "s": "fp32", "d": "fp64", "q": "fp8", "e": "fp8", "o": "fp4", "i": "int8"}


def cxx_types(s: str) -> list[str]:
    """The dtypes of the C++ type names in a demangled name's text, in order of appearance."""
    return [CXX[m.group(1)] for m in _CXX_RX.finditer(s)]


def mangled_types(head: str, words: tuple[str, ...]) -> list[str]:
    """The dtypes of an Itanium-mangled name: its length-prefixed identifiers that are type names
    (`14__hip_bfloat16`), then its builtin codes (DF16b std::bfloat16_t, DF16_ _Float16, Dh half)."""
    return [CXX[w] for w in words if w in CXX] + [_MANGLED[m.group(1)] for m in _MANGLED_RX.finditer(head)]


def word_types(s: str) -> list[str]:
    """The dtypes named by whole tokens of a plain name (`_bf16`, `bf16xbf16xmxfp4`), in order."""
    return [WORDS[w] for w in _WORD_SPLIT.split(s.lower()) if w in WORDS]


def narrowest(types: list[str]) -> str | None:
    """The narrowest floating type among `types` (the data a kernel works on: fp32 beside bf16 is
    its accumulator), else the first integer type, else None."""
    floats = [t for t in types if t in FLOAT_ORDER]
    if floats:
        return min(floats, key=FLOAT_ORDER.index)
    ints = [t for t in types if t in INTS]
    return ints[0] if ints else None


def data_types(types: list[str]) -> tuple[str | None, str | None]:
    """(data dtype, accumulate dtype) from the types a templated kernel names: the data is the
    narrowest float; a wider float beside it (fp32 beside bf16) is the accumulator."""
    a = narrowest(types)
    if a is None or a not in FLOAT_ORDER:
        return a, None
    wider = [t for t in types if t in FLOAT_ORDER and FLOAT_ORDER.index(t) > FLOAT_ORDER.index(a)]
    return a, (min(wider, key=FLOAT_ORDER.index) if wider else None)


def tensile_types(field: str) -> list[str]:
    """Tensile's type field ("BBS", "HHS", "S", "F8HS") as dtypes, in order."""
    return [TENSILE[t] for t in TENSILE_TOKEN.findall(field)]
