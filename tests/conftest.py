"""Shared test helpers: where the real traces live (skip cleanly when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# ../shared next to the checkout; TRACEANA_SHARED names it elsewhere (a git worktree in another folder)
SHARED = Path(os.environ.get("TRACEANA_SHARED") or REPO.parent / "shared").resolve()  # absolute: tests run children in other folders
TRACES = SHARED / "traces"
SAMPLES = REPO / "sample_traces"


def shared_trace(rel: str) -> str:
    """Path of a trace under ../shared/traces, or skip the test when it is not there."""
    p = TRACES / rel
    if not p.exists():
        pytest.skip(f"{p} not present")
    return str(p)


def all_shared_traces() -> list[str]:
    if not TRACES.exists():
        return []
    return sorted(str(p.relative_to(TRACES)) for p in TRACES.rglob("*.json.gz"))


from tests.recorded import recorded_trace  # noqa: E402,F401  (the session fixture: real model code, recorded once)
