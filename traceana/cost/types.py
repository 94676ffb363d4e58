"""The values that cross the cost stage: an op call's recorded arguments in, a Cost out."""

from __future__ import annotations

from math import prod

import msgspec

from traceana.cost.dtypes import NON_TENSOR, dtype_info


class TensorArg(msgspec.Struct, frozen=True):
    """One tensor argument as recorded: shape, dtype and (when recorded) strides."""

    shape: tuple[int, ...]
    type_str: str
    strides: tuple[int, ...] | None = None

    @property
    def dtype(self) -> str:
        info = dtype_info(self.type_str)
        return info[0] if info else "unknown"

    @property
    def itemsize(self) -> float:
        info = dtype_info(self.type_str)
        return info[1] if info else 0.0

    @property
    def numel(self) -> int:
        """Logical element count (what the op iterates over)."""
        return prod(self.shape)

    @property
    def stored_numel(self) -> int:
        """Elements that really exist in memory: stride-0 (broadcast) dims count once."""
        if self.strides is None or len(self.strides) != len(self.shape):
            return self.numel
        return prod(d for d, s in zip(self.shape, self.strides) if s != 0)

    @property
    def stored_shape(self) -> tuple[int, ...]:
        """The shape without its stride-0 (broadcast) dims: what really exists in memory."""
        if self.strides is None or len(self.strides) != len(self.shape):
            return self.shape
        return tuple(d for d, s in zip(self.shape, self.strides) if s != 0)

    @property
    def nbytes(self) -> float:
        """Bytes read when every stored element is touched once."""
        return self.stored_numel * self.itemsize


class OpCall(msgspec.Struct, frozen=True):
    """The recorded arguments of one op signature (all fields hashable)."""

    name: str
    dims: tuple = ()
    types: tuple[str, ...] = ()
    strides: tuple | None = None
    concrete: tuple[str, ...] | None = None
    kernel_names: tuple[str, ...] = ()
    # other recorded facts as sorted (key, value) pairs, only for the ops that have them:
    # a collective's args (collective, in_nelems, out_nelems, group_size, dtype, world_size),
    # torch.compile's kernel_flop / kernel_num_gb, values recovered by cost.recover
    extra: tuple = ()

    def get(self, key: str, default=None):
        """The value of `key` in extra, or default."""
        for k, v in self.extra:
            if k == key:
                return v
        return default

    def tensor(self, i: int) -> TensorArg | None:
        """Argument i as a tensor, or None when it is not a (single) tensor."""
        if i >= len(self.dims) or i >= len(self.types):
            return None
        t = self.types[i]
        d = self.dims[i]
        if t in NON_TENSOR or t == "TensorList" or dtype_info(t) is None:
            return None
        if not isinstance(d, tuple) or any(not isinstance(x, int) for x in d):
            return None
        st = None
        if self.strides is not None and i < len(self.strides):
            s = self.strides[i]
            if isinstance(s, tuple) and all(isinstance(x, int) for x in s) and len(s) == len(d):
                st = s
        return TensorArg(d, t, st)

    def tensors(self) -> list[TensorArg]:
        """All single-tensor arguments in order."""
        out = []
        for i in range(len(self.dims)):
            t = self.tensor(i)
            if t is not None:
                out.append(t)
        return out

    def tensor_list(self, i: int) -> list[tuple[int, ...]] | None:
        """Argument i as a list of shapes (TensorList), or None."""
        if i >= len(self.dims):
            return None
        d = self.dims[i]
        if isinstance(d, tuple) and d and all(isinstance(x, tuple) for x in d):
            return list(d)
        if self.types[i:i + 1] == ("TensorList",) and d == ():
            return []
        return None

    def scalar(self, i: int) -> str | None:
        """Concrete value of argument i as recorded (a string), or None if not recorded."""
        if self.concrete is None or i >= len(self.concrete):
            return None
        v = self.concrete[i]
        return v if v != "" else None

    def number(self, i: int) -> float | None:
        v = self.scalar(i)
        if v is None:
            return None
        try:
            return float(v)
        except ValueError:
            if v in ("True", "False"):
                return float(v == "True")
            return None


class Cost(msgspec.Struct, frozen=True):
    """FLOPs and minimum DRAM bytes of one call, with the arithmetic shown to the user."""

    flops: float
    bytes: float
    family: str  # gemm | conv | attention | moe | pointwise | quant | reduction | norm | memory | index | comm | compiled | other
    dtype: str  # canonical dtype whose peak is the compute roof (fp32, bf16, fp16, fp8, ...)
    matrix: bool  # the work is matrix multiply (tensor cores / matrix units apply)
    flops_expr: str  # e.g. "2*M*N*K = 2*8192*8192*8192"
    bytes_expr: str  # e.g. "(M*K + K*N + M*N)*4 B"
    estimated: bool = False
    notes: tuple[str, ...] = ()
    # family-specific facts as (key, value) pairs, e.g. a collective's (("collective",
    # "all_reduce"), ("group_size", 8), ("msg_bytes", S), ("bus_factor", 1.75))
    detail: tuple = ()


class Unmodelled(msgspec.Struct, frozen=True):
    """No cost could be computed; reason says why (shown in the report).

    cause: set when a formula exists but the trace lacks one of its inputs (a key of
    traceana.link.attribute.CAUSES, e.g. "lengths_not_recorded"): the op is then opaque for that cause,
    with its advice on what to record, instead of unmodelled (no formula)."""

    reason: str
    cause: str | None = None
