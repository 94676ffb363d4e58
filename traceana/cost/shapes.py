"""Shape arithmetic, concrete-argument parsing and the human-readable arithmetic strings.

Pure Python, no torch. Every function returns None instead of raising on input it cannot use,
so formulas can turn that into an Unmodelled.
"""

from __future__ import annotations

from math import prod

Shape = tuple[int, ...]


# ---------------------------------------------------------------- shapes


def valid_shape(shape: object) -> bool:
    """A tuple of non-negative ints."""
    return isinstance(shape, tuple) and all(isinstance(d, int) and d >= 0 for d in shape)


def broadcast(*shapes: Shape) -> Shape | None:
    """NumPy/PyTorch broadcast of the shapes, or None when they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        off = rank - len(s)
        for i, d in enumerate(s):
            cur = out[off + i]
            if cur == 1:
                out[off + i] = d
            elif d != 1 and d != cur:
                return None
    return tuple(out)


def norm_dim(dim: int, rank: int) -> int | None:
    """Wrap a possibly negative dim; None when out of range (a 0-dim tensor accepts 0 and -1)."""
    r = max(rank, 1)
    if not -r <= dim < r:
        return None
    return dim % r


def reduce_shape(shape: Shape, dims: list[int] | None, keepdim: bool) -> Shape | None:
    """Output shape of a reduction over dims (None or [] = every dim)."""
    rank = len(shape)
    if not dims:
        return (1,) * rank if keepdim else ()
    axes = set()
    for d in dims:
        n = norm_dim(d, rank)
        if n is None:
            return None
        axes.add(n)
    if rank == 0:
        return ()
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def conv_out_size(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def conv_transpose_out_size(size: int, k: int, stride: int, pad: int, dil: int, out_pad: int) -> int:
    return (size - 1) * stride - 2 * pad + dil * (k - 1) + out_pad + 1


def expand_param(values: list[int] | None, n: int, default: int) -> list[int] | None:
    """A conv/pool parameter list stretched to n spatial dims ([2] -> [2, 2]); None if it does not fit."""
    if values is None or len(values) == 0:
        return [default] * n
    if len(values) == 1:
        return values * n
    if len(values) != n:
        return None
    return list(values)


# ---------------------------------------------------------------- concrete inputs


def parse_ints(s: str | None) -> list[int] | None:
    """'[1, 1]' -> [1, 1]; '3' -> [3]; '[]' -> []; None / '' / non-int -> None."""
    if s is None:
        return None
    s = s.strip()
    if s.startswith("[") and s.endswith("]"):
        body = s[1:-1].strip()
        if not body:
            return []
        parts = body.split(",")
    else:
        parts = [s]
    try:
        return [int(p) for p in parts]
    except ValueError:
        return None


def parse_int(s: str | None) -> int | None:
    vals = parse_ints(s)
    if vals is None or len(vals) != 1 or (s is not None and s.strip().startswith("[")):
        return None
    return vals[0]


def parse_bool(s: str | None) -> bool | None:
    if s is None:
        return None
    s = s.strip()
    if s in ("True", "true", "1"):
        return True
    if s in ("False", "false", "0"):
        return False
    return None


def parse_bools(s: str | None) -> list[bool] | None:
    """'[True, True, False]' -> [True, True, False]."""
    if s is None:
        return None
    s = s.strip()
    if not (s.startswith("[") and s.endswith("]")):
        return None
    out = []
    for p in s[1:-1].split(","):
        b = parse_bool(p)
        if b is None:
            return None
        out.append(b)
    return out


def parse_float(s: str | None) -> float | None:
    if s is None:
        return None
    try:
        return float(s)
    except ValueError:
        return None


# ---------------------------------------------------------------- formatting


def fmt_int(x: float) -> str:
    """536870912 -> '536,870,912' (non-integral values keep two decimals)."""
    if x == int(x):
        return f"{int(x):,}"
    return f"{x:,.2f}"


def fmt_flops(x: float) -> str:
    """Exact with separators below 1e9, scientific above: '67,108,864', '1.10e+12'."""
    if abs(x) < 1e9:
        return fmt_int(x)
    return f"{x:.2e}"


def fmt_num(x: float) -> str:
    """A factor in an arithmetic string: 4 -> '4', 0.5 -> '0.5'."""
    return f"{x:g}" if x != int(x) else str(int(x))


def dims_expr(shape: Shape) -> str:
    """(8192, 8192) -> '8192*8192'; () -> '1'."""
    return "*".join(str(d) for d in shape) if shape else "1"


def product_expr(factors: list[tuple[str, float]], total: float) -> str:
    """[('2', 2), ('M', 8), ...] -> '2*M*... = 2*8*... = <total>'."""
    names = "*".join(n for n, _ in factors)
    vals = "*".join(fmt_num(v) for _, v in factors)
    return f"{names} = {vals} = {fmt_flops(total)}"


def per_element_expr(numel_shape: Shape, per: float, total: float, what: str = "elements") -> str:
    """'8192*8192 elements x 1 FLOP = 67,108,864'."""
    unit = "FLOP" if per == 1 else "FLOPs"
    return f"{dims_expr(numel_shape)} {what} x {fmt_num(per)} {unit} = {fmt_flops(total)}"


class Traffic:
    """Accumulates DRAM read/write terms and renders them: 'read A 8*4 B + write C 8*4 B = 64 B'."""

    __slots__ = ("terms", "total")

    def __init__(self) -> None:
        self.terms: list[str] = []
        self.total: float = 0

    def add(self, verb: str, label: str, shape: Shape, itemsize: float) -> Traffic:
        n = prod(shape) * itemsize
        self.total += n
        body = f"{dims_expr(shape)}*{fmt_num(itemsize)}" if shape else fmt_num(itemsize)
        self.terms.append(f"{verb} {label} {body} B".replace("  ", " "))
        return self

    def read(self, label: str, t) -> Traffic:
        """Read a TensorArg once at its stored size (stride-0 dims count once)."""
        stored = t.stored_shape
        tag = label if stored == t.shape else f"{label}(stride-0 dims once)"
        return self.add("read", tag, stored, t.itemsize)

    def write(self, label: str, shape: Shape, itemsize: float) -> Traffic:
        return self.add("write", label, shape, itemsize)

    def raw(self, verb: str, label: str, nbytes: float, detail: str = "") -> Traffic:
        """A pre-computed amount (e.g. a whole TensorList)."""
        self.total += nbytes
        extra = f" ({detail})" if detail else ""
        self.terms.append(f"{verb} {label} {fmt_int(nbytes)} B{extra}")
        return self

    def expr(self) -> str:
        if not self.terms:
            return "no DRAM traffic = 0 B"
        return " + ".join(self.terms) + f" = {fmt_int(self.total)} B"
