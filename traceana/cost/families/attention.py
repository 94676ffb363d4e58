"""Scaled-dot-product attention, forward and backward (flash, memory-efficient, cuDNN, math entry).

FLOPs as torch.utils.flop_counter.sdpa_flop_count / sdpa_backward_flop_count:
  forward  = 2*B*Hq*Sq*Skv*Dq (Q K^T) + 2*B*Hq*Sq*Skv*Dv (P V) = 4*B*H*Sq*Skv*D when Dq == Dv
  backward = 2*B*Hq*Sq*Skv*(3*Dq + 2*Dv)  (recompute S, dP, dV, dQ, dK) = 2.5x the forward
GQA: FLOPs use the query heads. Causal masking is not discounted (flop_counter does not
halve it either); a note says so, since a causal kernel skips about half of the tiles.

_flash_attention_* and _efficient_attention_* take (batch, seq, heads, dim) tensors;
flop_counter's formulas for those two read the shape as (batch, heads, seq, dim), which is only
right for its nested-tensor path; we use the real layout (equal to flop_counter's sdpa_flop_count
on the transposed shapes).

Bytes: the fused-kernel minimum: every tensor argument read once (q, k, v, mask/bias, and in the
backward grad_out, out, logsumexp), the output (+ fp32 logsumexp) or grad_q/k/v written once. These aten
ops return their output in the query's dtype, so it is written at the query's size; library ops that take
an output tensor (attention_paged.py) write it at that tensor's dtype (fp8 inputs, a bf16 output).
K/V re-reads across query tiles and the Sq x Skv score matrix never reach DRAM in this model.
"""

from __future__ import annotations

from traceana.cost.families._common import make, need
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, fmt_flops, parse_bool, parse_int
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

CAUSAL_NOTE = ("is_causal: FLOPs counted in full as torch.utils.flop_counter does; the kernel skips "
               "about half of the score tiles, so the useful work is roughly half")

# name -> (first of q/k/v, layout, backward, causal position, causal is a mask type,
#          logsumexp written: True/False/position of compute_log_sumexp, varlen (cum_q, max_q, max_k))
_SPEC = {
    "scaled_dot_product_attention": (0, "bhsd3", False, 5, False, False, None),
    "_scaled_dot_product_flash_attention": (0, "bhsd", False, 4, False, True, None),
    "_scaled_dot_product_flash_attention_for_cpu": (0, "bhsd", False, 4, False, True, None),
    "_scaled_dot_product_efficient_attention": (0, "bhsd", False, 6, False, 4, None),
    "_scaled_dot_product_cudnn_attention": (0, "bhsd", False, 6, False, 4, None),
    "_flash_attention_forward": (0, "bshd", False, 8, False, True, (3, 5, 6)),
    "_efficient_attention_forward": (0, "bshd", False, 9, True, 10, (4, 6, 7)),
    "_scaled_dot_product_flash_attention_backward": (1, "bhsd", True, 11, False, False, None),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (1, "bhsd", True, 6, False, False, None),
    "_scaled_dot_product_efficient_attention_backward": (1, "bhsd", True, 11, False, False, None),
    "_scaled_dot_product_cudnn_attention_backward": (1, "bhsd", True, 14, False, False, None),
    "_flash_attention_backward": (1, "bshd", True, 11, False, False, (6, 8, 9)),
    "_efficient_attention_backward": (1, "bshd", True, 14, True, False, (6, 8, 9)),
}


def _bhsd(t: TensorArg, layout: str) -> tuple[int, int, int, int] | None:
    """(B, H, S, D); 'bhsd3' also accepts the public op's 3-D (B, S, D) inputs."""
    s = t.shape
    if layout == "bshd":
        return (s[0], s[2], s[1], s[3]) if len(s) == 4 else None
    if len(s) == 4:
        return s
    return (s[0], 1, s[1], s[2]) if len(s) == 3 and layout == "bhsd3" else None


def _varlen(call: OpCall, q: TensorArg, k: TensorArg, v: TensorArg, pos, notes: list[str]):
    """Packed (total, H, D) inputs with cumulative sequence offsets: equal-length estimate."""
    cum = call.tensor(pos[0])
    if cum is None or len(cum.shape) != 1 or cum.shape[0] < 2:
        return None
    b = cum.shape[0] - 1
    if len(q.shape) == 4 and q.shape[0] == 1:  # efficient attention packs as (1, total, H, D)
        q, k, v = (TensorArg(t.shape[1:], t.type_str) for t in (q, k, v))
    if len(q.shape) != 3 or len(k.shape) != 3 or len(v.shape) != 3:
        return None
    sq, skv = q.shape[0] / b, k.shape[0] / b
    notes.append(f"variable-length batch of {b} sequences ({q.shape[0]} query / {k.shape[0]} key tokens): "
                 f"FLOPs assume equal lengths {sq:g} x {skv:g} (a lower bound for self-attention; "
                 f"flop_counter would use max_q x max_k = {call.scalar(pos[1])} x {call.scalar(pos[2])})")
    return (b, q.shape[1], sq, q.shape[2]), (b, k.shape[1], skv, k.shape[2]), (b, v.shape[1], skv, v.shape[2])


def _causal(call: OpCall, pos: int, mask_type: bool) -> bool | None:
    if mask_type:
        t = parse_int(call.scalar(pos))
        return None if t is None else t != 0
    return parse_bool(call.scalar(pos))


def _attention(call: OpCall) -> Cost | Unmodelled:
    first, layout, backward, p_causal, mask_type, lse, varlen = _SPEC[call.name.split("::", 1)[1]]
    (q, k, v), err = need(call, first, first + 1, first + 2)
    if err:
        return err
    notes: list[str] = []
    dims = _varlen(call, q, k, v, varlen, notes) if varlen else None
    estimated = dims is not None
    if dims is None:
        dims = _bhsd(q, layout), _bhsd(k, layout), _bhsd(v, layout)
        if None in dims:
            return Unmodelled(f"attention q/k/v {q.shape} {k.shape} {v.shape} are not 4-D ({layout[:4]})")
    (b, hq, sq, dq), (bk, hk, skv, dk), (bv, hv, sv, dv) = dims
    if not (b == bk == bv and hk == hv and dq == dk and skv == sv) or hk == 0 or hq % hk:
        return Unmodelled(f"attention q/k/v shapes do not match: {q.shape} {k.shape} {v.shape}", cause="bad_shapes")
    if hk != hq:
        notes.append(f"grouped-query attention: {hq} query heads share {hk} key/value heads")
    base = 2 * b * hq * sq * skv
    mult = (3 * dq + 2 * dv) if backward else (dq + dv)
    flops = base * mult
    if backward:
        what = "2*B*H*Sq*Skv*(3*Dq+2*Dv)"
        nums = f"2*{b}*{hq}*{sq:g}*{skv:g}*(3*{dq}+2*{dv})"
    elif dq == dv:
        what, nums = "4*B*H*Sq*Skv*D", f"4*{b}*{hq}*{sq:g}*{skv:g}*{dq}"
    else:
        what, nums = "2*B*H*Sq*Skv*(Dq+Dv)", f"2*{b}*{hq}*{sq:g}*{skv:g}*({dq}+{dv})"
    if _causal(call, p_causal, mask_type):
        notes.append(CAUSAL_NOTE)
    tr = Traffic()
    for i in range(len(call.dims)):
        t = call.tensor(i)
        if t is not None:
            tr.read(_label(backward, i - first, t, q, dv), t)
    if backward:
        for label, t in (("grad_q", q), ("grad_k", k), ("grad_v", v)):
            tr.write(label, t.shape, t.itemsize)
    else:
        tr.write("out", q.shape[:-1] + (dv,), q.itemsize)
        if lse is True or (not isinstance(lse, bool) and parse_bool(call.scalar(lse))):
            tr.write("logsumexp(fp32)", (b, hq, int(sq)), 4)
    expr = f"{what} = {nums} = {fmt_flops(flops)}"
    return make(flops, tr, "attention", q.dtype, expr, estimated=estimated, notes=notes)


def _label(backward: bool, rel: int, t: TensorArg, q: TensorArg, dv: int) -> str:
    """A readable name for a tensor argument in the bytes string."""
    if 0 <= rel <= 2:
        return "qkv"[rel]
    if backward and rel == -1:
        return "grad_out"
    if backward and t.shape == q.shape[:-1] + (dv,):
        return "out"
    if t.dtype == "fp32" and len(t.shape) == 3:
        return "logsumexp"
    return "mask/bias" if len(t.shape) >= 2 else "aux"


formula(*_SPEC)(_attention)
