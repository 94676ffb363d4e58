"""Load stage: a trace file -> Trace (events as columns)."""

from traceana.load.model import Trace
from traceana.load.reader import load_trace

__all__ = ["Trace", "load_trace"]
