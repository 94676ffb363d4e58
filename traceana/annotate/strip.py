"""An annotated trace's document back to the original's: what `traceana annotate` added removed.

Everything it added is under one key (annotate/keys.py): "traceana", or "traceana_N" when the input
used that string. The key is the name of the document's first member when that member is
annotate's header (its schema is "traceana.annotated/..."; the header's "args_key" names it too)."""

from __future__ import annotations

from typing import Any

from traceana.annotate.counters import CAT
from traceana.annotate.keys import KEY


def annotation_key(doc: Any) -> str | None:
    """The key the annotation's additions live under; None when `doc` is not an annotated trace."""
    if not isinstance(doc, dict) or not doc:
        return None
    first = next(iter(doc))
    head = doc[first]
    if not (KEY.match(first) and isinstance(head, dict)
            and str(head.get("schema", "")).startswith("traceana.annotated/")):
        return None
    key = head.get("args_key", first)
    return key if isinstance(key, str) else first


def strip_event(ev: Any, key: str = CAT) -> Any:
    """The event as it was before annotation (a copy when something was added to it)."""
    if not isinstance(ev, dict):
        return ev
    args = ev.get("args")
    if not isinstance(args, dict) or key not in args:
        return ev
    added = args[key]
    out = dict(ev)
    rest = {k: v for k, v in args.items() if k != key}
    if isinstance(added, dict) and added.get("args_added") is True and not rest:
        del out["args"]
    else:
        out["args"] = rest
    return out


def is_added(ev: Any, key: str = CAT) -> bool:
    """An event the annotation added (a counter sample)."""
    return isinstance(ev, dict) and ev.get("cat") == key and ev.get("ph") == "C"


def strip(doc: dict) -> dict:
    """The document without the annotation's header, the added args and the added events (a document
    that is not an annotated trace is returned as it is)."""
    key = annotation_key(doc)
    if key is None:
        return doc
    first = next(iter(doc))
    out = {k: v for k, v in doc.items() if k != first}
    out["traceEvents"] = [strip_event(e, key) for e in doc.get("traceEvents") or () if not is_added(e, key)]
    return out
