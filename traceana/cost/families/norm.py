"""Softmax and normalisation layers (layer / RMS / batch / group / instance norm), fwd and bwd.

Bytes: the input read once (the minimum; batch norm training kernels usually read it twice, a
stats pass and a normalise pass, and the note says so), per-channel / per-feature tensors read
once, the output written once, plus the small saved statistics (mean, rstd) and gradients.
FLOPs per element (documented by each constant below) are small: these ops are memory-bound.
"""

from __future__ import annotations

from math import prod

from traceana.cost.families._common import ITEMSIZE, acc_dtype, dtype_from_enum, make, need
from traceana.cost.families.pointwise import TRANSCENDENTAL
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, parse_bool, parse_bools, parse_int, parse_ints, per_element_expr
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

EXP = TRANSCENDENTAL["exp"]
SOFTMAX = 4 + EXP  # row max, subtract, exp, row sum, divide
LOG_SOFTMAX = 4 + EXP  # row max, subtract, exp, row sum, subtract log(sum) (one log per row)
SOFTMAX_BWD = 4  # grad*y, row sum, subtract, multiply by y
LOG_SOFTMAX_BWD = 3 + EXP  # exp(y), row sum of grad, multiply, subtract
LAYER_NORM = 8  # mean 1 + variance 3 (sub, square, add) + normalise 2 + affine 2
LAYER_NORM_BWD = 13  # xhat 2, g*w 1, two row sums 3, grad_input 4, grad_weight 2, grad_bias 1
RMS_NORM = 4  # square-accumulate 2 + scale by rstd 1 + weight 1
RMS_NORM_BWD = 9  # xhat 1, g*w 1, row sum 2, grad_input 3, grad_weight 2
BATCH_NORM_TRAIN = 8  # statistics 4 + normalise 2 + affine 2
BATCH_NORM_EVAL = 2  # folded scale and shift: x*a + b
BATCH_NORM_BWD = 10  # sum(g) 1, sum(g*xhat) 3, grad_input 6
GROUP_NORM = 8
GROUP_NORM_BWD = 10

TWO_PASS = "training kernels usually read the input twice (statistics, then normalise); counted once"


def _cost(x: TensorArg, tr: Traffic, per: float, notes=(), estimated: bool = False) -> Cost:
    flops = x.numel * per
    return make(flops, tr, "norm", x.dtype, per_element_expr(x.shape, per, flops),
                estimated=estimated, notes=notes)


def _read_all(call: OpCall, tr: Traffic, labels: dict[int, str], skip: tuple[int, ...] = ()) -> None:
    for i in range(len(call.dims)):
        t = call.tensor(i)
        if t is not None and i not in skip:
            tr.read(labels.get(i, "reserve" if t.dtype == "uint8" else f"arg{i}"), t)


# ---------------------------------------------------------------- softmax


@formula("softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax")
def softmax(call: OpCall) -> Cost | Unmodelled:
    """softmax(self, dim, dtype) / _softmax(self, dim, half_to_float)."""
    (x,), err = need(call, 0)
    if err:
        return err
    short = call.name.split("::", 1)[1]
    if short.startswith("_") and short != "_safe_softmax":
        out = "fp32" if parse_bool(call.scalar(2)) else x.dtype
    else:
        out = dtype_from_enum(call.scalar(2)) or x.dtype
    tr = Traffic().read("input", x).write("out", x.shape, ITEMSIZE[out])
    return _cost(x, tr, LOG_SOFTMAX if "log" in short else SOFTMAX,
                 [f"exp counted as {EXP} FLOPs; memory-bound"])


@formula("_softmax_backward_data", "_log_softmax_backward_data")
def softmax_backward(call: OpCall) -> Cost | Unmodelled:
    """(grad_output, output, dim, input_dtype): read grad and output, write grad_input."""
    (g, y), err = need(call, 0, 1)
    if err:
        return err
    old = call.tensor(3)  # pre-1.10 schema passed self (only its dtype is used)
    out = dtype_from_enum(call.scalar(3)) or (old.dtype if old else g.dtype)
    tr = Traffic().read("grad_out", g).read("output", y).write("grad_input", g.shape, ITEMSIZE[out])
    return _cost(g, tr, LOG_SOFTMAX_BWD if "log" in call.name else SOFTMAX_BWD)


# ---------------------------------------------------------------- layer norm / RMS norm


def _normalized(call: OpCall, x: TensorArg, pos: int, w: TensorArg | None, notes: list[str]) -> int | None:
    """Elements per normalised row: prod(normalized_shape) (recorded, else the weight's shape)."""
    shp = parse_ints(call.scalar(pos))
    if shp is None:
        shp = list(w.shape) if w is not None else list(x.shape[-1:])
        if w is None:
            notes.append("normalized_shape not recorded: assumed the last dim")
    if len(shp) > len(x.shape) or tuple(shp) != x.shape[len(x.shape) - len(shp):]:
        return None
    return prod(shp)


@formula("layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm")
def layer_norm(call: OpCall) -> Cost | Unmodelled:
    """(input, normalized_shape, weight?, bias?, eps): write output + mean/rstd per row."""
    (x,), err = need(call, 0)
    if err:
        return err
    short = call.name.split("::", 1)[1]
    rms = "rms" in short
    w = call.tensor(2)
    notes: list[str] = []
    n = _normalized(call, x, 1, w, notes)
    if n is None:
        return Unmodelled(f"{short}: normalized_shape does not match input {x.shape}", cause="bad_shapes")
    rows = x.numel // n if n else 0
    tr = Traffic()
    _read_all(call, tr, {0: "input", 2: "weight", 3: "bias"})
    tr.write("out", x.shape, x.itemsize)
    stats = acc_dtype(x.dtype)
    if short == "native_layer_norm" or short == "layer_norm":
        tr.write("mean", (rows,), ITEMSIZE[stats]).write("rstd", (rows,), ITEMSIZE[stats])
    elif short == "_fused_rms_norm":
        tr.write("rstd", (rows,), ITEMSIZE[stats])
    if short in ("layer_norm", "rms_norm"):
        notes.append("composite: its child (native_layer_norm / _fused_rms_norm) does the work")
    affine = 1 if (w is not None or call.tensor(3) is not None) else 0
    per = (RMS_NORM - (1 - affine)) if rms else (LAYER_NORM - 2 * (1 - affine))
    return _cost(x, tr, per, notes)


def _mask(call: OpCall, pos: int, n: int) -> list[bool]:
    m = parse_bools(call.scalar(pos))
    return m if m is not None and len(m) == n else [True] * n


@formula("native_layer_norm_backward", "_fused_rms_norm_backward")
def layer_norm_backward(call: OpCall) -> Cost | Unmodelled:
    """LN: (grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask[3]);
    RMS: (grad_out, input, normalized_shape, rstd, weight?, output_mask[2])."""
    (g, x), err = need(call, 0, 1)
    if err:
        return err
    rms = "rms" in call.name
    p_w, p_mask = (4, 5) if rms else (5, 7)
    w = call.tensor(p_w)
    mask = _mask(call, p_mask, 2 if rms else 3)
    tr = Traffic()
    labels = {0: "grad_out", 1: "input", 3: "rstd" if rms else "mean", 4: "rstd", p_w: "weight"}
    _read_all(call, tr, labels, skip=(6,) if not rms else ())  # bias: only its presence matters
    if mask[0]:
        tr.write("grad_input", x.shape, x.itemsize)
    if w is not None:
        for i, name in ((1, "grad_weight"), (2, "grad_bias")):
            if i < len(mask) and mask[i]:
                tr.write(name, w.shape, w.itemsize)
    return _cost(x, tr, RMS_NORM_BWD if rms else LAYER_NORM_BWD)


# ---------------------------------------------------------------- batch / instance norm

# name -> training flag position (None: always eval)
_BN = {"batch_norm": 5, "_batch_norm_impl_index": 5, "native_batch_norm": 5, "cudnn_batch_norm": 5,
       "miopen_batch_norm": 5, "_native_batch_norm_legit": 5, "_native_batch_norm_legit_no_training": None,
       "instance_norm": 5, "_batch_norm_with_update": -1, "_batch_norm_no_update": None}


@formula(*_BN)
def batch_norm(call: OpCall) -> Cost | Unmodelled:
    """(input, weight, bias, running_mean, running_var, training, momentum, eps, ...)."""
    (x,), err = need(call, 0)
    if err:
        return err
    if len(x.shape) < 2:
        return Unmodelled(f"batch norm input {x.shape} has no channel dim", cause="bad_shapes")
    short = call.name.split("::", 1)[1]
    p_train = _BN[short]
    if short == "_native_batch_norm_legit" and len(call.dims) == 6:
        p_train = 3  # .no_stats overload
    notes: list[str] = []
    train = True if p_train == -1 else (False if p_train is None else parse_bool(call.scalar(p_train)))
    if train is None:
        train = True
        notes.append("training flag not recorded: assumed training")
    c = x.shape[1]
    stats = (x.shape[0] * c,) if short == "instance_norm" else (c,)
    tr = Traffic()
    _read_all(call, tr, {0: "input", 1: "weight", 2: "bias", 3: "running_mean", 4: "running_var"})
    tr.write("out", x.shape, x.itemsize)
    if train:
        s = ITEMSIZE[acc_dtype(x.dtype)]
        tr.write("save_mean", stats, s).write("save_invstd", stats, s)
        for i, name in ((3, "running_mean"), (4, "running_var")):
            rt = call.tensor(i)
            if rt is not None:  # momentum update of the running statistics
                tr.write(name, rt.shape, rt.itemsize)
        notes.append(TWO_PASS)
    if short in ("batch_norm", "instance_norm", "_batch_norm_impl_index"):
        notes.append("composite: its child (cudnn/miopen/native batch norm) does the work")
    return _cost(x, tr, BATCH_NORM_TRAIN if train else BATCH_NORM_EVAL, notes)


# name -> (input position, grad_out position, train flag position, output_mask position)
_BN_BWD = {"native_batch_norm_backward": (1, 0, 7, 9), "batch_norm_backward": (1, 0, 7, 9),
           "cudnn_batch_norm_backward": (0, 1, None, None), "miopen_batch_norm_backward": (0, 1, None, None),
           "_batch_norm_impl_index_backward": (1, 2, 8, 10)}


@formula(*_BN_BWD)
def batch_norm_backward(call: OpCall) -> Cost | Unmodelled:
    p_x, p_g, p_train, p_mask = _BN_BWD[call.name.split("::", 1)[1]]
    (x, g), err = need(call, p_x, p_g)
    if err:
        return err
    if len(x.shape) < 2:
        return Unmodelled(f"batch norm input {x.shape} has no channel dim", cause="bad_shapes")
    train = parse_bool(call.scalar(p_train)) if p_train is not None else True
    mask = _mask(call, p_mask, 3) if p_mask is not None else [True] * 3
    tr = Traffic()
    w_pos = max(p_x, p_g) + 1
    names = ("weight", "running_mean", "running_var", "save_mean", "save_invstd")
    labels = {p_x: "input", p_g: "grad_out", **{w_pos + i: n for i, n in enumerate(names)}}
    _read_all(call, tr, labels)
    if mask[0]:
        tr.write("grad_input", x.shape, x.itemsize)
    w = call.tensor(w_pos)
    cs = w.itemsize if w is not None else ITEMSIZE[acc_dtype(x.dtype)]
    for i, name in ((1, "grad_weight"), (2, "grad_bias")):
        if mask[i]:
            tr.write(name, (x.shape[1],), cs)
    return _cost(x, tr, BATCH_NORM_BWD if train is not False else BATCH_NORM_EVAL)


# ---------------------------------------------------------------- group norm


@formula("group_norm", "native_group_norm")
def group_norm(call: OpCall) -> Cost | Unmodelled:
    """group_norm(input, num_groups, weight, bias, eps, cudnn) /
    native_group_norm(input, weight, bias, N, C, HxW, group, eps): out + mean/rstd per (N, group)."""
    (x,), err = need(call, 0)
    if err:
        return err
    native = call.name.endswith("native_group_norm")
    groups = parse_int(call.scalar(6 if native else 1))
    notes: list[str] = []
    if groups is None:
        groups = 1
        notes.append("num_groups not recorded: assumed 1 (statistics size only)")
    if len(x.shape) < 2 or groups <= 0 or x.shape[1] % groups:
        return Unmodelled(f"group norm input {x.shape} cannot be split into {groups} groups", cause="bad_shapes")
    n = x.shape[0]
    tr = Traffic()
    _read_all(call, tr, {0: "input", 1 if native else 2: "weight", 2 if native else 3: "bias"})
    tr.write("out", x.shape, x.itemsize)
    tr.write("mean", (n, groups), x.itemsize).write("rstd", (n, groups), x.itemsize)
    if not native:
        notes.append("composite: its child native_group_norm does the work")
    return _cost(x, tr, GROUP_NORM, notes)


@formula("native_group_norm_backward")
def group_norm_backward(call: OpCall) -> Cost | Unmodelled:
    """(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)."""
    (g, x), err = need(call, 0, 1)
    if err:
        return err
    mask = _mask(call, 9, 3)
    tr = Traffic()
    _read_all(call, tr, {0: "grad_out", 1: "input", 2: "mean", 3: "rstd", 4: "weight"})
    if mask[0]:
        tr.write("grad_input", x.shape, x.itemsize)
    c = x.shape[1] if len(x.shape) > 1 else 1
    for i, name in ((1, "grad_weight"), (2, "grad_bias")):
        if mask[i]:
            tr.write(name, (c,), x.itemsize)
    return _cost(x, tr, GROUP_NORM_BWD)
