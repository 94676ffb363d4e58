"""Give ops whose weights live in their layer the weight shapes recorded inside them.

Some serving ops take only activations as arguments and read their weights from the module they
belong to: vLLM's `vllm::moe_forward(hidden_states, router_logits, layer_name)` names its layer
by a string, so the expert weights (and with them the intermediate size, the FLOPs and the weight
bytes) are not among its recorded inputs. The ops it runs are, though: the expert GEMMs of the
Triton `matmul_ogs` path reshape each weight with an `aten::view` of shape [E, ., .] (E = the
router logits' last dim), and the routing records top-k as a `topk` op's argument.

`attach_layer_weights` walks the ops nested inside each such op on the same thread (nesting by
time, as the profiler records it) and puts on the op (ops.extra):
  - "expert_weights": the 3-D tensors with leading dim E recorded inside it, as ((shape, dtype
    string), ...) in the order first seen (the gate/up projection before the down projection);
  - "top_k": from a nested top-k op ([T, k] outputs, or its k argument), when recorded;
  - "weights_from": where they came from, for the row's notes.
The formula (cost/families/moe.py) decides which pair of tensors fits w1 [E, N1, H] and
w2 [E, H, I] (in either orientation, 4-bit packed or not) and stays unmodelled when none does.
A graph replay takes these facts with the capturing op's shapes (replay/inject.py copies extra).
"""

from __future__ import annotations

import msgspec
import numpy as np

from traceana.load.model import Trace
from traceana.numbers import ascii_int

LAYER_OPS = ("vllm::moe_forward", "vllm::moe_forward_shared")
MAX_WEIGHTS = 6  # w1, w2 and their block scales, at most; more would be a guess


def _tensors(dims: bytes, types: bytes) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype string) of each sized tensor argument of one op; [] when not decodable."""
    if not dims:
        return []
    try:
        d = msgspec.json.decode(dims)
        t = msgspec.json.decode(types) if types else []
    except msgspec.DecodeError:
        return []
    if not isinstance(d, list) or not isinstance(t, list):
        return []
    out = []
    for i, x in enumerate(d):
        ty = t[i] if i < len(t) else ""
        if isinstance(x, list) and x and isinstance(ty, str) and ty and ty not in ("Scalar", "ScalarList") \
                and all(type(v) is int and v >= 0 for v in x):
            out.append((tuple(x), ty))
    return out


def _concrete_ints(concrete: bytes) -> list[int]:
    if not concrete:
        return []
    try:
        c = msgspec.json.decode(concrete)
    except msgspec.DecodeError:
        return []
    out = []
    for v in c if isinstance(c, list) else []:
        n = ascii_int(v)
        if n is not None:
            out.append(n)
    return out


def _top_k(names: list[str], ops, inner: np.ndarray, tokens: int, experts: int) -> int | None:
    """k of the first nested top-k op: a [T, k] tensor (k < E) it records, else its first int
    argument in 1..E (aten::topk(self, k, ...), Triton topk(x, k, ...))."""
    for j in inner.tolist():
        if "topk" not in names[int(ops.name[j])].lower().replace("_", ""):
            continue
        for shape, _ in _tensors(ops.dims[j], ops.types[j]):
            if len(shape) == 2 and shape[0] == tokens and 0 < shape[1] < experts:
                return shape[1]
        for v in _concrete_ints(ops.concrete[j]):
            if 0 < v <= experts:
                return v
    return None


def attach_layer_weights(trace: Trace) -> int:
    """Put the weight shapes and top-k recorded inside each layer-holding op on it; returns how many
    ops got weights."""
    names, ops = trace.names, trace.ops
    codes = [names.index(n) for n in LAYER_OPS if n in names]
    if not codes or not len(ops):
        return 0
    targets = np.flatnonzero(np.isin(ops.name, codes)).tolist()
    order = np.lexsort((ops.ts, ops.thread))
    thread_s, ts_s = ops.thread[order], ops.ts[order]
    done = 0
    for i in targets:
        if i in ops.extra:
            continue
        args = _tensors(ops.dims[i], ops.types[i])
        if len(args) < 2 or len(args[0][0]) != 2 or len(args[1][0]) != 2:
            continue  # (hidden_states [T, H], router_logits [T, E]) expected
        tokens, experts = args[0][0][0], args[1][0][-1]
        lo = np.searchsorted(thread_s, ops.thread[i], "left")
        hi = np.searchsorted(thread_s, ops.thread[i], "right")
        a = lo + np.searchsorted(ts_s[lo:hi], ops.ts[i], "left")
        b = lo + np.searchsorted(ts_s[lo:hi], ops.end[i], "right")
        inner = order[a:b]
        inner = inner[(inner != i) & (ops.end[inner] <= ops.end[i])]
        weights: list[tuple[tuple[int, ...], str]] = []
        for j in inner.tolist():
            for shape, ty in _tensors(ops.dims[j], ops.types[j]):
                if len(shape) == 3 and shape[0] == experts and shape[1] * shape[2] > 1 \
                        and (shape, ty) not in weights:
                    weights.append((shape, ty))
        if len(weights) < 2 or len(weights) > MAX_WEIGHTS:
            continue
        extra = [("expert_weights", tuple(weights)), ("weights_from", "3-D views of [E, ., .] recorded inside it")]
        k = _top_k(names, ops, inner, tokens, experts)
        if k:
            extra.append(("top_k", k))
        ops.extra[i] = tuple(sorted(extra))
        done += 1
    return done
