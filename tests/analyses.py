"""Shared-trace analyses for the CI-feature tests, each computed at most once per session.

`analysis(rel)` returns a fresh copy (through JSON, exactly as a saved `report -o x.json`
reads back) of the analysis of ../shared/traces/REL, skipping the test when the trace is
absent; `saved(rel, folder)` writes that copy as a file for CLI tests. The `shared_analysis`
fixture hands `analysis` to tests that prefer a fixture.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from tests.conftest import shared_trace


@lru_cache(maxsize=None)
def _saved_text(path: str) -> str:
    from traceana.analysis import analyze
    from traceana.render.json_out import render_json

    return render_json(analyze(path))


def analysis(rel: str) -> dict:
    """A fresh, mutable copy of the analysis of shared trace REL."""
    return json.loads(_saved_text(shared_trace(rel)))


def saved(rel: str, folder: Path, name: str | None = None) -> str:
    """Write the analysis of REL as a saved analysis file in `folder`; its path."""
    text = _saved_text(shared_trace(rel))
    out = folder / (name or Path(rel).name.replace(".json.gz", ".analysis.json"))
    out.write_text(text, encoding="utf-8")
    return str(out)


@pytest.fixture(scope="session")
def shared_analysis():
    return analysis
