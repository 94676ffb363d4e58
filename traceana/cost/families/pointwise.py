"""Elementwise ops: unary, binary, ternary, activation backwards, their in-place and out= forms.

Output shape = broadcast of the tensor operands; output dtype = torch type promotion (comparisons
and logical ops give bool; true division and transcendental functions give a float for integer
inputs; an in-place op keeps self's dtype; an out= tensor fixes shape and dtype).

FLOPs = output elements x a per-element weight. Basic IEEE operations (add, sub, mul, div, sqrt,
compare, select, min/max) count 1 each. Transcendental functions get the weights in
TRANSCENDENTAL: roughly the number of arithmetic instructions the accurate (non fast-math)
CUDA libdevice fp32 implementation executes on its common path. These are approximations
(exact counts vary with the CUDA version, the argument range and the code path), chosen only so
that an exp is not priced like an add. Even at these weights every op here stays far below the
ridge point of current GPUs: they are memory-bound, and the note on each Cost says so.

Bytes: each tensor operand read once at its stored size (stride-0 broadcast dims count once),
the output written once. In-place (name_): self is read and written once. A Python number
operand (`x * 0.5`), which the profiler records as a 0-dim `double` / `long int` tensor, is
passed to the kernel by value and costs 0 bytes; any other 0-dim tensor counts its itemsize.
"""

from __future__ import annotations

from traceana.cost.families._common import (
    ITEMSIZE,
    is_python_scalar,
    make,
    need,
    promote,
    shape_problem,
    to_float,
)
from traceana.cost.dtypes import NON_TENSOR, dtype_info
from traceana.cost.families.memory import foreach_list
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, broadcast, parse_float, per_element_expr
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

# Approximate per-element FLOPs of transcendental and composite functions (see module docstring).
TRANSCENDENTAL: dict[str, int] = {
    "exp": 8, "exp2": 4, "expm1": 10, "log": 16, "log2": 6, "log10": 16, "log1p": 20,
    "sin": 20, "cos": 20, "tan": 30, "asin": 20, "acos": 20, "atan": 20, "atan2": 30,
    "sinh": 14, "cosh": 14, "tanh": 12, "asinh": 24, "acosh": 24, "atanh": 20,
    "erf": 20, "erfc": 20, "erfinv": 30, "pow": 30, "hypot": 8, "xlogy": 17,
    "sigmoid": 10,  # exp + add + div
    "logit": 18,  # log + sub + div
    "silu": 11,  # x * sigmoid(x)
    "gelu": 24,  # 0.5*x*(1+erf(x/sqrt2)); the tanh approximation is not recorded, ~19
    "elu": 12, "selu": 13, "celu": 13,  # expm1 + select + scale
    "softplus": 30,  # log1p(exp(x)) + threshold compare
    "mish": 40,  # x * tanh(softplus(x))
    "gelu_backward": 36,  # erf (cdf) + exp (pdf) + ~8 mul/add
    "silu_backward": 15,  # sigmoid + 5 mul/add
    "softplus_backward": 12,  # sigmoid-like: exp + add + div + mul
}

# op -> (operand positions, FLOPs per output element, output dtype rule, has an in-place form)
# rules: P promote, F promote then float, B bool, S dtype of self, W promote(args 1, 2).
# Weights other than 1 count basic operations: relu6 / hardtanh / clamp(min, max) 2 compares;
# leaky_relu compare + mul; rsqrt sqrt + div; floor_divide div + floor; remainder div, floor,
# mul-sub; lerp / addcmul / addcdiv 3 (sub or mul, mul, add); hardsigmoid 4 and hardswish 5
# (add, scale, clamp, [mul]); sigmoid/tanh_backward 3 (g*(1-y)*y, g*(1-y*y)); the other
# activation backwards: compare/select plus 1-3 mul/add.
_U, _B, _T = (0,), (0, 1), (0, 1, 2)
OPS: dict[str, tuple[tuple[int, ...], float, str, bool]] = {
    **{n: (_U, 1, "P", True) for n in ("neg", "abs", "sign", "sgn", "floor", "ceil", "round",
                                       "trunc", "frac", "square", "relu", "bitwise_not", "nan_to_num",
                                       "threshold")},
    **{n: (_U, 1, "B", n == "logical_not") for n in ("logical_not", "isnan", "isinf", "isfinite")},
    "relu6": (_U, 2, "P", True), "hardtanh": (_U, 2, "P", True), "leaky_relu": (_U, 2, "P", True),
    "hardsigmoid": (_U, 4, "F", True), "hardswish": (_U, 5, "F", True),
    "clamp_min": (_B, 1, "P", True), "clamp_max": (_B, 1, "P", True), "clamp": (_T, 2, "P", True),
    "reciprocal": (_U, 1, "F", True), "sqrt": (_U, 1, "F", True), "rsqrt": (_U, 2, "F", True),
    **{n: (_U, w, "F", n not in ("softplus",)) for n, w in TRANSCENDENTAL.items()
       if n not in ("atan2", "pow", "hypot", "xlogy") and not n.endswith("_backward")},
    **{n: (_B, 1, "P", n not in ("maximum", "minimum", "fmax", "fmin"))
       for n in ("add", "sub", "mul", "maximum", "minimum", "fmax", "fmin", "bitwise_and",
                 "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift")},
    "rsub": (_B, 1, "P", False), "floor_divide": (_B, 2, "P", True), "remainder": (_B, 3, "P", True),
    "fmod": (_B, 2, "P", True), "div": (_B, 1, "F", True), "true_divide": (_B, 1, "F", True),
    "copysign": (_B, 1, "F", True), "atan2": (_B, 30, "F", True), "hypot": (_B, 8, "F", True),
    "xlogy": (_B, 17, "F", True), "pow": (_B, 30, "P", True),
    **{n: (_B, 1, "B", True) for n in ("eq", "ne", "lt", "le", "gt", "ge", "logical_and",
                                       "logical_or", "logical_xor")},
    "where": (_T, 1, "W", False), "masked_fill": (_T, 1, "S", True), "lerp": (_T, 3, "P", True),
    "addcmul": (_T, 3, "P", True), "addcdiv": (_T, 3, "P", True),
    "threshold_backward": (_B, 1, "P", False), "sigmoid_backward": (_B, 3, "P", False),
    "tanh_backward": (_B, 3, "P", False), "logit_backward": (_B, 4, "P", False),
    "gelu_backward": (_B, 36, "P", False), "silu_backward": (_B, 15, "P", False),
    "softplus_backward": (_B, 12, "P", False), "elu_backward": ((0, 5), 3, "P", False),
    "leaky_relu_backward": (_B, 2, "P", False), "hardtanh_backward": (_B, 2, "P", False),
    "hardswish_backward": (_B, 4, "P", False), "hardsigmoid_backward": (_B, 2, "P", False),
    "native_dropout_backward": (_B, 2, "S", False), "mse_loss_backward": (_T, 3, "P", False),
}

_BASE: dict[str, str] = {}  # registered short name -> OPS key
for _name, (_pos, _w, _rule, _inplace) in OPS.items():
    _BASE[_name] = _name
    if _inplace:
        _BASE[_name + "_"] = _name

# pow(x, c) for the exponents torch special-cases (x*x, x*x*x, sqrt, rsqrt, reciprocal, ...).
_POW_EXPONENT = {2.0: 1, 3.0: 2, 0.5: 1, -0.5: 2, -1.0: 1, -2.0: 2, 1.0: 1, 0.0: 0}


def intensity_note(flops: float, nbytes: float, what: str) -> str:
    ai = flops / nbytes if nbytes else 0.0
    return (f"{what} (approximate libdevice instruction count); at {ai:.2f} FLOP/B the op "
            f"remains memory-bound")


def _pow_weight(call: OpCall, notes: list[str]) -> float:
    if call.tensor(1) is not None or call.tensor(0) is None:
        return TRANSCENDENTAL["pow"]  # tensor exponent, or Scalar base: general pow
    e = parse_float(call.scalar(1))
    if e is None:
        notes.append("exponent not recorded: counted as a general pow")
        return TRANSCENDENTAL["pow"]
    return _POW_EXPONENT.get(e, TRANSCENDENTAL["pow"])


def _out_dtype(call: OpCall, rule: str, positions: tuple[int, ...], tensors: list[TensorArg]) -> str:
    if rule == "S":
        return tensors[0].dtype
    if rule == "B":
        return "bool"
    d = promote(call, (1, 2) if rule == "W" else positions) or tensors[0].dtype
    return to_float(d) if rule == "F" else d


def pointwise(call: OpCall) -> Cost | Unmodelled:
    short = call.name.split("::", 1)[1]
    base = _BASE[short]
    positions, weight, rule, _ = OPS[base]
    bad = shape_problem(call)
    if bad:
        return Unmodelled(bad, cause="bad_shapes")
    ops = [(i, call.tensor(i)) for i in positions]
    ops = [(i, t) for i, t in ops if t is not None]
    if not ops:  # an operand of a dtype traceana cannot size is its gap; none at all, a record that does not fit
        unknown = any(dtype_info(t) is None for t in call.types if t and t not in NON_TENSOR)
        return Unmodelled(f"{short}: no tensor operand of known dtype among arguments {positions}",
                          cause=None if unknown else "bad_shapes")
    tensors = [t for _, t in ops]
    inplace = short != base
    outs = [call.tensor(i) for i in range(max(positions) + 1, len(call.dims))]
    outs = [t for t in outs if t is not None]
    if inplace:
        self_t = call.tensor(0)
        if self_t is None:
            return Unmodelled(f"{short}: in-place op without a self tensor", cause="bad_shapes")
        shape, dtype = self_t.shape, self_t.dtype
    else:
        shape = broadcast(*(t.shape for t in tensors))
        if shape is None:
            return Unmodelled(f"{short}: operand shapes {[t.shape for t in tensors]} do not broadcast",
                              cause="bad_shapes")
        dtype = _out_dtype(call, rule, positions, tensors)
        if outs:  # out= tensor: fixes the dtype; any other trailing tensor means a corrupt record
            if len(outs) > 1 or (outs[0].shape != shape and outs[0].numel != 0):  # [0]: resized
                return Unmodelled(f"{short}: unexpected tensor arguments after the operands", cause="bad_shapes")
            dtype = outs[0].dtype
    notes: list[str] = []
    if base == "pow":
        weight = _pow_weight(call, notes)
    tr = Traffic()
    for i, t in ops:
        if i and is_python_scalar(t):
            continue  # a Python number: passed to the kernel by value
        name = ("self", "other")[i] if i < 2 else f"arg{i}"
        tr.read(name if t.shape else f"0-dim {name}", t)
    if inplace:
        tr.add("write", "self", self_t.stored_shape, self_t.itemsize)
    else:
        tr.write("out", shape, ITEMSIZE[dtype])
    n = 1
    for d in shape:
        n *= d
    flops = n * weight
    if weight > 4:
        notes.append(intensity_note(flops, tr.total, f"{base} counted as {weight} FLOPs/element"))
    compute = (promote(call, positions) or tensors[0].dtype) if rule == "B" else dtype
    return make(flops, tr, "pointwise", compute, per_element_expr(shape, weight, flops), notes=notes)


formula(*_BASE)(pointwise)


@formula("dropout", "native_dropout", "feature_dropout", "alpha_dropout")
def dropout(call: OpCall) -> Cost | Unmodelled:
    """(input, p, train). Training: read input, write output (+ a bool mask for native_dropout);
    2 FLOPs per element (compare with the random draw, scale). Eval or p == 0: no kernel."""
    (x,), err = need(call, 0)
    if err:
        return err
    p = parse_float(call.scalar(1))
    train = call.scalar(2)
    notes: list[str] = []
    if train == "False" or p == 0.0:
        tr = Traffic()
        return make(0, tr, "pointwise", x.dtype, "identity (eval mode or p = 0): 0 FLOPs",
                    notes=["returns its input: no kernel"])
    if p is None or train is None:
        notes.append("p / train not recorded: assumed training with p > 0")
    tr = Traffic().read("input", x).write("out", x.shape, x.itemsize)
    if call.name.endswith("native_dropout"):
        tr.write("mask(bool)", x.shape, 1)
    notes.append("random-number generation (Philox) not counted in FLOPs")
    flops = x.numel * 2
    return make(flops, tr, "pointwise", x.dtype, per_element_expr(x.shape, 2, flops), notes=notes)


# _foreach_<op>[_]: the op applied to every tensor of a TensorList (optimizer steps).
_FOREACH_OPS = ("add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max",
                "addcmul", "addcdiv", "lerp", "neg", "abs", "sqrt", "rsqrt", "exp", "log",
                "reciprocal", "sign", "sigmoid", "tanh", "pow")
_FOREACH = {f"_foreach_{op}{suffix}": (OPS[op][1], True)
            for op in _FOREACH_OPS for suffix in ("", "_")}
_FOREACH.update({"_foreach_copy_": (0, False), "_foreach_zero_": (0, False)})


@formula(*_FOREACH)
def foreach(call: OpCall) -> Cost | Unmodelled:
    bad = shape_problem(call)
    if bad:
        return Unmodelled(bad, cause="bad_shapes")
    weight, read_self = _FOREACH[call.name.split("::", 1)[1]]
    return foreach_list(call, weight, read_self)


def output_tensor(call: OpCall) -> tuple[tuple[int, ...], str, tuple[int, ...]] | None:
    """(shape, dtype, operand positions) of the tensor an element-wise op writes; None when the
    op is not one of OPS or its operands do not tell (the data-flow rules of fusion use this)."""
    short = call.name.split("::", 1)[-1]
    base = _BASE.get(short)
    if base is None:
        return None
    positions, _, rule, _ = OPS[base]
    tensors = [t for t in (call.tensor(i) for i in positions) if t is not None]
    if not tensors:
        return None
    if short != base:  # in place: self
        self_t = call.tensor(0)
        return (self_t.shape, self_t.dtype, positions) if self_t is not None else None
    shape = broadcast(*(t.shape for t in tensors))
    if shape is None:
        return None
    outs = [t for t in (call.tensor(i) for i in range(max(positions) + 1, len(call.dims))) if t is not None]
    dtype = outs[0].dtype if len(outs) == 1 else _out_dtype(call, rule, positions, tensors)
    return shape, dtype, positions
