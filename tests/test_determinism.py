"""The same trace gives byte-identical HTML, markdown and JSON reports across separate
processes, whatever PYTHONHASHSEED is, and wherever the trace file lives (same name)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES, TRACES
from tests.test_escaping import hostile_trace

FORMATS = ("html", "md", "json")
# One process writes all three formats (one interpreter start per run keeps this fast).
SCRIPT = """
import sys
from traceana.cli import main
trace, out = sys.argv[1], sys.argv[2]
for fmt in ("html", "md", "json"):
    rc = main(["report", trace, "-o", f"{out}/report.{fmt}", "-q"])
    if rc:
        sys.exit(rc)
"""


def reports(trace: Path, out: Path, hashseed: str) -> dict[str, bytes]:
    out.mkdir(parents=True)
    env = dict(os.environ, PYTHONHASHSEED=hashseed, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(trace), str(out)], env=env, cwd=out,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return {fmt: (out / f"report.{fmt}").read_bytes() for fmt in FORMATS}


def traces(tmp_path: Path) -> list[Path]:
    hostile = tmp_path / "in" / "hostile.json"
    hostile.parent.mkdir()
    hostile.write_text(json.dumps(hostile_trace()))
    found = [SAMPLES / "t4_seed_pow_mul.json", hostile]
    bert = TRACES / "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
    if bert.exists():
        found.append(bert)
    return found


@pytest.mark.parametrize("index", [0, 1, 2])
def test_reports_are_byte_identical_across_processes(tmp_path, index):
    found = traces(tmp_path)
    if index >= len(found):
        pytest.skip("../shared/traces not present")
    trace = found[index]
    first = reports(trace, tmp_path / "a", "0")
    # a copy of the trace in another folder, read by a process with another hash seed
    elsewhere = tmp_path / "elsewhere" / trace.name
    elsewhere.parent.mkdir()
    shutil.copyfile(trace, elsewhere)
    second = reports(elsewhere, tmp_path / "b", "4242")
    for fmt in FORMATS:
        assert first[fmt] == second[fmt], f"{trace.name}: {fmt} differs"
        assert str(tmp_path).encode() not in first[fmt]  # no absolute paths in a report
