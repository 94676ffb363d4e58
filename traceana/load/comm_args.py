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
    try:
        ev = COMM_EVENT_DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return comm_extra(ev.args) if ev.args is not None else None


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
