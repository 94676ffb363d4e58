"""Custom (non-aten) ops whose semantics are clear from their recorded arguments: serving kernels
(sgl_kernel, aiter, vllm, sglang) and the size-preserving FBGEMM ops of recommender models.

Each formula states the kernel's contract it relies on (which argument is read, which written).
Ops whose work cannot be told from what is recorded stay unmodelled with the reason. FBGEMM's
table-batched embedding lookup and its autograd node have their own family (tbe.py).
"""

from __future__ import annotations

from math import prod

from traceana.cost.families._common import make, need, shape_problem
from traceana.cost.families.norm import RMS_NORM
from traceana.cost.families.pointwise import TRANSCENDENTAL
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, fmt_flops, parse_bool, parse_int, per_element_expr
from traceana.cost.types import Cost, OpCall, Unmodelled

# ---------------------------------------------------------------- activations: act(x[..., :d]) * x[..., d:]

_ACT_AND_MUL = {"silu_and_mul": TRANSCENDENTAL["silu"], "gelu_and_mul": TRANSCENDENTAL["gelu"],
                "gelu_tanh_and_mul": 19, "gelu_quick_and_mul": TRANSCENDENTAL["sigmoid"] + 2}


@formula(*(f"{ns}::{op}" for ns in ("sgl_kernel", "_C", "vllm", "aiter") for op in _ACT_AND_MUL))
def act_and_mul(call: OpCall) -> Cost | Unmodelled:
    """(out [..., d], input [..., 2d]): read the input once, write the output once; per output
    element the activation of the first half times the second half."""
    (a, b), err = need(call, 0, 1)
    if err:
        return err
    if not a.shape or not b.shape:
        return Unmodelled(f"{call.name}: expected out [..., d] and input [..., 2d], got {a.shape}, {b.shape}")
    out, x = (a, b) if b.shape[-1:] == (2 * a.shape[-1],) else (b, a)
    if not out.shape or x.shape[:-1] != out.shape[:-1] or x.shape[-1] != 2 * out.shape[-1]:
        return Unmodelled(f"{call.name}: expected out [..., d] and input [..., 2d], got {a.shape}, {b.shape}")
    w = _ACT_AND_MUL[call.name.split("::", 1)[1]] + 1
    flops = out.numel * w
    tr = Traffic().read("input", x).write("out", out.shape, out.itemsize)
    return make(flops, tr, "pointwise", x.dtype, per_element_expr(out.shape, w, flops, "output elements"),
                notes=["activation of the first half times the second half (transcendental weight as "
                       "pointwise.TRANSCENDENTAL, + 1 multiply); memory-bound at any such weight"])


# ---------------------------------------------------------------- RMSNorm kernels


@formula("aiter::rmsnorm", "aiter::rms_norm", "sgl_kernel::rmsnorm", "_C::rms_norm", "vllm::rms_norm")
def rmsnorm(call: OpCall) -> Cost | Unmodelled:
    """(out, input, weight, eps): read input and weight, write out."""
    (out, x, w), err = need(call, 0, 1, 2)
    if err:
        return err
    if out.shape != x.shape or w.shape != x.shape[-1:]:
        return Unmodelled(f"{call.name}: expected out, input [..., H] and weight [H], got "
                          f"{out.shape}, {x.shape}, {w.shape}")
    tr = Traffic().read("input", x).read("weight", w).write("out", out.shape, out.itemsize)
    flops = x.numel * RMS_NORM
    return make(flops, tr, "norm", x.dtype, per_element_expr(x.shape, RMS_NORM, flops),
                notes=["RMS_NORM FLOPs per element as aten::rms_norm (norm.py)"])


@formula("aiter::add_rmsnorm", "sgl_kernel::fused_add_rmsnorm", "_C::fused_add_rms_norm",
         "vllm::fused_add_rms_norm")
def add_rmsnorm(call: OpCall) -> Cost | Unmodelled:
    """aiter: (out, input, residual_in, residual_out, weight, eps): out = rmsnorm(input + residual_in),
    residual_out = input + residual_in. sgl_kernel / vLLM in-place: (input, residual, weight, eps):
    residual += input; input = rmsnorm(residual)."""
    tensors = [call.tensor(i) for i in range(len(call.dims))]
    big = [t for t in tensors if t is not None and len(t.shape) >= 2]
    w = [t for t in tensors if t is not None and len(t.shape) == 1]
    if shape_problem(call) or not big or len(w) != 1 or any(t.shape != big[0].shape for t in big) \
            or w[0].shape != big[0].shape[-1:]:
        return Unmodelled(f"{call.name}: expected [..., H] activations and one weight [H]")
    x, w = big[0], w[0]
    tr = Traffic()
    if len(big) == 4:  # out, input, residual_in, residual_out
        tr.read("input", x).read("residual_in", x).read("weight", w)
        tr.write("out", x.shape, x.itemsize).write("residual_out", x.shape, x.itemsize)
    elif len(big) == 2:  # input, residual: both updated in place
        tr.read("input", x).read("residual", x).read("weight", w)
        tr.write("residual", x.shape, x.itemsize).write("input", x.shape, x.itemsize)
    else:
        return Unmodelled(f"{call.name}: {len(big)} activation tensors, expected 2 or 4")
    per = RMS_NORM + 1
    flops = x.numel * per
    return make(flops, tr, "norm", x.dtype, per_element_expr(x.shape, per, flops),
                notes=["residual add (1) + RMS norm (RMS_NORM) per element"])


# ---------------------------------------------------------------- rotary embedding


@formula("sgl_kernel::rotary_embedding", "_C::rotary_embedding", "vllm::rotary_embedding")
def rotary_embedding(call: OpCall) -> Cost | Unmodelled:
    """(positions [T], query [T, Hq*D], key [T, Hk*D], head_size, cos_sin_cache [P, rot], is_neox):
    query and key rotated in place (read + write); one cos/sin row gathered per token.
    FLOPs: 3 per rotated element (a pair takes 4 multiplies and 2 adds)."""
    (pos, q, k, cache), err = need(call, 0, 1, 2, 4)
    if err:
        return err
    rot = cache.shape[-1] if len(cache.shape) == 2 else 0
    head = parse_int(call.scalar(3))
    if not rot or not q.shape or q.shape[0] != pos.numel:
        return Unmodelled(f"{call.name}: unexpected shapes {pos.shape}, {q.shape}, {cache.shape}")
    notes = []
    if head and head > 0 and rot <= head:
        frac = rot / head
        notes.append(f"rotary dim {rot} of head size {head}")
    else:
        frac = 1.0
        notes.append("head size not recorded: every element assumed rotated")
    tr = Traffic().read("positions", pos).read("query", q).read("key", k)
    tr.add("read", "cos_sin rows (one per token)", (pos.numel, rot), cache.itemsize)
    tr.write("query", q.shape, q.itemsize).write("key", k.shape, k.itemsize)
    rotated = (q.numel + k.numel) * frac
    flops = rotated * 3
    return make(flops, tr, "pointwise", q.dtype, f"({q.numel:,} + {k.numel:,}) elements x {frac:g} rotated "
                f"x 3 FLOPs = {fmt_flops(flops)}", notes=notes)


# ---------------------------------------------------------------- KV-cache writes


@formula("_C_cache_ops::reshape_and_cache_flash", "_C_cache_ops::reshape_and_cache",
         "vllm::reshape_and_cache_flash", "sglang::store_cache")
def store_kv(call: OpCall) -> Cost | Unmodelled:
    """(key, value, key_cache, value_cache, slot_mapping, ...): each token's key and value rows are
    read and written into their cache slot; the caches are not otherwise touched."""
    (k, v, kc, vc, slots), err = need(call, 0, 1, 2, 3, 4)
    if err:
        return err
    if not k.shape or slots.numel != k.shape[0] or v.shape[0] != k.shape[0]:
        return Unmodelled(f"{call.name}: slot mapping {slots.shape} does not match key {k.shape}")
    tr = Traffic().read("key", k).read("value", v).read("slot_mapping", slots)
    tr.write("key_cache rows", k.shape, kc.itemsize).write("value_cache rows", v.shape, vc.itemsize)
    notes = []
    if kc.itemsize != k.itemsize:
        notes.append(f"cache stored as {kc.dtype}: written at its element size")
    return make(0, tr, "memory", k.dtype, "a scatter copy: 0 FLOPs", notes=notes)


# ---------------------------------------------------------------- attention over a paged KV cache

_CAUSAL = ("is_causal: FLOPs counted in full, as the attention family does; the kernel skips about half "
           "of the score tiles")


@formula("aiter::mha_batch_prefill")
def mha_batch_prefill(call: OpCall) -> Cost | Unmodelled:
    """(q [Tq, Hq, D], k_cache [P, Hk, D], v_cache, cu_seqlens_q [b+1], kv_indptr [b+1],
    kv_page_indices [n], max_seqlen_q, max_seqlen_k, dropout_p, scale, soft_cap, zero_tensors,
    is_causal, ...). FLOPs 4*Hq*D*sum(Sq_i*Sk_i); bytes: q read, the K/V rows the batch uses read
    once, the output written once (the rest of the cache is not touched)."""
    (q, k, v, cu_q, _, pages), err = need(call, 0, 1, 2, 3, 4, 5)
    if err:
        return err
    if len(q.shape) != 3 or len(k.shape) != 3 or k.shape != v.shape or k.shape[-1] != q.shape[-1] \
            or not k.shape[1] or q.shape[1] % k.shape[1] or len(cu_q.shape) != 1 or cu_q.numel < 2:
        return Unmodelled(f"{call.name}: unexpected q/k/v {q.shape} {k.shape} {v.shape}")
    b = cu_q.numel - 1
    tq, hq, d = q.shape
    hk = k.shape[1]
    max_q, max_k = parse_int(call.scalar(6)), parse_int(call.scalar(7))
    max_q = max_q if max_q and max_q > 0 else None
    max_k = max_k if max_k and max_k > 0 else None
    notes = [_CAUSAL] if parse_bool(call.scalar(12)) else []
    if max_q and max_k and tq == b * max_q and max_k == max_q:
        # every sequence has max_q queries; prefill keys >= queries and <= max_k: all max_k
        sum_qk, kv_tokens, estimated = tq * max_k, b * max_k, False
        notes.append(f"{b} sequences of exactly {max_q} query tokens ({tq} = {b} x {max_q}) and so "
                     f"{max_k} key tokens each")
    elif max_k:
        sum_qk, kv_tokens, estimated = tq * max_k, min(pages.numel, b * max_k), True
        notes.append(f"per-sequence lengths not recorded: every query token counted against max_seqlen_k "
                     f"= {max_k} keys (an upper bound)")
    else:
        return Unmodelled(f"{call.name}: max_seqlen_k not recorded")
    flops = 4 * hq * d * sum_qk
    tr = Traffic().read("q", q)
    tr.add("read", "k rows used", (kv_tokens, hk, d), k.itemsize)
    tr.add("read", "v rows used", (kv_tokens, hk, d), v.itemsize)
    tr.read("kv_page_indices", pages).write("out", q.shape, q.itemsize)
    expr = f"4*Hq*D*sum(Sq*Sk) = 4*{hq}*{d}*{sum_qk:,} = {fmt_flops(flops)}"
    return Cost(flops, tr.total, "attention", q.dtype, True, expr, tr.expr(), estimated, tuple(notes))


@formula("vllm::unified_attention_with_output", "vllm::unified_attention")
def unified_attention(call: OpCall) -> Cost | Unmodelled:
    """(q [T, Hq, D], k [T, Hk, D], v [T, Hk, Dv], out [T, Hq, Dv], layer_name, ...): the new tokens'
    q/k/v; sequence boundaries and the cached context live in vLLM's forward context, which the
    profiler does not record. Costed as causal attention of the T new tokens over themselves as
    one sequence (estimated), bytes q/k/v read and out written once."""
    (q, k, v), err = need(call, 0, 1, 2)
    if err:
        return err
    if len(q.shape) != 3 or len(k.shape) != 3 or len(v.shape) != 3 or q.shape[0] != k.shape[0] \
            or k.shape[:2] != v.shape[:2] or q.shape[2] != k.shape[2] or not k.shape[1] or q.shape[1] % k.shape[1]:
        return Unmodelled(f"{call.name}: unexpected q/k/v {q.shape} {k.shape} {v.shape}")
    t, hq, d = q.shape
    dv = v.shape[2]
    flops = 2 * hq * t * t * (d + dv)
    tr = Traffic().read("q", q).read("k", k).read("v", v)
    out = call.tensor(3)
    tr.write("out", out.shape if out is not None else (t, hq, dv), q.itemsize)
    notes = ["sequence boundaries and the cached context are not recorded: counted as one sequence of "
             f"{t} tokens attending to each other (causal masking counted in full); the real batch may "
             "hold many shorter sequences (fewer FLOPs) or long cached contexts (more FLOPs and bytes)"]
    expr = f"2*Hq*T*T*(D+Dv) = 2*{hq}*{t}*{t}*({d}+{dv}) = {fmt_flops(flops)}"
    return Cost(flops, tr.total, "attention", q.dtype, True, expr, tr.expr(), True, tuple(notes))


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
                              f"in the trace")
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
        return Unmodelled(f"{call.name}: input {x.shape} has no rows")
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
