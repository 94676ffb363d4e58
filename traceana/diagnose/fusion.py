"""Fusion opportunities: producer -> consumer paths of memory- or latency-bound ops.

A link a -> b joins two op instances when all of these hold (dataflow.py has the tensor rules):
  order     b is the next op *that launched GPU work* on a's CPU thread, and no op of another
            thread that ran in between reads a tensor like a's output;
  stream    all kernels of a and of b ran on one stream, and b's first kernel is the next kernel
            on that stream after a's last (nothing else ran in between);
  data      b reads the tensor a writes (shape and dtype; `copy_` reads its source);
  no break  neither is a library, GEMM, convolution, attention, collective, memcpy or compiled op;
  no branch b is not a sibling of a: b does not repeat a's signature, is not followed by an op of
            its own signature (the same op applied to several tensors, e.g. unrelated `copy_`s of q, k
            and v: which one reads a's output is unknown) and does not repeat a recent op that started
            from outside the chain (the same code on a second tensor, e.g. RoPE on q then on k);
            signatures here include the instance's recorded strides;
  fresh     when a writes a new tensor, b's matching input is laid out densely (a strided slice of
            that shape is some other tensor);
  scalar    a one-element intermediate links only out of a reduction (any scalar matches any other).
Chains are the maximal runs of links; identical chains (same signatures) are grouped. Unfused
attention (GEMM -> element-wise steps -> softmax -> GEMM) is attention.py's: its ops are claimed
first and no chain here runs through them, so no saving is counted twice.

Savings. Each link's intermediate makes a DRAM round trip that a fused kernel keeps on chip:
its write and its read back (only the read when the producer works in place on a tensor that
lives on; a `copy_` under `to` / `contiguous` / `clone` fills a fresh tensor, so both count).
Time saved = those bytes at the chain's own measured bandwidth, never below the chain's compute
floor. Chains whose time is mostly in latency-bound ops (tiny tensors: launch and fixed per-kernel
cost dominate) are pitched as fewer kernels instead: fused, the chain costs about its longest
kernel, so the saving is the measured time of the others.
"""

from __future__ import annotations

from math import prod

import msgspec
import numpy as np

from traceana import units as u
from traceana.arrays import distinct, run_classes
from traceana.diagnose import attention
from traceana.diagnose.dataflow import REDUCTIONS, Flow, dense, fills_out_buffer, in_place, reads, short
from traceana.link.attribute import Links
from traceana.link.nesting import nesting_of
from traceana.load.model import Trace
from traceana.meter import OFF, Meter

FUSABLE_BOUNDS = ("memory", "latency")
REPEAT_WINDOW = 8  # ops back in which a repeated signature marks a parallel branch
_OPTIMIZER_STEPS = frozenset({"mul_", "add_", "addcdiv_", "addcmul_", "lerp_", "sqrt_", "div_", "sub_"})
_FRESH_COPY_PARENTS = frozenset({"aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone", "aten::copy",
                                 "aten::type_as", "aten::reshape", "aten::flatten", "aten::_reshape_alias"})


def pattern(names: list[str]) -> tuple[str | None, str, str]:
    """What the chain computes, read from the ops in it: (label or None, the long fix, a one-line fix).

    Model code often writes a standard layer out as separate element-wise ops (Hugging Face's
    LlamaRMSNorm: to(fp32) -> pow -> mean -> add(eps) -> rsqrt -> mul -> to(dtype) -> mul(weight);
    rotate_half: slice -> neg -> cat, then q*cos + rotate_half(q)*sin); each op is a kernel and a DRAM
    round trip. Where torch has the layer as one fused op, that op is the fix, with no compiler."""
    n = {short(x) for x in names}
    if "rsqrt" in n and ("mean" in n or "pow" in n) and not n & {"sub", "var", "var_mean"}:
        label = "Residual add + RMSNorm" if names and short(names[0]) == "add" else "RMSNorm"
        return (f"{label} written out as separate ops",
                "use torch.nn.RMSNorm / torch.nn.functional.rms_norm: one fused kernel on CUDA in recent torch "
                "(aten::_fused_rms_norm), or torch.compile; or a fused add + RMSNorm kernel (Liger, apex, "
                "Transformer Engine)",
                "Use nn.RMSNorm / F.rms_norm (one fused kernel) or torch.compile.")
    if "mean" in n and "sub" in n and n & {"rsqrt", "sqrt", "var", "var_mean", "pow"}:
        return ("LayerNorm written out as separate ops",
                "use torch.nn.LayerNorm / torch.nn.functional.layer_norm: one fused kernel in eager mode",
                "Use nn.LayerNorm / F.layer_norm (one fused kernel).")
    norms = ("native_layer_norm", "layer_norm")
    if n & set(norms):
        seq = [short(x) for x in names]
        at = next(i for i, x in enumerate(seq) if x in norms)
        if at > 0 and seq[at - 1] in ("add", "add_"):
            return ("Residual add + LayerNorm",
                    "fuse the residual add into the norm: torch.compile, or a fused add + layer-norm kernel "
                    "(apex FusedLayerNorm, Transformer Engine)",
                    "Fuse the residual add into the norm (torch.compile or a fused add + LayerNorm).")
        # the norm beside other element-wise ops (an activation before it, a scale or dropout after):
        # named by what the chain holds, in its order
        before = list(dict.fromkeys(x for x in seq[:at] if x not in norms))[-2:]
        after = list(dict.fromkeys(x for x in seq[at + 1:] if x not in norms))[:2]
        label = " + ".join([*before, "LayerNorm", *after])
        return (label if before or after else "LayerNorm chain",
                "fuse the element-wise ops next to the norm into its kernel: torch.compile fuses point-wise "
                "producers and consumers into the norm's reduction",
                "Fuse the ops next to the norm into it (torch.compile).")
    if "exp" in n and n & {"sum"} and n & {"div", "div_", "mul"}:
        return ("Softmax written out as separate ops",
                "use torch.softmax: one kernel that also subtracts the row maximum (numerically safe)",
                "Use torch.softmax (one kernel).")
    seq = [short(x) for x in names]
    # 0.5 x (1 + tanh(c (x + 0.044715 x^3))): tanh, then + 1, then the product (an LSTM cell's
    # o * tanh(c) has no add between); the cube may sit in a chain of its own
    if "tanh" in n and ("pow" in n or any(seq[i:i + 3] == ["tanh", "add", "mul"] for i in range(len(seq)))):
        return ("GELU (tanh approximation) written out as separate ops",
                "use torch.nn.functional.gelu(x, approximate=\"tanh\"): one kernel",
                "Use F.gelu(x, approximate=\"tanh\") (one kernel).")
    if n & {"addcdiv_", "addcmul_", "lerp_", "_foreach_addcdiv_", "_foreach_mul_", "_foreach_add_"}:
        return ("Optimizer update per parameter",
                "use a fused optimizer step: torch.optim.AdamW(..., fused=True) (or foreach=True)",
                "Use a fused optimizer (torch.optim.AdamW(..., fused=True)).")
    if {"mul_", "add_"} <= n <= _OPTIMIZER_STEPS:
        return ("Optimizer update per parameter",
                "this looks like a per-parameter optimizer update (in-place mul_ / add_ on each tensor): use the "
                "fused or foreach implementation (torch.optim.SGD/Adam/AdamW(..., fused=True) or foreach=True)",
                "Use a fused optimizer (fused=True or foreach=True).")
    if "sigmoid" in n and "mul" in n and not n & {"silu", "gelu"}:
        i = seq.index("sigmoid")
        if 0 < i < len(seq) - 1 and seq[i - 1] == "mul" and seq[i + 1] == "mul":
            return ("QuickGELU (x * sigmoid(1.702 x)) written out as separate ops",
                    "torch.compile fuses it into one kernel (keep the activation: swapping it for F.gelu changes "
                    "the model's numerics)",
                    "Fuse it into one kernel with torch.compile.")
        return ("x * sigmoid(.) written out as separate ops",
                "torch.compile fuses it into one kernel; if it is x * sigmoid(x), torch.nn.functional.silu is one "
                "kernel in eager mode",
                "Use F.silu if it is x * sigmoid(x), else torch.compile.")
    if n & {"silu", "gelu"} and n & {"mul"}:
        return ("Gated activation (SwiGLU / GeGLU)",
                "fuse the gated activation: torch.compile, or a fused SwiGLU / GeGLU kernel "
                "(Liger, xformers, Transformer Engine)",
                "Fuse act(gate) * up: torch.compile or a fused SwiGLU kernel.")
    if "cat" in n and ("neg" in n or {"mul", "add"} <= n):
        return ("Rotary embedding written out (rotate_half)",
                "fuse the rotary embedding: torch.compile, or a fused RoPE kernel (flash-attn apply_rotary_emb)",
                "Use a fused rotary-embedding kernel or torch.compile.")
    library = sorted({x for x in names if not x.startswith("aten::")})
    if library:  # torch.compile treats a library's custom op as opaque: it cannot fuse through it
        return (None,
                f"one custom kernel doing both steps, or a layout that makes the copy unnecessary: "
                f"{', '.join(x[:60] for x in library[:2])} {'is a library op' if len(library) == 1 else 'are library ops'} "
                f"that torch.compile does not fuse",
                "One custom kernel for both steps (torch.compile does not fuse library ops).")
    return None, "torch.compile fuses such element-wise chains into one Triton kernel", FIX


FIX = "Fuse the chain into one kernel (torch.compile)."


def fix_for(names: list[str]) -> str:
    """What fuses this chain, from the op names in it (and the library ops around it)."""
    return pattern(names)[1]


def _op_events(trace: Trace, links: Links, ev_row: np.ndarray) -> dict[str, np.ndarray]:
    """Per op instance: its row, stream (-2 when several), stream positions and kernel span."""
    ops, gpu = trace.ops, trace.gpu
    n = len(ops)
    ev = np.flatnonzero(links.gpu_op >= 0)
    skey = gpu.device * 1_000_003 + gpu.stream
    order = np.lexsort((gpu.ts, skey))
    pos = np.empty(len(gpu), dtype=np.int64)
    pos[order] = np.arange(len(gpu))
    op_of = links.gpu_op[ev]
    row = np.full(n, -1, dtype=np.int64)
    row[op_of] = ev_row[ev]
    bad_row = np.zeros(n, dtype=bool)
    bad_row[op_of[ev_row[ev] < 0]] = True
    lo_s = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    hi_s = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo_s, op_of, skey[ev])
    np.maximum.at(hi_s, op_of, skey[ev])
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(n, -1, dtype=np.int64)
    np.minimum.at(first, op_of, pos[ev])
    np.maximum.at(last, op_of, pos[ev])
    start = np.full(n, np.inf)
    end = np.full(n, -np.inf)
    np.minimum.at(start, op_of, gpu.ts[ev])
    np.maximum.at(end, op_of, gpu.ts[ev] + gpu.dur[ev])
    stream = np.where(lo_s == hi_s, lo_s, -2)
    row[bad_row] = -1
    return {"row": row, "stream": stream, "first": first, "last": last, "start": start, "end": end}


def _parent_names(trace: Trace, links: Links | None, idx: list[int]) -> dict[int, str]:
    """Name of the innermost op enclosing each op in idx (same thread), where it is near: among the
    16 ops before it in (thread, start, longest first) order (the link stage's: link/nesting.py), the
    nearest that encloses it."""
    ops = trace.ops
    if not idx:
        return {}
    nest = nesting_of(trace, links)
    order = nest.order
    at = np.asarray(idx, dtype=np.int64)
    rank_at = nest.pos()[at]
    found = np.full(len(at), -1, dtype=np.int64)
    live = np.ones(len(at), dtype=bool)  # still looking: no enclosing op yet, no other thread reached
    for off in range(1, 17):
        k = rank_at - off
        live &= k >= 0
        j = order[np.where(live, k, 0)]
        live &= ops.thread[j] == ops.thread[at]
        hit = live & (ops.ts[j] <= ops.ts[at]) & (ops.end[j] >= ops.end[at])
        found[hit] = j[hit]
        live &= ~hit
    names = trace.names
    return {i: names[ops.name[j]] for i, j in zip(at.tolist(), found.tolist()) if j >= 0}


def _pair(flow: Flow, a: int, b: int) -> tuple[int, ...] | None:
    """The arguments of row b that read row a's output, when a -> b can be a link (signatures only)."""
    f = flow.feeds(a, b)
    ra, rb = flow.rows[a], flow.rows[b]
    if f is None or fills_out_buffer(ra, rb):
        return None
    if prod(f[0]) <= 1 and short(ra["name"]) not in REDUCTIONS:
        return None  # a single element matches any other one: only a reduction's result is told apart
    t = flow.output(a)
    return tuple(i for i, _, _ in reads(rb, t)) if t else None


def _strides(raw: bytes, cache: dict[bytes, object]) -> object:
    if raw not in cache:
        try:
            cache[raw] = msgspec.json.decode(raw) if raw else None
        except msgspec.DecodeError:
            cache[raw] = None
    return cache[raw]


def _linked(trace: Trace, flow: Flow, seq: np.ndarray, oe: dict[str, np.ndarray], meter: Meter = OFF,
            strides: tuple[list[bytes], np.ndarray, int] | None = None) -> np.ndarray:
    """ok[i]: seq[i] -> seq[i + 1] is a producer -> consumer link. strides: each position's recorded strides
    (trace.ops.strides of seq), the same as numbers and how many distinct there are, when worked out."""
    ops, rows = trace.ops, flow.rows
    r = oe["row"][seq]
    cand = np.array([r_.get("bound") in FUSABLE_BOUNDS and r_.get("bytes") is not None
                     and not r_.get("opaque") and flow.breaks(k) is None for k, r_ in enumerate(rows)], dtype=bool)
    st, th = oe["stream"][seq], ops.thread[seq]
    pre = ((th[1:] == th[:-1]) & (st[1:] == st[:-1]) & (st[1:] >= 0) & cand[r[:-1]] & cand[r[1:]]
           & (oe["first"][seq][1:] == oe["last"][seq][:-1] + 1) & (r[1:] != r[:-1]))
    ok = np.zeros(len(pre), dtype=bool)
    multi = len(distinct(th)) > 1
    all_ts = ops.ts[seq]
    by_ts = np.argsort(all_ts, kind="stable")
    s_ts = all_ts[by_ts]
    todo = np.flatnonzero(pre)
    if strides is None:
        raw = list(map(ops.strides.__getitem__, seq.tolist()))
        codes = dict(zip(dict.fromkeys(raw), range(len(raw))))  # each distinct strides string -> a number
        strides = raw, np.fromiter(map(codes.__getitem__, raw), dtype=np.int64, count=len(raw)), len(codes)
    raw, sc, n_codes = strides
    back, again = _repeats(sc, n_codes, r, th, todo)
    # what a link needs of the two signatures alone, worked out once per distinct pair (and consumer strides):
    # b reads a's output (its arguments doing so), and a fresh output is read densely
    a_t, b_t = r[todo], r[todo + 1]
    _, first, pinv = np.unique(a_t * len(rows) + b_t, return_index=True, return_inverse=True)
    r_l = r.tolist()
    args_of = [_pair(flow, r_l[i], r_l[i + 1]) for i in todo[first].tolist()]
    has_args = np.array([bool(x) for x in args_of], dtype=bool)[pinv] if len(todo) else np.zeros(0, bool)
    in_place_row = np.array([in_place(x["name"]) for x in rows], dtype=bool)
    strided = np.zeros(len(todo), dtype=bool)
    need = np.flatnonzero(has_args & ~again & ~in_place_row[a_t])
    if len(need):
        _, ufirst, kinv = np.unique(pinv[need] * n_codes + sc[todo[need] + 1], return_index=True,
                                       return_inverse=True)
        cache: dict[bytes, object] = {}
        bad = []
        for k in need[ufirst].tolist():
            i, args = int(todo[k]), args_of[int(pinv[k])]
            st_b = _strides(raw[i + 1], cache)
            dims_b = rows[r_l[i + 1]]["input_dims"]
            bad.append(isinstance(st_b, list) and not any(j < len(st_b) and dense(tuple(dims_b[j]), st_b[j])
                                                          for j in args))
        strided[need] = np.array(bad, dtype=bool)[kinv]
    # b repeats a recent op that started a branch (the same code on a second tensor): only when that op is not
    # itself in a link, which the links before it decide, in order
    keep = has_args & ~again & ~strided
    inlink = bytearray(len(seq))
    for i, bk in zip(todo[keep].tolist(), back[keep].tolist()):
        if bk >= 0 and not inlink[bk]:
            continue
        if multi and _read_elsewhere(flow, r, th, all_ts, s_ts, by_ts, i, meter):
            continue
        ok[i] = True
        inlink[i + 1] = 1
    return ok


def _repeats(sc: np.ndarray, n_codes: int, r: np.ndarray, th: np.ndarray,
             at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each candidate link seq[i] -> seq[i + 1] (i in at), where an instance's signature is its row
    and its recorded strides (sc[i]: seq[i]'s strides as one of n_codes numbers): back[i], the latest j in
    [i - REPEAT_WINDOW + 1, i] on seq[i]'s thread whose signature is seq[i + 1]'s (-1: none), and again[i],
    whether seq[i + 2] (same thread) has it too."""
    sig = r * max(n_codes, 1) + sc
    n = len(sc)
    back = np.full(len(at), -1, dtype=np.int64)
    for off in range(REPEAT_WINDOW - 1, -1, -1):  # the nearest match (smallest offset) written last
        j = at - off
        ok = j >= 0
        jj = np.where(ok, j, 0)
        m = ok & (th[jj] == th[at]) & (sig[jj] == sig[at + 1])
        back[m] = j[m]
    k = np.minimum(at + 2, n - 1)
    again = (at + 2 < n) & (th[k] == th[at]) & (sig[k] == sig[at + 1])
    return back, again


def _read_elsewhere(flow: Flow, r: np.ndarray, th: np.ndarray, ts: np.ndarray, s_ts: np.ndarray,
                    by_ts: np.ndarray, i: int, meter: Meter = OFF) -> bool:
    """An op of another thread that ran between seq[i] and seq[i + 1] reads a tensor like seq[i]'s output
    (s_ts: ts sorted, by_ts: the order that sorts it)."""
    a = int(r[i])
    if flow.output(a) is None:
        return False
    lo, hi = np.searchsorted(s_ts, ts[i], "right"), np.searchsorted(s_ts, ts[i + 1], "left")
    ks = by_ts[lo:hi]
    meter.visit("diagnose.fusion", len(ks) + 1)
    for k in ks[th[ks] != th[i]].tolist():
        if r[k] >= 0 and flow.reads_output(int(r[k]), a):
            return True
    return False


def _neighbour(flow: Flow, r: np.ndarray, th: np.ndarray, i: int, j: int) -> str | None:
    """Why the chain stops at seq[j] although data flows between seq[i] and seq[j] (the library note)."""
    if not 0 <= j < len(r) or th[j] != th[i] or r[j] < 0:
        return None
    a, b = (i, j) if j > i else (j, i)
    why = flow.breaks(int(r[j]))
    if why and flow.feeds(int(r[a]), int(r[b])) is not None:
        return why
    return None


def chains(trace: Trace, links: Links, ev_row: np.ndarray, rows: list[dict],
           device: dict | None = None, meter: Meter = OFF) -> list[dict]:
    """Groups of identical fusable chains, most time saved first: unfused attention (attention.py) first
    claims its ops, the element-wise chains are then sought among the rest (no op saved twice).
    device: the resolved device (its DRAM bandwidth prices the fused attention kernel)."""
    ops = trace.ops
    if not rows or len(ops) == 0 or len(trace.gpu) == 0:
        return []
    oe = _op_events(trace, links, ev_row)
    meter.visit("diagnose.fusion", len(ops) + len(trace.gpu))
    owned = np.flatnonzero(oe["row"] >= 0)
    if len(owned) < 2:
        return []
    seq = owned[np.lexsort((ops.ts[owned], ops.thread[owned]))]
    flow = Flow(rows)
    r, th = oe["row"][seq], ops.thread[seq]
    op_us = links.op_device_us
    raw = list(map(ops.strides.__getitem__, seq.tolist()))  # each position's recorded strides ...
    codes = dict(zip(dict.fromkeys(raw), range(len(raw))))  # ... and as a number (equal for equal strings)
    sc = np.fromiter(map(codes.__getitem__, raw), dtype=np.int64, count=len(raw))
    att, claimed = attention.find(trace, flow, seq, r, th, oe, op_us, meter, sc)
    ok = _linked(trace, flow, seq, oe, meter, (raw, sc, len(codes))) & ~claimed[:-1] & ~claimed[1:]
    meter.visit("diagnose.fusion", len(seq))
    edges = np.diff(np.concatenate(([0], ok.astype(np.int8), [0])))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    # fresh[k]: seq[k]'s output is a new tensor (not in place, or a copy_ filling a fresh one)
    fresh_pos = np.array([not in_place(x["name"]) for x in rows], dtype=bool)[r]
    is_copy = np.array([short(x["name"]) == "copy_" for x in rows], dtype=bool)
    copies = np.flatnonzero(np.append(ok, False) & is_copy[r])  # the copies inside chains
    parent = _parent_names(trace, links, seq[copies].tolist())
    fresh_pos[copies] |= np.array([parent.get(o, "") in _FRESH_COPY_PARENTS for o in seq[copies].tolist()],
                                  dtype=bool)
    fresh_l = fresh_pos.tolist()
    t_sum, t_max, gap = _chain_sums(op_us[seq], oe["start"][seq], oe["end"][seq], starts, stops)
    r_l = r.tolist()
    # identical chains (rows), and identical chains whose intermediates are fresh alike: classes numbered by first
    # appearance, each worked out from its first chain; the sums then added per class in chain order
    gid, g_first = run_classes(r, starts, stops)
    fid, f_first = run_classes(r, starts, stops, fresh_pos)
    groups: dict[tuple, dict] = {}
    order: list[dict] = []
    for c in g_first.tolist():
        i, j = int(starts[c]), int(stops[c])
        key = tuple(r_l[i:j + 1])
        inter = [flow.feeds(key[k], key[k + 1]) for k in range(len(key) - 1)]
        order.append(groups.setdefault(key, {
            "rows": key, "count": 0, "time_us": 0.0, "saved_bytes": 0.0, "links": inter, "fresh": fresh_l[i:j],
            "launch_saved_us": 0.0, "gap_us": 0.0, "kernels": int(sum(rows[k]["kernel_count"] for k in key) + 0.5),
            "before": _neighbour(flow, r, th, i, i - 1), "after": _neighbour(flow, r, th, j, j + 1)}))
    saved = np.zeros(len(f_first))
    for k, c in enumerate(f_first.tolist()):
        i, j = int(starts[c]), int(stops[c])
        saved[k] = float(sum(prod(s) * isz * (2 if f else 1) for (s, isz), f in zip(order[gid[c]]["links"],
                                                                                   fresh_l[i:j])))
    n_g = len(order)
    count = np.bincount(gid, minlength=n_g).tolist()
    sums = np.zeros((4, n_g))
    for row, x in enumerate((t_sum, saved[fid], t_sum - t_max, gap)):
        np.add.at(sums[row], gid, x)  # (ufunc.at adds in index order: chain by chain, as a running total)
    for g, n, t, b, ls, gp in zip(order, count, *sums.tolist()):
        g.update(count=n, time_us=t, saved_bytes=b, launch_saved_us=ls, gap_us=gp)
    out = [_cost(g, rows) for g in groups.values()] + attention.cost(att, rows, device)
    return sorted(out, key=lambda g: -g["saving_us"])


def _seq_sum(x: np.ndarray, lo: np.ndarray, n: np.ndarray) -> np.ndarray:
    """x[lo[c]:lo[c] + n[c]].sum() for every c, with numpy's own rounding: short runs (< 8, which numpy
    adds one by one from 0.0) added position by position across all runs at once, longer ones one by one."""
    out = np.zeros(len(lo))
    short_ = n < 8
    for p in range(int(n[short_].max()) if short_.any() else 0):
        m = short_ & (n > p)
        out[m] += x[lo[m] + p]
    for c in np.flatnonzero(~short_).tolist():
        out[c] = x[lo[c]:lo[c] + n[c]].sum()
    return out


def _chain_sums(t: np.ndarray, start: np.ndarray, end: np.ndarray, starts: np.ndarray,
                stops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per chain seq[i..j] (i in starts, j in stops): its ops' summed and longest device time, and the
    GPU idle between its ops' kernels (t, start, end: per position of seq)."""
    if not len(starts):
        return np.zeros(0), np.zeros(0), np.zeros(0)
    n = stops - starts + 1
    total = _seq_sum(t, starts, n)
    bounds = np.stack((starts, stops + 1), axis=1).ravel()  # max of t[i..j]: exact in any order
    longest = np.maximum.reduceat(t, bounds[:-1] if bounds[-1] == len(t) else bounds)[::2]
    gaps = np.clip(start[1:] - end[:-1], 0, None)  # gaps[k]: between positions k and k + 1
    return total, longest, _seq_sum(gaps, starts, n - 1)


def _cost(g: dict, rows: list[dict]) -> dict:
    key, n = g["rows"], g["count"]
    chain_bytes = sum(rows[k]["bytes"] for k in key) * n
    lat_us = sum(rows[k]["mean_time_us"] for k in key if rows[k]["bound"] == "latency") * n
    g["launch_bound"] = g["time_us"] > 0 and lat_us >= 0.5 * g["time_us"]
    bw = chain_bytes / (g["time_us"] * 1e3) if g["time_us"] > 0 else None  # GB/s
    if g["launch_bound"]:
        saved_us = g["launch_saved_us"]
    else:
        saved_us = g["time_us"] * min(g["saved_bytes"] / chain_bytes, 1.0) if chain_bytes > 0 else 0.0
        # the fused kernel still has to do the chain's FLOPs: never save below that floor
        floor = sum(rows[k].get("compute_time_us") or 0.0 for k in key) * n
        saved_us = max(min(saved_us, g["time_us"] - floor), 0.0)
    g.update({"bytes": chain_bytes, "measured_gbps": bw, "saving_us": saved_us, "saved_per_rep": g["saved_bytes"] / n,
              "names": [rows[k]["name"] for k in key], "ids": [rows[k]["id"] for k in key]})
    g["pattern"], g["fix"], g["short_fix"] = pattern(g["names"])
    return g


def _intermediates(g: dict) -> list[str]:
    out = []
    for (shape, isz), a, fresh in zip(g["links"], g["names"][:-1], g["fresh"]):
        out.append(f"[{', '.join(map(str, shape))}] ({u.nbytes(prod(shape) * isz)}) from {short(a)}"
                   + ("" if fresh else " (in place: read back only)"))
    return out


def _stops(g: dict) -> str:
    notes = [f"its input comes from an op it cannot be fused with ({g['before']})" if g["before"] else "",
             f"its output goes on into an op it cannot be fused with ({g['after']})" if g["after"] else ""]
    notes = [x for x in notes if x]
    if not notes:
        return ""
    return (" The chain stops there: " + "; ".join(notes) + ". torch.compile does not fuse through library ops "
            "(cuBLAS/cuDNN/NCCL/FBGEMM kernels, custom ops); going further needs a kernel that does both "
            "(e.g. a GEMM epilogue).")


def fusion_findings(groups: list[dict], total_us: float, limit: int = 8) -> list[dict]:
    out = []
    for g in groups[:limit]:
        if total_us <= 0 or g["saving_us"] < 0.001 * total_us:
            continue
        chain = " → ".join(short(n) for n in g["names"])
        if g.get("attention"):
            out.append(attention.finding(g))
            continue
        inter = _intermediates(g)
        inter_s = "; ".join(inter[:4]) + (f"; and {len(inter) - 4} more" if len(inter) > 4 else "")
        head = (f"{chain} runs {g['count']:,} time(s) on one stream, each op reading the tensor the op before "
                f"wrote (shapes and dtypes match; nothing else ran on the stream or read it in between). ")
        if g["launch_bound"]:
            k = g["kernels"]
            text = (head + f"Its tensors are tiny (intermediates: {inter_s}): the time is launch and fixed per-kernel "
                    f"cost, not DRAM traffic ({u.nbytes(g['saved_per_rep'])} per repetition would stay on chip). "
                    f"Fused, its {k} kernels become 1: it then costs about its longest kernel, so the other kernels' "
                    f"measured time goes, {u.us(g['saving_us'])} in all ({u.us(g['saving_us'] / g['count'])} per "
                    f"repetition); the GPU also sat idle {u.us(g['gap_us'])} between these kernels waiting for "
                    f"launches (not counted). Fix: {g['fix']}.")
            title = (f"{g['pattern']}: {k} kernels per call -> 1 (tiny tensors: launch-bound; {chain})" if g["pattern"]
                     else f"Fuse {chain}: {k} kernels -> 1 (tiny tensors: launch-bound)")
        else:
            text = (head + f"Intermediates that round-trip through DRAM: {inter_s}. Fused, they stay on chip: "
                    f"{u.nbytes(g['saved_per_rep'])} less traffic per repetition (each intermediate's write and read "
                    f"back; in place, the read only), {u.nbytes(g['saved_bytes'])} in all. The chain moves "
                    f"{u.nbytes(g['bytes'])} in {u.us(g['time_us'])} ({u.rate_gbps(g['measured_gbps'])} measured); "
                    f"at that bandwidth the saved bytes take {u.us(g['saving_us'])}. Fix: {g['fix']}. "
                    "(Assumes no later op reads the intermediates.)")
            title = (f"{g['pattern']}: {g['kernels']} kernels per call; fused, {u.nbytes(g['saved_bytes'])} less DRAM "
                     f"traffic ({chain})" if g["pattern"] else f"Fuse {chain}: {u.nbytes(g['saved_bytes'])} less DRAM traffic")
        out.append({"kind": "fusion", "title": title, "text": text + _stops(g), "ops": list(dict.fromkeys(g["ids"])),
                    "saving_us": g["saving_us"], "fix": g["short_fix"], "pattern": g["pattern"]})
    return out
