"""Profiler dtype strings -> canonical dtype names and element sizes."""

from __future__ import annotations

# Canonical name and bytes per element for each `Input type` string torch.profiler writes.
_DTYPES: dict[str, tuple[str, float]] = {
    "float": ("fp32", 4),
    "double": ("fp64", 8),
    "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2),
    "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1),
    "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1),
    "c10::Float8_e8m0fnu": ("fp8", 1),
    "c10::Float4_e2m1fn_x2": ("fp4", 1),
    "long int": ("int64", 8),
    "long": ("int64", 8),
    "int": ("int32", 4),
    "short int": ("int16", 2),
    "short": ("int16", 2),
    "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1),
    "bool": ("bool", 1),
    "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
    "c10::complex<c10::Half>": ("complex32", 4),
    "unsigned short": ("uint16", 2),
    "unsigned int": ("uint32", 4),
    "unsigned long": ("uint64", 8),
    "c10::qint8": ("int8", 1),
    "c10::quint8": ("uint8", 1),
    "c10::qint32": ("int32", 4),
}

# Type strings that mark a non-tensor argument.
NON_TENSOR = frozenset({"", "Scalar", "ScalarList", "GenericList", "Int", "Bool", "Device", "None", "String"})


def dtype_info(type_str: str) -> tuple[str, float] | None:
    """(canonical name, bytes per element) for a profiler type string, or None if unknown."""
    return _DTYPES.get(type_str)


def canonical(type_str: str) -> str | None:
    info = _DTYPES.get(type_str)
    return info[0] if info else None


def itemsize(type_str: str) -> float | None:
    info = _DTYPES.get(type_str)
    return info[1] if info else None


def is_float(canon: str | None) -> bool:
    return canon in ("fp64", "fp32", "fp16", "bf16", "fp8", "fp4")
