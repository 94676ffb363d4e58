"""Pooling (max / avg / adaptive avg, 1-3 spatial dims) and its backward: windowed reductions.

FLOPs: one compare or add per window element per output (max / avg pool), one add per input
element (adaptive avg pool), one per gradient element (backward). Bytes: input read once,
output (and the int64 indices of *_with_indices) written once; backward reads grad_out (and
indices) and writes the full grad_input.
"""

from __future__ import annotations

from math import prod

from traceana.cost.families._common import make, need
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, expand_param, parse_bool, parse_ints, per_element_expr
from traceana.cost.types import Cost, OpCall, Unmodelled


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    if ceil:
        out = -(-span // s) + 1
        if (out - 1) * s >= size + p:
            out -= 1
        return out
    return span // s + 1


# name -> (kernel, stride, padding, dilation (None: 1), ceil_mode positions, writes indices)
_POOL = {
    "max_pool1d": (1, 2, 3, 4, 5, False), "max_pool2d": (1, 2, 3, 4, 5, False),
    "max_pool3d": (1, 2, 3, 4, 5, False), "max_pool1d_with_indices": (1, 2, 3, 4, 5, True),
    "max_pool2d_with_indices": (1, 2, 3, 4, 5, True), "max_pool3d_with_indices": (1, 2, 3, 4, 5, True),
    "avg_pool1d": (1, 2, 3, None, 4, False), "avg_pool2d": (1, 2, 3, None, 4, False),
    "avg_pool3d": (1, 2, 3, None, 4, False),
}


@formula(*_POOL)
def pool(call: OpCall) -> Cost | Unmodelled:
    """(self, kernel_size, stride=kernel, padding, [dilation,] ceil_mode, ...)."""
    (x,), err = need(call, 0)
    if err:
        return err
    pk, ps, pp, pd, pc, idx = _POOL[call.name.split("::", 1)[1]]
    k = parse_ints(call.scalar(pk))
    if not k:
        return Unmodelled(f"{call.name}: kernel_size not recorded", cause="scalars_not_recorded")
    n = len(k) if len(k) > 1 else int(call.name.split("pool")[1][0])
    if len(x.shape) < n + 1:
        return Unmodelled(f"{call.name}: input {x.shape} has fewer than {n + 1} dims")
    k = expand_param(k, n, 1)
    s = expand_param(parse_ints(call.scalar(ps)) or k, n, 1)
    p = expand_param(parse_ints(call.scalar(pp)) or [0], n, 0)
    d = expand_param(parse_ints(call.scalar(pd)) or [1], n, 1) if pd is not None else [1] * n
    if None in (k, s, p, d) or min(s) <= 0 or min(k) <= 0:
        return Unmodelled(f"{call.name}: bad pooling parameters")
    ceil = bool(parse_bool(call.scalar(pc)))
    sp = x.shape[-n:]
    out = x.shape[:-n] + tuple(max(_pool_out(*a, ceil), 0) for a in zip(sp, k, s, p, d))
    tr = Traffic().read("input", x).write("out", out, x.itemsize)
    if idx:
        tr.write("indices", out, 8)
    per = prod(k)
    flops = prod(out) * per
    return make(flops, tr, "reduction", x.dtype, per_element_expr(out, per, flops, "outputs"))


@formula("adaptive_avg_pool1d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d", "adaptive_avg_pool3d",
         "_adaptive_avg_pool3d", "adaptive_max_pool2d", "adaptive_max_pool1d", "adaptive_max_pool3d")
def adaptive_pool(call: OpCall) -> Cost | Unmodelled:
    """(self, output_size): every input element read and folded into its window once."""
    (x,), err = need(call, 0)
    if err:
        return err
    size = parse_ints(call.scalar(1))
    if not size or len(size) > len(x.shape) or any(v < 0 for v in size):
        return Unmodelled(f"{call.name}: output_size not recorded", cause="scalars_not_recorded")
    out = x.shape[:len(x.shape) - len(size)] + tuple(size)
    tr = Traffic().read("input", x).write("out", out, x.itemsize)
    if "max" in call.name:
        tr.write("indices", out, 8)
    return make(x.numel, tr, "reduction", x.dtype, per_element_expr(x.shape, 1, x.numel))


@formula("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward", "avg_pool2d_backward",
         "avg_pool3d_backward", "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward",
         "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward")
def pool_backward(call: OpCall) -> Cost | Unmodelled:
    """(grad_output, self, ...[, indices]): grad_input (self's shape) written in full."""
    (g, x), err = need(call, 0, 1)
    if err:
        return err
    tr = Traffic().read("grad_out", g)
    idx = call.tensor(len(call.dims) - 1) if len(call.dims) > 2 else None
    if idx is not None and idx.dtype == "int64":
        tr.read("indices", idx)
    tr.write("grad_input", x.shape, x.itemsize)
    return make(g.numel, tr, "reduction", x.dtype, per_element_expr(g.shape, 1, g.numel, "gradients"))
