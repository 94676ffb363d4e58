"""The loader keeps the Python call tree (python_function events, with_stack=True), the allocator's
[memory] events (profile_memory=True) and the ops' "Call stack" / "Module Hierarchy" args: Trace.python,
Trace.memory, CpuOps.call_stack / module_hierarchy. Checked against a direct json read of the same file,
on a training step recorded here and on shared traces, with both loaders (C scanner and Python)."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np

from tests.conftest import shared_trace
from traceana.load import reader, stream


def _loads(path, monkeypatch):
    """(way, Trace) for each loader there is: the C scanner (when built) and the Python loader."""
    out = []
    if stream.available():
        out.append(("c", reader.load_trace(str(path))))
    with monkeypatch.context() as m:
        m.setenv("TRACEANA_PURE_PYTHON", "1")
        out.append(("py", reader.load_trace(str(path))))
    return out


def _events(path):
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as f:
        return json.load(f)["traceEvents"]


def _check_python(trace, events):
    """Trace.python against the python_function X events read directly, in trace order."""
    py = [e for e in events if e.get("ph") == "X" and e.get("cat") == "python_function"]
    p = trace.python
    assert len(p) == len(py)
    assert [trace.names[c] for c in p.name.tolist()] == [e["name"] for e in py]
    assert p.ts.tolist() == [float(e["ts"]) for e in py]
    assert p.end.tolist() == [e["ts"] + e["dur"] for e in py]
    ids = [e["args"].get("Python id") for e in py]
    parents = [e["args"].get("Python parent id") for e in py]
    modules = [e["args"].get("Python module id") for e in py]
    assert p.py_id.tolist() == [-1 if v is None else v for v in ids]
    assert p.parent.tolist() == [-1 if v is None else v for v in parents]
    assert p.module_id.tolist() == [-1 if v is None else v for v in modules]
    threads = [f"{e['pid']}/{e['tid']}" for e in py]
    assert [trace.threads[c] for c in p.thread.tolist()] == threads
    assert p.name.dtype == np.int32 and p.thread.dtype == np.int32 and p.py_id.dtype == np.int64
    return py


def _check_memory(trace, events):
    """Trace.memory against the [memory] instant events read directly, in trace order."""
    mem = [e for e in events if e.get("ph") == "i" and e.get("name") == "[memory]"]
    m = trace.memory
    assert len(m) == len(mem)
    a = [e.get("args", {}) for e in mem]
    assert m.ts.tolist() == [float(e["ts"]) for e in mem]
    assert m.addr.tolist() == [x.get("Addr", 0) for x in a]
    assert m.nbytes.tolist() == [x.get("Bytes", 0) for x in a]
    assert m.device_type.tolist() == [x.get("Device Type", -1) for x in a]
    assert m.device.tolist() == [x.get("Device Id", -1) for x in a]
    for col, key in ((m.total_allocated, "Total Allocated"), (m.total_reserved, "Total Reserved")):
        want = [float(x[key]) if key in x else math.nan for x in a]
        assert np.array_equal(col, np.array(want), equal_nan=True)
    assert [trace.threads[c] for c in m.thread.tolist()] == [f"{e['pid']}/{e['tid']}" for e in mem]
    assert m.device_type.dtype == np.int8 and m.nbytes.dtype == np.int64
    return mem


def test_recorded_train_step(recorded_trace, monkeypatch):
    """A real training step (tiny BertForMaskedLM: forward, backward, AdamW step) recorded on CPU with
    with_stack, profile_memory and record_shapes."""
    path = recorded_trace.train_step()
    events = _events(path)
    for way, trace in _loads(path, monkeypatch):
        py = _check_python(trace, events)
        mem = _check_memory(trace, events)
        assert len(py) > 1000 and len(mem) > 100, way  # a step runs thousands of Python calls, allocates often
        p, m = trace.python, trace.memory
        # every nn.Module call is an "nn.Module: <Class>_<n>" event and only those carry a Python module id
        modules = [e for e in py if e["name"].startswith("nn.Module: ")]
        assert int((p.module_id >= 0).sum()) == len(modules) > 0
        assert any(e["name"] == "nn.Module: BertForMaskedLM_0" for e in modules)
        # the tree: one root per thread, every other call's parent is a recorded call
        ids = set(p.py_id.tolist())
        roots = int((p.parent == -1).sum())
        assert roots >= 1 and sum(x in ids for x in p.parent.tolist()) == len(p) - roots
        # the CPU allocator's running total: each event moves Total Allocated by its Bytes
        # (total[i] = total[i-1] + bytes[i]), so the last total = first total - first bytes + sum(bytes)
        cpu = m.device_type == 0
        assert cpu.all()  # CPU-only recording: Device Type 0, Device Id -1
        assert (m.device == -1).all()
        assert np.array_equal(np.diff(m.total_allocated), m.nbytes[1:].astype(np.float64))
        start = m.total_allocated[0] - m.nbytes[0]
        assert m.total_allocated[-1] == start + m.nbytes.sum()
        want_bytes = sum(e["args"]["Bytes"] for e in mem)
        assert int(m.nbytes.sum()) == want_bytes
        assert float(np.nanmax(m.total_allocated)) == max(e["args"]["Total Allocated"] for e in mem)
        # allocations (Bytes > 0) minus frees (|Bytes| of Bytes < 0) = the sum of Bytes
        allocs = sum(e["args"]["Bytes"] for e in mem if e["args"]["Bytes"] > 0)
        frees = -sum(e["args"]["Bytes"] for e in mem if e["args"]["Bytes"] < 0)
        assert int(m.nbytes[m.nbytes > 0].sum()) - int(-m.nbytes[m.nbytes < 0].sum()) == allocs - frees == want_bytes
        # neither kind of event is an op, nor moves the trace's span: the ops are exactly the cpu_op events
        assert len(trace.ops) == sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op")


def test_python_and_memory_codes_come_after_the_others(recorded_trace, monkeypatch):
    """Names and threads of python_function / [memory] events are coded after every other event's: the
    codes of ops, launches, kernels and annotations are those of the same trace without them."""
    path = recorded_trace.train_step()
    events = _events(path)
    kept = [e for e in events if e.get("cat") != "python_function" and e.get("name") != "[memory]"]
    bare = path.replace(".pt.trace.json.gz", "_bare.json")
    with open(bare, "w") as f:
        json.dump({"traceEvents": kept}, f)
    for (way, full), (_, less) in zip(_loads(path, monkeypatch), _loads(bare, monkeypatch)):
        assert full.names[:len(less.names)] == less.names, way
        assert np.array_equal(full.ops.name, less.ops.name) and np.array_equal(full.ops.thread, less.ops.thread)
        assert full.span_us == less.span_us and len(less.python) == 0 and len(less.memory) == 0
        assert less.python.name.dtype == np.int32 and less.memory.total_allocated.dtype == np.float64


def test_shared_trace_with_stacks_and_memory(monkeypatch):
    """tracelens' bert-small trace (H100) has python_function and CUDA [memory] events."""
    path = shared_trace("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz")
    events = _events(path)
    for way, trace in _loads(path, monkeypatch):
        py = _check_python(trace, events)
        mem = _check_memory(trace, events)
        assert len(py) == 1385 and len(mem) == 236, way  # counted in the file: cat python_function / name [memory]
        # 84 nn.Module calls, the outermost BertLMHeadModel_0
        assert int((trace.python.module_id >= 0).sum()) == 84
        cuda = trace.memory.device_type == 1
        assert float(trace.memory.total_allocated[cuda].max()) == 101305344.0  # max "Total Allocated" of device 0


def test_call_stack_and_module_hierarchy(monkeypatch):
    """Ops' "Call stack" (kineto's 2021 resnet50 trace) and "Module Hierarchy" args (HTA's control
    trace: recorded with_modules, every op's args empty): only non-empty ones are kept, by op index."""
    path = shared_trace("kineto/worker0.1623143089861.pt.trace.json.gz")
    events = _events(path)
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator", "operator")
           and not e["name"].startswith("ProfilerStep#")]
    want = {i: e["args"]["Call stack"] for i, e in enumerate(ops) if e.get("args", {}).get("Call stack")}
    for way, trace in _loads(path, monkeypatch):
        assert len(trace.ops) == len(ops), way
        assert trace.ops.call_stack == want and len(want) > 10000
        assert trace.ops.module_hierarchy == {}
        # the 2021 format's [memory] events have no cat, no Addr nor totals: unknown, not zero
        m = trace.memory
        assert len(m) == 12838 and np.isnan(m.total_allocated).all() and (m.addr == 0).all()
    path = shared_trace("hta/control.json.gz")
    for way, trace in _loads(path, monkeypatch):
        assert trace.ops.call_stack == {} and trace.ops.module_hierarchy == {}, way  # all "" in this file
        assert len(trace.python) == 0 and len(trace.memory) == 0


def test_odd_values(tmp_path, monkeypatch):
    """Odd types and missing fields: unknown (-1 / nan / 0 / not kept), never a reason to reject an event."""
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 9,
         "args": {"External id": 1, "Call stack": "a.py(1): f;b.py(2): g", "Module Hierarchy": ["x"]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 2, "dur": 1,
         "args": {"External id": 2, "Call stack": 7, "Module Hierarchy": "top(Net)::fc(Linear)"}},
        {"ph": "X", "cat": "python_function", "name": "nn.Module: Net_0", "pid": 1, "tid": 1, "ts": 0, "dur": 20,
         "args": {"Python id": "5", "Python parent id": None, "Python module id": 2.0}},
        {"ph": "X", "cat": "python_function", "name": "x.py(3): h", "pid": 2, "tid": 9, "ts": 0.5, "dur": 1},
        {"ph": "X", "cat": "python_function", "name": "bad", "pid": 1, "tid": 1, "ts": 1, "dur": -1},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 3, "ts": 3,
         "args": {"Bytes": "12", "Addr": True, "Total Allocated": "x", "Device Type": 300, "Device Id": 1.0}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 4},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1},
        {"ph": "i", "cat": "cpu_instant_event", "name": "other", "pid": 1, "tid": 1, "ts": 5},
    ]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    for way, t in _loads(path, monkeypatch):
        assert t.ops.call_stack == {0: "a.py(1): f;b.py(2): g"}, way
        assert t.ops.module_hierarchy == {1: "top(Net)::fc(Linear)"}
        p = t.python
        assert [t.names[c] for c in p.name.tolist()] == ["nn.Module: Net_0", "x.py(3): h"]
        assert p.py_id.tolist() == [5, -1] and p.parent.tolist() == [-1, -1] and p.module_id.tolist() == [2, -1]
        assert [t.threads[c] for c in p.thread.tolist()] == ["1/1", "2/9"]
        m = t.memory
        assert m.ts.tolist() == [3.0, 4.0] and m.nbytes.tolist() == [12, 0] and m.addr.tolist() == [0, 0]
        assert np.isnan(m.total_allocated).all() and np.isnan(m.total_reserved).all()
        assert m.device_type.tolist() == [-1, -1] and m.device.tolist() == [1, -1]
        assert [t.threads[c] for c in m.thread.tolist()] == ["1/3", "1/1"]
        assert t.threads == ["1/1", "2/9", "1/3"]  # ops' thread first, then the Python calls', then memory's
        assert t.span_us == 9.0  # the ops' span (1 .. 10), not the Python calls' (0 .. 20)
        assert any("2 events had missing" in w for w in t.warnings)  # the Python call with dur -1, [memory] without ts


def test_lenient_and_normalised_paths_keep_them(tmp_path, monkeypatch):
    """A file the typed decode refuses (a mistyped field elsewhere: the lenient per-event decode) and
    one that is not strict JSON (NaN: normalised first) still give the Python calls and memory events."""
    py = {"ph": "X", "cat": "python_function", "name": "nn.Module: Net_0", "pid": 1, "tid": 1, "ts": 0, "dur": 5,
          "args": {"Python id": 3, "Python parent id": 1, "Python module id": 0}}
    mem = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 2,
           "args": {"Addr": 64, "Bytes": 4096, "Total Allocated": 8192, "Total Reserved": 1 << 21, "Device Type": 1,
                    "Device Id": 0}}
    bad = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "soon", "dur": 1}
    lenient = tmp_path / "lenient.json"
    lenient.write_text(json.dumps({"traceEvents": [py, mem, bad]}))
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps({"traceEvents": [py, mem]}).replace("8192", "NaN"))
    for path, alloc in ((lenient, [8192.0]), (nan, [math.nan])):
        for way, t in _loads(path, monkeypatch):
            assert t.names[int(t.python.name[0])] == "nn.Module: Net_0", (path.name, way)
            assert t.python.py_id.tolist() == [3] and t.python.module_id.tolist() == [0]
            m = t.memory
            assert m.nbytes.tolist() == [4096] and m.addr.tolist() == [64] and m.total_reserved.tolist() == [2097152.0]
            assert np.array_equal(m.total_allocated, np.array(alloc), equal_nan=True)
            assert t.warnings  # each path says what it did
