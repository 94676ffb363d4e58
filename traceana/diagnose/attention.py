"""Unfused attention, however the model writes it: GEMM -> element-wise steps -> softmax -> GEMM.

Attention computed op by op writes the score matrix S = Q K^T and the probabilities P = softmax(S)
to DRAM (and every element-wise step between, each a full Sq x Sk tensor per head); a fused
attention kernel (torch.nn.functional.scaled_dot_product_attention: Flash / memory-efficient /
cuDNN) keeps them on chip and reads Q, K, V and writes O once.

Found by data flow on each CPU thread's sequence of ops that launched GPU work, around every
softmax (`_softmax`, `softmax`, `_safe_softmax`, `_log_softmax`) and every softmax backward
(`_softmax_backward_data`, `_log_softmax_backward_data`):
  back      from the softmax's input, step to the nearest earlier op (at most WINDOW ops back) that
            writes that tensor: an element-wise step (STEPS: scale mul / div, mask add / sub,
            masked_fill, where, clamp, tanh soft-capping, casts as copy_, dropout) continues the walk
            from the step's own data input (an operand as large as its output; with two, such as
            scores + a relative-position bias, the shortest path from any earlier writer in the
            window that reaches a GEMM through steps only);
            a batched GEMM (bmm / baddbmm / matmul / mm / einsum) ends it; anything else writing it
            (a gather building the bias) ends that path;
  forward   from the softmax's output, the nearest later op that reads it: a STEPS op (dropout,
            casts, the backward's scale) continues, a GEMM ends the chain, anything else ends the
            search (the probabilities are used elsewhere);
  layout    views, transposes and reshapes launch nothing and are seen through: a GEMM's operand
            matches a tensor of the same element count and dtype whose last two dims are equal
            (or swapped: K^T, dS^T), batch dims merged or split ([B, H, S, S] ~ [B*H, S, S]);
            an element-wise step reads the tensor up to size-1 dims (dataflow.reads). A freshly
            written tensor is read densely (recorded strides); a strided read of that shape is
            another tensor (a transposed V of the same size);
  copies    forward chains also own the copies (copy_) that write a GEMM operand of the chain in
            the ops just before its GEMMs: the contiguous Q / K^T / V the batched GEMM needs, which
            the fused kernel does not (it takes the strided views);
  backward  a backward chain (dP GEMM -> dropout backward -> softmax backward -> scale -> dQ/dK GEMM)
            also owns the other GEMMs of the same attention backward next to its two GEMMs: the
            second reader of dS and the dV GEMM beside the dP GEMM (they share dO);
  fused     an op inside a fused attention op (scaled_dot_product_attention's math fallback,
            vLLM / SGLang / flash_attn ops) is never reported: the model already calls one; nor is
            a softmax backward whose probabilities have the shape and dtype of a softmax run inside
            one (the math fallback's backward runs outside the op, under autograd).

Its saving and finding: attention_cost.py.
"""

from __future__ import annotations

import re
from math import prod

import numpy as np

# (the saving and finding, in their own module; fusion and the tests read them here)
from traceana.diagnose.attention_cost import DEFAULT_FRACTION, FIX, cost, finding, fraction_of_peak  # noqa: F401
from traceana.diagnose.dataflow import Flow, dense, short
from traceana.meter import OFF, Meter
from traceana.arrays import distinct

WINDOW = 16  # ops searched on either side of a softmax
SOFTMAX_FWD = frozenset({"_softmax", "softmax", "_safe_softmax", "_log_softmax", "log_softmax"})
SOFTMAX_BWD = frozenset({"_softmax_backward_data", "_log_softmax_backward_data"})
GEMMS = frozenset({"bmm", "baddbmm", "matmul", "mm", "einsum"})
STEPS = frozenset({"mul", "mul_", "div", "div_", "add", "add_", "sub", "sub_", "rsub", "masked_fill", "masked_fill_",
                   "where", "copy_", "_to_copy", "to", "type_as", "clamp", "clamp_", "clamp_min", "clamp_max",
                   "maximum", "minimum", "tanh", "tanh_", "neg", "dropout", "native_dropout", "feature_dropout",
                   "native_dropout_backward", "_masked_scale"})
_SAME_SHAPE = frozenset({"dropout", "native_dropout", "feature_dropout", "native_dropout_backward", "_masked_scale",
                         "_to_copy", "to", "type_as"})
_FUSED = re.compile(r"scaled_dot_product|flash|_efficient_attention|^(vllm|sglang|flash_attn|xformers|flashinfer)::"
                    r"|attention", re.I)

Tensor = tuple[tuple[int, ...], "str | None"]


def _like(a: tuple[int, ...], b: tuple[int, ...], swapped: bool = False) -> bool:
    """a and b hold the same matrices up to merged / split batch dims (and a transpose when swapped)."""
    if len(a) < 2 or len(b) < 2 or prod(a) != prod(b):
        return False
    return a[-2:] == b[-2:] or (swapped and a[-2:] == b[-2:][::-1])


def _gemm_io(args: list) -> tuple[tuple[int, ...], tuple[int, ...], str] | None:
    """(A, B, dtype) of a batched matrix multiply: its last two matrix arguments (args: its tensor_args)."""
    mats = [(s, d) for _, (s, d), _ in args if len(s) >= 2]
    if len(mats) < 2:
        return None
    (a, dt), (b, _) = mats[-2], mats[-1]
    return (a, b, dt) if a[-1] == b[-2] else None


class _Seq:
    """One thread's ops in launch order, with what the walks ask of them."""

    def __init__(self, flow: Flow, seq: np.ndarray, r: np.ndarray, th: np.ndarray, stream: np.ndarray,
                 strides: list[bytes]) -> None:
        self.flow, self.seq, self.r, self.th, self.stream = flow, seq, r, th, stream
        self.strides = strides
        # the same columns as lists: the walks read them one position at a time (a list index is several times
        # cheaper than a numpy scalar's)
        self._r, self._th, self._st, self._seq = r.tolist(), th.tolist(), stream.tolist(), seq.tolist()
        self.names = [short(x["name"]) if x["name"].startswith("aten::") else "" for x in flow.rows]
        self._dense: dict[tuple[int, int], list[bool] | None] = {}
        self._gemm: dict[int, tuple | None] = {}
        self.memo: dict[tuple, tuple | None] = {}  # _walk_back's answers
        # the lowest and highest position read since `reset`: every walk reads a position through same() or
        # name() first (or is at a position one of them read)
        self.lo = self.hi = 0

    def reset(self, c: int) -> None:
        """Start a search around position c: its reach is c alone, its walks' answers are its own."""
        self.lo = self.hi = c
        self.memo = {}

    def args(self, i: int) -> list[tuple[int, Tensor, float]]:
        """tensor_args of op i's row (worked out once per row)."""
        return self.flow.args(self._r[i])

    def gemm_io(self, i: int) -> tuple[tuple[int, ...], tuple[int, ...], str] | None:
        """_gemm_io of op i's row (once per row)."""
        a = self._r[i]
        if a not in self._gemm:
            self._gemm[a] = _gemm_io(self.flow.args(a))
        return self._gemm[a]

    def name(self, i: int) -> str:
        if i < self.lo:
            self.lo = i
        elif i > self.hi:
            self.hi = i
        return self.names[self._r[i]]

    def same(self, i: int, j: int) -> bool:
        if j < self.lo:
            self.lo = j
        elif j > self.hi:
            self.hi = j
        st = self._st
        return 0 <= j < len(st) and self._th[j] == self._th[i] and self._r[j] >= 0 and st[j] >= 0 and st[j] == st[i]

    def out(self, i: int) -> Tensor | None:
        t = self.flow.output(self._r[i])
        if t is None and self.name(i) in _SAME_SHAPE | {"gather"}:
            ts = self.args(i)
            if self.name(i) == "gather":  # gather(self, dim, index): the index's shape, self's dtype
                idx = next((s for k, (s, _), _ in ts if k == 2), None)
                return (idx, ts[0][1][1]) if idx is not None and ts else None
            return ts[0][1] if ts else None
        return t

    def dense_args(self, i: int) -> list[bool] | None:
        key = (self._r[i], self._seq[i])
        if key not in self._dense:
            import msgspec
            raw = self.strides[key[1]]
            try:
                st = msgspec.json.decode(raw) if raw else None
            except msgspec.DecodeError:
                st = None
            dims = self.flow.rows[key[0]].get("input_dims") or []
            self._dense[key] = ([dense(tuple(d), st[k]) if k < len(st) and isinstance(d, list) else True
                                 for k, d in enumerate(dims)] if isinstance(st, list) else None)
        return self._dense[key]

    def reads(self, i: int, t: Tensor) -> list[int]:
        """Argument positions of op i that read t densely (element-wise: up to size-1 dims)."""
        hits = [k for k, _, _ in self.flow.reads(self._r[i], t)]
        d = self.dense_args(i)
        return [k for k in hits if d is None or k >= len(d) or d[k]]

    def gemm_reads(self, i: int, t: Tensor) -> tuple[str, tuple[int, ...], tuple[int, ...]] | None:
        """('A' or 'B', that operand, the other operand) when GEMM i reads t as an operand."""
        io = self.gemm_io(i)
        if io is None or (t[1] is not None and io[2] != t[1]):
            return None
        a, b, _ = io
        if _like(a, t[0], swapped=True):
            return "A", a, b
        if _like(b, t[0], swapped=True):
            return "B", b, a
        return None

    def data_inputs(self, i: int, out: Tensor) -> list[Tensor]:
        """The operands of step i that may carry the chain: those as large as its output (copy_: the source)."""
        ts = self.args(i)
        if self.name(i) == "copy_":
            return [(s, d) for k, (s, d), _ in ts if k == 1]
        n = prod(out[0])
        return [(s, d) for _, (s, d), _ in ts if prod(s) == n and len(s) >= 2]


def _walk_back(q: _Seq, c: int, t: Tensor, tries: int = 1) -> tuple[list[int], int, tuple] | None:
    """(steps, GEMM position, GEMM output) producing tensor t read by op c. The nearest earlier writer of
    a tensor like t is its producer; when c reads two such operands (scores + a bias built the same size),
    every earlier writer in the window is tried and the shortest path that reaches the GEMM through steps
    only is the scores' (a path that meets an op outside STEPS, the bias's gather, is not)."""
    key = (c, t, tries)
    if key in q.memo:
        return q.memo[key]
    q.memo[key] = None  # a path never loops back on itself
    best = None
    j = c - 1
    while j >= 0 and c - j <= WINDOW and q.same(c, j) and tries > 0:
        name = q.name(j)
        got = None
        if name in GEMMS:
            io = q.gemm_io(j)
            out = io[0][:-1] + (io[1][-1],) if io else None
            if out is not None and _like(out, t[0]) and (t[1] is None or io[2] == t[1]):
                got, tries = ([], j, out), 0
        else:
            o = q.out(j)
            if o is not None and prod(o[0]) == prod(t[0]) and o[0][-1:] == t[0][-1:] \
                    and (t[1] is None or o[1] is None or o[1] == t[1]):
                tries -= 1
                ins = q.data_inputs(j, o) if name in STEPS else []
                for nxt in dict.fromkeys(ins):
                    sub = _walk_back(q, j, nxt, WINDOW if ins.count(nxt) > 1 else 1)
                    if sub is not None and (got is None or len(sub[0]) < len(got[0]) - 1):
                        got = (sub[0] + [j], sub[1], sub[2])
        if got is not None and (best is None or len(got[0]) < len(best[0])):
            best = got
        j -= 1
    q.memo[key] = best
    return best


def _walk_forward(q: _Seq, c: int, t: Tensor) -> tuple[list[int], int, tuple] | None:
    """(steps, GEMM position, (side, operand, other operand)) consuming op c's output t."""
    steps: list[int] = []
    j = c + 1
    while j < len(q.seq) and j - c <= WINDOW and q.same(c, j):
        name = q.name(j)
        if name in GEMMS:
            g = q.gemm_reads(j, t)
            if g is not None:
                return steps, j, g
        elif q.reads(j, t):
            if name not in STEPS:
                return None  # the probabilities go on into something else
            o = q.out(j)
            if o is None:
                return None
            steps.append(j)
            t = o
        j += 1
    return None


def _inside_fused(trace, at: np.ndarray, meter: Meter = OFF) -> np.ndarray:
    """Per op index in at: whether a fused attention op (by name) encloses it on its thread. (The ops asked
    about are softmaxes, never fused ops themselves.) One sort of the fused ops, then a search per thread."""
    ops, names = trace.ops, trace.names
    out = np.zeros(len(at), dtype=bool)
    if not len(at):
        return out
    # the names of ops only (the table's kernel names, most of it and the longest, are never an op's), the
    # cheap test first: a case-blind search of a long name is slow
    fused_codes = np.array([c for c in distinct(ops.name).tolist() if "::" in names[c] and _FUSED.search(names[c])],
                           dtype=np.int64)
    if not len(fused_codes):
        return out
    f = np.flatnonzero(np.isin(ops.name, fused_codes))
    meter.visit("diagnose.attention", len(ops) + len(at))
    if not len(f):
        return out
    f = f[np.lexsort((ops.ts[f], ops.thread[f]))]
    f_th, f_ts, f_end = ops.thread[f], ops.ts[f], ops.end[f]
    for th in distinct(ops.thread[at]).tolist():
        lo, hi = np.searchsorted(f_th, f_th.dtype.type(th), "left"), np.searchsorted(f_th, f_th.dtype.type(th), "right")
        if lo == hi:
            continue
        q = np.flatnonzero(ops.thread[at] == th)
        reach = np.maximum.accumulate(f_end[lo:hi])  # the latest end among the thread's fused ops started so far
        k = np.searchsorted(f_ts[lo:hi], ops.ts[at[q]], "right") - 1  # the last one started by the op's start
        out[q] = (k >= 0) & (reach[np.maximum(k, 0)] >= ops.end[at[q]])
        meter.visit("diagnose.attention", len(at) + hi - lo)
    return out


def _first_tensor(args: list, arg: int = 0) -> Tensor | None:
    """(shape, dtype) of the op's argument `arg` when it is a tensor (args: its tensor_args)."""
    return next((t for k, t, _ in args if k == arg), None)


def _copies(q: _Seq, lo: int, hi: int, operands: list[tuple[int, ...]], dt: str | None, taken: set[int]) -> list[int]:
    """copy_ ops in positions [lo, hi) writing one of the GEMM operands (the contiguous Q / K^T / V)."""
    found = []
    for j in range(max(lo, 0), hi):
        if j in taken or q.name(j) != "copy_" or not q.same(hi, j):
            continue
        o = q.out(j)
        if o is not None and (dt is None or o[1] == dt) and any(_like(o[0], s, swapped=True) for s in operands):
            found.append(j)
    return found


def find(trace, flow: Flow, seq: np.ndarray, r: np.ndarray, th: np.ndarray, oe: dict[str, np.ndarray],
         op_us: np.ndarray, meter: Meter = OFF, strides: np.ndarray | None = None) -> tuple[list[dict], np.ndarray]:
    """Groups of identical unfused attention chains, and the positions of seq they claim. strides: each
    position's recorded strides as a number (equal numbers for equal strings), when already worked out."""
    claimed = np.zeros(len(seq), dtype=bool)
    if len(seq) < 3:
        return [], claimed
    q = _Seq(flow, seq, r, th, oe["stream"][seq], trace.ops.strides)
    centre = np.array([n in SOFTMAX_FWD or n in SOFTMAX_BWD for n in q.names], dtype=bool)
    at = np.flatnonzero((r >= 0) & centre[np.maximum(r, 0)])
    inside = _inside_fused(trace, seq[at], meter)
    # the probabilities a fused op's math fallback computed: a softmax backward of that shape is its backward
    fused_p = {_first_tensor(flow.args(int(r[c]))) for c in at[inside].tolist() if q.name(c) in SOFTMAX_FWD}
    at = at[~inside]
    groups: dict[tuple, dict] = {}
    meter.visit("diagnose.attention", len(seq) + (2 * WINDOW + 1) * len(at))  # each walk: WINDOW ops either side
    if not len(at):
        return [], claimed
    if strides is None:
        raw = list(map(trace.ops.strides.__getitem__, seq.tolist()))
        code = dict(zip(dict.fromkeys(raw), range(len(raw))))
        strides = np.fromiter(map(code.__getitem__, raw), dtype=np.int64, count=len(raw))
    seen = _Seen(q, claimed, strides)
    r_l = q._r
    us = op_us[seq].tolist()  # each position's op time
    for c in at.tolist():
        if claimed[c] or (q.name(c) in SOFTMAX_BWD and _first_tensor(flow.args(r_l[c]), 1) in fused_p):
            continue
        hit = seen.chain(c)
        if hit is None:
            continue
        positions, facts = hit
        for p in positions:
            claimed[p] = True
        key = tuple(r_l[p] for p in positions)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"rows": key, "count": 0, "time_us": 0.0, **facts, "chain": list(facts["chain"])}
        g["count"] += 1
        t = 0.0  # the ops' times added in order (as sum() adds numpy floats: no compensation)
        for p in positions:
            t += us[p]
        g["time_us"] += t
    return list(groups.values()), claimed


_MARGIN = 4  # positions past a search's reach that its bounds checks may have looked at (a walk's end, range stops)


class _Seen:
    """_chain's answers by neighbourhood: a search reads only the positions between the lowest and highest it
    reached (and, through bounds checks, a few past them); at another centre whose positions over that reach
    hold the same rows, threads, streams, strides and claims, it reads the same and answers the same, shifted.
    So a model's repeated layers and a trace's repeated steps are searched once."""

    def __init__(self, q: _Seq, claimed: np.ndarray, strides: np.ndarray) -> None:
        """strides: each position's recorded strides as a number (equal numbers for equal strings)."""
        self.q, self.claimed = q, claimed
        self.cols = np.ascontiguousarray(np.stack((q.r, q.th, q.stream, strides), axis=1).astype(np.int64))
        self.reach: dict[tuple[int, int], dict[tuple, tuple | None]] = {}  # (lo, hi) from the centre -> answers

    def _key(self, a: int, b: int) -> tuple:
        """What a search may read over positions [a, b]: the rows, threads, streams and strides, the claims
        (and how far the range runs past either end of the sequence)."""
        n = len(self.cols)
        lo, hi = max(a, 0), min(b + 1, n)
        return lo - a, b + 1 - hi, self.cols[lo:hi].tobytes(), self.claimed[lo:hi].tobytes()

    def chain(self, c: int) -> tuple[list[int], dict] | None:
        for (lo, hi), answers in self.reach.items():
            got = answers.get(self._key(c + lo - _MARGIN, c + hi + _MARGIN), False)
            if got is not False:
                if got is None:
                    return None
                offsets, facts = got
                return [c + o for o in offsets], facts  # (facts: the same dict each time; the caller copies it)
        q = self.q
        q.reset(c)
        hit = _chain(q, c, self.claimed)
        lo, hi = q.lo - c, q.hi - c
        key = self._key(c + lo - _MARGIN, c + hi + _MARGIN)  # (the claims as they were when searched)
        self.reach.setdefault((lo, hi), {})[key] = None if hit is None else ([p - c for p in hit[0]], hit[1])
        return hit


def _chain(q: _Seq, c: int, claimed: np.ndarray) -> tuple[list[int], dict] | None:
    ts = q.args(c)
    if not ts or len(ts[0][1][0]) < 2:
        return None
    backward = q.name(c) in SOFTMAX_BWD
    back = _walk_back(q, c, ts[0][1])
    out = q.flow.output(q._r[c])
    fwd = _walk_forward(q, c, out) if out is not None else None
    if back is None or fwd is None:
        return None
    pre, g1, s_shape = back
    post, g2, (side, _, other) = fwd
    io1 = q.gemm_io(g1)
    sq, sk = s_shape[-2], s_shape[-1]
    bh = prod(s_shape) // (sq * sk)
    k1 = io1[0][-1]  # contraction dim of the scores GEMM: D (forward) or Dv (dP = dO V^T)
    free = other[-1] if side == "A" else other[-2]  # the second GEMM's output columns: Dv (P V) or D (dS K)
    d, dv = (free, k1) if backward else (k1, free)
    positions = [g1] + pre + [c] + post + [g2]
    if any(claimed[p] for p in positions):
        return None
    dt = io1[2]
    if backward:  # the rest of this attention's backward GEMMs: the other reader of dS, the dV GEMM beside dP's
        ds = q.out(post[-1]) if post else out
        for j in range(g2 + 1, min(g2 + 3, len(q.seq))):
            if q.same(c, j) and q.name(j) in GEMMS and not claimed[j] and q.gemm_reads(j, ds):
                positions.append(j)
                break
        d_o = io1[0]
        for j in (g1 - 1, g1 + 1, g1 - 2):
            if q.same(c, j) and q.name(j) in GEMMS and j not in positions and not claimed[j] \
                    and q.gemm_reads(j, (d_o, dt)):
                positions.append(j)
                break
    else:
        io2 = q.gemm_io(g2)
        taken = set(positions)
        positions += _copies(q, g1 - 6, g1, [io1[0], io1[1]], dt, taken)
        positions += _copies(q, g1 - 6, g2, [io2[1] if side == "A" else io2[0]], dt, taken | set(positions))
    positions = sorted(set(positions))
    isz = next((x for _, (s, t), x in q.args(g1) if t == dt), 4.0)
    masks = 0.0
    for p in pre + post:  # each mask / bias operand read once by the fused kernel (not the chain's own tensor)
        if q.name(p) == "copy_":
            continue  # a cast: its other tensor is the destination it writes
        ts = [(prod(s), x) for _, (s, _), x in q.args(p) if prod(s) > 1]
        big = max((n for n, _ in ts), default=0)
        ts.remove(next(t for t in ts if t[0] == big)) if ts else None
        masks += sum(n * x for n, x in ts)
    facts = {"backward": backward, "bh": bh, "sq": sq, "sk": sk, "d": d, "dv": dv, "itemsize": isz,
             "mask_bytes": masks, "dtype": dt, "scores": tuple(s_shape), "gemm_row": q._r[g1],
             "chain": [q._r[p] for p in [g1] + pre + [c] + post + [g2]]}
    return positions, facts
