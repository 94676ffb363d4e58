"""annotate keeps every user value (issue 28): its additions live under a key the input does not use, so
stripping gives the original back even when the input holds "traceana" keys; refusals state the real
reason. Before: an event's own args.traceana got a second "traceana" member (the user's value shadowed,
lost on stripping); a user's top-level "traceana" member was refused as "already annotated by
traceana"; two top-level traceEvents lists were refused as "it changed meanwhile"; and the C splice
called memcpy(NULL, src, 0) (UBSAN) when it copied nothing, as for an event holding -Infinity."""

from __future__ import annotations

import gzip
import json

import pytest

from tests import synth
from traceana.analysis import analyze
from traceana.annotate.keys import free_key
from traceana.annotate.strip import annotation_key, strip
from traceana.cli import main
from traceana.output.ownership import annotated, written_by_traceana


@pytest.fixture(params=["C", "Python"])
def way(request, monkeypatch):
    if request.param == "Python":
        monkeypatch.setenv("TRACEANA_PURE_PYTHON", "1")
    else:
        monkeypatch.delenv("TRACEANA_PURE_PYTHON", raising=False)
    return request.param


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys {keys}"  # a shadowed value would hide here
    return dict(pairs)


def _read(path) -> dict:
    data = open(path, "rb").read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data, object_pairs_hook=_no_duplicates)


def _events():
    """aten::mm [64x128] @ [128x32] fp32 launching a 10 µs kernel: both get a verdict."""
    mm = dict(dims=[[64, 128], [128, 32]], types=["float", "float"])
    return [synth.op("aten::mm", 100, 20, 1, **mm), synth.launch(102, 1, 1),
            synth.kernel("ampere_sgemm_64x32", 105, 10, 1, 1)]


def test_free_key_by_hand():
    assert free_key([b'{"traceEvents": [{"name": "traceana/record.py(3): f"}]}']) == "traceana"  # no string
    assert free_key([b'{"a": "traceana"}']) == "traceana_1"  # a value counts too
    assert free_key([b'{"traceana": 1, "x": "traceana_1", "y": "traceana_3"}']) == "traceana_2"
    assert free_key([b'{"tr\\u0061ceana": 1}']) == "traceana_1"  # spelled with an escape
    assert free_key([b'{"a": "\\"traceana\\""}']) == "traceana"  # "\"traceana\"" is another string
    text = b'{"x": 1, "traceana": {"traceana_1": 2}, "s": "tr\\u0061ceana_2"}'
    for piece in (1, 2, 5, 13):  # the strings cut across pieces
        assert free_key(text[i:i + piece] for i in range(0, len(text), piece)) == "traceana_3"


def test_user_traceana_keys_are_kept(tmp_path, way):
    """Events holding args.traceana, a counter event of category "traceana", and a top-level "traceana"
    member first: the additions go under "traceana_1"; no key is duplicated; stripping gives the original."""
    ev = _events()
    for i, e in enumerate(ev):
        e.setdefault("args", {})["traceana"] = {"mine": i}
    ev.append({"ph": "C", "cat": "traceana", "name": "my counter", "pid": 1, "ts": 1, "args": {"v": 1}})
    doc = {"traceana": {"note": "the user's own"}, **synth.trace(ev)}
    src = synth.write(tmp_path, doc, "mine.json")
    out = str(tmp_path / "mine.annotated.json.gz")
    assert main(["annotate", src, "-o", out, "-q"]) == 0
    ann = _read(out)
    assert next(iter(ann)) == "traceana_1" and annotation_key(ann) == "traceana_1"
    head = ann["traceana_1"]
    assert head["args_key"] == head["events_cat"] == "traceana_1"
    assert ann["traceana"] == {"note": "the user's own"}
    mm, la, k = ann["traceEvents"][:3]
    assert mm["args"]["traceana"] == {"mine": 0} and la["args"]["traceana"] == {"mine": 1}
    assert "bound" in mm["args"]["traceana_1"] and "bound" in k["args"]["traceana_1"]
    assert ann["traceEvents"][3] == ev[3]  # the user's counter, untouched
    added = [e for e in ann["traceEvents"] if e.get("cat") == "traceana_1"]
    assert len(added) == head["counter_events"] > 0
    assert strip(ann) == json.loads(open(src).read())
    assert written_by_traceana(out) and annotated(out)
    # the annotated trace analyses as the original did: its added events counted out (4 events)
    assert analyze(out)["trace"]["events"] == analyze(src)["trace"]["events"] == 4
    assert main(["annotate", out, "-o", str(tmp_path / "again.json"), "-q"]) == 2  # annotated: refused


def test_a_user_top_level_traceana_member_is_not_an_annotation(tmp_path, capsys, way):
    """Its first member "traceana" without traceana's marker: annotated (before: refused as "already
    annotated by traceana"); a file that does carry the marker is refused, before its analysis."""
    doc = {"traceana": {"schema": "mine"}, **synth.trace(_events())}
    src = synth.write(tmp_path, doc, "own.json")
    assert not annotated(src)
    assert main(["annotate", src, "-o", str(tmp_path / "own.annotated.json"), "-q"]) == 0
    ann = _read(tmp_path / "own.annotated.json")
    assert list(ann)[:2] == ["traceana_1", "traceana"] and strip(ann) == doc
    assert main(["annotate", str(tmp_path / "own.annotated.json"), "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already annotated by traceana" in err


@pytest.mark.parametrize("second", [1, 3, 5])
def test_two_traceevents_lists_are_refused_as_such(tmp_path, capsys, way, second):
    """{"traceEvents": [3 events], ..., "traceEvents": [n events]}: the loaders read the last list (as JSON
    readers do); the rewrite meets the first. Refused naming the two lists, whatever n (before: "has more
    events than when it was analysed: it changed meanwhile")."""
    text = json.dumps(synth.trace(_events()))
    extra = [synth.op("aten::add", 300 + i, 5, 10 + i) for i in range(second)]
    src = tmp_path / "two.json"
    src.write_text(text[:-1] + ', "traceEvents": ' + json.dumps(extra) + "}")
    assert main(["annotate", str(src), "-o", str(tmp_path / "two.annotated.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "top-level 'traceEvents' lists" in err and "meanwhile" not in err


def test_an_event_holding_minus_infinity(tmp_path, way):
    """An event the scanner leaves to the Python way (-Infinity is not JSON) right where a splice call
    starts: the splice copies nothing (before: memcpy(NULL, src, 0), a UBSAN report under the sanitizer
    job). The event is kept byte for byte, its neighbours annotated."""
    ev = _events()
    text = json.dumps(synth.trace(ev))
    bad = '{"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1, "tid": 1, "ts": -Infinity, "dur": 1}'
    text = text.replace('"traceEvents": [', '"traceEvents": [' + bad + ", ", 1)
    src = tmp_path / "inf.json"
    src.write_text(text)
    out = tmp_path / "inf.annotated.json"
    assert main(["annotate", str(src), "-o", str(out), "-q"]) == 0
    assert bad.encode() in out.read_bytes()
    ann = json.loads(out.read_text())  # the standard library reads -Infinity
    assert strip(ann) == json.loads(text)
    assert "traceana" in ann["traceEvents"][1]["args"]  # aten::mm, after the odd event
