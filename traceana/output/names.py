"""The name a report gets when -o is not given: the trace's name, `.report.html`, in the current
directory (`traceana report`), or beside the trace (`traceana record`); `traceana annotate` names its
output `.annotated.json.gz` the same way."""

from __future__ import annotations

import os


def default_output(trace: str, suffix: str = ".report.html") -> str:
    base = os.path.basename(trace.rstrip("/"))
    for ext in (".gz", ".json", ".pftrace"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base + suffix
