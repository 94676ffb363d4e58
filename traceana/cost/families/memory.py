"""Data movement: views and allocations (free), fills, copies and casts, cat / stack, repeat.

All 0 FLOPs. Bytes: what reaches DRAM: a fill writes its tensor, a copy reads the source and
writes the destination, a cast writes in the target dtype. Composite ops (to, contiguous, clone,
zeros, ...) are costed as the copy / fill their child op performs, and say so; views and
allocations cost nothing (no kernel runs).
"""

from __future__ import annotations

from math import isfinite, prod

from traceana.cost.families._common import (
    ITEMSIZE,
    dtype_from_enum,
    itemsize_from_kernels,
    make,
    need,
    shape_problem,
    type_at,
)
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, broadcast, parse_ints
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

VIEWS = (
    "view", "_unsafe_view", "view_as", "reshape", "_reshape_alias", "as_strided", "as_strided_",
    "transpose", "transpose_", "t", "t_", "permute", "expand", "expand_as", "broadcast_to",
    "unsqueeze", "unsqueeze_", "squeeze", "squeeze_", "slice", "select", "narrow", "split",
    "split_with_sizes", "unsafe_split", "chunk", "unbind", "flatten", "unflatten", "detach", "detach_",
    "alias", "numpy_T", "lift_fresh", "resolve_conj", "resolve_neg", "movedim", "swapaxes",
    "diagonal", "unfold", "view_as_real", "view_as_complex", "_nested_view_from_buffer",
    "broadcast_tensors", "meshgrid", "conj", "unflatten_dense_tensors",
)
BOOKKEEPING = ("record_stream", "result_type", "is_pinned", "can_cast", "promote_types", "is_same_size")
ALLOCS = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_",
          "resize_as_", "set_", "_empty_affine_quantized")
COMPOSITE = "composite op: the DRAM traffic is done by its child kernel op (also costed)"


def _zero(call: OpCall, what: str) -> Cost:
    t = call.tensor(0)
    return make(0, Traffic(), "memory", t.dtype if t else "fp32", f"{what}: 0 FLOPs",
                notes=[f"{what}: no kernel, no DRAM traffic"])


@formula(*VIEWS)
def view(call: OpCall) -> Cost:
    """Views only rewrite metadata (reshape copies via a child clone/_unsafe_view when it must)."""
    return _zero(call, "view")


@formula(*ALLOCS)
def alloc(call: OpCall) -> Cost:
    return _zero(call, "allocation")


@formula(*BOOKKEEPING)
def bookkeeping(call: OpCall) -> Cost:
    return make(0, Traffic(), "other", "fp32", "bookkeeping: 0 FLOPs", notes=["host-side only: no kernel"])


def _write(call: OpCall, label: str, shape: tuple[int, ...], dtype: str, notes=()) -> Cost:
    tr = Traffic().write(label, shape, ITEMSIZE[dtype])
    return make(0, tr, "memory", dtype, "fill: 0 FLOPs", notes=notes)


RNG_FILLS = ("normal_", "uniform_", "random_", "bernoulli_", "exponential_", "geometric_",
             "log_normal_", "cauchy_")


@formula("fill_", "zero_", *RNG_FILLS)
def fill_(call: OpCall) -> Cost | Unmodelled:
    """Overwrites self without reading it: write self once at its stored size."""
    (t,), err = need(call, 0)
    if err:
        return err
    tr = Traffic().add("write", "self", t.stored_shape, t.itemsize)
    rng = call.name.split("::", 1)[1] in RNG_FILLS
    notes = ["random-number generation (Philox) not counted in FLOPs"] if rng else []
    return make(0, tr, "memory", t.dtype, "fill: 0 FLOPs", notes=notes)


def _size_and_dtype(call: OpCall, size_pos: int | None, dtype_pos: int) -> tuple | Unmodelled:
    """Output (shape, dtype) of a factory op from its recorded size list / template tensor."""
    notes: list[str] = []
    src = call.tensor(0)
    if size_pos is None:
        if src is None:
            return Unmodelled(f"{call.name}: no template tensor")
        shape = src.shape
    else:
        shape = parse_ints(call.scalar(size_pos))
        if shape is None or any(d < 0 for d in shape):
            return Unmodelled(f"{call.name}: output size not recorded", cause="scalars_not_recorded")
        shape = tuple(shape)
    dtype = dtype_from_enum(call.scalar(dtype_pos))
    if dtype is None:
        dtype = src.dtype if src is not None else "fp32"
        if call.scalar(dtype_pos) is None and call.concrete is None:
            notes.append(f"dtype not recorded: assumed {dtype}")
    return shape, dtype, notes


# name -> (size position or None for *_like / new_* templates, dtype position)
_FACTORIES = {
    "zeros": (0, 1), "ones": (0, 1), "full": (0, 2), "scalar_tensor": (None, 1),
    "zeros_like": (None, 1), "ones_like": (None, 1), "full_like": (None, 2),
    "new_zeros": (1, 2), "new_ones": (1, 2), "new_full": (1, 3), "randn": (0, 1), "rand": (0, 1),
    "randn_like": (None, 1), "rand_like": (None, 1),
}


@formula(*_FACTORIES)
def factory(call: OpCall) -> Cost | Unmodelled:
    size_pos, dtype_pos = _FACTORIES[call.name.split("::", 1)[1]]
    bad = shape_problem(call)
    if bad:
        return Unmodelled(bad, cause="bad_shapes")
    if call.name.endswith("scalar_tensor"):
        r = ((), dtype_from_enum(call.scalar(1)) or "fp32", [])
    else:
        r = _size_and_dtype(call, size_pos, dtype_pos)
    if isinstance(r, Unmodelled):
        return r
    shape, dtype, notes = r
    return _write(call, "out", shape, dtype, [COMPOSITE] + notes)


def _copy_cost(src: TensorArg, shape: tuple[int, ...], dtype: str, notes=(), estimated=False) -> Cost:
    tr = Traffic().read("src", src).write("dst", shape, ITEMSIZE[dtype])
    return make(0, tr, "memory", dtype, "copy: 0 FLOPs", notes=notes, estimated=estimated)


@formula("copy_")
def copy_(call: OpCall) -> Cost | Unmodelled:
    """copy_(dst, src): read src, write dst (dst is overwritten, not read)."""
    (dst, src), err = need(call, 0, 1)
    if err:
        return err
    if broadcast(dst.shape, src.shape) != dst.shape:
        return Unmodelled(f"copy_: src {src.shape} does not broadcast to dst {dst.shape}", cause="bad_shapes")
    tr = Traffic().read("src", src).add("write", "dst", dst.stored_shape, dst.itemsize)
    return make(0, tr, "memory", dst.dtype, "copy: 0 FLOPs")


def _cast_target(call: OpCall, pos: int, src: TensorArg, notes: list[str]) -> str:
    raw = call.scalar(pos)
    d = dtype_from_enum(raw)
    if d is not None:
        return d
    if call.concrete is None and type_at(call, pos) != "":
        notes.append(f"target dtype not recorded: assumed unchanged ({src.dtype})")
    return src.dtype


@formula("_to_copy", "to", "type_as")
def to_copy(call: OpCall) -> Cost | Unmodelled:
    """Cast / device move: read the input, write it in the target dtype.

    to(...): dtype at 1 (to.dtype, to.dtype_layout), at 2 (to.device, 6 arguments), or the dtype of
    a tensor at 1 (to.other, type_as). aten::to with nothing to change returns self (no child)."""
    (src,), err = need(call, 0)
    if err:
        return err
    notes: list[str] = []
    short = call.name.split("::", 1)[1]
    other = call.tensor(1)
    if other is not None:
        dtype = other.dtype
    else:
        pos = 2 if short == "to" and len(call.dims) == 6 else 1
        dtype = _cast_target(call, pos, src, notes)
    guessed = bool(notes)
    if short != "_to_copy":
        notes.append(COMPOSITE + "; a no-op (0 bytes) when nothing changes")
    return _copy_cost(src, src.shape, dtype, notes, estimated=guessed)


@formula("clone", "contiguous", "flip", "roll", "triu", "tril", "_conj_physical",
         "conj_physical", "detach_copy", "alias_copy")
def clone(call: OpCall) -> Cost | Unmodelled:
    """Read the input once, write a same-size copy. contiguous() of a contiguous input is free."""
    (src,), err = need(call, 0)
    if err:
        return err
    short = call.name.split("::", 1)[1]
    if short == "contiguous" and src.strides is not None and _is_contiguous(src):
        return _zero(call, "contiguous() of a contiguous tensor")
    notes = [COMPOSITE] if short in ("clone", "contiguous") else []
    return _copy_cost(src, src.shape, src.dtype, notes)


def _is_contiguous(t: TensorArg) -> bool:
    expect = 1
    for d, s in zip(reversed(t.shape), reversed(t.strides or ())):
        if d != 1 and s != expect:
            return False
        expect *= d
    return True


@formula("repeat")
def repeat(call: OpCall) -> Cost | Unmodelled:
    (src,), err = need(call, 0)
    if err:
        return err
    reps = parse_ints(call.scalar(1))
    if reps is None or len(reps) < len(src.shape) or any(r < 0 for r in reps):
        return Unmodelled("repeat: repeats not recorded", cause="scalars_not_recorded")
    shape = (1,) * (len(reps) - len(src.shape)) + src.shape
    return _copy_cost(src, tuple(s * r for s, r in zip(shape, reps)), src.dtype)


@formula("constant_pad_nd")
def constant_pad_nd(call: OpCall) -> Cost | Unmodelled:
    (src,), err = need(call, 0)
    if err:
        return err
    pad = parse_ints(call.scalar(1))
    if pad is None or len(pad) % 2 or len(pad) // 2 > len(src.shape):
        return Unmodelled("constant_pad_nd: pad not recorded", cause="scalars_not_recorded")
    shape = list(src.shape)
    for i in range(len(pad) // 2):
        shape[-1 - i] += pad[2 * i] + pad[2 * i + 1]
    if min(shape, default=0) < 0:
        return Unmodelled(f"constant_pad_nd: negative output size {shape}", cause="bad_shapes")
    return _copy_cost(src, tuple(shape), src.dtype)


@formula("arange")
def arange(call: OpCall) -> Cost | Unmodelled:
    """arange(end, dtype, ...) / .start(start, end, dtype, ...) / .start_step(start, end, step,
    dtype, ...) / .start_out(start, end, step, out): ceil((end - start) / step) elements written."""
    n = len(call.dims)
    out_t = call.tensor(n - 1) if n else None
    lead = {5: 1, 6: 2, 7: 3, 4: 3}.get(n)
    if lead is None:
        return Unmodelled(f"arange: unexpected argument count {n}")
    raw = [call.scalar(i) for i in range(lead)]
    try:
        vals = [float(v) for v in raw]  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return Unmodelled("arange: start / end / step not recorded", cause="scalars_not_recorded")
    start, end, step = (0.0, vals[0], 1.0) if lead == 1 else (vals[0], vals[1], vals[2] if lead == 3 else 1.0)
    if step == 0 or not all(isfinite(v) for v in (start, end, step)):
        return Unmodelled(f"arange: unusable start / end / step {raw}")
    count = max(0, -int(-(end - start) // step))
    if out_t is not None:
        dtype = out_t.dtype
    else:
        ints = all(v is not None and "." not in v and "e" not in v for v in raw)
        dtype = dtype_from_enum(call.scalar(lead)) or ("int64" if ints else "fp32")
    return _write(call, "out", (count,), dtype)


@formula("nonzero", "argwhere")
def nonzero(call: OpCall) -> Cost | Unmodelled:
    """Reads the input; the index output is data-dependent and not counted."""
    (x,), err = need(call, 0)
    if err:
        return err
    tr = Traffic().read("input", x)
    return make(x.numel, tr, "memory", x.dtype, f"{x.numel:,} compares",
                estimated=True, notes=["output size is data-dependent: its write is not counted"])


@formula("item", "_local_scalar_dense", "is_nonzero")
def item(call: OpCall) -> Cost | Unmodelled:
    (t,), err = need(call, 0)
    if err:
        return err
    tr = Traffic().read("element", TensorArg((), t.type_str))
    return make(0, tr, "memory", t.dtype, "device->host read: 0 FLOPs",
                notes=["synchronises the host with the device"])


# ---------------------------------------------------------------- TensorLists


def list_shapes(call: OpCall, i: int) -> list[tuple[tuple[int, ...], int]] | None:
    """(shape, stored numel) of each tensor of the TensorList at i; None if not recorded."""
    shapes = call.tensor_list(i)
    if not shapes:
        return None
    strides = call.strides[i] if call.strides is not None and i < len(call.strides) else None
    out = []
    for j, shp in enumerate(shapes):
        st = strides[j] if isinstance(strides, tuple) and j < len(strides) else None
        if isinstance(st, tuple) and len(st) == len(shp):
            stored = prod(d for d, s in zip(shp, st) if s != 0)
        else:
            stored = prod(shp)
        out.append((shp, stored))
    return out


def list_itemsize(call: OpCall, notes: list[str]) -> tuple[float, str, bool]:
    """Element size of a TensorList (its dtype is not recorded): from kernel names, else 4 B."""
    hint = itemsize_from_kernels(call)
    if hint is not None:
        notes.append(f"TensorList dtype not recorded: {hint[2]} taken from the kernel name")
        return hint[0], hint[1], False
    notes.append("TensorList dtype not recorded: assumed 4-byte elements (fp32)")
    return 4.0, "fp32", True


def foreach_list(call: OpCall, weight: float, read_self: bool) -> Cost | Unmodelled:
    """A _foreach_ op: every TensorList argument read (self only if read_self), plus any single
    tensor operand; the result list (self when in-place) written. Lists share self's shapes."""
    bad = shape_problem(call)
    if bad:
        return Unmodelled(bad, cause="bad_shapes")
    items = list_shapes(call, 0)
    if items is None:
        return Unmodelled("TensorList shapes not recorded", cause="shapes_not_recorded")
    notes: list[str] = []
    size, dtype, est = list_itemsize(call, notes)
    n = sum(prod(s) for s, _ in items)
    stored = sum(st for _, st in items)
    lists = [i for i, t in enumerate(call.types) if t == "TensorList" and (i or read_self)]
    tr = Traffic()
    for i in lists:
        tr.raw("read", "self" if i == 0 else f"list{i}", stored * size, f"{len(items)} tensors")
    for t in (call.tensor(i) for i in range(1, len(call.dims))):
        if t is not None:
            tr.read("tensor", t)
    tr.raw("write", "self" if call.name.endswith("_") else "out", n * size, f"{n:,} elements")
    expr = f"{n:,} elements x {weight:g} FLOP{'s' if weight != 1 else ''} = {n * weight:,.0f}"
    return make(n * weight, tr, "pointwise" if weight else "memory", dtype, expr,
                estimated=est, notes=notes)


@formula("cat", "_cat", "stack", "concat", "concatenate", "hstack", "vstack", "flatten_dense_tensors")
def cat(call: OpCall) -> Cost | Unmodelled:
    """Read every input once, write their concatenation (sum of numels)."""
    bad = shape_problem(call)
    if bad:
        return Unmodelled(bad, cause="bad_shapes")
    pos = next((i for i, t in enumerate(call.types) if t in ("TensorList", "GenericList")), 0)
    items = list_shapes(call, pos)
    if items is None:
        return Unmodelled("TensorList shapes not recorded", cause="shapes_not_recorded")
    notes: list[str] = []
    size, dtype, est = list_itemsize(call, notes)
    n = sum(prod(s) for s, _ in items)
    stored = sum(st for _, st in items)
    tr = Traffic().raw("read", f"{len(items)} inputs", stored * size, f"{stored:,} elements")
    tr.raw("write", "out", n * size, f"{n:,} elements x {size:g} B")
    return make(0, tr, "memory", dtype, "copy: 0 FLOPs", estimated=est, notes=notes)
