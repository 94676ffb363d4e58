"""Resampling and selection: upsample / interpolate (nearest, linear, bilinear, bicubic, trilinear,
forward and backward), sort / argsort / topk, and the fused QKV bias-add of torch's native MHA.

Upsample. The output's spatial size comes from the recorded output_size (a concrete int list) or,
for the `.vec` overloads, from input size x scale_factors (floor, as torch computes it). Each
output element is a weighted sum of P source points: nearest 1 (an index copy, 0 FLOPs), linear
2, bilinear 4, bicubic 16, trilinear 8; FLOPs = 2*P per output element (a multiply-add per point;
the weights themselves are per row/column and not counted). Bytes: the input read once (a
downsampling nearest reads only the points it keeps: min(input, output) elements) and the output
written once. Backward: grad_output read, grad_input written once (zeroed first: counted as a
second write), 2*P FLOPs per grad_output element (the scatter-add).

Sort and top-k: each row along `dim` is one problem of length n. FLOPs count comparisons:
n*ceil(log2 n) per row for a sort (a comparison sort's bound; a radix sort does a few passes of
digit work instead), n per row for top-k (a selection). Bytes: input read once, values and int64
indices written once (sort: n each; top-k: k each); a radix sort of long rows makes several passes
through memory, so the bytes are a lower bound (said in a note).
"""

from __future__ import annotations

from math import ceil, floor, log2, prod

from traceana.cost.families._common import make, need
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, fmt_flops, fmt_int, norm_dim, parse_bool, parse_float, parse_int, parse_ints
from traceana.cost.types import Cost, OpCall, Unmodelled

# mode -> (spatial dims, source points per output element)
_MODES = {
    "nearest1d": (1, 1), "nearest2d": (2, 1), "nearest3d": (3, 1),
    "nearest_exact1d": (1, 1), "nearest_exact2d": (2, 1), "nearest_exact3d": (3, 1),
    "linear1d": (1, 2), "bilinear2d": (2, 4), "bicubic2d": (2, 16), "trilinear3d": (3, 8),
    "bilinear2d_aa": (2, 4), "bicubic2d_aa": (2, 16),
}
_LINEAR = ("linear1d", "bilinear2d", "bicubic2d", "trilinear3d", "bilinear2d_aa", "bicubic2d_aa")


def _mode(name: str) -> tuple[str, bool]:
    base = name.split("::")[-1].lstrip("_").removeprefix("upsample_")
    back = base.endswith("_backward")
    return base.removesuffix("_backward"), back


def _scales(s: str | None) -> list[float] | None:
    if s is None or not s.strip().startswith("["):
        return None
    try:
        return [float(x) for x in s.strip()[1:-1].split(",") if x.strip()]
    except ValueError:
        return None


def _out_size(call: OpCall, spatial_in: tuple[int, ...], nd: int, linear: bool) -> tuple[list[int], str] | None:
    """Spatial output size and where it came from: output_size (pos 1), else scale_factors (vec)."""
    size = parse_ints(call.scalar(1))
    if size and len(size) == nd:
        return size, "output_size"
    pos = 3 if linear else 2  # vec: (input, output_size?, [align_corners,] scale_factors?)
    sc = _scales(call.scalar(pos))
    if sc and len(sc) == nd:
        return [floor(d * f) for d, f in zip(spatial_in, sc)], f"input x scale_factors {sc}"
    # non-vec forms record scales_h / scales_w as separate optional floats
    first = 3 if linear else 2
    fs = [parse_float(call.scalar(first + i)) for i in range(nd)]
    if all(f is not None and f > 0 for f in fs):
        return [floor(d * f) for d, f in zip(spatial_in, fs)], "input x scales"
    return None


_PRIVATE = ("nearest_exact1d", "nearest_exact2d", "nearest_exact3d", "bilinear2d_aa", "bicubic2d_aa")
_NAMES = tuple(f"_upsample_{m}" if m in _PRIVATE else f"upsample_{m}" for m in _MODES)


@formula(*_NAMES)
def upsample(call: OpCall) -> Cost | Unmodelled:
    mode, _ = _mode(call.name)
    nd, points = _MODES[mode]
    (x,), err = need(call, 0)
    if err:
        return err
    if len(x.shape) != nd + 2:
        return Unmodelled(f"{call.name}: input {x.shape} is not [N, C, {nd} spatial dims]")
    linear = mode in _LINEAR
    got = _out_size(call, x.shape[2:], nd, linear)
    if got is None:
        return Unmodelled(f"{call.name}: neither output_size nor scale factors recorded", cause="scalars_not_recorded")
    size, how = got
    if any(v < 0 for v in size):
        return Unmodelled(f"{call.name}: negative output size {size}", cause="bad_shapes")
    out = x.shape[:2] + tuple(size)
    n_out = prod(out)
    flops = 0 if points == 1 else 2 * points * n_out
    tr = Traffic()
    if points == 1 and n_out < x.numel:
        tr.add("read", "input points kept", out, x.itemsize)
    else:
        tr.read("input", x)
    tr.write("out", out, x.itemsize)
    expr = ("nearest: an index copy = 0" if points == 1 else
            f"2*P*out = 2*{points}*{fmt_int(n_out)} = {fmt_flops(flops)}")
    return make(flops, tr, "resample", x.dtype, expr, notes=(f"output {out} from {how}",))


@formula(*[f"{n}_backward" for n in _NAMES])
def upsample_backward(call: OpCall) -> Cost | Unmodelled:
    """(grad_output, output_size, input_size, [align_corners,] scales...)."""
    mode, _ = _mode(call.name)
    nd, points = _MODES[mode]
    (g,), err = need(call, 0)
    if err:
        return err
    in_size = parse_ints(call.scalar(2))
    if not in_size:
        return Unmodelled(f"{call.name}: input_size not recorded", cause="scalars_not_recorded")
    if len(in_size) != nd + 2 or len(g.shape) != nd + 2 or min(in_size) < 0:
        return Unmodelled(f"{call.name}: input_size {in_size} / grad_output {g.shape} are not {nd + 2}-D",
                          cause="bad_shapes")
    n_in = prod(in_size)
    flops = 2 * points * g.numel
    tr = Traffic().read("grad_output", g)
    tr.add("write", "grad_input (zeroed)", tuple(in_size), g.itemsize)
    tr.add("write", "grad_input", tuple(in_size), g.itemsize)
    expr = f"2*P*grad_out = 2*{points}*{fmt_int(g.numel)} = {fmt_flops(flops)}"
    return make(flops, tr, "resample", g.dtype, expr,
                notes=(f"scatter-add of {fmt_int(g.numel)} gradients into {fmt_int(n_in)} inputs",))


# ---------------------------------------------------------------- sort / top-k

def _rows(shape: tuple[int, ...], dim: int | None) -> tuple[int, int] | None:
    if not shape:
        return 1, 1
    d = norm_dim(dim if dim is not None else -1, len(shape))
    if d is None:
        return None
    n = shape[d]
    return (prod(shape) // n if n else 0), n


@formula("sort", "argsort")
def sort(call: OpCall) -> Cost | Unmodelled:
    """sort(self, dim=-1, descending) or sort.stable(self, stable, dim, descending); argsort alike
    (indices only)."""
    (x,), err = need(call, 0)
    if err:
        return err
    stable_form = len(call.dims) >= 4 and parse_bool(call.scalar(1)) is not None
    dim = parse_int(call.scalar(2 if stable_form else 1))
    rn = _rows(x.shape, dim)
    if rn is None:
        return Unmodelled(f"{call.name}: dim {dim} does not fit {x.shape}", cause="bad_shapes")
    rows, n = rn
    flops = rows * n * ceil(log2(n)) if n > 1 else 0
    tr = Traffic().read("self", x)
    if call.name.endswith("::sort"):
        tr.write("values", x.shape, x.itemsize)
    tr.write("indices (int64)", x.shape, 8)
    expr = f"rows*n*ceil(log2 n) = {fmt_int(rows)}*{n}*{ceil(log2(n)) if n > 1 else 0} = {fmt_flops(flops)}"
    notes = ["comparisons counted as FLOPs; a radix sort of long rows makes several passes over memory, so "
             "the bytes are a lower bound"]
    if dim is None:
        notes.append("dim not recorded: the last dim assumed")
    return make(flops, tr, "sort", x.dtype, expr, estimated=dim is None, notes=notes)


@formula("topk")
def topk(call: OpCall) -> Cost | Unmodelled:
    """topk(self, k, dim=-1, largest, sorted) -> (values, indices)."""
    (x,), err = need(call, 0)
    if err:
        return err
    k = parse_int(call.scalar(1))
    if k is None or k < 0:
        return Unmodelled(f"{call.name}: k not recorded", cause="scalars_not_recorded")
    dim = parse_int(call.scalar(2))
    rn = _rows(x.shape, dim)
    if rn is None or k > rn[1]:
        return Unmodelled(f"{call.name}: k = {k} or dim {dim} does not fit {x.shape}", cause="bad_shapes")
    rows, n = rn
    flops = rows * n
    out = (rows * k,)
    tr = Traffic().read("self", x).write("values", out, x.itemsize).write("indices (int64)", out, 8)
    expr = f"rows*n = {fmt_int(rows)}*{n} = {fmt_flops(flops)} comparisons"
    return make(flops, tr, "sort", x.dtype, expr, notes=(f"k = {k} of {n} per row; comparisons counted as FLOPs",))


# ---------------------------------------------------------------- native MHA's QKV bias

@formula("_transform_bias_rescale_qkv")
def transform_bias_rescale_qkv(call: OpCall) -> Cost | Unmodelled:
    """(qkv [B, T, 3*D], qkv_bias [3*D], num_heads) -> q, k, v [B, heads, T, D/heads]: the bias added to
    all three, q scaled by 1/sqrt(D/heads). FLOPs = 3*B*T*D adds + B*T*D multiplies = 4*B*T*D.
    Bytes: qkv and the bias read, q, k, v written (B*T*3*D elements)."""
    (qkv, bias), err = need(call, 0, 1)
    if err:
        return err
    if len(qkv.shape) != 3 or qkv.shape[-1] % 3 or bias.numel != qkv.shape[-1]:
        return Unmodelled(f"{call.name}: expected qkv [B, T, 3*D] and bias [3*D], got {qkv.shape}, {bias.shape}")
    b, t, d3 = qkv.shape
    d = d3 // 3
    flops = 4 * b * t * d
    tr = Traffic().read("qkv", qkv).read("qkv_bias", bias).add("write", "q, k, v", (3, b, t, d), qkv.itemsize)
    expr = f"3*B*T*D + B*T*D = 4*{b}*{t}*{d} = {fmt_flops(flops)}"
    heads = parse_int(call.scalar(2))
    notes = (f"{heads} heads of {d // heads}" if heads and d % heads == 0 else "heads not recorded",)
    return make(flops, tr, "pointwise", qkv.dtype, expr, notes=notes)
