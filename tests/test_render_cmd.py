"""`traceana render`: a saved analysis (or diff) re-rendered without the trace, byte for byte
what `report` (or `diff`) writes; anything that is not a supported saved document is exit 2."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.analyses import saved
from tests.conftest import SAMPLES, shared_trace
from traceana.cli import main

T4 = str(SAMPLES / "t4_seed_pow_mul.json")


@pytest.mark.parametrize("trace", [T4, "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"])
@pytest.mark.parametrize("ext", ["html", "md"])
def test_round_trip_is_byte_for_byte(tmp_path, trace, ext):
    if not trace.startswith("/"):
        trace = shared_trace(trace)
    direct, saved_json, again = tmp_path / f"a.{ext}", tmp_path / "a.json", tmp_path / f"b.{ext}"
    assert main(["report", trace, "-o", str(direct), "-q"]) == 0
    assert main(["report", trace, "-o", str(saved_json), "-q"]) == 0
    assert main(["render", str(saved_json), "-o", str(again), "-q"]) == 0
    assert again.read_bytes() == direct.read_bytes()


def test_render_json_is_a_fixed_point(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["report", T4, "-o", str(a), "-q"]) == 0
    assert main(["render", str(a), "-o", str(b), "-q"]) == 0
    assert a.read_bytes() == b.read_bytes()


def test_render_saved_diff_and_gates(tmp_path, capsys):
    a = saved("hta/triton_example.json.gz", tmp_path)
    d_json, d_md, again = tmp_path / "d.json", tmp_path / "d.md", tmp_path / "d2.md"
    assert main(["diff", a, a, "-o", str(d_json), "-q"]) == 0
    assert main(["diff", a, a, "-o", str(d_md), "-q"]) == 0
    assert main(["render", str(d_json), "-o", str(again), "-q"]) == 0
    assert again.read_bytes() == d_md.read_bytes()
    # gates on a saved analysis and a saved diff; the diff records them for its markdown
    assert main(["render", a, "-o", str(tmp_path / "r.md"), "-q", "--fail-on", "roof<40%:nothing*"]) == 1
    assert main(["render", str(d_json), "-o", str(again), "-q", "--fail-on", "time-regression=0%"]) == 0
    assert "## Gates: all passed" in again.read_text()
    assert main(["render", str(d_json), "-o", str(tmp_path / "x.md"), "--svg", str(tmp_path / "c.svg")]) == 2
    assert "is a saved diff" in capsys.readouterr().err


def _write(tmp_path, doc, name="bad.json"):
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(p)


GOOD = {"schema": "traceana.analysis/1", "trace": {}, "device": {}, "coverage": {}, "breakdown": {},
        "ops": [], "findings": []}


@pytest.mark.parametrize("doc, message", [
    ("{not json", "not valid JSON"),
    ({"traceEvents": []}, "no 'schema' field"),
    ([1, 2], "no 'schema' field"),
    ({"schema": "traceana.analysis/2"}, "'traceana.analysis/2' is not supported"),
    ({"schema": "something/1"}, "is not a traceana document"),
    ({**GOOD, "coverage": None}, "'coverage' must be an object"),
    ({k: v for k, v in GOOD.items() if k != "ops"}, "has no 'ops' section"),
    ({**GOOD, "ops": [1]}, "ops[0] must be an object"),
])
def test_bad_saved_documents_exit_2_with_one_line(tmp_path, capsys, doc, message):
    path = _write(tmp_path, doc)
    assert main(["render", path, "-o", str(tmp_path / "out.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and path in err[0] and message in err[0]
    assert not (tmp_path / "out.html").exists()


def test_minimal_valid_document_and_gzip(tmp_path):
    p = tmp_path / "min.json.gz"
    p.write_bytes(gzip.compress(json.dumps(GOOD).encode()))
    assert main(["render", str(p), "-o", str(tmp_path / "m.md"), "-q"]) == 0
    assert (tmp_path / "m.md").read_text().startswith("# traceana: trace")


def test_a_trace_is_not_a_saved_analysis(tmp_path, capsys):
    assert main(["render", T4, "-o", str(tmp_path / "x.html")]) == 2
    assert "use `traceana report`" in capsys.readouterr().err


def test_default_output_and_foreign_files(tmp_path, monkeypatch):
    a = tmp_path / "run.json"
    assert main(["report", T4, "-o", str(a), "-q"]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["render", str(a), "-q"]) == 0
    assert (tmp_path / "run.report.html").read_text().startswith("<!DOCTYPE html>")
    foreign = tmp_path / "notes.md"
    foreign.write_text("mine\n")
    assert main(["render", str(a), "-o", str(foreign), "-q"]) == 2
    assert foreign.read_text() == "mine\n"
