"""Pair each table-batched embedding lookup with its autograd node (a pre-pass like cost.recover).

The forward lookup records the index and offset counts but not the tables' total width total_D;
its autograd node records only its gradient [B, total_D]. Neither carries a sequence number that
links them (the lookup is called inside FBGEMM's own autograd function), so they are paired by
what both record: the batch B (the lookup's offsets hold B*T + 1 entries) and, when several
nodes share B, the width closest to the lookup's own estimate T * W / R (row-wise optimizers
keep one state element per row, so W / R is the mean row width). Lookups whose sizes differ only
in their index count L (one signature per iteration) form one module, paired as a whole.

`pair(calls, counts, context)` returns index -> (variants, how), the format of cost.recover:
a forward gets total_D as OpCall.extra; a node gets the forward signatures of its module with
their call counts (cost.recover.cost_variants averages them, weighted by calls).
"""

from __future__ import annotations

from collections import defaultdict
from msgspec.structs import replace
from math import log
from typing import Sequence

import msgspec

from traceana.cost.families.tbe import BACKWARD, FORWARD, Lookup, parse_forward
from traceana.cost.types import OpCall

CONTEXT_OPS = tuple(sorted(FORWARD))  # lookups are read wherever they are (even without kernels of their own)

Variants = list[tuple[OpCall, int]]


def _module_key(lk: Lookup) -> tuple:
    """What stays fixed across the iterations of one TBE module (everything but L)."""
    return (lk.optimizer, lk.tables, lk.bags, lk.weights, lk.rows, lk.weight.type_str, lk.weighted)


def _sig(call: OpCall) -> tuple:
    """What identifies a signature whether it came from the groups or the context (which carry no
    kernel names)."""
    return call.name, call.dims, call.types, call.concrete


def _distance(lk: Lookup, total_d: int) -> float:
    est = lk.mean_width * lk.tables if lk.mean_width else None
    return abs(log(total_d / est)) if est and total_d > 0 else float("inf")


def pair(calls: Sequence[OpCall | None], counts: Sequence[int],
         context: Sequence[tuple[OpCall, int]] = ()) -> dict[int, tuple[Variants, str]]:
    ctx_names = {c.name for c, _ in context}
    sources = list(context) + [(c, n) for c, n in zip(calls, counts) if c is not None and c.name not in ctx_names]
    modules: dict[tuple, list[tuple[OpCall, int, Lookup]]] = defaultdict(list)
    for call, n in sources:
        if call is not None and call.name in FORWARD:
            lk = parse_forward(call)
            if not isinstance(lk, str) and lk.batch is not None:
                modules[_module_key(lk)].append((call, n, lk))
    nodes = {i: c for i, c in enumerate(calls) if c is not None and c.name in BACKWARD}
    node_key = {}  # node index -> (optimizer, B, total_D)
    for i, c in nodes.items():
        g = c.tensor(0)
        if g is not None and len(g.shape) == 2 and len(c.dims) == 1:
            node_key[i] = (BACKWARD[c.name], g.shape[0], g.shape[1])
    # each module -> its node: the same optimizer and B; several candidates: the closest width,
    # one module per node first (greedy by distance), then any module left takes its closest node
    cands = []
    for mk, members in modules.items():
        lk = members[0][2]
        for i, (opt, b, total_d) in node_key.items():
            if opt == lk.optimizer and b == lk.batch:
                cands.append((_distance(lk, total_d), mk, i))
    cands.sort(key=lambda x: (x[0], x[2], str(x[1])))
    chosen: dict[tuple, int] = {}
    taken: set[int] = set()
    for dist, mk, i in cands:
        if mk not in chosen and i not in taken:
            chosen[mk] = i
            taken.add(i)
    for dist, mk, i in cands:
        if mk not in chosen:
            chosen[mk] = i
    out: dict[int, tuple[Variants, str]] = {}
    index_of = {_sig(c): j for j, c in enumerate(calls) if c is not None and c.name in FORWARD}
    node_variants: dict[int, Variants] = defaultdict(list)
    for mk, i in chosen.items():
        total_d = node_key[i][2]
        for call, n, lk in modules[mk]:
            node_variants[i].append((replace(nodes[i], extra=nodes[i].extra + (("tbe_forward", call),)), n))
            j = index_of.get(_sig(call))  # None: a context instance that launched no kernels itself
            if j is not None:
                done = replace(call, extra=call.extra + (("tbe_total_D", total_d),))
                out[j] = ([(done, counts[j])], f"total_D = {total_d} from the gradient of the paired autograd node")
    for i, variants in node_variants.items():
        variants.sort(key=lambda v: -v[1])
        out[i] = (variants, f"lookup sizes from the {len(variants)} forward signature"
                            f"{'s' * (len(variants) != 1)} of the same embedding module (paired by batch "
                            f"{node_key[i][1]} and width)")
    return out
