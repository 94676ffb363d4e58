"""An annotated trace's document back to the original's: what `traceana annotate` added removed."""

from __future__ import annotations

from typing import Any

from traceana.annotate.counters import CAT


def strip_event(ev: Any) -> Any:
    """The event as it was before annotation (a copy when something was added to it)."""
    if not isinstance(ev, dict):
        return ev
    args = ev.get("args")
    if not isinstance(args, dict) or "traceana" not in args:
        return ev
    added = args["traceana"]
    out = dict(ev)
    rest = {k: v for k, v in args.items() if k != "traceana"}
    if isinstance(added, dict) and added.get("args_added") is True and not rest:
        del out["args"]
    else:
        out["args"] = rest
    return out


def is_added(ev: Any) -> bool:
    """An event the annotation added (a counter sample)."""
    return isinstance(ev, dict) and ev.get("cat") == CAT and ev.get("ph") == "C"


def strip(doc: dict) -> dict:
    """The document without the "traceana" member, the added args and the added events."""
    out = {k: v for k, v in doc.items() if k != "traceana"}
    out["traceEvents"] = [strip_event(e) for e in doc.get("traceEvents") or () if not is_added(e)]
    return out
