"""Cost stage: FLOPs and bytes per op call from recorded shapes, dtypes, strides, scalars."""

from __future__ import annotations

from traceana.cost import families  # noqa: F401  (registers every formula)
from traceana.cost.registry import lookup, registered_names
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

__all__ = ["Cost", "OpCall", "TensorArg", "Unmodelled", "op_cost", "registered_names"]


def op_cost(call: OpCall) -> Cost | Unmodelled:
    """Cost of one call. Never raises: a formula that fails on odd input gives Unmodelled."""
    fn = lookup(call.name)
    if fn is None:
        return Unmodelled(f"no formula for {call.name}")
    if not call.dims:
        return Unmodelled("the trace recorded no input shapes for this op")
    try:
        return fn(call)
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, OverflowError) as exc:
        return Unmodelled(f"formula failed on the recorded inputs: {exc}")
