"""Mixture-of-experts: the fused expert computation of vllm, sglang, aiter and TensorRT-LLM, and the
routing kernels around it (top-k softmax, token sorting / block alignment, the top-k sum).

Fused experts. T tokens of hidden size H, E experts, each token routed to k of them; the
gate-and-up projection w1 [E, N1, H] (N1 = 2I for a gated activation, else I) and the down
projection w2 [E, H, I]. 4-bit weights are stored two to a byte (the last dim halved: uint8 or
Float4_e2m1fn_x2), which the shapes show. Per routed (token, expert) pair the work is the two
GEMM rows, so

    FLOPs = 2 * T * k * (N1*H + H*I)

Bytes: the weights of the experts actually used, read once each (with their per-expert block
scales and biases at their stored size), the hidden states read and the output written once,
the routing (top-k ids and weights) read. Which experts the batch uses is not recorded (tensor
contents): at most min(E, T*k) distinct experts, taken as the count (an upper bound, so every
fused-MoE cost is marked estimated). The intermediate [T*k, N1] and [T*k, I] activations are
not counted (a fused kernel keeps them on chip; a two-kernel path writes and reads them once).
"""

from __future__ import annotations

from math import ceil, log2

from traceana.cost.families._common import make, need, shape_problem
from traceana.cost.families.norm import SOFTMAX
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, fmt_flops, fmt_int, parse_int, per_element_expr
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

# name -> positions of (hidden_states, w1, w2, topk_weights, topk_ids)
_FUSED = {
    **{f"{ns}::{op}": (0, 1, 2, 3, 4) for ns in ("vllm", "sglang")
       for op in ("inplace_fused_experts", "outplace_fused_experts", "rocm_aiter_fused_moe")},
    # TensorRT-LLM: (input, token_selected_experts, token_final_scales, fc1_expert_weights,
    # fc1_expert_biases, fc2_expert_weights, fc2_expert_biases, output_dtype, quant_scales, ...)
    "trtllm::fused_moe": (0, 3, 5, 2, 1),
}
_LOW = ("fp8", "fp4", "int8", "uint8")


def _dims(x: TensorArg, w1: TensorArg, w2: TensorArg) -> tuple[int, int, int, int, int] | str:
    """(E, H, N1, I, values per stored element) from the shapes, or why they do not fit."""
    if len(w1.shape) != 3 or len(w2.shape) != 3 or w1.shape[0] != w2.shape[0] or len(x.shape) < 2:
        return f"expected hidden [T, H], w1 [E, N1, H] and w2 [E, H, I], got {x.shape}, {w1.shape}, {w2.shape}"
    e, n1, k1 = w1.shape
    h = w2.shape[1]
    if not k1 or h % k1 or h // k1 not in (1, 2):
        return f"w1's last dim {k1} is neither H = {h} nor H/2 (packed 4-bit)"
    pack = h // k1
    i = w2.shape[2] * pack
    if i * 2 != n1 and i != n1:
        return f"w2's inner dim {w2.shape[2]} (x{pack}) is neither N1/2 nor N1 = {n1}"
    return e, h, n1, i, pack


def _compute_dtype(x: TensorArg, w1: TensorArg) -> tuple[str, str | None]:
    """The dtype whose roof applies: the weights' when they are fp8 / int8 (w8a8 paths quantize the
    activations too) or the activations' when already low-precision; else the activations'."""
    if x.dtype in ("fp8", "fp4", "int8"):
        return x.dtype, None
    if w1.dtype in ("fp8", "int8"):
        return w1.dtype, f"{w1.dtype} weights: the {w1.dtype} tensor-core roof (activations quantized on the fly)"
    if w1.dtype in ("fp4", "uint8"):
        return x.dtype, f"4-bit weights with {x.dtype} activations: dequantized to {x.dtype}, its roof applies"
    return x.dtype, None


def fused_experts(call: OpCall) -> Cost | Unmodelled:
    xp, w1p, w2p, twp, idp = _FUSED[call.name]
    (x, w1, w2, ids), err = need(call, xp, w1p, w2p, idp)
    if err:
        return err
    dims = _dims(x, w1, w2)
    if isinstance(dims, str):
        return Unmodelled(f"{call.name}: {dims}")
    e, h, n1, inter, pack = dims
    t = x.shape[0]
    if len(ids.shape) != 2 or ids.shape[0] != t:
        return Unmodelled(f"{call.name}: topk_ids {ids.shape} do not match {t} tokens", cause="bad_shapes")
    k = ids.shape[1]
    pairs = t * k
    used = min(e, pairs)
    flops = 2 * pairs * (n1 * h + h * inter)
    tr = Traffic().read("hidden_states", x)
    frac = used / e
    tr.add("read", f"w1 of {used} experts", (used,) + w1.shape[1:], w1.itemsize)
    tr.add("read", f"w2 of {used} experts", (used,) + w2.shape[1:], w2.itemsize)
    skip = {xp, w1p, w2p, idp}
    for i in range(len(call.dims)):
        s = call.tensor(i)
        if i in skip or s is None:
            continue
        if len(s.shape) >= 2 and s.shape[0] == e:  # per-expert scales / biases / zero points
            tr.add("read", f"arg{i} of {used} experts", (used,) + s.shape[1:], s.itemsize)
        else:
            tr.read("topk_weights" if i == twp else f"arg{i}", s)
    tr.read("topk_ids", ids)
    out_size = x.itemsize if x.dtype not in _LOW else 2
    tr.write("out", (t, h), out_size)
    dtype, why = _compute_dtype(x, w1)
    gated = "gated (N1 = 2I)" if n1 == 2 * inter else "not gated (N1 = I)"
    notes = [f"experts used not recorded: min(E, T*k) = min({e}, {t}*{k}) = {used} assumed, each read once "
             "(an upper bound; a skewed routing uses fewer)",
             f"E = {e}, H = {h}, I = {inter}, {gated}" + (", 4-bit weights two to a byte" if pack == 2 else ""),
             "intermediate activations not counted (kept on chip by a fused kernel)"]
    if why:
        notes.append(why)
    if x.dtype in _LOW:
        notes.append("pre-quantized input: output taken as bf16")
    expr = (f"2*T*k*(N1*H + H*I) = 2*{t}*{k}*({n1}*{h} + {h}*{inter}) = {fmt_flops(flops)}")
    return Cost(flops, tr.total, "moe", dtype, True, expr, tr.expr(), True, tuple(notes),
                (("experts", e), ("experts_used", used), ("top_k", k), ("frac_experts_used", frac)))


formula(*_FUSED)(fused_experts)


# block-scale formats named in the expert GEMM kernels' names: values per scale, bytes per scale
# (OCP MX: one e8m0 byte per 32 values; NVFP4: one fp8 e4m3 byte per 16 values)
_BLOCK_SCALES = (("mxfp4", 32, 1), ("mxfp6", 32, 1), ("mxfp8", 32, 1), ("nvfp4", 16, 1))


def _layer_dims(h: int, w1: TensorArg, w2: TensorArg) -> tuple[int, int, int, int] | None:
    """(N1, I, pack, w1 orientation) when w1 [E, N1, H] / [E, H, N1] and w2 [E, H, I] / [E, I, H]
    fit hidden size h, 4-bit weights packed two to a byte along H (w1) or I (w2); else None."""
    for pack in (1, 2):
        if h % pack:
            continue
        for hdim in (2, 1):  # w1's H (or H/2) dim: last (torch layout), or middle (K-major)
            if w1.shape[hdim] != h // pack:
                continue
            n1 = w1.shape[3 - hdim]
            for w2h in (1, 2):
                if w2.shape[w2h] != h:
                    continue
                inter = w2.shape[3 - w2h] * pack
                if n1 in (inter, 2 * inter):
                    return n1, inter, pack, hdim
    return None


def _block_scales(kernels: tuple[str, ...]) -> tuple[str, int, int] | None:
    low = " ".join(kernels).lower()
    for fmt, per, size in _BLOCK_SCALES:
        if fmt in low:
            return fmt, per, size
    return None


@formula("vllm::moe_forward", "vllm::moe_forward_shared")
def moe_forward(call: OpCall) -> Cost | Unmodelled:
    """(hidden_states [T, H], router_logits [T, E], layer_name): the expert weights live in the layer
    named by a string, not in the arguments. load/layer_weights.py puts the [E, ., .] tensors recorded
    inside the op (the expert GEMMs' weight views) and the routing's top-k on the call; from them the
    fused-experts formula applies: FLOPs = 2*T*k*(N1*H + H*I), bytes = the weights of the experts
    used (+ block scales when the kernels name an MX/NVFP4 format) + hidden states + output."""
    (x, logits), err = need(call, 0, 1)
    if err:
        return err
    weights = call.get("expert_weights")
    t = x.shape[0] if len(x.shape) == 2 else None
    e = logits.shape[-1] if logits.shape else None
    if not weights or t is None or e is None:
        return Unmodelled(f"{call.name}: the expert weights are not arguments (the layer holds them) and no "
                          f"[E, ., .] weight views were recorded inside it: {t if t is not None else '?'} tokens "
                          f"over {e if e is not None else '?'} experts, but the intermediate size, and so the FLOPs "
                          "and weight bytes, are not known (profile with record_shapes=True so the ops it runs "
                          "record their weights; a graph-replayed layer records them in its capture trace)",
                          cause="input_not_recorded")
    h = x.shape[1]
    ws = [TensorArg(tuple(shape), ty) for shape, ty in weights]
    found = None
    for a in range(len(ws)):
        for b in range(a + 1, len(ws)):
            fit = _layer_dims(h, ws[a], ws[b])
            if fit:
                found = (ws[a], ws[b], fit)
                break
        if found:
            break
    if not found:
        return Unmodelled(f"{call.name}: the [E, ., .] tensors recorded inside it "
                          f"{[w.shape for w in ws]} do not fit w1 [E, N1, H] and w2 [E, H, I] for H = {h}: the expert "
                          "weights themselves were not recorded", cause="input_not_recorded")
    w1, w2, (n1, inter, pack, hdim) = found
    k = call.get("top_k")
    notes = []
    if not k:
        k = 1
        notes.append("top-k not recorded inside the op: k = 1 assumed (a lower bound on the FLOPs)")
    pairs = t * k
    used = min(e, pairs)
    flops = 2 * pairs * (n1 * h + h * inter)
    tr = Traffic().read("hidden_states", x)
    tr.add("read", f"w1 of {used} experts", (used,) + w1.shape[1:], w1.itemsize)
    tr.add("read", f"w2 of {used} experts", (used,) + w2.shape[1:], w2.itemsize)
    for w in ws:
        if w is not w1 and w is not w2:  # per-expert scales / biases recorded inside
            tr.add("read", f"{w.shape} of {used} experts", (used,) + w.shape[1:], w.itemsize)
    scales = _block_scales(call.kernel_names) if pack == 2 or w1.dtype in ("fp8", "uint8") else None
    if scales and len(ws) == 2:
        fmt, per, size = scales
        values = used * (n1 * h + h * inter)
        tr.raw("read", f"{fmt} block scales", values / per * size, f"{fmt_int(values)} values / {per} x {size} B")
        notes.append(f"{fmt} weights (kernel names): one {size}-byte scale per {per} values counted")
    tr.read("router_logits", logits)
    tr.write("out", (t, h), x.itemsize)
    if pack == 1 and w1.dtype == "uint8":
        dtype, why = x.dtype, f"8-bit weights stored as bytes with {x.dtype} activations: the {x.dtype} roof applies"
    else:
        dtype, why = _compute_dtype(x, w1)
    layout = "w1 [E, H/2, N1] (K-major)" if hdim == 1 and pack == 2 else \
        "w1 [E, H, N1] (K-major)" if hdim == 1 else "w1 [E, N1, H]"
    gated = "gated (N1 = 2I)" if n1 == 2 * inter else "not gated (N1 = I)"
    notes += [f"expert weights from the views recorded inside the op ({call.get('weights_from', 'recorded')}): "
              f"{w1.shape} {w1.type_str} and {w2.shape} {w2.type_str}, {layout}",
              f"experts used not recorded: min(E, T*k) = min({e}, {t}*{k}) = {used} assumed, each read once "
              "(an upper bound; a skewed routing uses fewer)",
              f"E = {e}, H = {h}, I = {inter}, {gated}" + (", 4-bit weights two to a byte" if pack == 2 else ""),
              "intermediate activations and the routing kernels' traffic not counted"]
    if why:
        notes.append(why)
    expr = f"2*T*k*(N1*H + H*I) = 2*{t}*{k}*({n1}*{h} + {h}*{inter}) = {fmt_flops(flops)}"
    return Cost(flops, tr.total, "moe", dtype, True, expr, tr.expr(), True, tuple(notes),
                (("experts", e), ("experts_used", used), ("top_k", k), ("frac_experts_used", used / e)))


# ---------------------------------------------------------------- routing


def _gating_and_topk(call: OpCall) -> tuple[TensorArg, list[TensorArg]] | str:
    """The gating logits [T, E] and the [T, k] outputs among the recorded tensors."""
    ts = [call.tensor(i) for i in range(len(call.dims))]
    ts = [t for t in ts if t is not None and len(t.shape) == 2]
    if len(ts) < 2:
        return "expected gating_output [T, E] and topk outputs [T, k]"
    t_rows = ts[0].shape[0]
    widths = sorted({t.shape[1] for t in ts})
    if any(t.shape[0] != t_rows for t in ts) or len(widths) != 2:
        return f"expected gating_output [T, E] and topk outputs [T, k], got {[t.shape for t in ts]}"
    k, e = widths
    gating = [t for t in ts if t.shape[1] == e]
    outs = [t for t in ts if t.shape[1] == k]
    if len(gating) != 1:
        return f"{len(gating)} tensors of width {e}: which is the gating output is ambiguous"
    return gating[0], outs


@formula("_moe_C::topk_softmax", "sgl_kernel::topk_softmax", "aiter::topk_softmax", "vllm::rocm_aiter_topk_softmax")
def topk_softmax(call: OpCall) -> Cost | Unmodelled:
    """(topk_weights [T, k], topk_indices [T, k], (token_expert_indices [T, k],) gating_output [T, E],
    (renormalize)): a softmax over each token's E logits and the k largest picked. FLOPs per logit:
    SOFTMAX (norm.py) + log2(k) compares; bytes: the logits read, the [T, k] outputs written."""
    if shape_problem(call):
        return Unmodelled(shape_problem(call), cause="bad_shapes")
    got = _gating_and_topk(call)
    if isinstance(got, str):
        return Unmodelled(f"{call.name}: {got}")
    g, outs = got
    t, e = g.shape
    k = outs[0].shape[1]
    per = SOFTMAX + max(1, ceil(log2(k)) if k > 1 else 1)
    flops = t * e * per
    tr = Traffic().read("gating_output", g)
    for o in outs:
        tr.write(f"[T, k] {o.dtype}", o.shape, o.itemsize)
    return make(flops, tr, "reduction", g.dtype, per_element_expr(g.shape, per, flops, "logits"),
                notes=[f"softmax over {e} experts ({SOFTMAX} per logit) and a top-{k} pick (log2(k) compares)"])


@formula("_moe_C::moe_align_block_size", "_moe_C::sgl_moe_align_block_size", "sgl_kernel::moe_align_block_size")
def moe_align_block_size(call: OpCall) -> Cost | Unmodelled:
    """(topk_ids [T, k], num_experts, block_size, sorted_token_ids [S]!, experts_ids [S/block]!,
    num_tokens_post_pad [1]!, ...): count the pairs per expert, then write each pair's index into its
    expert's block-padded slot. Bytes: the ids read, the three outputs written whole (the padding
    is filled too); FLOPs: 2 per pair (count, place)."""
    (ids, sorted_ids, expert_ids), err = need(call, 0, 3, 4)
    if err:
        return err
    tr = Traffic().read("topk_ids", ids).write("sorted_token_ids", sorted_ids.shape, sorted_ids.itemsize)
    tr.write("experts_ids", expert_ids.shape, expert_ids.itemsize)
    post = call.tensor(5)
    if post is not None:
        tr.write("num_tokens_post_pad", post.shape, post.itemsize)
    flops = ids.numel * 2
    return make(flops, tr, "index", ids.dtype, per_element_expr(ids.shape, 2, flops, "routed pairs"),
                notes=["the per-expert prefix sum over E counters not counted"])


@formula("_moe_C::moe_sum", "sgl_kernel::moe_sum")
def moe_sum(call: OpCall) -> Cost | Unmodelled:
    """(input [T, k, H], output [T, H]!): each token's k expert outputs summed: (k-1) adds per output."""
    (x, out), err = need(call, 0, 1)
    if err:
        return err
    if len(x.shape) != 3 or out.shape != (x.shape[0], x.shape[2]):
        return Unmodelled(f"{call.name}: expected input [T, k, H] and output [T, H], got {x.shape}, {out.shape}")
    per = max(x.shape[1] - 1, 1)
    flops = out.numel * per
    tr = Traffic().read("input", x).write("output", out.shape, out.itemsize)
    return make(flops, tr, "reduction", x.dtype, per_element_expr(out.shape, per, flops, "outputs"))


@formula("TopK", exact=True)
def triton_topk(call: OpCall) -> Cost | Unmodelled:
    """triton_kernels' routing TopK autograd function: (x [T, E], k, apply_softmax, dim, ...): the k
    largest logits per row (softmaxed over the k when apply_softmax), written as values [T, k]
    (x's dtype), int16 indices [T, k] and a bitmatrix of one bit per (token, expert), [T, ceil(E/32)]
    uint32. Other autograd functions named TopK exist: a call whose arguments do not fit stays
    unmodelled."""
    (x,), err = need(call, 0)
    if err:
        return err
    k = parse_int(call.scalar(1))
    if len(x.shape) != 2 or x.dtype not in ("bf16", "fp16", "fp32") or not k or not 0 < k <= x.shape[1] \
            or call.scalar(2) not in ("True", "False"):
        return Unmodelled(f"{call.name}: not triton_kernels' routing TopK (x [T, E], int k, bool apply_softmax)")
    t, e = x.shape
    per = max(1, ceil(log2(k)) if k > 1 else 1)
    flops = t * e * per + (t * k * SOFTMAX if call.scalar(2) == "True" else 0)
    tr = Traffic().read("x", x).write("values", (t, k), x.itemsize).write("indices(int16)", (t, k), 2)
    tr.write("bitmatrix(uint32)", (t, ceil(e / 32)), 4)
    return make(flops, tr, "reduction", x.dtype, f"{fmt_int(t)}*{e}*{per} compares + softmax of the k "
                f"= {fmt_flops(flops)}", notes=[f"top-{k} of {e} per token; a softmax over the k picked"])


@formula("SortTokens", exact=True)
def triton_sort_tokens(call: OpCall) -> Cost | Unmodelled:
    """triton_kernels' routing SortTokens autograd function: (expt_scal [T, k], expt_indx [T, k],
    n_expts_tot, bitmatrix?): a histogram of the T*k pairs per expert, their order by expert (two
    int32 index arrays of T*k) and the gate weights in that order. Bytes: both inputs read; the
    histogram [E], the two index arrays and the sorted weights written; 2 FLOPs per pair."""
    (scal, indx), err = need(call, 0, 1)
    if err:
        return err
    e = parse_int(call.scalar(2))
    if len(scal.shape) != 2 or scal.shape != indx.shape or not e or e <= 0:
        return Unmodelled(f"{call.name}: not triton_kernels' SortTokens (expt_scal and expt_indx [T, k], int E)")
    n = scal.numel
    tr = Traffic().read("expt_scal", scal).read("expt_indx", indx)
    tr.write("hist(int32)", (e,), 4).write("topk_indx + gate_indx(int32)", (2 * n,), 4)
    tr.write("gate_scal", (n,), scal.itemsize)
    return make(2 * n, tr, "index", scal.dtype, per_element_expr(scal.shape, 2, 2 * n, "routed pairs"),
                notes=["the per-block offset tables (a few hundred int32) not counted"])
