"""Serving kernels of vllm, sglang (sgl_kernel) and aiter that are element-wise or row-wise:
gated activations, RMSNorm (plain and with the residual add), rotary embedding, KV-cache writes.

Each formula states the kernel's contract it relies on (which argument is read, which written),
from the op's registered schema; a call whose arguments do not fit it stays unmodelled with the
reason. Attention over paged caches is in attention_paged.py, mixture-of-experts and routing in
moe.py, quantization and low-precision GEMMs in quant.py.
"""

from __future__ import annotations

from traceana.cost.families._common import make, need, shape_problem
from traceana.cost.families.norm import RMS_NORM
from traceana.cost.families.pointwise import TRANSCENDENTAL
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, fmt_flops, parse_int, per_element_expr
from traceana.cost.types import Cost, OpCall, Unmodelled

# ---------------------------------------------------------------- activations: act(x[..., :d]) * x[..., d:]

_ACT_AND_MUL = {"silu_and_mul": TRANSCENDENTAL["silu"], "gelu_and_mul": TRANSCENDENTAL["gelu"],
                "gelu_tanh_and_mul": 19, "gelu_quick_and_mul": TRANSCENDENTAL["sigmoid"] + 2,
                "mul_and_silu": TRANSCENDENTAL["silu"], "fatrelu_and_mul": 1,
                # gpt-oss: clamp both halves (2), x*sigmoid(alpha*x) (sigmoid + 2), (up + 1) (1)
                "swigluoai_and_mul": TRANSCENDENTAL["sigmoid"] + 5}


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


@formula("aiter::rmsnorm", "aiter::rms_norm", "sgl_kernel::rmsnorm", "_C::rms_norm", "vllm::rms_norm",
         "vllm::rocm_aiter_rms_norm", "aiter::rmsnorm2d_fwd", "sgl_kernel::gemma_rmsnorm")
def rmsnorm(call: OpCall) -> Cost | Unmodelled:
    """Out-of-place (out, input [..., H], weight [H], eps) as vllm _C / sgl_kernel / aiter::rmsnorm, or
    functional (input [..., H], weight [H], eps, ...) -> out as aiter::rms_norm, aiter::rmsnorm2d_fwd and
    vllm::rocm_aiter_rms_norm: read input and weight, write out (input's shape and dtype)."""
    a, b, c = call.tensor(0), call.tensor(1), call.tensor(2)
    bad = shape_problem(call)
    if bad:
        return Unmodelled(bad, cause="bad_shapes")
    if a is not None and b is not None and c is not None and a.shape == b.shape and c.shape == b.shape[-1:]:
        out, x, w = a, b, c
    elif a is not None and b is not None and a.shape and b.shape == a.shape[-1:]:
        out, x, w = a, a, b
    else:
        return Unmodelled(f"{call.name}: expected [out,] input [..., H] and weight [H], got {call.dims[:3]}")
    tr = Traffic().read("input", x).read("weight", w).write("out", out.shape, out.itemsize)
    flops = x.numel * RMS_NORM
    return make(flops, tr, "norm", x.dtype, per_element_expr(x.shape, RMS_NORM, flops),
                notes=["RMS_NORM FLOPs per element as aten::rms_norm (norm.py)"])


@formula("aiter::add_rmsnorm", "sgl_kernel::fused_add_rmsnorm", "_C::fused_add_rms_norm",
         "vllm::fused_add_rms_norm", "aiter::rmsnorm2d_fwd_with_add", "aiter::rmsnorm2d_fwd_with_add_ck",
         "vllm::rocm_aiter_rmsnorm2d_fwd_with_add", "sgl_kernel::gemma_fused_add_rmsnorm")
def add_rmsnorm(call: OpCall) -> Cost | Unmodelled:
    """aiter add_rmsnorm / rmsnorm2d_fwd_with_add(_ck): (out, input, residual_in, residual_out, weight,
    eps, ...): out = rmsnorm(input + residual_in), residual_out = input + residual_in. sgl_kernel / vLLM
    in-place: (input, residual, weight, eps): residual += input; input = rmsnorm(residual).
    vllm::rocm_aiter_rmsnorm2d_fwd_with_add (x, residual, weight, eps) -> (out, residual_out): the
    same two reads and two writes."""
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
         "vllm::reshape_and_cache_flash", "sglang::store_cache", "sgl_kernel::store_kv_cache")
def store_kv(call: OpCall) -> Cost | Unmodelled:
    """(key, value, key_cache, value_cache, slot_mapping, ...): each token's key and value rows are
    read and written into their cache slot; the caches are not otherwise touched."""
    (k, v, kc, vc, slots), err = need(call, 0, 1, 2, 3, 4)
    if err:
        return err
    if not k.shape or slots.numel != k.shape[0] or v.shape[0] != k.shape[0]:
        return Unmodelled(f"{call.name}: slot mapping {slots.shape} does not match key {k.shape}", cause="bad_shapes")
    tr = Traffic().read("key", k).read("value", v).read("slot_mapping", slots)
    tr.write("key_cache rows", k.shape, kc.itemsize).write("value_cache rows", v.shape, vc.itemsize)
    notes = []
    if kc.itemsize != k.itemsize:
        notes.append(f"cache stored as {kc.dtype}: written at its element size")
    return make(0, tr, "memory", k.dtype, "a scatter copy: 0 FLOPs", notes=notes)




@formula("vllm::unified_kv_cache_update")
def unified_kv_cache_update(call: OpCall) -> Cost | Unmodelled:
    """(key [T, Hk, D], value [T, Hk, Dv], layer_name): the layer's cache and slot mapping live in
    vLLM's forward context (not recorded). Each token's key and value rows are read and written into
    their cache slot (as reshape_and_cache_flash), the T int64 slot indices read."""
    (k, v), err = need(call, 0, 1)
    if err:
        return err
    if not k.shape or not v.shape or k.shape[0] != v.shape[0]:
        return Unmodelled(f"{call.name}: key {k.shape} and value {v.shape} differ in tokens", cause="bad_shapes")
    t = k.shape[0]
    tr = Traffic().read("key", k).read("value", v).add("read", "slot_mapping(int64)", (t,), 8)
    tr.write("key_cache rows", k.shape, k.itemsize).write("value_cache rows", v.shape, v.itemsize)
    notes = ["the cache is not recorded: its dtype is assumed the key's (an fp8 cache writes half the bytes); "
             "the slot mapping taken as int64 [T]"]
    return make(0, tr, "memory", k.dtype, "a scatter copy: 0 FLOPs", estimated=True, notes=notes)
