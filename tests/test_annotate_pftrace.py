"""`traceana annotate` with Perfetto traces: .pftrace in, JSON or .pftrace out (and JSON in, .pftrace
out). The annotated trace reads back as the trace it annotates (its added counter samples counted out
by the header), its events carry the verdicts the JSON annotation carries, and its counter tracks are
the JSON's counter events, one track per series."""

from __future__ import annotations

import gzip

import msgspec
import numpy as np
import pytest

from tests.conftest import shared_trace
from tests.pftrace_files import converted, same_trace
from traceana.annotate.counters import CAT, IDLE, TFLOPS
from traceana.cli import main
from traceana.load import pftrace
from traceana.load.reader import load_trace
from traceana.output.ownership import written_by_traceana

BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    d = tmp_path_factory.mktemp("ann")
    js = shared_trace(BERT)
    pf = converted(js)
    out = {"pf": pf, "js": js}
    for key, src, name in (("pf2pf", pf, "a.pftrace"), ("pf2js", pf, "a.json.gz"), ("js2pf", js, "b.pftrace.gz"),
                           ("js2js", js, "b.json.gz")):
        assert main(["annotate", src, "-o", str(d / name), "-q"]) == 0
        out[key] = str(d / name)
    return out


def _verdicts_json(path: str) -> dict[tuple, dict]:
    """(name, ts) -> the traceana arg of each event of an annotated JSON trace."""
    doc = msgspec.json.decode(gzip.open(path).read())
    return {(e["name"], round(e["ts"], 3)): e["args"]["traceana"] for e in doc["traceEvents"]
            if isinstance(e.get("args"), dict) and "traceana" in e["args"]}


def _verdicts_pftrace(path: str) -> dict[tuple, dict]:
    from traceana.load.pftrace.chrome import events

    res = pftrace.decode(path)
    return {(e["name"], round(e["ts"], 3)): e["args"]["traceana"] for _, e in events(res)
            if isinstance(e.get("args"), dict) and "traceana" in e["args"]}


def test_annotated_traces_read_back_as_the_trace(annotated):
    base = load_trace(annotated["pf"])
    for key in ("pf2pf", "pf2js", "js2pf", "js2js"):
        back = load_trace(annotated[key])
        same_trace(base, back, key)
        assert not back.warnings
        assert written_by_traceana(annotated[key]), key
    # the Perfetto outputs count out exactly the counter samples they added
    assert load_trace(annotated["pf2pf"]).n_events == base.n_events == load_trace(annotated["js2pf"]).n_events


def test_the_verdicts_are_the_json_annotations(annotated):
    want = _verdicts_json(annotated["js2js"])
    assert len(want) == 122  # the kernels, memsets and launching ops of bert-small with a verdict
    for key in ("pf2pf", "js2pf"):
        got = _verdicts_pftrace(annotated[key])
        assert got == want, key
    assert _verdicts_json(annotated["pf2js"]) == want


def test_the_counter_tracks_are_the_json_counters(annotated):
    doc = msgspec.json.decode(gzip.open(annotated["js2js"]).read())
    samples = [e for e in doc["traceEvents"] if e.get("cat") == CAT and e.get("ph") == "C"]
    series = sum(len(e["args"]) for e in samples)  # one Perfetto counter sample per series of each event
    res = pftrace.decode(annotated["pf2pf"])
    kind = np.frombuffer(res["ev_kind"], np.int8)
    assert int((kind == 2).sum()) == series
    head = msgspec.json.decode(dict(_metadata(res))["traceana"])
    assert head["counter_events"] == series and head["schema"].startswith("traceana.annotated/")
    names = {res["strings"][c] for c in np.frombuffer(res["tr_name"], np.int32).tolist() if c >= 0}
    assert f"{TFLOPS} TFLOP/s" not in names and TFLOPS in names  # one series: the track is the counter's name
    assert any(n.startswith(IDLE + " ") for n in names)  # the idle causes: one track per cause


def _metadata(res):
    s = res["strings"]
    ev = np.frombuffer(res["ar_event"], np.int32)
    for j in np.flatnonzero(ev < 0).tolist():
        yield s[np.frombuffer(res["ar_key"], np.int32)[j]], s[np.frombuffer(res["ar_str"], np.int32)[j]]


def test_perfettos_protos_read_the_annotation(annotated):
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    trace = pb.Trace.FromString(open(annotated["pf2pf"], "rb").read())
    anns = [a for p in trace.packet if p.HasField("track_event") for a in p.track_event.debug_annotations
            if a.name == "traceana"]
    assert len(anns) == 122
    keys = {d.name for d in anns[0].dict_entries}
    assert {"op", "name", "bound"} <= keys


def test_the_default_output_follows_the_input(tmp_path, monkeypatch):
    from traceana.cli.annotate import default_output

    assert default_output(converted(shared_trace(BERT))).endswith(".annotated.pftrace")
    assert default_output(shared_trace(BERT)) == "gaunernst_bert-small-uncased__1016001.annotated.json.gz"


def test_an_unknown_output_suffix_is_refused(tmp_path, capsys):
    assert main(["annotate", converted(shared_trace(BERT)), "-o", str(tmp_path / "x.perfetto-trace")]) == 2
    assert ".pftrace" in capsys.readouterr().err
