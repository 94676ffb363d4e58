"""Cost stage: FLOPs and bytes per op call from recorded shapes, dtypes, strides, scalars."""

from __future__ import annotations

from traceana.cost import families  # noqa: F401  (registers every formula)
from traceana.cost.families.compiled import compiled, is_compiled
from traceana.cost.registry import lookup, registered_names
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

__all__ = ["Cost", "OpCall", "TensorArg", "Unmodelled", "op_cost", "registered_names"]


def op_cost(call: OpCall, meta: bool = False) -> Cost | Unmodelled:
    """Cost of one call. Never raises: a formula that fails on odd input gives Unmodelled.
    meta=True: an op with no formula is run on meta tensors for its bytes (cost.meta; needs torch)."""
    fn = lookup(call.name)
    if fn is None and is_compiled(call):
        fn = compiled
    elif fn is None:
        if meta and call.dims:
            from traceana.cost.meta import meta_cost

            return meta_cost(call)
        return Unmodelled(f"no formula for {call.name}")
    if not call.dims and fn is not compiled:
        return Unmodelled("the trace recorded no input shapes for this op", cause="no_shapes")
    try:
        return fn(call)
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, OverflowError) as exc:
        return Unmodelled(f"formula failed on the recorded inputs: {exc}", cause="bad_shapes")
