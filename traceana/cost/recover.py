"""Recover arguments a trace did not record from other op signatures of the same trace.

Old traces (before `Concrete Inputs`, torch < 2.4) leave out the int-list arguments of the cuDNN
convolution ops: `cudnn_convolution_backward_weight` has no weight size, `..._backward_input` no
input size, and the forward `cudnn_convolution` no stride or padding, so its output size is a
guess. The same trace holds the answer: its `cudnn_convolution_backward` (or
`convolution_backward`) signatures record input, grad_output and weight together, and its forward
convolutions record input and weight (grad_output is the forward's output).

`recover(calls, counts)` is a pre-pass over the op signatures of one trace (fed by analysis.py):
it returns, for each signature it can complete, the variants it stands for, each a completed
OpCall with the number of calls it covers. One variant: the shapes are known exactly. Several
(e.g. a 1x1 and a 3x3 convolution with the same input and output sizes both map to one
`backward_weight` signature): `cost_variants` costs each and reports the call-weighted mean,
which is exact for the signature's total when the variants' call counts add up to its own.
"""

from __future__ import annotations

from collections import defaultdict
from msgspec.structs import replace
from typing import Sequence

import msgspec

from traceana.cost.shapes import conv_out_size, fmt_flops, fmt_int, parse_ints
from traceana.cost.types import Cost, OpCall, Unmodelled

# backward ops recording (input, grad_output, weight): name -> their positions
_FULL_BWD = {
    "aten::cudnn_convolution_backward": (0, 1, 2),
    "aten::miopen_convolution_backward": (0, 1, 2),
    "aten::convolution_backward": (1, 0, 2),
}
# forward ops: name -> (input, weight, stride, padding, dilation) positions
_FWD = {
    "aten::cudnn_convolution": (0, 1, 3, 2, 4),
    "aten::miopen_convolution": (0, 1, 4, 3, 5),
    "aten::_convolution": (0, 1, 3, 4, 5),
    "aten::convolution": (0, 1, 3, 4, 5),
}
_WEIGHT = ("aten::cudnn_convolution_backward_weight", "aten::miopen_convolution_backward_weight")
_INPUT = ("aten::cudnn_convolution_backward_input", "aten::miopen_convolution_backward_input")

Variants = list[tuple[OpCall, int]]


def _t(call: OpCall, i: int) -> tuple[int, ...] | None:
    t = call.tensor(i)
    return t.shape if t is not None and len(t.shape) >= 3 else None


def _geometry(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...]) -> tuple[list[int], list[int]] | None:
    """(stride, padding) per spatial dim that turn input x into output out with kernel w (dilation 1),
    preferring the 'same'-style padding k//2; None when no integer geometry does."""
    stride, pad = [], []
    for size, k, o in zip(x[2:], w[2:], out[2:]):
        hit = None
        for s in range(1, max(size, 1) + 1):
            for p in sorted(range(k), key=lambda p: (abs(p - k // 2), p)):
                if conv_out_size(size, k, s, p, 1) == o:
                    hit = (s, p)
                    break
            if hit or conv_out_size(size, k, s, k - 1, 1) < o:
                break
        if hit is None:
            return None
        stride.append(hit[0])
        pad.append(hit[1])
    return stride, pad


def _consistent(x, w, out) -> bool:
    return len(x) == len(w) == len(out) and x[0] == out[0] and w[0] == out[1] and x[1] % w[1] == 0 \
        and _geometry(x, w, out) is not None


def _with_concrete(call: OpCall, values: dict[int, str]) -> OpCall:
    conc = list(call.concrete) if call.concrete is not None else [""] * len(call.dims)
    conc += [""] * (len(call.dims) - len(conc))
    for i, v in values.items():
        if i < len(conc):
            conc[i] = v
    return replace(call, concrete=tuple(conc))


def _lst(v) -> str:
    return "[" + ", ".join(str(int(x)) for x in v) + "]"


CONTEXT_OPS = tuple(_FULL_BWD)  # ops whose signatures recover() reads even when they own no kernels


def recover(calls: Sequence[OpCall | None], counts: Sequence[int],
            context: Sequence[tuple[OpCall, int]] = ()) -> dict[int, tuple[Variants, str]]:
    """index -> (variants, how they were found) for the signatures this pass can complete.
    context: (signature, calls) of CONTEXT_OPS in the trace (parents that launch no kernel
    themselves, so they are not among `calls`)."""
    full: dict[tuple, int] = defaultdict(int)  # (x, go, w) -> calls, from the backward ops
    fwd: dict[tuple, int] = defaultdict(int)  # (x, w) -> calls, from the forward ops
    ctx_names = {c.name for c, _ in context}  # the context counts every instance of these names
    pairs = list(context) + [(c, n) for c, n in zip(calls, counts) if c is not None and c.name not in ctx_names]
    for call, n in pairs:
        if call is None:
            continue
        pos = _FULL_BWD.get(call.name)
        if pos:
            x, go, w = (_t(call, i) for i in pos)
            if x and go and w:
                full[(x, go, w)] += n
        pos = _FWD.get(call.name)
        if pos:
            x, w = _t(call, pos[0]), _t(call, pos[1])
            if x and w:
                fwd[(x, w)] += n
    out: dict[int, tuple[Variants, str]] = {}
    for idx, call in enumerate(calls):
        if call is None:
            continue
        if call.name in _WEIGHT and parse_ints(call.scalar(0)) is None:
            go, x = _t(call, 1), _t(call, 2)
            if go and x:
                cands = {w: n for (fx, fgo, w), n in full.items() if fx == x and fgo == go}
                how = "the backward pass (cudnn_convolution_backward) of the same trace"
                if not cands:
                    cands = {w: n for (fx, w), n in fwd.items() if fx == x and _consistent(x, w, go)}
                    how = "the forward convolutions of the same trace (same input, output = grad_output)"
                if cands:
                    out[idx] = ([(_with_concrete(call, {0: _lst(w)}), n) for w, n in sorted(cands.items())],
                                f"weight size recovered from {how}")
        elif call.name in _INPUT and parse_ints(call.scalar(0)) is None:
            go, w = _t(call, 1), _t(call, 2)
            if go and w:
                cands = {x: n for (x, fgo, fw), n in full.items() if fgo == go and fw == w}
                how = "the backward pass (cudnn_convolution_backward) of the same trace"
                if not cands:
                    cands = {x: n for (x, fw), n in fwd.items() if fw == w and _consistent(x, w, go)}
                    how = "the forward convolutions of the same trace (same weight, output = grad_output)"
                if cands:
                    out[idx] = ([(_with_concrete(call, {0: _lst(x)}), n) for x, n in sorted(cands.items())],
                                f"input size recovered from {how}")
        elif call.name in _FWD:
            p_x, p_w, p_s, p_p, p_d = _FWD[call.name]
            if call.scalar(p_s) is not None:
                continue  # stride recorded: nothing to recover
            x, w = _t(call, p_x), _t(call, p_w)
            if x and w:
                cands = {go: n for (fx, go, fw), n in full.items() if fx == x and fw == w}
                variants = []
                for go, n in sorted(cands.items()):
                    geo = _geometry(x, w, go)
                    if geo:
                        vals = {p_s: _lst(geo[0]), p_p: _lst(geo[1]), p_d: _lst([1] * len(geo[0]))}
                        variants.append((_with_concrete(call, vals), n))
                if variants:
                    out[idx] = (variants, "output size (so stride and padding) recovered from the backward pass "
                                          "(cudnn_convolution_backward) of the same trace")
    return out


def cost_variants(variants: Variants, how: str, own_count: int, op_cost) -> Cost | Unmodelled:
    """The call-weighted mean cost of the variants (one variant: its cost), with `how` as a note."""
    costs = []
    for call, n in variants:
        c = op_cost(call)
        if not isinstance(c, Cost):
            return c
        costs.append((c, n))
    if len(costs) == 1:
        c = costs[0][0]
        notes = tuple(n for n in c.notes if "not recorded" not in n)
        return replace(c, notes=(how,) + notes)
    total = sum(n for _, n in costs)
    flops = sum(c.flops * n for c, n in costs) / total
    nbytes = sum(c.bytes * n for c, n in costs) / total
    exact = total == own_count
    shapes = "; ".join(f"{n} call{'s' * (n != 1)}: {_shape_of(call)}" for call, n in variants)
    first = costs[0][0]
    notes = [f"{how}: {len(costs)} shapes share this signature ({shapes}); FLOPs and bytes are the "
             f"call-weighted mean" + ("" if exact else f" (their {total} calls vs the signature's "
                                                         f"{own_count}: the mix is estimated)")]
    notes += [f"{n} x ({c.flops_expr}) + bytes {c.bytes_expr}" for c, n in costs]
    fexpr = ("(" + " + ".join(f"{n} x {fmt_flops(c.flops)}" for c, n in costs)
             + f") / {total} calls = {fmt_flops(flops)}")
    bexpr = ("(" + " + ".join(f"{n} x {fmt_int(c.bytes)} B" for c, n in costs)
             + f") / {total} calls = {fmt_int(nbytes)} B")
    return Cost(flops, nbytes, first.family, first.dtype, first.matrix, fexpr, bexpr,
                not exact or any(c.estimated for c, _ in costs), tuple(notes))


def _shape_of(call: OpCall) -> str:
    fwd = call.get("tbe_forward")
    if fwd is not None:
        idx = fwd.tensor(11)
        return f"{idx.shape[0] if idx is not None and idx.shape else '?'} lookups"
    v = call.scalar(0)
    if v is not None and call.name in _WEIGHT:
        return f"weight {v}"
    if v is not None and call.name in _INPUT:
        return f"input {v}"
    return "stride " + (next((s for s in (call.concrete or ()) if s.startswith("[")), "?"))

