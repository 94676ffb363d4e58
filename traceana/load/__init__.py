"""Load stage: a trace file -> Trace (events as columns).

`Trace` and `load_trace` are looked up on first use, so that importing a submodule (the
numpy-free scanner feed that starts in a thread before the rest of traceana imports) does not
import the loader and numpy with it."""

from __future__ import annotations

from typing import Any

__all__ = ["Trace", "load_trace"]


def __getattr__(name: str) -> Any:
    if name == "Trace":
        from traceana.load.model import Trace

        return Trace
    if name == "load_trace":
        from traceana.load.reader import load_trace

        return load_trace
    raise AttributeError(f"module 'traceana.load' has no attribute {name!r}")
