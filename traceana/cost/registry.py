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


# SGLang's profiler names the ranges it wraps around library calls `sglang_profiler::<module>_<function>_<n>`,
# with a per-call-site counter n: the formula is registered without it.
_COUNTED = ("sglang_profiler::",)


def lookup(name: str) -> Formula | None:
    fn = _TABLE.get(name)
    if fn is None and name.startswith(_COUNTED):
        stem, _, n = name.rpartition("_")
        if n.isdigit():
            fn = _TABLE.get(stem)
    return fn


def registered_names() -> list[str]:
    return sorted(_TABLE)
