"""The formula registry: aten op name -> function(OpCall) -> Cost | Unmodelled.

A formula is one decorated function. The table is filled once, when the family modules
are imported by traceana.cost, and never changed afterwards; a duplicate name is a bug.
"""

from __future__ import annotations

from typing import Callable

from traceana.cost.types import Cost, OpCall, Unmodelled

Formula = Callable[[OpCall], "Cost | Unmodelled"]

_TABLE: dict[str, Formula] = {}


def formula(*names: str, exact: bool = False) -> Callable[[Formula], Formula]:
    """Register fn for each op name (with or without the 'aten::' prefix; exact=True: the names
    as given, for ops with no namespace such as record_param_comms)."""

    def register(fn: Formula) -> Formula:
        for name in names:
            key = name if "::" in name or exact else f"aten::{name}"
            if key in _TABLE:
                raise RuntimeError(f"formula for {key} registered twice")
            _TABLE[key] = fn
        return fn

    return register


def lookup(name: str) -> Formula | None:
    return _TABLE.get(name)


def registered_names() -> list[str]:
    return sorted(_TABLE)
