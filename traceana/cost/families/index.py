"""Gathers and scatters: embedding, index_select, gather, scatter(_add), index, index_put_,
index_add_ / index_copy_ / index_fill_, and the backward ops that rebuild a dense gradient.

Bytes count only the elements really touched: a gather reads the index tensor plus one source
element per output element and writes the output; a scatter reads the index and the source and
writes (read-modify-writes, for accumulating forms) one destination element per source element.
Repeated indices are counted per lookup (the cache may serve repeats; DRAM may see less).
FLOPs are 0 except where values are accumulated (1 add per accumulated element).
"""

from __future__ import annotations

from math import prod

from traceana.cost.families._common import make, need
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, broadcast, norm_dim, parse_bool, parse_int, parse_ints, per_element_expr
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

NO_INDEX = "index tensors not recorded: their reads are not counted"


def _cost(tr: Traffic, dtype: str, flops: int = 0, shape=None, notes=(), estimated=False) -> Cost:
    expr = per_element_expr(shape, 1, flops, "accumulated elements") if flops else "gather/scatter: 0 FLOPs"
    return make(flops, tr, "index", dtype, expr, estimated=estimated, notes=notes)


@formula("embedding")
def embedding(call: OpCall) -> Cost | Unmodelled:
    """(weight [V, D], indices, padding_idx, scale_grad_by_freq, sparse): the gathered rows only."""
    (w, idx), err = need(call, 0, 1)
    if err:
        return err
    if len(w.shape) != 2:
        return Unmodelled(f"embedding weight {w.shape} is not 2-D")
    rows = idx.shape + (w.shape[1],)
    tr = Traffic().read("indices", idx).add("read", "gathered rows", rows, w.itemsize)
    tr.write("out", rows, w.itemsize)
    return _cost(tr, w.dtype, notes=["repeated indices counted per lookup"])


@formula("embedding_dense_backward", "embedding_backward")
def embedding_backward(call: OpCall) -> Cost | Unmodelled:
    """(grad_output [..., D], indices, num_weights, padding_idx, scale_grad_by_freq[, sparse]):
    the dense [num_weights, D] gradient written in full, one add per looked-up element."""
    (g, idx), err = need(call, 0, 1)
    if err:
        return err
    nw = parse_int(call.scalar(2))
    if nw is None or nw < 0 or not g.shape:
        return Unmodelled("embedding backward: num_weights not recorded", cause="scalars_not_recorded")
    d = g.shape[-1]
    tr = Traffic().read("grad_out", g).read("indices", idx).write("grad_weight", (nw, d), g.itemsize)
    n = idx.numel * d
    return _cost(tr, g.dtype, n, idx.shape + (d,),
                 ["sort/segment-reduce scratch traffic of the CUDA kernel not counted"])


def _dim(call: OpCall, pos: int, rank: int) -> int | None:
    d = parse_int(call.scalar(pos))
    return None if d is None else norm_dim(d, rank)


@formula("index_select")
def index_select(call: OpCall) -> Cost | Unmodelled:
    """(self, dim, index): out = self with dim resized to index.numel."""
    (x, idx), err = need(call, 0, 2)
    if err:
        return err
    d = _dim(call, 1, len(x.shape))
    notes = []
    if d is None:
        d = 0
        notes.append("dim not recorded: assumed 0")
    out = x.shape[:d] + (idx.numel,) + x.shape[d + 1:] if x.shape else (idx.numel,)
    tr = Traffic().read("index", idx).add("read", "selected", out, x.itemsize).write("out", out, x.itemsize)
    return _cost(tr, x.dtype, notes=notes, estimated=bool(notes))


@formula("gather")
def gather(call: OpCall) -> Cost | Unmodelled:
    """(self, dim, index, sparse_grad): out has index's shape."""
    (x, idx), err = need(call, 0, 2)
    if err:
        return err
    tr = Traffic().read("index", idx).add("read", "gathered", idx.shape, x.itemsize)
    tr.write("out", idx.shape, x.itemsize)
    return _cost(tr, x.dtype)


def _scatter(call: OpCall, x: TensorArg, idx: TensorArg, src: TensorArg | None, accumulate: bool,
             inplace: bool) -> Cost:
    tr = Traffic()
    if not inplace:
        tr.read("self", x)  # out-of-place: copy self, then scatter into the copy
    tr.read("index", idx)
    if src is not None:
        tr.add("read", "src", idx.shape, src.itemsize)
    if accumulate and inplace:
        tr.add("read", "dst elements", idx.shape, x.itemsize)
    if inplace:
        tr.add("write", "dst elements", idx.shape, x.itemsize)
    else:
        tr.write("out", x.shape, x.itemsize)
    return _cost(tr, x.dtype, idx.numel if accumulate else 0, idx.shape)


@formula("scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_")
def scatter(call: OpCall) -> Cost | Unmodelled:
    """(self, dim, index, src | value[, reduce]): one destination element per index element."""
    (x, idx), err = need(call, 0, 2)
    if err:
        return err
    short = call.name.split("::", 1)[1]
    accumulate = "add" in short or "reduce" in short
    return _scatter(call, x, idx, call.tensor(3), accumulate, short.endswith("_"))


@formula("gather_backward")
def gather_backward(call: OpCall) -> Cost | Unmodelled:
    """(grad, self, dim, index, sparse_grad) = zeros(self).scatter_add_(dim, index, grad)."""
    (g, x, idx), err = need(call, 0, 1, 3)
    if err:
        return err
    tr = Traffic().read("grad", g).read("index", idx).write("grad_input", x.shape, g.itemsize)
    return _cost(tr, g.dtype, idx.numel, idx.shape)


@formula("index_add_", "index_add", "index_copy_", "index_copy")
def index_add(call: OpCall) -> Cost | Unmodelled:
    """(self, dim, index, source[, alpha]): source.numel destination elements written
    (read-modify-written by index_add)."""
    (x, idx, src), err = need(call, 0, 2, 3)
    if err:
        return err
    short = call.name.split("::", 1)[1]
    add = short.startswith("index_add")
    tr = Traffic()
    if not short.endswith("_"):
        tr.read("self", x)
    tr.read("index", idx).read("source", src)
    if add and short.endswith("_"):
        tr.add("read", "dst elements", src.shape, x.itemsize)
    if short.endswith("_"):
        tr.add("write", "dst elements", src.shape, x.itemsize)
    else:
        tr.write("out", x.shape, x.itemsize)
    return _cost(tr, x.dtype, src.numel if add else 0, src.shape)


@formula("index_fill_", "index_fill")
def index_fill(call: OpCall) -> Cost | Unmodelled:
    """(self, dim, index, value): index.numel slices of self written."""
    (x, idx), err = need(call, 0, 2)
    if err:
        return err
    d = _dim(call, 1, len(x.shape))
    if d is None or not x.shape:
        return Unmodelled("index_fill: dim not recorded", cause="scalars_not_recorded")
    sl = x.shape[:d] + (idx.numel,) + x.shape[d + 1:]
    tr = Traffic().read("index", idx)
    if call.name.endswith("_"):
        tr.add("write", "filled", sl, x.itemsize)
    else:
        tr.read("self", x).write("out", x.shape, x.itemsize)
    return _cost(tr, x.dtype)


def _index_shapes(call: OpCall, pos: int) -> list[tuple[int, ...]] | None:
    shapes = call.tensor_list(pos)
    return shapes if shapes else None


@formula("index", "_unsafe_index")
def index(call: OpCall) -> Cost | Unmodelled:
    """(self, indices): advanced indexing with leading integer index tensors (bool masks and
    None gaps make the output data-dependent). Torch usually leaves the indices unrecorded."""
    (x,), err = need(call, 0)
    if err:
        return err
    shapes = _index_shapes(call, 1)
    if shapes is None:
        # the indices are a List[Optional[Tensor]], which the profiler records without sizes
        return Unmodelled(NO_INDEX.split(":")[0] + ": output size unknown", cause="shapes_not_recorded")
    b = broadcast(*shapes)
    if b is None or len(shapes) > len(x.shape):
        return Unmodelled(f"index: index shapes {shapes} do not fit {x.shape}", cause="bad_shapes")
    out = b + x.shape[len(shapes):]
    n_idx = sum(prod(s) for s in shapes)
    tr = Traffic().raw("read", "indices(int64 assumed)", n_idx * 8)
    tr.add("read", "gathered", out, x.itemsize).write("out", out, x.itemsize)
    return _cost(tr, x.dtype, notes=["index dtype not recorded: int64 assumed"])


@formula("index_put_", "index_put", "_index_put_impl_")
def index_put(call: OpCall) -> Cost | Unmodelled:
    """(self, indices, values, accumulate[, unsafe]): values.numel elements written (read-modify-
    written when accumulate). Without recorded indices a 0-dim value gives an unknown count."""
    (x, v), err = need(call, 0, 2)
    if err:
        return err
    shapes = _index_shapes(call, 1)
    notes: list[str] = []
    if shapes is not None and broadcast(*shapes) is not None and len(shapes) <= len(x.shape):
        written = broadcast(*shapes) + x.shape[len(shapes):]
    elif v.shape:
        written = v.shape
        notes.append(NO_INDEX)
    else:
        return Unmodelled("index_put_: indices not recorded and the value is a scalar: element count unknown", cause="shapes_not_recorded")
    acc = parse_bool(call.scalar(3))
    tr = Traffic()
    if not call.name.endswith("_"):
        tr.read("self", x)
    if shapes is not None:
        tr.raw("read", "indices(int64 assumed)", sum(prod(s) for s in shapes) * 8)
    tr.read("values", v)
    if acc:
        tr.add("read", "dst elements", written, x.itemsize)
    if call.name.endswith("_"):
        tr.add("write", "dst elements", written, x.itemsize)
    else:
        tr.write("out", x.shape, x.itemsize)
    if acc is None:
        notes.append("accumulate not recorded: assumed False")
    return _cost(tr, x.dtype, prod(written) if acc else 0, written, notes, estimated=bool(notes))


@formula("slice_backward", "select_backward", "diagonal_backward")
def slice_backward(call: OpCall) -> Cost | Unmodelled:
    """(grad_output, input_sizes, ...): a zero tensor of input_sizes with the grad copied in."""
    (g,), err = need(call, 0)
    if err:
        return err
    sizes = parse_ints(call.scalar(1))
    if sizes is None or any(s < 0 for s in sizes):
        return Unmodelled(f"{call.name}: input_sizes not recorded", cause="scalars_not_recorded")
    tr = Traffic().read("grad", g).write("grad_input", tuple(sizes), g.itemsize)
    return _cost(tr, g.dtype)


@formula("value_selecting_reduction_backward")
def value_selecting_reduction_backward(call: OpCall) -> Cost | Unmodelled:
    """(grad, dim, indices, sizes, keepdim): zeros(sizes) with grad scattered at indices."""
    (g, idx), err = need(call, 0, 2)
    if err:
        return err
    sizes = parse_ints(call.scalar(3))
    if sizes is None or any(s < 0 for s in sizes):
        return Unmodelled("value_selecting_reduction_backward: sizes not recorded", cause="scalars_not_recorded")
    tr = Traffic().read("grad", g).read("indices", idx).write("grad_input", tuple(sizes), g.itemsize)
    return _cost(tr, g.dtype)
