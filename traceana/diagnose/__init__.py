"""Diagnose stage: explanations and findings from the roofline rows (pure functions)."""

from traceana.diagnose.explain import explain_rows
from traceana.diagnose.findings import find

__all__ = ["explain_rows", "find"]
