"""The collective arguments of a record_param_comms op (collective name, element counts, group, dtype),
read from the op's own event on every load path and carried into its OpCall.extra."""

from __future__ import annotations

from typing import Any

import msgspec

from traceana.load.decode import clean_text
from traceana.load.schema import COMM_EVENT_DECODER


def comm_record(raw: bytes) -> tuple | None:
    """comm_extra of one record_param_comms event from its raw text (the C scanner hands over
    the text of each such op with its row), None when its args say nothing we read."""
    return comm_both(raw)[0]


def comm_both(raw: bytes) -> tuple[tuple | None, tuple | None]:
    """(comm_extra, comm_ids) of one record_param_comms event from its raw text."""
    try:
        ev = COMM_EVENT_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None, None
    if ev.args is None:
        return None, None
    return comm_extra(ev.args), comm_ids(ev.args)


# record_param_comms args carried into OpCall.extra: (key, CommArgs attribute, type)
_COMM_ARGS = (("collective", "collective_name", str), ("in_nelems", "in_msg_nelems", int),
              ("out_nelems", "out_msg_nelems", int), ("group_size", "group_size", int),
              ("dtype", "comm_dtype", str), ("group_ranks", "pg_ranks", str))


def comm_extra(a: Any) -> tuple:
    """The collective's recorded args as sorted (key, value) pairs; values of the wrong type, out
    of range or overlong are dropped (a list of ranks is kept only as its length)."""
    out = []
    for key, attr, typ in _COMM_ARGS:
        v = getattr(a, attr)
        if key == "group_ranks" and isinstance(v, list):
            out.append(("group_ranks_n", len(v)))
            continue
        if typ is int:
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if type(v) is not int or not 0 <= v < 2**62:
                continue
        elif not isinstance(v, str) or not v or len(v) > 100_000:
            continue
        elif key == "group_ranks":
            v = v.count(",") + 1 if v.strip("[] ") else 0
            key = "group_ranks_n"
        else:
            v = clean_text(v[:80])
        out.append((key, v))
    return tuple(sorted(out))


#: a split list longer than this is not kept (a group of more ranks than any run has)
MAX_SPLITS = 65_536


def _int(v: Any) -> int | None:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if type(v) is int and -1 <= v < 2**62 else None


def _splits(v: Any) -> tuple[int, ...] | None:
    """'[3, 5, 2]' (as the profiler writes it) or a list -> (3, 5, 2); None when empty or not that."""
    if isinstance(v, str):
        body = v.strip()
        if not (body.startswith("[") and body.endswith("]")) or len(body) > 16 * MAX_SPLITS:
            return None
        parts = [p.strip() for p in body[1:-1].split(",")] if body[1:-1].strip() else []
        if not all(p.isascii() and p.isdigit() for p in parts):
            return None
        v = [int(p) for p in parts]
    if not isinstance(v, list) or not v or len(v) > MAX_SPLITS:
        return None
    out = [_int(x) for x in v]
    return None if any(x is None or x < 0 for x in out) else tuple(out)


def comm_ids(a: Any) -> tuple | None:
    """Which call of which process group a record_param_comms is, and its per-peer sizes, as sorted
    (key, value) pairs: seq (the group's sequence number), pg (its name), in_split / out_split
    (all_to_all's elements per peer), src / dst (a p2p call's peer). Kept apart from comm_extra:
    they differ per call, so they must not split an op signature. None when none is recorded."""
    out = []
    seq = _int(a.comm_seq)
    if seq is not None and seq >= 0:
        out.append(("seq", seq))
    if isinstance(a.pg_name, (str, int)) and not isinstance(a.pg_name, bool) and len(str(a.pg_name)) <= 200:
        out.append(("pg", clean_text(str(a.pg_name))))
    for key, v in (("in_split", a.in_split), ("out_split", a.out_split)):
        sp = _splits(v)
        if sp is not None:
            out.append((key, sp))
    for key, v in (("src", a.src_rank), ("dst", a.dst_rank)):
        r = _int(v)
        if r is not None and r >= 0:
            out.append((key, r))
    return tuple(sorted(out)) or None
