"""Attention of serving engines over variable-length batches and paged KV caches: aiter's batch
prefill, vLLM's unified and paged attention, flash-attn's varlen entry points (the flash_attn
library's torch ops and vLLM's vendored copies).

FLOPs follow the attention family (attention.py): 4*Hq*D*sum(Sq_i*Sk_i) forward (2*Hq*(Dq+Dv)*...
when the value head differs), causal masking counted in full with a note. Bytes: q read, the
K/V rows the batch attends to read once (not the whole cache), the output written once.
What a trace records: the tensors' sizes and the scalar maxima (max_seqlen_q/k, max_seq_len),
never the per-sequence lengths (tensor contents). A batch whose totals equal batch x max has
every sequence at the maximum (exact); otherwise the maxima give an upper bound, marked
estimated.
"""

from __future__ import annotations

from traceana.cost.families._common import need
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, fmt_flops, parse_bool, parse_int
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

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
        return Unmodelled(f"{call.name}: max_seqlen_k not recorded", cause="scalars_not_recorded")
    flops = 4 * hq * d * sum_qk
    tr = Traffic().read("q", q)
    tr.add("read", "k rows used", (kv_tokens, hk, d), k.itemsize)
    tr.add("read", "v rows used", (kv_tokens, hk, d), v.itemsize)
    out = _output(call, 6, q.shape)  # out_, when the caller passed one (it sets the output's dtype)
    tr.read("kv_page_indices", pages).write("out", q.shape, out.itemsize if out is not None else q.itemsize)
    expr = f"4*Hq*D*sum(Sq*Sk) = 4*{hq}*{d}*{sum_qk:,} = {fmt_flops(flops)}"
    return Cost(flops, tr.total, "attention", q.dtype, True, expr, tr.expr(), estimated, tuple(notes))


def _output(call: OpCall, start: int, shape: tuple[int, ...]) -> TensorArg | None:
    """The output tensor a caller handed in (an optional `out_` after the inputs, from argument `start`):
    the first later tensor argument of the query's shape. The output is written at its dtype, which need
    not be the query's (fp8 inputs, a bf16 output)."""
    for i in range(start, len(call.dims)):
        t = call.tensor(i)
        if t is not None and t.shape == shape:
            return t
    return None


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
    out = call.tensor(3)  # written at its own dtype: fp8 q/k/v may write a bf16 output
    tr.write("out", out.shape if out is not None else (t, hq, dv), out.itemsize if out is not None else q.itemsize)
    notes = ["sequence boundaries and the cached context are not recorded: counted as one sequence of "
             f"{t} tokens attending to each other (causal masking counted in full); the real batch may "
             "hold many shorter sequences (fewer FLOPs) or long cached contexts (more FLOPs and bytes)"]
    expr = f"2*Hq*T*T*(D+Dv) = 2*{hq}*{t}*{t}*({d}+{dv}) = {fmt_flops(flops)}"
    return Cost(flops, tr.total, "attention", q.dtype, True, expr, tr.expr(), True, tuple(notes))




# ---------------------------------------------------------------- vLLM paged attention (decode)


def _paged(call: OpCall, first: int, v2: bool) -> Cost | Unmodelled:
    """paged_attention_v1 (out, query, key_cache, value_cache, num_kv_heads, scale, block_tables,
    seq_lens, block_size, max_seq_len, ...); v2 puts (exp_sums, max_logits, tmp_out) after out.
    One query token per sequence: query [B, Hq, D]; key_cache [blocks, Hk, D/x, block_size, x];
    value_cache [blocks, Hk, D, block_size]. The per-sequence lengths (seq_lens' contents) are not
    recorded: every sequence is taken at max_seq_len (an upper bound, estimated)."""
    q_pos = first
    (out, q, kc, vc, tables, lens), err = need(call, 0, q_pos, q_pos + 1, q_pos + 2, q_pos + 5, q_pos + 6)
    if err:
        return err
    if len(q.shape) != 3 or len(kc.shape) < 4 or len(vc.shape) != 4 or len(tables.shape) != 2 \
            or tables.shape[0] != q.shape[0]:
        return Unmodelled(f"{call.name}: unexpected query {q.shape}, caches {kc.shape} {vc.shape}, "
                          f"block_tables {tables.shape}")
    b, hq, d = q.shape
    hk, block = vc.shape[1], vc.shape[3]
    if not hk or hq % hk:
        return Unmodelled(f"{call.name}: {hq} query heads do not group onto {hk} key/value heads")
    max_len = parse_int(call.scalar(q_pos + 8))
    notes = ["per-sequence lengths not recorded: every sequence taken at the longest"]
    if not max_len or max_len <= 0:
        max_len = tables.shape[1] * block
        notes[0] += f" the block table allows ({tables.shape[1]} blocks x {block} = {max_len} tokens)"
    else:
        notes[0] += f", max_seq_len = {max_len} tokens"
    flops = 4 * b * hq * d * max_len
    tr = Traffic().read("query", q)
    tr.add("read", "k rows (B x max_seq_len)", (b, max_len, hk, d), kc.itemsize)
    tr.add("read", "v rows (B x max_seq_len)", (b, max_len, hk, d), vc.itemsize)
    tr.read("block_tables", tables).read("seq_lens", lens)
    if v2:
        for i, label in ((1, "exp_sums"), (2, "max_logits"), (3, "tmp_out")):
            t = call.tensor(i)
            if t is not None:  # partial results: written by the partitions, read by the reduction
                tr.add("write", label, t.shape, t.itemsize).read(label, t)
        notes.append("v2: each partition's partial output, max and sum written and read back once")
    tr.write("out", out.shape, out.itemsize)
    expr = f"4*B*Hq*D*max_seq_len = 4*{b}*{hq}*{d}*{max_len} = {fmt_flops(flops)}"
    return Cost(flops, tr.total, "attention", q.dtype, True, expr, tr.expr(), True, tuple(notes))


@formula("_C::paged_attention_v1")
def paged_attention_v1(call: OpCall) -> Cost | Unmodelled:
    return _paged(call, 1, False)


@formula("_C::paged_attention_v2")
def paged_attention_v2(call: OpCall) -> Cost | Unmodelled:
    return _paged(call, 4, True)


# ---------------------------------------------------------------- ragged paged attention (aiter)

# name -> position of the query; key_cache, value_cache, kv_indptr follow it (aiter's
# paged_attention_ragged(out, workspace, query, key_cache, value_cache, scale, kv_indptr, ...),
# and SGLang's profiler range around it, which records the tensors and drops the scalars)
_RAGGED = {"aiter::paged_attention_ragged": (2, 6), "sglang_profiler::attention_paged_attention_ragged": (2, 5)}


@formula(*_RAGGED)
def paged_attention_ragged(call: OpCall) -> Cost | Unmodelled:
    """Decode attention over a paged KV cache of pages [P, page, Hk, D], the batch's pages listed by
    kv_indptr [b+1] / kv_page_indices. FLOPs = 4*Hq*D*sum(Sk_i) (one query token per sequence),
    bytes = the K and V rows of the batch's pages + query + output. sum(Sk_i) is kv_indptr's contents
    (and the last pages' fill), which no profiler records, and the call takes no max_seq_len: the op
    is opaque for that cause, with the formula per KV token in its reason."""
    qp, ip = _RAGGED[call.name.rpartition("_")[0] if call.name not in _RAGGED else call.name]
    (q, kc, vc, indptr), err = need(call, qp, qp + 1, qp + 2, ip)
    if err:
        return err
    if len(q.shape) != 3 or len(kc.shape) != 4 or kc.shape != vc.shape or kc.shape[-1] != q.shape[-1] \
            or len(indptr.shape) != 1 or indptr.numel < 2:
        return Unmodelled(f"{call.name}: unexpected query {q.shape}, caches {kc.shape} {vc.shape}, "
                          f"kv_indptr {indptr.shape}")
    b = indptr.numel - 1
    _, hq, d = q.shape
    hk = kc.shape[2]
    per_token_flops = 4 * hq * d
    per_token_bytes = 2 * hk * d * kc.itemsize
    return Unmodelled(f"{call.name}: {b} sequences, {hq} query heads of {d} over {hk} KV heads: FLOPs = "
                      f"4*Hq*D*sum(Sk) = {per_token_flops}*sum(Sk), bytes = 2*Hk*D*{kc.itemsize:g} B*sum(Sk) = "
                      f"{per_token_bytes}*sum(Sk) + query + output; the KV lengths sum(Sk) are kv_indptr's "
                      "contents, not recorded", cause="lengths_not_recorded")


# ---------------------------------------------------------------- flash-attn library ops

# name -> (position of q, of cu_seqlens_q, of max_seqlen_q, of causal, backward); k, v follow q,
# cu_seqlens_k and max_seqlen_k follow theirs (flash_attn_interface's torch.library ops)
_FLASH = {
    "flash_attn::_flash_attn_varlen_forward": (0, 3, 5, 9, False),
    "flash_attn::_flash_attn_varlen_backward": (1, 9, 11, 15, True),
    "flash_attn::_flash_attn_forward": (0, None, None, 5, False),
    "flash_attn::_flash_attn_backward": (1, None, None, 11, True),
}


def _sum_qk(call: OpCall, q, k, cu_pos: int, max_pos: int, notes: list[str]):
    """(sequences, sum over sequences of Sq*Sk, key rows touched, estimated) of a varlen call."""
    cu_q, cu_k = call.tensor(cu_pos), call.tensor(cu_pos + 1)
    if cu_q is None or len(cu_q.shape) != 1 or cu_q.numel < 2:
        return None
    b = cu_q.numel - 1
    if cu_k is not None and cu_k.numel != cu_q.numel:
        return None
    mq, mk = parse_int(call.scalar(max_pos)), parse_int(call.scalar(max_pos + 1))
    tq, tk = q.shape[0], k.shape[0]
    if not mq or not mk or mq <= 0 or mk <= 0:
        return None
    if tq == b * mq and tk == b * mk:
        notes.append(f"{b} sequences all at the maximum ({tq} = {b} x {mq} query, {tk} = {b} x {mk} key tokens)")
        return b, b * mq * mk, tk, False
    bound = min(tq * mk, tk * mq)
    notes.append(f"{b} sequences of {tq} query / {tk} key tokens in all, lengths not recorded: sum(Sq*Sk) "
                 f"taken as its upper bound min(Tq*max_k, Tk*max_q) = min({tq}*{mk}, {tk}*{mq})")
    return b, bound, tk, True


@formula(*_FLASH)
def flash_attn(call: OpCall) -> Cost | Unmodelled:
    """flash_attn's forward / backward, dense ([B, S, H, D]) or varlen (packed [T, H, D] with
    cu_seqlens_q/k [B+1] and max_seqlen_q/k). Forward 4*Hq*D*sum(Sq*Sk); backward 2.5x that
    (2*Hq*sum(Sq*Sk)*(3*Dq+2*Dv), as the attention family)."""
    qp, cu, mx, cp, backward = _FLASH[call.name]
    (q, k, v), err = need(call, qp, qp + 1, qp + 2)
    if err:
        return err
    notes: list[str] = []
    varlen = cu is not None
    if varlen:
        if len(q.shape) != 3 or len(k.shape) != 3 or len(v.shape) != 3:
            return Unmodelled(f"{call.name}: expected packed [T, H, D] q/k/v, got {q.shape} {k.shape} {v.shape}")
        got = _sum_qk(call, q, k, cu, mx, notes)
        if got is None:
            return Unmodelled(f"{call.name}: cu_seqlens or max_seqlen_q/k not recorded", cause="scalars_not_recorded")
        _, sum_qk, _, estimated = got
        hq, dq, hk, dv = q.shape[1], q.shape[2], k.shape[1], v.shape[2]
    else:
        if len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4 or q.shape[0] != k.shape[0]:
            return Unmodelled(f"{call.name}: expected [B, S, H, D] q/k/v, got {q.shape} {k.shape} {v.shape}")
        b, sq, hq, dq = q.shape
        sum_qk, hk, dv, estimated = b * sq * k.shape[1], k.shape[2], v.shape[3], False
    if not hk or hq % hk or k.shape[-1] != dq:
        return Unmodelled(f"{call.name}: q/k/v heads or head dims do not match: {q.shape} {k.shape} {v.shape}",
                          cause="bad_shapes")
    if parse_bool(call.scalar(cp)):
        notes.append(_CAUSAL)
    mult, what = ((3 * dq + 2 * dv), "2*Hq*sum(Sq*Sk)*(3*Dq+2*Dv)") if backward else ((dq + dv), "2*Hq*sum(Sq*Sk)*(Dq+Dv)")
    flops = 2 * hq * sum_qk * mult
    tr = Traffic()
    for i in range(len(call.dims)):
        t = call.tensor(i)
        if t is not None and (not backward or i < 6 or i >= 9):  # dq/dk/dv buffers are written, not read
            tr.read(f"arg{i}" if not qp <= i <= qp + 2 else "qkv"[i - qp], t)
    if backward:
        for label, t in (("grad_q", q), ("grad_k", k), ("grad_v", v)):
            tr.write(label, t.shape, t.itemsize)
    else:
        tr.write("out", q.shape[:-1] + (dv,), q.itemsize)
        tr.write("softmax_lse(fp32)", (hq,) + q.shape[:-2], 4)
    expr = f"{what} = 2*{hq}*{sum_qk:,}*{mult} = {fmt_flops(flops)}"
    return Cost(flops, tr.total, "attention", q.dtype, True, expr, tr.expr(), estimated, tuple(notes))
