"""Helpers shared by the formula families: dtypes of outputs, argument checks, Cost building."""

from __future__ import annotations

import re

from traceana.cost.dtypes import NON_TENSOR, dtype_info
from traceana.cost.shapes import Traffic, parse_float, valid_shape
from traceana.cost.types import Cost, OpCall, Unmodelled

# Bytes per element of each canonical dtype name (the outputs we derive are named canonically).
ITEMSIZE: dict[str, float] = {
    "fp64": 8, "fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp4": 1, "int64": 8, "int32": 4,
    "int16": 2, "int8": 1, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1,
    "complex32": 4, "complex64": 8, "complex128": 16,
}

# c10::ScalarType enum values as `Concrete Inputs` records them (checked against torch 2.13:
# x.to(dtype) under the profiler). 23 = Float8_e5m2, 24 = Float8_e4m3fn, 25/26 = the fnuz variants.
SCALAR_TYPE: dict[int, str] = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "fp16", 6: "fp32", 7: "fp64",
    8: "complex32", 9: "complex64", 10: "complex128", 11: "bool", 12: "int8", 13: "uint8",
    14: "int32", 15: "bf16", 23: "fp8", 24: "fp8", 25: "fp8", 26: "fp8", 27: "uint16",
    28: "uint32", 29: "uint64", 44: "fp8", 45: "fp4",
}

_CATEGORY = {"bool": 0, "uint8": 1, "int8": 1, "int16": 1, "int32": 1, "int64": 1, "uint16": 1,
             "uint32": 1, "uint64": 1, "fp8": 2, "fp4": 2, "fp16": 2, "bf16": 2, "fp32": 2,
             "fp64": 2, "complex32": 3, "complex64": 3, "complex128": 3}
_RANK = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 3, "uint32": 3,
         "int64": 4, "uint64": 4, "fp4": 0, "fp8": 1, "fp16": 2, "bf16": 2, "fp32": 3, "fp64": 4,
         "complex32": 2, "complex64": 3, "complex128": 4}
# The dtype a Python number of each category becomes (torch default dtypes).
_DEFAULT = {0: "bool", 1: "int64", 2: "fp32", 3: "complex64"}
# 0-dim tensors of these types are how the profiler records a Python scalar operand
# ("wrapped numbers"): they promote like a Scalar, not like a 0-dim tensor, and are passed
# to the kernel by value (no DRAM read).
_WRAPPED = frozenset({"double", "long int", "long", "c10::complex<double>"})


def is_python_scalar(t) -> bool:
    """A 0-dim CPU double / int64 operand: a Python number the kernel gets by value (no DRAM read)."""
    return not t.shape and t.type_str in _WRAPPED


def dtype_from_enum(s: str | None) -> str | None:
    """'15' -> 'bf16'; None when absent or unknown."""
    if s is None:
        return None
    try:
        return SCALAR_TYPE.get(int(s))
    except ValueError:
        return None


def _join(a: str, b: str) -> str:
    """Promote two dtypes of the same category (torch.promote_types within a category)."""
    if a == b:
        return a
    if {a, b} == {"fp16", "bf16"}:
        return "fp32"
    if {a, b} == {"uint8", "int8"}:
        return "int16"
    return a if _RANK.get(a, 0) >= _RANK.get(b, 0) else b


def _group_result(dtypes: list[str], cat: int) -> str | None:
    best = None
    for d in dtypes:
        if _CATEGORY.get(d) == cat:
            best = d if best is None else _join(best, d)
    return best


def scalar_category(s: str | None) -> int | None:
    """Category of a recorded Scalar value: '2' int, '0.5' float, 'True' bool; None unknown."""
    if s is None:
        return None
    if s in ("True", "False"):
        return 0
    try:
        int(s)
        return 1
    except ValueError:
        return 2 if parse_float(s) is not None else None


def promote(call: OpCall, positions: range | list[int]) -> str | None:
    """torch result_type over the arguments at positions (tensors, 0-dim tensors, Scalars).

    Priority: dimensioned tensors > 0-dim tensors > Python scalars; a lower tier only matters when
    its category (bool < int < float < complex) is higher. None when no tensor operand exists.
    """
    dim_t, zero_t, wrapped, scal = [], [], [], []
    for i in positions:
        t = call.tensor(i)
        if t is not None:
            if t.shape:
                dim_t.append(t.dtype)
            elif t.type_str in _WRAPPED:
                wrapped.append(t.dtype)
            else:
                zero_t.append(t.dtype)
        elif i < len(call.types) and call.types[i] == "Scalar":
            c = scalar_category(call.scalar(i))
            if c is not None:
                scal.append(c)
    if not dim_t and not zero_t:
        zero_t = wrapped  # only Python-number-like operands: they are the tensors here
    else:
        scal += [_CATEGORY.get(d, 2) for d in wrapped]
    if not dim_t and not zero_t:
        return None
    cat = max([_CATEGORY.get(d, 2) for d in dim_t + zero_t] + scal)
    for group in (dim_t, zero_t):
        r = _group_result(group, cat)
        if r is not None:
            return r
    return _DEFAULT[cat]


def to_float(dtype: str) -> str:
    """Integer/bool inputs of a floating op (div, exp, ...) give the default float dtype."""
    return dtype if _CATEGORY.get(dtype, 2) >= 2 else "fp32"


def acc_dtype(dtype: str) -> str:
    """Accumulation dtype of a half-precision op (saved statistics are kept in it)."""
    return "fp32" if dtype in ("fp16", "bf16", "fp8") else dtype


_OPAQUE = re.compile(r"OpaqueType<([0-9]{1,4})u?>")  # bytes per element; a longer run is no size
_KERNEL_DTYPES = (("c10::BFloat16", "bf16"), ("c10::Half", "fp16"), ("__nv_bfloat16", "bf16"),
                  ("<float", "fp32"), ("<double", "fp64"), ("<long", "int64"), ("<int", "int32"))
_BY_SIZE = {1: "uint8", 2: "fp16", 4: "fp32", 8: "fp64"}


def itemsize_from_kernels(call: OpCall) -> tuple[float, str, str] | None:
    """(element size, canonical dtype guess, what was seen) from the op's kernel names, e.g.
    'CatArrayBatchedCopy<OpaqueType<2u>, ...>' -> 2 bytes."""
    for k in call.kernel_names:
        m = _OPAQUE.search(k)
        if m:
            n = int(m.group(1))
            return float(n), _BY_SIZE.get(n, "fp32"), f"{n}-byte elements"
        for token, name in _KERNEL_DTYPES:
            if token in k:
                return ITEMSIZE[name], name, name
    return None


def type_at(call: OpCall, i: int) -> str:
    """The recorded type string of argument i ('' when absent)."""
    return call.types[i] if 0 <= i < len(call.types) else ""


def shape_problem(call: OpCall) -> str | None:
    """Why the recorded shapes are unusable (negative or non-int dims), else None."""
    for i, d in enumerate(call.dims):
        if d == ():
            continue
        if isinstance(d, tuple) and d and all(isinstance(x, tuple) for x in d):
            if not all(valid_shape(x) for x in d):
                return f"argument {i} holds a tensor with an invalid shape {d}"
        elif not valid_shape(d):
            return f"argument {i} has invalid dims {d}"
    return None


def need(call: OpCall, *positions: int, max_args: int | None = None) -> tuple[list, Unmodelled | None]:
    """The tensors at positions, or an Unmodelled naming the first missing one.

    max_args: the most arguments any overload of the op has (out= included); more means the
    record is corrupt (old profilers sometimes appended earlier ops' shapes)."""
    if max_args is not None and len(call.dims) > max_args:
        return [None] * len(positions), Unmodelled(
            f"{call.name}: {len(call.dims)} recorded arguments, at most {max_args} expected", cause="bad_shapes")
    bad = shape_problem(call)
    if bad:
        return [None] * len(positions), Unmodelled(bad, cause="bad_shapes")
    out = []
    for p in positions:
        t = call.tensor(p)
        if t is None:
            got = call.types[p] if p < len(call.types) else "nothing"
            why = f"{call.name}: argument {p} is not a tensor of known dtype (got {got!r})"
            # a dtype traceana cannot size is its own gap (unmodelled); no tensor where the op takes one is
            # a record that does not fit the op
            known = got in ("nothing", "") or got in NON_TENSOR or dtype_info(got) is not None
            return [None] * len(positions), Unmodelled(why, cause="bad_shapes" if known else None)
        out.append(t)
    return out, None


def make(
    flops: float,
    traffic: Traffic,
    family: str,
    dtype: str,
    flops_expr: str,
    *,
    estimated: bool = False,
    notes: tuple[str, ...] | list[str] = (),
    detail: tuple = (),
) -> Cost:
    return Cost(
        flops=flops,
        bytes=traffic.total,
        family=family,
        dtype=dtype,
        matrix=family in ("gemm", "conv", "attention"),
        flops_expr=flops_expr,
        bytes_expr=traffic.expr(),
        estimated=estimated,
        notes=tuple(notes),
        detail=detail,
    )
