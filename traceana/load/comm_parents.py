"""Size collectives that recorded nothing from the op that issued them.

Traces from before torch 2.1 write `record_param_comms` with no args and no shapes, so its NCCL
kernel would be opaque. Libraries often issue the collective from their own autograd function,
and that op does record its tensor: TorchRec's `All2All_Pooled_Req` ([B_global, D_local] sent to
every rank) and `All2All_Pooled_WaitBackward` (the gradient [B_local, D_global] sent back), and
likewise named functions for all_gather / reduce_scatter / all_reduce (a `*_Wait` forward and a
`*_ReqBackward` only wait on the collective: their one tensor is a placeholder, never used).
`adopt_parent_messages`
gives such a record_param_comms the tensor of its nearest enclosing op on the same thread whose
name names a collective and which recorded exactly one sized tensor, plus the collective it names
and where the size came from (ops.extra: "collective", "message_from"). The comm formula then
costs it like any record_param_comms that recorded its input tensor.

Ops that recorded several tensors, or TensorLists without sizes (`c10d::allreduce_` in old
traces: [[], [], [], []]), are never used: which tensor is the message would be a guess.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from traceana.load.model import Trace

# a collective named in an op name (case-insensitive, separators ignored) -> "Collective name" value
_NAMED = (("all2all", "all_to_all"), ("alltoall", "all_to_all"), ("allgather", "allgather"),
          ("reducescatter", "reduce_scatter"), ("allreduce", "allreduce"))
_SEPARATORS = re.compile(r"[^a-z0-9]")


def _collective_of(name: str) -> str | None:
    flat = _SEPARATORS.sub("", name.lower())
    if flat.startswith(("c10d", "nccl", "recordparamcomms")):
        return None  # the collective ops themselves (their own args decide)
    if flat.endswith(("wait", "reqbackward")):
        return None  # TorchRec: *_Wait and the backward of *_Req only wait; their tensor is a placeholder
    for frag, coll in _NAMED:
        if frag in flat:
            return coll
    return None


def _one_tensor(dims: bytes, types: bytes) -> tuple[bytes, bytes] | None:
    """(dims, types) JSON of the op's single sized tensor argument, or None."""
    if not dims:
        return None
    try:
        d, t = msgspec.json.decode(dims), msgspec.json.decode(types) if types else []
    except msgspec.DecodeError:
        return None
    if not isinstance(d, list) or not isinstance(t, list):
        return None
    sized = [(x, t[i] if i < len(t) else "") for i, x in enumerate(d)
             if isinstance(x, list) and x and all(type(v) is int and v >= 0 for v in x)]
    if len(sized) != 1 or not isinstance(sized[0][1], str) or not sized[0][1]:
        return None
    return msgspec.json.encode([sized[0][0]]), msgspec.json.encode([sized[0][1]])


def adopt_parent_messages(trace: Trace) -> int:
    """Fill in the record_param_comms ops that recorded neither shapes nor args; returns how many.
    (No trace warning: each costed row says where its message came from and is marked estimated.)"""
    names, ops = trace.names, trace.ops
    if "record_param_comms" not in names or not len(ops):
        return 0
    rpc = names.index("record_param_comms")
    targets = [i for i in np.flatnonzero(ops.name == rpc).tolist() if not ops.dims[i] and i not in ops.extra]
    if not targets:
        return 0
    coll_codes = {c: coll for c, n in enumerate(names) if (coll := _collective_of(n))}
    if not coll_codes:
        return 0
    cand = np.flatnonzero(np.isin(ops.name, list(coll_codes))).tolist()
    sized = {i: s for i in cand if (s := _one_tensor(ops.dims[i], ops.types[i]))}
    if not sized:
        return 0
    idx = np.array(sorted(sized), dtype=np.int64)
    c_thread, c_ts, c_end = ops.thread[idx], ops.ts[idx], ops.end[idx]
    done = 0
    for i in targets:
        enclosing = np.flatnonzero((c_thread == ops.thread[i]) & (c_ts <= ops.ts[i]) & (c_end >= ops.end[i]))
        if not len(enclosing):
            continue
        j = int(idx[enclosing[np.argmax(c_ts[enclosing])]])  # the nearest (latest-starting) ancestor
        ops.dims[i], ops.types[i] = sized[j]
        ops.extra[i] = (("collective", coll_codes[int(ops.name[j])]), ("message_from", names[int(ops.name[j])]))
        done += 1
    return done
