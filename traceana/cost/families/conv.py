"""Convolutions, forward and backward.

FLOPs follow torch.utils.flop_counter.conv_flop_count: 2 * N * Cout * prod(out spatial) *
(Cin/groups) * prod(kernel) for a convolution, 2 * N * prod(in spatial) * prod(weight shape) for a
transposed one; bias adds are not counted. One deliberate difference: the weight gradient of a
grouped convolution. flop_counter counts it as 2*N*Cin*Cout*prod(k)*prod(S) (groups ignored, so a
depthwise conv's weight gradient is overcounted by a factor of Cin); we count the real work,
that divided by groups, which is also the forward's FLOPs. The two agree when groups == 1.

Bytes: input, weight and bias read once, output written once (implicit-GEMM ideal: the
im2col expansion is not materialised in DRAM).
"""

from __future__ import annotations

from math import prod

from traceana.cost.families._common import make, need, type_at
from traceana.cost.registry import formula
from traceana.cost.shapes import (
    Traffic,
    conv_out_size,
    conv_transpose_out_size,
    expand_param,
    fmt_flops,
    parse_bool,
    parse_bools,
    parse_int,
    parse_ints,
    product_expr,
)
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

# Argument positions of each forward op: input, weight, bias, stride, padding, dilation,
# transposed (index, or a fixed bool), output_padding, groups.
_FWD = {
    "convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "_convolution": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "convolution_overrideable": (0, 1, 2, 3, 4, 5, 6, 7, 8),
    "conv1d": (0, 1, 2, 3, 4, 5, False, None, 6),
    "conv2d": (0, 1, 2, 3, 4, 5, False, None, 6),
    "conv3d": (0, 1, 2, 3, 4, 5, False, None, 6),
    "_convolution_mode": (0, 1, 2, 3, 4, 5, False, None, 6),
    "conv_transpose1d": (0, 1, 2, 3, 4, 7, True, 5, 6),
    "conv_transpose2d": (0, 1, 2, 3, 4, 7, True, 5, 6),
    "conv_transpose3d": (0, 1, 2, 3, 4, 7, True, 5, 6),
    "cudnn_convolution": (0, 1, None, 3, 2, 4, False, None, 5),
    "cudnn_convolution_transpose": (0, 1, None, 4, 2, 5, True, 3, 6),
    "miopen_convolution": (0, 1, 2, 4, 3, 5, False, None, 6),
    "miopen_depthwise_convolution": (0, 1, 2, 4, 3, 5, False, None, 6),
    "miopen_convolution_transpose": (0, 1, 2, 5, 3, 6, True, 4, 7),
    "mkldnn_convolution": (0, 1, 2, 4, 3, 5, False, None, 6),
}

_SPATIAL = {1: ["L"], 2: ["H", "W"], 3: ["D", "H", "W"]}
_TF32_POS = {"_convolution": 12, "cudnn_convolution": 8, "cudnn_convolution_transpose": 9}
ASSUMED = "stride/padding/dilation not recorded: assumed stride 1, dilation 1, 'same' padding"
ASSUMED_SAME = "padding given as a string (not recorded): assumed 'same'"


class _Geom:
    """Everything a conv formula needs, resolved from the recorded arguments."""

    __slots__ = ("x", "w", "n", "groups", "transposed", "stride", "pad", "dil", "opad", "same", "notes")

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.same = False  # 'same' padding assumed: output spatial size = input's


_STRING_PADDING = frozenset({"conv1d", "conv2d", "conv3d", "_convolution_mode"})


def _param(call: OpCall, pos, nsp: int, default: int) -> list[int] | None:
    """A per-spatial-dim int list argument; None when it exists but was not recorded."""
    if pos is None or pos >= len(call.dims):
        return [default] * nsp
    raw = call.scalar(pos)
    if raw is None:
        recorded = call.concrete is not None and type_at(call, pos) in ("", "None")
        return [default] * nsp if recorded else None  # "" = None argument: the default
    vals = parse_ints(raw)
    return expand_param(vals, nsp, default) if vals is not None else None


def geometry(call: OpCall, layout: tuple, x: TensorArg, w: TensorArg) -> _Geom | Unmodelled:
    _, _, _, p_stride, p_pad, p_dil, p_tr, p_opad, p_groups = layout
    g = _Geom()
    nsp = len(w.shape) - 2
    if nsp not in _SPATIAL:
        return Unmodelled(f"conv weight {w.shape} is not 3-, 4- or 5-D")
    if len(x.shape) == nsp + 1:  # unbatched input of conv1d/2d/3d
        x = TensorArg((1,) + x.shape, x.type_str, None)
        g.notes.append("unbatched input: N = 1")
    if len(x.shape) != nsp + 2:
        return Unmodelled(f"conv input {x.shape} does not match weight {w.shape}", cause="bad_shapes")
    g.x, g.w, g.n = x, w, x.shape[0]
    tr = p_tr if isinstance(p_tr, bool) else parse_bool(call.scalar(p_tr))
    if tr is None:
        g.notes.append("transposed flag not recorded: assumed False")
    g.transposed = bool(tr)
    g.groups = parse_int(call.scalar(p_groups)) if p_groups is not None else 1
    if g.groups is None:
        if not g.transposed and w.shape[1] and x.shape[1] % w.shape[1] == 0:
            g.groups = x.shape[1] // w.shape[1]
        else:
            g.groups = 1
            g.notes.append("groups not recorded: assumed 1")
    cin = x.shape[1]
    if g.groups <= 0 or (not g.transposed and cin != w.shape[1] * g.groups) or (g.transposed and cin != w.shape[0]):
        return Unmodelled(f"conv channels do not match: input {x.shape}, weight {w.shape}, groups {g.groups}",
                          cause="bad_shapes")
    g.stride, g.dil = _param(call, p_stride, nsp, 1), _param(call, p_dil, nsp, 1)
    g.pad, g.opad = _param(call, p_pad, nsp, 0), _param(call, p_opad, nsp, 0)
    string_pad = call.name.split("::")[-1] in _STRING_PADDING and call.concrete is not None \
        and type_at(call, p_pad) in ("", "String") and call.scalar(p_pad) is None
    if string_pad:  # padding="same"/"valid": the string is not recorded
        g.pad = None
    if g.stride is None or g.dil is None or g.opad is None:
        g.notes.append(ASSUMED)
        g.stride, g.dil, g.opad, g.pad = g.stride or [1] * nsp, g.dil or [1] * nsp, g.opad or [0] * nsp, None
    if g.pad is None:
        if max(g.stride) > 1:
            g.pad = [0] * nsp  # padding="same" is not allowed with stride > 1: it was "valid"
        else:
            g.pad, g.same = [g.dil[i] * (k - 1) // 2 for i, k in enumerate(w.shape[2:])], True
            if ASSUMED not in g.notes:
                g.notes.append(ASSUMED_SAME)
    if min(g.stride) <= 0 or min(g.dil) <= 0:
        return Unmodelled(f"conv stride {g.stride} / dilation {g.dil} must be positive", cause="bad_shapes")
    return g


def _estimated(g: _Geom) -> bool:
    return ASSUMED in g.notes or ASSUMED_SAME in g.notes


def out_shape(g: _Geom) -> tuple[int, ...]:
    ks, sp = g.w.shape[2:], g.x.shape[2:]
    if g.transposed:
        o = [conv_transpose_out_size(s, k, st, p, d, op)
             for s, k, st, p, d, op in zip(sp, ks, g.stride, g.pad, g.dil, g.opad)]
        cout = g.w.shape[1] * g.groups
    elif g.same:
        o, cout = list(sp), g.w.shape[0]
    else:
        o = [conv_out_size(s, k, st, p, d) for s, k, st, p, d in zip(sp, ks, g.stride, g.pad, g.dil)]
        cout = g.w.shape[0]
    return (g.n, cout) + tuple(max(v, 0) for v in o)


def conv_factors(g: _Geom, out: tuple[int, ...]) -> list[tuple[str, int]]:
    """The factors of flop_counter's count: 2*N*Cout*O...*(Cin/g)*K... (transposed: input spatial)."""
    names = _SPATIAL[len(g.w.shape) - 2]
    ks = [("K" + n, k) for n, k in zip(names, g.w.shape[2:])]
    if g.transposed:
        sp = [("I" + n, s) for n, s in zip(names, g.x.shape[2:])]
        return [("2", 2), ("N", g.n)] + sp + [("Cin", g.w.shape[0]), ("Cout/g", g.w.shape[1])] + ks
    sp = [("O" + n, s) for n, s in zip(names, out[2:])]
    return [("2", 2), ("N", g.n), ("Cout", g.w.shape[0])] + sp + [("Cin/g", g.w.shape[1])] + ks


def _fwd(call: OpCall) -> Cost | Unmodelled:
    layout = _FWD[call.name.split("::", 1)[1]]
    (x, w), err = need(call, layout[0], layout[1])
    if err:
        return err
    g = geometry(call, layout, x, w)
    if isinstance(g, Unmodelled):
        return g
    out = out_shape(g)
    factors = conv_factors(g, out)
    flops = prod(v for _, v in factors)
    tr = Traffic().read("input", x).read("weight", w)
    bias = call.tensor(layout[2]) if layout[2] is not None else None
    notes = list(g.notes)
    if bias is not None:
        tr.read("bias", bias)
        notes.append("bias add not counted in FLOPs, as torch.utils.flop_counter")
    tr.write("output", out, x.itemsize)
    tf32 = _TF32_POS.get(call.name.split("::", 1)[1])
    if x.dtype == "fp32" and tf32 is not None and parse_bool(call.scalar(tf32)):
        notes.append("allow_tf32=True: cuDNN may run this fp32 convolution on TF32 tensor cores")
    return make(flops, tr, "conv", x.dtype, product_expr(factors, flops),
                estimated=_estimated(g), notes=notes)


formula(*_FWD)(_fwd)


def _mask(call: OpCall, pos: int, n: int, notes: list[str]) -> list[bool]:
    m = parse_bools(call.scalar(pos))
    if m is None or len(m) < 2:
        notes.append("output_mask not recorded: grad_input and grad_weight assumed computed")
        return [True] * n
    return m


def _backward(call: OpCall, go: TensorArg, x: TensorArg, w: TensorArg, g: _Geom, mask: list[bool],
              bias_grad: bool, estimated: bool = False) -> Cost:
    """grad_input = transposed conv of grad_out (same FLOPs as the forward); grad_weight likewise."""
    fwd_out = go.shape
    factors = conv_factors(g, fwd_out)
    one = prod(v for _, v in factors)
    parts = int(mask[0]) + int(mask[1])
    flops = one * parts
    which = " + ".join(p for p, m in zip(("grad_input", "grad_weight"), mask[:2]) if m) or "nothing"
    expr = f"{which}: {parts} x ({product_expr(factors, one)}) = {fmt_flops(flops)}"
    tr = Traffic().read("grad_out", go)
    if mask[1]:
        tr.read("input", x)
    if mask[0]:
        tr.read("weight", w)
        tr.write("grad_input", x.shape, x.itemsize)
    if mask[1]:
        tr.write("grad_weight", w.shape, w.itemsize)
    notes = list(g.notes)
    if bias_grad:
        cout = go.shape[1]
        tr.write("grad_bias", (cout,), w.itemsize)
        notes.append("grad_bias reduction (N*Cout*spatial adds) not counted, as torch.utils.flop_counter")
    if mask[1] and g.groups > 1:
        notes.append(f"grad_weight counted per group (torch.utils.flop_counter counts it {g.groups}x higher)")
    return make(flops, tr, "conv", x.dtype, expr, estimated=estimated, notes=notes)


@formula("convolution_backward")
def convolution_backward(call: OpCall) -> Cost | Unmodelled:
    """(grad_out, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
    groups, output_mask). FLOPs need no stride: grad_out carries the output shape."""
    (go, x, w), err = need(call, 0, 1, 2)
    if err:
        return err
    g = geometry(call, (1, 2, None, 4, 5, 6, 7, 8, 9), x, w)
    if isinstance(g, Unmodelled):
        return g
    if len(go.shape) != len(g.x.shape) or go.shape[0] != g.n:
        return Unmodelled(f"grad_out {go.shape} does not match input {x.shape}", cause="bad_shapes")
    g.notes = [n for n in g.notes if n not in (ASSUMED, ASSUMED_SAME)]  # only groups are needed
    mask = _mask(call, 10, 3, g.notes)
    bias_grad = len(mask) > 2 and mask[2]
    return _backward(call, go, g.x, w, g, mask, bias_grad)


@formula("cudnn_convolution_backward", "miopen_convolution_backward")
def cudnn_convolution_backward(call: OpCall) -> Cost | Unmodelled:
    """Old cudnn (self, grad_output, weight, padding, stride, dilation, groups, ..., output_mask)."""
    (x, go, w), err = need(call, 0, 1, 2)
    if err:
        return err
    g = geometry(call, (0, 2, None, 4, 3, 5, False, None, 6), x, w)
    if isinstance(g, Unmodelled):
        return g
    g.notes = [n for n in g.notes if n not in (ASSUMED, ASSUMED_SAME)]
    mask = _mask(call, len(call.dims) - 1, 2, g.notes)
    return _backward(call, go, g.x, w, g, mask, bool(len(mask) > 2 and mask[2]))


@formula("cudnn_convolution_backward_input", "miopen_convolution_backward_input")
def cudnn_convolution_backward_input(call: OpCall) -> Cost | Unmodelled:
    """(self_size, grad_output, weight, padding, stride, dilation, groups, ...)."""
    (go, w), err = need(call, 1, 2)
    if err:
        return err
    if len(go.shape) != len(w.shape) or len(w.shape) - 2 not in _SPATIAL or go.shape[1] != w.shape[0]:
        return Unmodelled(f"grad_out {go.shape} does not match weight {w.shape}", cause="bad_shapes")
    size = parse_ints(call.scalar(0))
    notes = []
    if size is None or len(size) != len(go.shape):
        groups = parse_int(call.scalar(6)) or 1
        size = [go.shape[0], w.shape[1] * groups, *go.shape[2:]]
        notes.append(f"input size not recorded: assumed {tuple(size)} (stride 1, 'same' padding)")
    x = TensorArg(tuple(size), go.type_str)
    g = _Geom()
    g.x, g.w, g.n, g.groups, g.transposed, g.notes = x, w, go.shape[0], 1, False, notes
    return _backward(call, go, x, w, g, [True, False], False, estimated=bool(notes))


@formula("cudnn_convolution_backward_weight", "miopen_convolution_backward_weight")
def cudnn_convolution_backward_weight(call: OpCall) -> Cost | Unmodelled:
    """(weight_size, grad_output, self, padding, stride, dilation, groups, ...)."""
    (go, x), err = need(call, 1, 2)
    if err:
        return err
    size = parse_ints(call.scalar(0))
    if size is None:
        return Unmodelled("weight size not recorded (the trace predates Concrete Inputs)", cause="scalars_not_recorded")
    if len(size) != len(x.shape) or len(go.shape) != len(x.shape) or len(size) - 2 not in _SPATIAL \
            or min(size) < 0 or go.shape[0] != x.shape[0]:
        return Unmodelled(f"weight size {size} does not match input {x.shape} / grad_out {go.shape}",
                          cause="bad_shapes")
    w = TensorArg(tuple(size), x.type_str)
    g = _Geom()
    groups = x.shape[1] // size[1] if size[1] and x.shape[1] % size[1] == 0 else 1
    g.x, g.w, g.n, g.groups, g.transposed = x, w, x.shape[0], groups, False
    return _backward(call, go, x, w, g, [False, True], False)
