"""Reductions (sum, mean, max, norm, var, any, ...), scans (cumsum, cumprod) and losses.

FLOPs: 1 per input element (the add / compare / multiply that folds it in); var, std and
norms do a few more per element, but they are bandwidth-bound by a wide margin either way.
Bytes: the input read once at its stored size, the reduced output(s) written once.
dim / keepdim come from Concrete Inputs; a missing dim argument, None or [] reduces every dim.
When the trace recorded the dim argument without its value (no Concrete Inputs), the output is
taken as fully reduced and the Cost is marked estimated (the read dominates anyway).
"""

from __future__ import annotations

from msgspec.structs import replace

from traceana.cost.families._common import (
    ITEMSIZE,
    acc_dtype,
    dtype_from_enum,
    make,
    need,
    shape_problem,
    type_at,
)
from traceana.cost.families.memory import list_itemsize, list_shapes
from traceana.cost.families.pointwise import pointwise
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, parse_bool, parse_int, parse_ints, per_element_expr, reduce_shape
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

_INTS = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")

# name -> (dim position, keepdim position, dtype position, output rule, arity that means "all dims")
# rules: S same dtype as input, I int64 for integer/bool input, L int64 indices, B bool,
#        SL values + int64 indices (when a dim is given), SS two outputs of the input dtype.
_RED: dict[str, tuple] = {
    "sum": (1, 2, 3, "I", 2), "nansum": (1, 2, 3, "I", 2), "mean": (1, 2, 3, "S", 2),
    "prod": (1, 2, 3, "I", 2), "amax": (1, 2, None, "S", 1), "amin": (1, 2, None, "S", 1),
    "max": (1, 2, None, "SL", 1), "min": (1, 2, None, "SL", 1), "argmax": (1, 2, None, "L", 1),
    "argmin": (1, 2, None, "L", 1), "any": (1, 2, None, "B", 1), "all": (1, 2, None, "B", 1),
    "norm": (2, 3, 4, "S", 3), "linalg_vector_norm": (2, 3, 4, "S", 1), "linalg_norm": (2, 3, 4, "S", 1),
    "var": (1, 3, None, "S", 2), "std": (1, 3, None, "S", 2), "var_mean": (1, 3, None, "SS", 2),
    "std_mean": (1, 3, None, "SS", 2), "logsumexp": (1, 2, None, "S", 1),
    "count_nonzero": (1, None, None, "L", 1),
}

NOT_RECORDED = "dim not recorded (no Concrete Inputs): output assumed fully reduced"


def _dims(call: OpCall, pos: int, all_arity: int) -> tuple[list[int] | None, bool]:
    """(dims or None for all, known?)."""
    if len(call.dims) <= all_arity or pos >= len(call.dims):
        return None, True
    raw = call.scalar(pos)
    if raw is None:
        recorded = call.concrete is not None or type_at(call, pos) in ("", "None")
        return None, recorded
    vals = parse_ints(raw)
    return vals, vals is not None


def _out_dtype(rule: str, x: TensorArg, override: str | None) -> list[str]:
    if override:
        return [override]
    if rule == "I":
        return ["int64" if x.dtype in _INTS else x.dtype]
    return {"S": [x.dtype], "L": ["int64"], "B": ["bool"], "SL": [x.dtype, "int64"],
            "SS": [x.dtype, x.dtype]}[rule]


@formula(*_RED)
def reduction(call: OpCall) -> Cost | Unmodelled:
    short = call.name.split("::", 1)[1]
    if short in ("max", "min") and call.tensor(1) is not None:  # max.other: elementwise
        return pointwise(replace(call, name="aten::maximum" if short == "max" else "aten::minimum"))
    p_dim, p_keep, p_dtype, rule, all_arity = _RED[short]
    (x,), err = need(call, 0)
    if err:
        return err
    dims, known = _dims(call, p_dim, all_arity)
    keep = bool(parse_bool(call.scalar(p_keep))) if p_keep is not None else False
    out = reduce_shape(x.shape, dims if known else None, keep)
    if out is None:
        return Unmodelled(f"{short}: dims {dims} out of range for shape {x.shape}", cause="bad_shapes")
    if rule == "SL" and dims is None and known:
        rule = "S"  # max(self): a single value, no indices
    override = None
    if p_dtype is not None:  # sum(self, dtype) / norm(self, p, dtype): dtype is the last argument
        override = dtype_from_enum(call.scalar(p_dtype if len(call.dims) > all_arity else all_arity - 1))
    tr = Traffic().read("input", x)
    for i, d in enumerate(_out_dtype(rule, x, override)):
        tr.write("out" if i == 0 else "out2", out, ITEMSIZE[d])
    flops = x.numel
    notes = [] if known else [NOT_RECORDED]
    return make(flops, tr, "reduction", x.dtype, per_element_expr(x.shape, 1, flops),
                estimated=not known, notes=notes)


@formula("cumsum", "cumprod", "cumsum_", "cumprod_", "logcumsumexp", "cummax", "cummin")
def scan(call: OpCall) -> Cost | Unmodelled:
    """(self, dim, dtype): read the input, write a same-shape output; 1 FLOP per element."""
    pos = next((i for i in range(len(call.dims)) if call.tensor(i) is not None), None)
    if pos is None:
        return Unmodelled(f"{call.name}: no tensor argument")
    (x,), err = need(call, pos)
    if err:
        return err
    short = call.name.split("::", 1)[1]
    to_long = short.rstrip("_") in ("cumsum", "cumprod") and x.dtype in _INTS
    dtype = dtype_from_enum(call.scalar(pos + 2)) or ("int64" if to_long else x.dtype)
    tr = Traffic().read("input", x).write("out", x.shape, ITEMSIZE[dtype])
    if short in ("cummax", "cummin"):
        tr.write("indices", x.shape, 8)
    return make(x.numel, tr, "reduction", x.dtype, per_element_expr(x.shape, 1, x.numel))


# ---------------------------------------------------------------- losses

# name -> (FLOPs per element, reduction position); inputs (self, target) read, output by reduction
_LOSS = {"mse_loss": (3, 2), "l1_loss": (3, 2), "smooth_l1_loss": (5, 2), "huber_loss": (5, 2),
         "binary_cross_entropy": (20, 3), "binary_cross_entropy_with_logits": (33, 4),
         "soft_margin_loss": (30, 2)}


@formula(*_LOSS)
def loss(call: OpCall) -> Cost | Unmodelled:
    """Elementwise loss then (reduction 1 mean / 2 sum) a reduction to a scalar, or (0) none."""
    (x, y), err = need(call, 0, 1)
    if err:
        return err
    short = call.name.split("::", 1)[1]
    per, p_red = _LOSS[short]
    red = parse_int(call.scalar(p_red))
    notes = [] if red is not None else ["reduction not recorded: assumed mean (scalar output)"]
    out = x.shape if red == 0 else ()
    tr = Traffic().read("input", x).read("target", y)
    for i in range(2, p_red):
        t = call.tensor(i)
        if t is not None:
            tr.read("weight", t)
    tr.write("out", out, x.itemsize)
    flops = x.numel * per
    if per > 4:
        notes.append(f"{short} counted as {per} FLOPs/element (log/exp weighted, approximate)")
    return make(flops, tr, "reduction", x.dtype, per_element_expr(x.shape, per, flops), notes=notes)


@formula("nll_loss_forward", "nll_loss", "nll_loss_nd", "nll_loss2d_forward")
def nll_loss(call: OpCall) -> Cost | Unmodelled:
    """(self [N, C, ...], target [N, ...], weight?, reduction, ignore_index): reads one
    log-probability per target (plus the target), writes a scalar (or N values) + total_weight."""
    (x, t), err = need(call, 0, 1)
    if err:
        return err
    red = parse_int(call.scalar(3))
    n = t.numel
    tr = Traffic().add("read", "gathered log-probs", t.shape, x.itemsize).read("target", t)
    w = call.tensor(2)
    if w is not None:
        tr.add("read", "weight rows", t.shape, w.itemsize)
    tr.write("out", t.shape if red == 0 else (), x.itemsize)
    if call.name.endswith("_forward"):
        tr.write("total_weight", (), x.itemsize)
    return make(n, tr, "reduction", x.dtype, per_element_expr(t.shape, 1, n, "targets"))


@formula("nll_loss_backward", "nll_loss2d_backward")
def nll_loss_backward(call: OpCall) -> Cost | Unmodelled:
    """(grad_output, self, target, weight, reduction, ignore_index, total_weight): grad_input has
    self's shape: written in full (zeros), one value per target scattered into it."""
    (go, x, t), err = need(call, 0, 1, 2)
    if err:
        return err
    tr = Traffic().read("grad_out", go).read("target", t).write("grad_input", x.shape, x.itemsize)
    return make(t.numel, tr, "reduction", x.dtype, per_element_expr(t.shape, 1, t.numel, "targets"))


@formula("_foreach_norm")
def foreach_norm(call: OpCall) -> Cost | Unmodelled:
    """(tensors, ord, dtype): every tensor read once, one scalar per tensor written; 2 FLOPs/elem."""
    if shape_problem(call):
        return Unmodelled(shape_problem(call), cause="bad_shapes")
    items = list_shapes(call, 0)
    if items is None:
        return Unmodelled("TensorList shapes not recorded", cause="shapes_not_recorded")
    notes: list[str] = []
    size, dtype, est = list_itemsize(call, notes)
    n = sum(1 for _ in items)
    total = sum(s for _, s in items)
    tr = Traffic().raw("read", f"{n} tensors", total * size).raw("write", f"{n} norms", n * 4)
    return make(2 * total, tr, "reduction", acc_dtype(dtype), f"{total:,} elements x 2 FLOPs = {2 * total:,}",
                estimated=est, notes=notes)
