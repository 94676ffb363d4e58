"""Fusion opportunities: chains of memory-bound ops where each op's output feeds the next.

An op instance is a link of a chain when (1) its signature is a memory- or latency-bound aten op
outside the library families (GEMM, convolution, attention, collectives, compiled kernels,
embedding tables: they end a chain, as does any non-aten custom op), and not a copy directly
after a copy (two copies in a row are independent copies),
(2) it is the next op *that launched GPU work* on the same CPU thread, its kernels run on the
same stream as the previous op's, and (3) data flows: one of its tensor inputs has the shape
of the previous op's output. Output shapes follow the cost model's rules: broadcast of the
tensor inputs for element-wise ops, the first input for in-place ops (`mul_`, `copy_`), the
concatenated shape for `cat`, M x N for matrix multiplies; a reduction feeds the next op when
that op reads its input with some dims reduced to 1 (keepdim) or dropped.

Each link is an intermediate tensor that makes a round trip through DRAM: written by the
producer and read back by the consumer. A fused kernel keeps it on chip, so fusion saves
2 x its bytes (only the read when the producer works in place: its result lives on and must be
written anyway). Time saved = bytes saved at the chain's own measured bandwidth (its bytes /
its time). When every op of the chain is latency-bound (tiny tensors), the chain costs launches,
not traffic: the saving is its time minus one launch floor plus its roofline time per
repetition, and the finding says so. Identical chains (same sequence of op signatures) are
grouped and summed. Limit: the trace records shapes, not tensor identities, so two sibling
consumers of one producer with identical shapes cannot be told from a chain; the finding says
"as far as shapes and order show".
"""

from __future__ import annotations

from math import prod

import numpy as np

from traceana import units as u

from traceana.cost.dtypes import NON_TENSOR, dtype_info
from traceana.cost.shapes import broadcast
from traceana.link import Links
from traceana.load.model import Trace

FUSABLE_BOUNDS = ("memory", "latency")
# Families that end a chain: library kernels (cuBLAS/cuDNN/flash/NCCL/FBGEMM) and compiled
# kernels, which neither torch.compile nor a hand-written element-wise kernel fuses through.
BREAKS_CHAIN = frozenset({"gemm", "conv", "attention", "comm", "compiled", "tbe"})
COPY_OPS = frozenset({"copy_", "_to_copy", "to", "clone", "contiguous"})
# The one fusion through GEMMs: unfused attention, batched GEMM -> softmax -> batched GEMM, which
# fused attention (scaled_dot_product_attention) replaces. A batched GEMM links only to a softmax.
ATTN_GEMMS = frozenset({"bmm", "baddbmm", "matmul"})
SOFTMAX = frozenset({"_softmax", "softmax", "_safe_softmax"})
_GEMM = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear"}
_REDUCE = {"sum", "mean", "amax", "amin", "max", "min", "prod", "norm", "linalg_vector_norm", "var",
           "std", "var_mean", "std_mean", "logsumexp", "argmax", "argmin", "all", "any"}


def _short(name: str) -> str:
    return name.split("::", 1)[-1]


def _tensors(row: dict) -> list[tuple[tuple[int, ...], float]]:
    """(shape, bytes per element) of each single-tensor input."""
    out = []
    for d, t in zip(row.get("input_dims") or [], row.get("input_types") or []):
        info = dtype_info(t) if t not in NON_TENSOR else None
        if info and isinstance(d, (list, tuple)) and all(isinstance(x, int) for x in d):
            out.append((tuple(d), info[1]))
    return out


def out_shape(row: dict) -> tuple[int, ...] | None:
    """The op's output shape by the cost model's rules, or None when it cannot be told."""
    name = _short(row["name"])
    ts = _tensors(row)
    dims = row.get("input_dims") or []
    if name == "cat" and dims and isinstance(dims[0], (list, tuple)) and dims[0] \
            and all(isinstance(s, (list, tuple)) for s in dims[0]):
        shapes = [tuple(s) for s in dims[0] if len(s)]
        if not shapes or len({len(s) for s in shapes}) != 1:
            return None
        diff = [i for i in range(len(shapes[0])) if len({s[i] for s in shapes}) > 1]
        axis = diff[0] if len(diff) == 1 else (len(shapes[0]) - 1 if not diff else None)
        if axis is None:
            return None
        return tuple(sum(s[i] for s in shapes) if i == axis else shapes[0][i] for i in range(len(shapes[0])))
    if not ts:
        return None
    if name.endswith("_"):
        return ts[0][0]
    if name in _GEMM:
        mats = [s for s, _ in ts if len(s) >= 2]
        if name in ("addmm", "baddbmm") and len(mats) >= 2:
            a, b = mats[-2], mats[-1]
        elif name == "linear" and len(mats) >= 2:
            return mats[0][:-1] + (mats[1][0],)
        elif len(mats) >= 2:
            a, b = mats[0], mats[1]
        else:
            return None
        return a[:-1] + (b[-1],)
    if name in _REDUCE:
        return None
    return broadcast(*[s for s, _ in ts])


def _squeeze(s: tuple[int, ...]) -> tuple[int, ...]:
    i = 0
    while i < len(s) - 1 and s[i] == 1:
        i += 1
    return s[i:]


def _reduced_from(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """dst looks like src reduced over some dims (kept as 1, or dropped), and is not src."""
    if dst == src or not dst or prod(dst) >= prod(src):
        return False
    if len(dst) == len(src):
        return all(d == s or d == 1 for d, s in zip(dst, src))
    it = iter(src)
    return all(any(d == s for s in it) for d in dst)  # dst is a subsequence of src


def feeds(a: dict, b: dict) -> tuple[tuple[int, ...], float] | None:
    """(intermediate shape, bytes per element) when a's output is one of b's inputs."""
    ins = _tensors(b)
    if _short(a["name"]) in _REDUCE:
        src = _tensors(a)
        if not src:
            return None
        for s, isz in ins:
            if _reduced_from(src[0][0], s):
                return s, isz
        return None
    out = out_shape(a)
    if out is None or not out:
        return None
    for s, isz in ins:
        if s == out or (_squeeze(s) == _squeeze(out) and len(out) > 1):
            return s, isz
    return None


def fix_for(names: list[str]) -> str:
    """What fuses this chain, from the op names in it."""
    n = {_short(x) for x in names}
    if n & {"_softmax", "softmax", "_safe_softmax"} and n & {"bmm", "baddbmm", "matmul"}:
        return ("use fused attention: torch.nn.functional.scaled_dot_product_attention (Flash / "
                "memory-efficient kernels) never writes the attention-score matrix to DRAM")
    if "rsqrt" in n and ("mean" in n or "pow" in n):
        return ("use a fused RMSNorm: torch.nn.functional.rms_norm / nn.RMSNorm under torch.compile, or a "
                "fused kernel (apex FusedRMSNorm, Liger, Transformer Engine)")
    if n & {"native_layer_norm", "layer_norm"}:
        return ("fuse the residual add into the norm: torch.compile, or a fused add + layer-norm kernel "
                "(apex FusedLayerNorm, Transformer Engine)")
    if n & {"addcdiv_", "addcmul_", "lerp_", "_foreach_addcdiv_", "_foreach_mul_", "_foreach_add_"}:
        return "use a fused optimizer step: torch.optim.AdamW(..., fused=True) (or foreach=True)"
    if n & {"silu", "sigmoid", "gelu"} and n & {"mul"}:
        return ("fuse the gated activation: torch.compile, or a fused SwiGLU / GeGLU kernel "
                "(Liger, xformers, Transformer Engine)")
    if "cat" in n and ("neg" in n or {"mul", "add"} <= n):
        return "fuse the rotary embedding: torch.compile, or a fused RoPE kernel (flash-attn apply_rotary_emb)"
    library = sorted({x for x in names if not x.startswith("aten::")})
    if library:  # torch.compile treats a library's custom op as opaque: it cannot fuse through it
        return (f"one custom kernel doing both steps, or a layout that makes the copy unnecessary: "
                f"{', '.join(x[:60] for x in library[:2])} {'is a library op' if len(library) == 1 else 'are library ops'} "
                f"that torch.compile does not fuse")
    return "torch.compile fuses such element-wise chains into one Triton kernel"


def chains(trace: Trace, links: Links, ev_row: np.ndarray, rows: list[dict]) -> list[dict]:
    """Groups of identical fusable chains, most time saved first."""
    ops, gpu = trace.ops, trace.gpu
    n_rows = len(rows)
    if n_rows == 0 or len(ops) == 0:
        return []
    bgemm = np.array([r.get("family") == "gemm" and _short(r["name"]) in ATTN_GEMMS for r in rows], dtype=bool)
    soft = np.array([_short(r["name"]) in SOFTMAX for r in rows], dtype=bool)
    cand = np.array([r.get("bound") in FUSABLE_BOUNDS and r.get("bytes") is not None and not r.get("opaque")
                     and (r.get("family") not in BREAKS_CHAIN or bgemm[i]) and r["name"].startswith("aten::")
                     and not any(k["name"].startswith(("Memcpy", "Memset")) for k in r.get("kernels") or [])
                     for i, r in enumerate(rows)], dtype=bool)
    is_copy = np.array([_short(r["name"]) in COPY_OPS for r in rows], dtype=bool)
    op_row = np.full(len(ops), -1, dtype=np.int64)
    op_stream = np.full(len(ops), -1, dtype=np.int64)
    m = (links.gpu_op >= 0) & (ev_row >= 0)
    op_row[links.gpu_op[m]] = ev_row[m]
    op_stream[links.gpu_op[m]] = gpu.device[m] * 1_000_003 + gpu.stream[m]
    owned = np.flatnonzero(op_row >= 0)
    if len(owned) < 2:
        return []
    seq = owned[np.lexsort((ops.ts[owned], ops.thread[owned]))]
    r = op_row[seq]
    # two copies in a row are independent copies, not a producer and its consumer
    link = ((ops.thread[seq][1:] == ops.thread[seq][:-1]) & (op_stream[seq][1:] == op_stream[seq][:-1])
            & cand[r[:-1]] & cand[r[1:]] & ~(is_copy[r[:-1]] & is_copy[r[1:]])
            & ~(bgemm[r[:-1]] & ~soft[r[1:]]) & ~(bgemm[r[1:]] & ~soft[r[:-1]]))
    pos = np.flatnonzero(link)
    if len(pos) == 0:
        return []
    code = r[pos] * n_rows + r[pos + 1]
    uniq, inv = np.unique(code, return_inverse=True)
    saved_of = np.zeros(len(uniq))
    inter: list[tuple | None] = []
    for k, c in enumerate(uniq.tolist()):
        a, b = rows[c // n_rows], rows[c % n_rows]
        f = feeds(a, b)
        inter.append(f)
        if f is not None:
            nbytes = prod(f[0]) * f[1]
            saved_of[k] = nbytes * (1 if _short(a["name"]).endswith("_") else 2)
    ok = np.zeros(len(link), dtype=bool)
    ok[pos] = saved_of[inv] > 0
    saved_link = np.zeros(len(link))
    saved_link[pos] = saved_of[inv]
    # runs of consecutive ok links: a chain covers seq[i .. j + 1]
    edges = np.diff(np.concatenate(([0], ok.astype(np.int8), [0])))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    op_us = links.op_device_us
    groups: dict[tuple, dict] = {}
    for i, j in zip(starts.tolist(), stops.tolist()):
        key = tuple(r[i:j + 1].tolist())
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"rows": key, "count": 0, "time_us": 0.0, "saved_bytes": 0.0,
                               "links": [inter[int(inv[np.searchsorted(pos, p)])] for p in range(i, j)],
                               "saved_per_rep": float(saved_link[i:j].sum())}
        g["count"] += 1
        g["time_us"] += float(op_us[seq[i:j + 1]].sum())
        g["saved_bytes"] += float(saved_link[i:j].sum())
    out = []
    for g in groups.values():
        chain_bytes = sum(rows[k]["bytes"] for k in g["rows"]) * g["count"]
        bw = chain_bytes / (g["time_us"] * 1e3) if g["time_us"] > 0 else None  # GB/s
        saved_us = g["time_us"] * min(g["saved_bytes"] / chain_bytes, 1.0) if chain_bytes > 0 else 0.0
        # the fused kernel still has to do the chain's FLOPs: never save below that floor
        floor = sum(rows[k].get("compute_time_us") or 0.0 for k in g["rows"]) * g["count"]
        saved_us = max(min(saved_us, g["time_us"] - floor), 0.0)
        # tiny tensors: each op's time is its launch floor, not its bytes; fused, the chain is one
        # kernel (one floor + the chain's roofline time), so the saving is launches, not traffic
        g["launch_bound"] = all(rows[k].get("bound") == "latency" for k in g["rows"])
        if g["launch_bound"]:
            per_kernel = max((rows[k].get("launch_floor_us") or 0.0) / max(rows[k].get("kernel_count") or 1, 1)
                             for k in g["rows"])
            fused = g["count"] * (per_kernel + sum(rows[k].get("roofline_time_us") or 0.0 for k in g["rows"]))
            g["kernels"] = sum(rows[k].get("kernel_count") or 1 for k in g["rows"])
            saved_us = max(g["time_us"] - fused, 0.0)
        g.update({"bytes": chain_bytes, "measured_gbps": bw, "saving_us": saved_us,
                  "names": [rows[k]["name"] for k in g["rows"]], "ids": [rows[k]["id"] for k in g["rows"]]})
        g["fix"] = fix_for(g["names"])
        out.append(g)
    out.sort(key=lambda g: -g["saving_us"])
    return out


def fusion_findings(groups: list[dict], total_us: float, limit: int = 8) -> list[dict]:
    out = []
    for g in groups[:limit]:
        if total_us <= 0 or g["saving_us"] < 0.001 * total_us:
            continue
        chain = " → ".join(n.split("::", 1)[-1] for n in g["names"])
        inter = []
        for (shape, isz), a in zip(g["links"], g["names"][:-1]):
            b = prod(shape) * isz
            inter.append(f"[{', '.join(map(str, shape))}] ({u.nbytes(b)}) from {a.split('::', 1)[-1]}"
                         + (" (in place: read back only)" if a.endswith("_") else ""))
        per = g["saved_per_rep"]
        if g.get("launch_bound"):
            text = (f"{chain} runs {g['count']:,} time(s) back to back on one stream, each op's output feeding the "
                    f"next (as far as shapes and order show). Its tensors are tiny ({u.nbytes(per)} of intermediates "
                    f"per repetition): every op is launch-bound, so the chain costs {g['kernels']:g} kernel launches "
                    f"per repetition, not DRAM traffic. Fused into one kernel it takes about one launch floor plus its "
                    f"bytes: {u.us(g['time_us'])} would become {u.us(g['time_us'] - g['saving_us'])}. Fix: {g['fix']}; "
                    "or capture the step in a CUDA graph (torch.compile mode='reduce-overhead'). "
                    "(Assumes the intermediates are not needed elsewhere.)")
            out.append({"kind": "fusion", "title": f"Fuse {chain}: {g['kernels']:g} launches → 1 per repetition",
                        "text": text, "ops": list(dict.fromkeys(g["ids"])), "saving_us": g["saving_us"]})
            continue
        text = (f"{chain} runs {g['count']:,} time(s) back to back on one stream, each op's output feeding the next "
                f"(as far as shapes and order show). Intermediates that round-trip through DRAM: "
                + "; ".join(inter[:4]) + (f"; and {len(inter) - 4} more" if len(inter) > 4 else "")
                + f". Fused, they stay on chip: {u.nbytes(per)} less traffic per repetition (the producer's write and the consumer's read; in place, the read only), "
                  f"{u.nbytes(g['saved_bytes'])} in all. The chain moves {u.nbytes(g['bytes'])} in {u.us(g['time_us'])} "
                  f"({u.rate_gbps(g['measured_gbps'])} measured); at that bandwidth the saved bytes take "
                  f"{u.us(g['saving_us'])}. Fix: {g['fix']}. (Assumes the intermediates are not needed elsewhere.)")
        out.append({"kind": "fusion", "title": f"Fuse {chain}: {u.nbytes(g['saved_bytes'])} less DRAM traffic",
                    "text": text, "ops": list(dict.fromkeys(g["ids"])), "saving_us": g["saving_us"]})
    return out
