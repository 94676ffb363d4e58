"""FBGEMM's size-preserving custom ops of recommender models (permutes, bucketizing, rowwise
quantization, prefix sums), whose semantics are clear from their recorded arguments.

Each formula states the kernel's contract it relies on (which argument is read, which written).
Ops whose work cannot be told from what is recorded stay unmodelled with the reason. FBGEMM's
table-batched embedding lookup and its autograd node have their own family (tbe.py); the serving
kernels (vllm, sglang, aiter) have theirs: serving.py, attention_paged.py, moe.py, quant.py.
"""

from __future__ import annotations

from math import prod

from traceana.cost.families._common import make, need
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, parse_int, per_element_expr
from traceana.cost.types import Cost, OpCall, Unmodelled

# ---------------------------------------------------------------- FBGEMM: size-preserving permutes and casts


def _permute_sparse(call: OpCall) -> Cost | Unmodelled:
    """(permute [T'], lengths [T, B], indices [N], weights?, permuted_lengths_sum?): a gather of whole
    features: reads lengths and indices (and weights), writes the permuted lengths and indices."""
    (perm, lengths, idx), err = need(call, 0, 1, 2)
    if err:
        return err
    if len(perm.shape) != 1 or len(lengths.shape) != 2 or len(idx.shape) != 1:
        return Unmodelled(f"{call.name}: unexpected shapes {perm.shape} {lengths.shape} {idx.shape}")
    t, b = lengths.shape
    tp = perm.shape[0]
    weights = call.tensor(3)
    tr = Traffic().read("permute", perm).read("lengths", lengths).read("indices", idx)
    if weights is not None:
        tr.read("weights", weights)
    notes = ["offset computations (prefix sums over the lengths) not counted"]
    n_out = parse_int(call.scalar(4)) if len(call.dims) > 4 else None
    if n_out is not None and n_out < 0:
        n_out = None
    estimated = False
    if n_out is None:
        if tp == t:
            n_out = idx.numel
        else:
            n_out = round(idx.numel * tp / t) if t else 0
            estimated = True
            notes.append(f"{tp} of {t} features selected: permuted indices estimated as N*{tp}/{t}")
    tr.write("permuted lengths", (tp, b), lengths.itemsize)
    tr.write("permuted indices", (n_out,), idx.itemsize)
    if weights is not None:
        tr.write("permuted weights", (n_out,), weights.itemsize)
    return make(0, tr, "index", idx.dtype, "a gather: 0 FLOPs", estimated=estimated, notes=notes)


formula("fbgemm::permute_2D_sparse_data", "fbgemm::permute_sparse_features",
        "fbgemm::permute_sparse_data")(_permute_sparse)

_PERMUTE_POOLED_NODE = "torch::autograd::CppNode<fbgemm_gpu::PermutePooledEmbsFunction<&fbgemm_gpu::" \
                       "permute_pooled_embs_gpu> >"


@formula("fbgemm::permute_pooled_embs_auto_grad", "fbgemm::permute_pooled_embs",
         "fbgemm::recat_embedding_grad_output_mixed_D_batch", "fbgemm::recat_embedding_grad_output",
         _PERMUTE_POOLED_NODE)
def permute_blocks(call: OpCall) -> Cost | Unmodelled:
    """A permutation of column blocks of a [B, sum(D)] tensor (forward, its autograd node's backward,
    or the recat of a gradient): read it once, write a tensor of the same size; the small offset and
    permutation lists are read once."""
    (x,), err = need(call, 0)
    if err:
        return err
    tr = Traffic().read("input", x)
    for i in range(1, len(call.dims)):
        t = call.tensor(i)
        if t is not None:
            tr.read(f"arg{i}", t)
    tr.write("output", x.shape, x.itemsize)
    return make(0, tr, "memory", x.dtype, "a permutation: 0 FLOPs",
                notes=["same-size output (a permutation of column blocks)"])


@formula("fbgemm::bounds_check_indices")
def bounds_check_indices(call: OpCall) -> Cost | Unmodelled:
    """(rows_per_table [T], indices [N], offsets [T*B+1], mode, warning, weights?, ...): reads the
    indices and offsets and checks each against its table size (indices are rewritten only when out
    of bounds: not counted). 2 compares per index."""
    (rows, idx, offs), err = need(call, 0, 1, 2)
    if err:
        return err
    tr = Traffic().read("rows_per_table", rows).read("indices", idx).read("offsets", offs)
    flops = idx.numel * 2
    return make(flops, tr, "index", idx.dtype, per_element_expr(idx.shape, 2, flops, "indices"),
                notes=["out-of-bounds indices are rewritten in place: assumed none"])


@formula("fbgemm::block_bucketize_sparse_features")
def block_bucketize(call: OpCall) -> Cost | Unmodelled:
    """(lengths [T*B], indices [N], bucketize_pos, sequence, block_sizes [T], my_size, weights?, ...):
    each index goes to bucket index / block_size of its feature (a divide and a remainder: 2 FLOPs);
    writes the new lengths [my_size * T*B] and the N re-based indices (and weights when given).
    Position and permutation outputs (flags not recorded) and the scans' offset arrays are not counted."""
    (lengths, idx, blocks), err = need(call, 0, 1, 4)
    if err:
        return err
    notes = ["position / unbucketize-permute outputs and the scans' offset arrays not counted"]
    my_size = parse_int(call.scalar(5))
    estimated = False
    if my_size is None or my_size <= 0:
        world = call.get("world_size")
        if type(world) is not int or world <= 0:
            return Unmodelled(f"{call.name}: my_size (the number of buckets) not recorded and no world size "
                              f"in the trace", cause="scalars_not_recorded")
        my_size, estimated = world, True
        notes.append(f"my_size not recorded: taken as the world size {world} (one bucket per rank)")
    tr = Traffic().read("lengths", lengths).read("indices", idx).read("block_sizes", blocks)
    w = call.tensor(6)
    weighted = w is not None and w.numel == idx.numel and idx.numel > 0
    if weighted:
        tr.read("weights", w)
    tr.write("new lengths", (my_size,) + lengths.shape, lengths.itemsize)
    tr.write("new indices", idx.shape, idx.itemsize)
    if weighted:
        tr.write("new weights", w.shape, w.itemsize)
    flops = idx.numel * 2
    return make(flops, tr, "index", idx.dtype, per_element_expr(idx.shape, 2, flops, "indices"),
                estimated=estimated, notes=notes)


def _rowwise_cols(c: int) -> int:
    """FP8/8-bit rowwise quantized row length: the values padded to 4 plus two fp32 (scale, bias)."""
    return (c + 3) // 4 * 4 + 8


@formula("fbgemm::FloatToFP8RowwiseQuantized", "fbgemm::FloatToFused8BitRowwiseQuantized")
def float_to_rowwise(call: OpCall) -> Cost | Unmodelled:
    """(input [R, C], ...) -> uint8 [R, ceil4(C) + 8]: per row a max-abs (or min/max) pass, then
    scale and convert. FLOPs: 3 per element (statistic, scale, convert)."""
    (x,), err = need(call, 0)
    if err:
        return err
    if len(x.shape) < 1 or not x.shape[-1]:
        return Unmodelled(f"{call.name}: input {x.shape} has no rows", cause="bad_shapes")
    out = x.shape[:-1] + (_rowwise_cols(x.shape[-1]),)
    tr = Traffic().read("input", x).write("quantized(uint8)", out, 1)
    flops = x.numel * 3
    return make(flops, tr, "pointwise", x.dtype, per_element_expr(x.shape, 3, flops),
                notes=["the row statistics kernel reads the input a second time: counted once"])


@formula("fbgemm::FP8RowwiseQuantizedToFloat", "fbgemm::Fused8BitRowwiseQuantizedToFloat")
def rowwise_to_float(call: OpCall) -> Cost | Unmodelled:
    """(input uint8 [R, ceil4(C) + 8], ...) -> fp32 [R, C]: 2 FLOPs per element (scale, bias)."""
    (x,), err = need(call, 0)
    if err:
        return err
    if len(x.shape) < 1 or x.shape[-1] <= 8:
        return Unmodelled(f"{call.name}: input {x.shape} is not a rowwise-quantized tensor")
    out = x.shape[:-1] + (x.shape[-1] - 8,)
    tr = Traffic().read("quantized", x).write("output(fp32)", out, 4)
    n = prod(out)
    return make(n * 2, tr, "pointwise", "fp32", per_element_expr(out, 2, n * 2),
                notes=["the values' padding to a multiple of 4 is taken as absent (C = row length - 8)"])


@formula("fbgemm::FloatToHFP8Quantized", "fbgemm::HFP8QuantizedToFloat")
def hfp8(call: OpCall) -> Cost | Unmodelled:
    """Elementwise fp32 <-> 8-bit hybrid float: read one, write the other, 4 FLOPs per element
    (exponent / mantissa arithmetic)."""
    (x,), err = need(call, 0)
    if err:
        return err
    to8 = call.name.endswith("FloatToHFP8Quantized")
    tr = Traffic().read("input", x).write("output(uint8)" if to8 else "output(fp32)", x.shape, 1 if to8 else 4)
    flops = x.numel * 4
    return make(flops, tr, "pointwise", "fp32", per_element_expr(x.shape, 4, flops))



@formula("fbgemm::asynchronous_complete_cumsum", "fb::asynchronous_complete_cumsum")
def complete_cumsum(call: OpCall) -> Cost | Unmodelled:
    """(t_in [N]) -> [N + 1]: an exclusive prefix sum with the total appended. N adds."""
    (x,), err = need(call, 0)
    if err:
        return err
    if len(x.shape) != 1:
        return Unmodelled(f"{call.name}: expected a 1-D input, got {x.shape}")
    tr = Traffic().read("input", x).write("output", (x.numel + 1,), x.itemsize)
    return make(x.numel, tr, "reduction", x.dtype, per_element_expr(x.shape, 1, x.numel))
