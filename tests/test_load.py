"""Load stage: one typed parse into columns; bad input -> one clear BadInput line."""

from __future__ import annotations

import gzip
import json

import pytest

from tests import synth as s
from tests.conftest import all_shared_traces, shared_trace
from traceana.errors import BadInput
from traceana.load import load_trace


def test_gzip_and_plain_give_the_same_columns(tmp_path):
    doc = s.trace([s.op("aten::add", 1.5, 2.25, ext=1, dims=[[2], [2]]), s.launch(2, 7, 1),
                   s.kernel("k", 5, 1.125, 7, 1)])
    plain = s.write(tmp_path, doc)
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(doc).encode()))
    a, b = load_trace(plain), load_trace(str(gz))
    assert a.ops.ts.tolist() == b.ops.ts.tolist() == [1.5]
    assert a.ops.end.tolist() == [3.75]  # 1.5 + 2.25
    assert a.gpu.dur.tolist() == b.gpu.dur.tolist() == [1.125]
    assert a.ops.dims[0] == b"[[2], [2]]"  # kept as the raw JSON text, decoded once per signature later


def test_bare_event_list_is_accepted(tmp_path):
    p = tmp_path / "list.json"
    p.write_text(json.dumps([s.kernel("k", 1, 2, 3)]))
    tr = load_trace(str(p))
    assert len(tr.gpu) == 1


def test_profiler_step_is_an_annotation_not_an_op(tmp_path):
    ev = [s.op("ProfilerStep#3", 0, 100, ext=1), s.op("aten::add", 10, 5, ext=2, dims=[[2], [2]])]
    tr = load_trace(s.write(tmp_path, s.trace(ev)))
    assert [tr.names[c] for c in tr.ops.name] == ["aten::add"]
    assert [tr.names[c] for c in tr.annotations.name] == ["ProfilerStep#3"]


def test_wrongly_typed_fields_fall_back_to_lenient_decode(tmp_path):
    ev = [s.kernel("ok", 1, 2, 3), {"ph": "X", "cat": "kernel", "name": "bad", "ts": "soon", "dur": 1}]
    tr = load_trace(s.write(tmp_path, s.trace(ev)))
    assert [tr.names[c] for c in tr.gpu.name] == ["ok"]
    assert any("could not be read" in w for w in tr.warnings)


@pytest.mark.parametrize("content, message", [
    (b"", "file is empty"),
    (b"not json", "not valid JSON"),
    (b'{"traceEvents": [', "not valid JSON"),
    (b"[1, 2", "not valid JSON"),
    (b'"a string"', "not a trace"),
    (b'{"traceEvents": 5}', "not a trace"),
    (b"\x1f\x8b\x08\x00garbage", "gzip"),
])
def test_bad_input_is_one_clear_error(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(BadInput) as exc:
        load_trace(str(p))
    assert message in str(exc.value)
    assert str(p) in str(exc.value)
    assert "\n" not in str(exc.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        load_trace(str(tmp_path / "nope.json"))
    with pytest.raises(BadInput, match="is a directory"):
        load_trace(str(tmp_path))


def test_legacy_2021_trace_loads():
    tr = load_trace(shared_trace("kineto/worker0.1623143089861.pt.trace.json.gz"))
    assert tr.format == "kineto-2021"
    assert len(tr.ops) == 23640 and len(tr.gpu) == 9096  # Operator / Kernel+Memcpy+Memset events
    assert tr.device_properties[0]["name"] == "Tesla V100-DGXS-32GB"


@pytest.mark.parametrize("rel", all_shared_traces())
def test_every_shared_trace_loads_without_warnings(rel):
    tr = load_trace(shared_trace(rel))
    assert tr.n_events > 0
    assert tr.warnings == []
