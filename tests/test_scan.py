"""The C scanner (traceana/load/_scan.c, driven by traceana/load/stream.py) loads every trace
exactly as the Python loader does: same name and thread codes, same numbers (NaN where NaN),
same raw shape arguments, same collective args, same warnings. And where it cannot, it steps
aside (the Python loader then decides), never loads something different."""

from __future__ import annotations

import msgspec.structs
import gzip
import json
import os

import numpy as np
import pytest

from traceana.load import reader, stream

feed = stream.feed
from tests.conftest import SAMPLES, TRACES, all_shared_traces

pytestmark = pytest.mark.skipif(not stream.available(), reason="the C scanner is not built")


def _python_load(path, monkeypatch):
    with monkeypatch.context() as m:
        m.setenv("TRACEANA_PURE_PYTHON", "1")
        assert not stream.available()
        return reader.load_trace(str(path))


def _same(a, b, where=""):
    """Field by field equality of two loaded traces (arrays: dtype, shape, values, NaN = NaN)."""
    if isinstance(a, msgspec.Struct):
        assert type(a) is type(b), where
        for f in msgspec.structs.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    else:
        assert a == b, where


def _fast_load(path):
    trace = stream.load(str(path), os.stat(path))
    assert trace is not None, f"the scanner stepped aside on {path}"
    # the same post-steps load_trace runs
    reader.adopt_parent_messages(trace)
    reader.attach_layer_weights(trace)
    return trace


_ALL = [TRACES / rel for rel in all_shared_traces()] + sorted(SAMPLES.glob("*.json*"))


@pytest.mark.parametrize("path", _ALL, ids=lambda p: p.name)
def test_every_shared_trace_loads_identically(path, monkeypatch):
    fast = _fast_load(path)
    slow = _python_load(path, monkeypatch)
    _same(fast, slow, path.name)
    assert len(fast.names) == len(slow.names) and fast.n_events == slow.n_events


def _write(tmp_path, doc, name="t.json", gz=False):
    text = doc if isinstance(doc, (bytes, str)) else json.dumps(doc)
    data = text.encode() if isinstance(text, str) else text
    p = tmp_path / name
    p.write_bytes(gzip.compress(data) if gz else data)
    return p


KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2,
          "args": {"device": 0, "stream": 7, "correlation": 5, "External id": 3, "grid": [2, 3, 4]}}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 9, "dur": 5,
      "args": {"External id": 3, "Input Dims": [[64, 32], [32, 128]], "Input type": ["float", "float"]}}
LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 9.5,
          "dur": 0.5, "args": {"correlation": 5, "External id": 3}}


def test_odd_values_take_the_python_rules(tmp_path, monkeypatch):
    """Ids written as strings, byte counts as strings, a launch grid too large for exact doubles,
    escaped names, several gzip members: converted by the Python loader's own functions."""
    odd = dict(KERNEL, name="k\\u00e9\\n", args=dict(KERNEL["args"], correlation="12", device="x",
                                                    bytes="2048", grid=[2**40, 2**20, 3]))
    memcpy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 1e1,
              "dur": 1.25e0, "args": {"bytes": 4096, "External id": None, "external id": 9}}
    doc = {"schemaVersion": 1, "traceEvents": [OP, LAUNCH, odd, memcpy, {"ph": "M", "name": "meta"}],
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}], "traceName": "x"}
    text = json.dumps(doc).replace("k\\\\u00e9\\\\n", "k\\u00e9\\n")
    half = len(text) // 2
    p = tmp_path / "two.json.gz"
    p.write_bytes(gzip.compress(text[:half].encode()) + gzip.compress(text[half:].encode()))
    fast = _fast_load(p)
    slow = _python_load(p, monkeypatch)
    _same(fast, slow)
    g = fast.gpu
    assert fast.names[g.name[0]] == "k\u00e9\n"
    assert g.corr.tolist() == [12, -1]  # "12" -> 12 (_as_int); absent -> -1
    assert g.device.tolist() == [0, 0]  # "x" -> -1 -> the pid (0)
    assert g.nbytes.tolist() == [2048.0, 4096.0]
    assert g.blocks[0] == float(2**40 * 2**20 * 3)  # 2^60 * 3 = 3458764513820540928
    assert g.ext.tolist() == [3, 9]  # "External id": null -> the 2021 spelling "external id"
    assert fast.n_events == 5 and fast.device_properties[0]["name"] == "NVIDIA H100 80GB HBM3"


def test_python_calls_memory_and_stacks_take_the_python_rules(tmp_path, monkeypatch):
    """python_function and [memory] events, ops' Call stack / Module Hierarchy, with odd values: ids as
    strings, floats, bools, arrays, ints beyond int64, escaped names, a Python call named like an op, a
    null category, instant events that are not [memory], bad times. The scanner reads them
    itself (no stepping aside) into the Python loader's columns and codes."""
    py = {"ph": "X", "cat": "python_function", "pid": 1, "tid": 2, "ts": 8, "dur": 10}
    mem = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, "ts": 9.5}
    events = [
        dict(py, name="nn.Module: Net_0", args={"Python id": 1, "Python parent id": None, "Python module id": 0}),
        dict(py, name="a\\u00e9.py(3): f", args={"Python id": "2", "Python parent id": 1.0, "Python module id": True}),
        dict(py, name="aten::mm", args={"Python id": 2**70, "Python parent id": [1], "Ev Idx": 4}),
        dict(py, name="x.py(9): g", tid=5, ts=-1, dur=-1),
        dict(py, name="x.py(9): g", tid=6),
        dict(py, name=None, pid=7, args=None),
        OP,
        dict(OP, ts=10, args=dict(OP["args"], **{"Call stack": "a.py(1): f;b.py(2): g", "Module Hierarchy": ""})),
        dict(OP, ts=11, args=dict(OP["args"], **{"Call stack": "a.py(1): f;b.py(2): g", "Module Hierarchy": 3})),
        dict(OP, ts=12, args={"Call stack": "c\\u202e.py(1)", "Module Hierarchy": "top(M)::fc(Linear)"}),
        LAUNCH, KERNEL,
        dict(mem, args={"Addr": 140000000000000, "Bytes": 512, "Total Allocated": 1024, "Total Reserved": 2097152,
                        "Device Type": 1, "Device Id": 0}),
        dict(mem, tid=9, args={"Addr": "7", "Bytes": -512.0, "Total Allocated": "512", "Total Reserved": 2.5e6,
                               "Device Type": 1000, "Device Id": None}),
        dict(mem, cat=None, args={"Bytes": 2**64, "Total Allocated": 2**64, "Device Type": False}),
        dict(mem, ts=None),
        dict(mem, name="other"),
        {"ph": "i", "name": "[memory]", "pid": 3, "tid": 3, "ts": 7, "args": {"Bytes": [1], "Addr": {"a": 1}}},
    ]
    text = json.dumps({"traceEvents": events}).replace("\\\\u", "\\u")
    p = _write(tmp_path, text)
    fast = _fast_load(p)
    slow = _python_load(p, monkeypatch)
    _same(fast, slow)
    assert [fast.names[c] for c in fast.python.name.tolist()] == [
        "nn.Module: Net_0", "a\u00e9.py(3): f", "aten::mm", "x.py(9): g", ""]  # the bad-time call skipped
    assert fast.names.index("aten::mm") < fast.names.index("nn.Module: Net_0")  # an op's code comes first
    p_ = fast.python
    assert p_.py_id.tolist() == [1, 2, -1, -1, -1]  # "2" -> 2; 2**70 is beyond int64 -> -1
    assert p_.parent.tolist() == [-1, 1, -1, -1, -1] and p_.module_id.tolist() == [0, -1, -1, -1, -1]
    assert [fast.threads[c] for c in p_.thread.tolist()] == ["1/2", "1/2", "1/2", "1/6", "7/2"]
    m = fast.memory
    assert m.addr.tolist() == [140000000000000, 7, 0, 0] and m.nbytes.tolist() == [512, -512, 0, 0]
    assert m.total_allocated.tolist()[:3] == [1024.0, 512.0, 2.0**64] and np.isnan(m.total_allocated[3])
    assert m.total_reserved.tolist()[:2] == [2097152.0, 2.5e6] and np.isnan(m.total_reserved[2:]).all()
    assert m.device_type.tolist() == [1, -1, -1, -1] and m.device.tolist() == [0, -1, -1, -1]
    assert [fast.threads[c] for c in m.thread.tolist()] == ["1/2", "1/9", "1/2", "3/3"]
    assert fast.ops.call_stack == {1: "a.py(1): f;b.py(2): g", 2: "a.py(1): f;b.py(2): g", 3: "c\ufffd.py(1)"}
    assert fast.ops.module_hierarchy == {3: "top(M)::fc(Linear)"}
    assert any(w.startswith("2 events had missing") for w in fast.warnings)  # the Python call and the [memory]


@pytest.mark.parametrize("text", [
    b'[{"ph": "X"}]',  # a bare event list
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "10", "dur": 1}]}',  # ts as a string
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 1.5}]}',
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}',  # truncated
    b'{"traceEvents": [{"ph": "X", "cat": "cpu_\\u006fp", "name": "k", "ts": 1, "dur": 1}]}',  # escaped cat
    b'{"traceEvents": [{"ph": "X", "name": "\\ud800"}]}',  # a lone surrogate
    b'{"traceEvents": [1, 2]}',
    b'{"traceEvents": null}',
    b'{"traceEvents": [], "traceEvents": []}',
    b'{"traceEvents": [{"ph": "X", "ts": 1e400, "dur": 1, "cat": "kernel"}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 01, "dur": 1}]}',  # not JSON
    b'{"traceEvents": []} x',
    b'{"traceEvents": [{"ph": "i", "name": "[memory]", "ts": 1, "args": {"Bytes": 1e400}}]}',  # out of range
    b'{"traceEvents": [{"ph": "i", "name": "[memory]", "ts": 1, "args": {"Addr": [1e400]}}]}',
])
def test_what_the_scanner_leaves_to_the_python_loader(tmp_path, text):
    p = _write(tmp_path, text)
    assert stream.load(str(p), os.stat(p)) is None


def test_pieces_split_anywhere_give_the_same_columns(tmp_path, monkeypatch):
    """Feeding the text in pieces of any size (an event split across pieces, even a number or a
    UTF-8 character) gives the same result as one piece."""
    events = [dict(OP, ts=9 + i, name=f"aten::op{i % 7}\u00b5") for i in range(50)] + [KERNEL, LAUNCH]
    data = json.dumps({"traceEvents": events}, ensure_ascii=False).encode()
    whole = feed.scan([data])
    for size in (1, 3, 7, 64, 1000):
        parts = [data[i:i + size] for i in range(0, len(data), size)]
        got = feed.scan(parts)
        assert got is not None
        for k, v in whole.items():
            assert got[k] == v, (size, k)


def test_numbers_are_parsed_as_python_parses_them():
    """Correctly rounded doubles: fast path (<= 2^53 mantissa, |exp| <= 22) and the slow one."""
    values = ["1718062135781745.123", "6155538669427.906", "0.1", "2.5e-3", "1e22", "1e23", "-0.0",
              "123456789012345678", "9007199254740993", "4.35", "1.7976931348623157e308", "5e-324",
              "0.30000000000000004", "1234567890123456789012e-3"]
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 0, "ts": 0, "dur": 1,
               "args": {"bytes": 0}} for _ in values]
    text = json.dumps({"traceEvents": events})
    for v in values:
        text = text.replace('"bytes": 0}', f'"bytes": {v}}}', 1)
    got = feed.scan([text.encode()])
    col = np.frombuffer(got["gp_bytes"], dtype=np.float64)
    assert [float(x) for x in col] == [float(v) for v in values]
    assert str(col[6]) == "-0.0"


def test_scan_started_ahead_gives_the_same_trace(monkeypatch):
    """`traceana report` starts reading and scanning before it imports the rest (prefetch.Scan in
    a thread); what load_trace then takes over equals the Python loader's trace."""
    from traceana.load import prefetch

    path = str(TRACES / "hta/rank0.json.gz")
    if not os.path.exists(path):
        pytest.skip("shared traces absent")
    prefetch.start(path)
    assert prefetch._streams, "no scan started ahead"
    ahead = reader.load_trace(path)
    assert not prefetch._streams  # taken over
    _same(ahead, _python_load(path, monkeypatch))


def test_cli_reports_are_the_same_either_way(tmp_path):
    """The whole JSON report, from the command line (scan ahead) and with TRACEANA_PURE_PYTHON=1."""
    import subprocess
    import sys

    path = TRACES / "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"
    if not path.exists():
        pytest.skip("shared traces absent")
    out = {}
    for way, env in (("c", {}), ("py", {"TRACEANA_PURE_PYTHON": "1"})):
        dest = tmp_path / f"{way}.json"
        subprocess.run([sys.executable, "-m", "traceana", "report", str(path), "-o", str(dest), "-q"], check=True,
                       env={**os.environ, **env}, timeout=300)
        out[way] = dest.read_bytes()
    assert out["c"] == out["py"]


@pytest.mark.parametrize("size", [4 << 20, 16 << 20])
def test_a_value_longer_than_a_piece_is_scanned_about_once(size):
    """One event holding a value far longer than a piece (here a 4 / 16 MB string in 256 KB
    pieces) is not re-joined and re-scanned from its start for every piece (quadratic: 16 MB in
    64 pieces would be ~64*65/2 * 256 KB = 520 MB scanned, 32x the text); the bytes handed to the
    scanner stay within 3x the text whatever the value's size (held back until as much text again
    has come: at most size + size/2 + size/4 ... = 2x for the value, once for the rest)."""
    events = [dict(OP, ts=9 + i) for i in range(200)]
    events.insert(100, dict(OP, name="aten::big", args=dict(OP["args"], blob="x" * size)))
    data = json.dumps({"traceEvents": events}).encode()
    piece = 256 << 10
    stats: dict = {}
    got = feed.scan([data[i:i + piece] for i in range(0, len(data), piece)], stats=stats)
    whole = feed.scan([data])
    assert got is not None and all(got[k] == v for k, v in whole.items())
    assert len(data) <= stats["fed"] <= 3 * len(data), (stats["fed"], len(data))


def test_sequence_numbers_take_the_python_rules(tmp_path, monkeypatch):
    """Ops' autograd "Sequence number" (traceana.modules places backward ops by it): ints, strings, absent,
    null; a float or a number beyond int64 sends the event to the lenient decode, as on the Python path."""
    ops = [dict(OP, ts=9 + i, args=dict(OP["args"], **({"Sequence number": v} if v != "absent" else {})))
           for i, v in enumerate([7, "12", "absent", None, "x"])]
    for extra in ([], [dict(OP, ts=20, args=dict(OP["args"], **{"Sequence number": 2.5}))],
                  [dict(OP, ts=21, args=dict(OP["args"], **{"Sequence number": 2**70}))]):
        p = _write(tmp_path, {"traceEvents": ops + extra + [LAUNCH, KERNEL]})
        slow = _python_load(p, monkeypatch)
        if not extra:
            fast = _fast_load(p)
            _same(fast, slow)
            assert fast.ops.seq.tolist() == [7, 12, -1, -1, -1]  # "12" -> 12 (_as_int); "x", null, absent -> -1
        else:
            with monkeypatch.context():
                same = reader.load_trace(str(p))
            _same(same, slow)


def test_names_made_after_the_piece_meet_their_escaped_spellings(tmp_path, monkeypatch):
    """The scanner makes a name's str when it next holds the GIL (the end of the piece), not as it meets the
    name: a name spelled plainly first and with escapes later (or the other way round, across pieces) is
    still one name with one code, step and collective names keep their flags, and the codes follow the
    order the names first appear in, as in the Python loader."""
    def op(name, ts):
        return dict(OP, name=name, ts=ts, dur=1)

    events = [op("aten::mm", 1), op("ProfilerStep#1", 2), op("record_param_comms", 3)]
    events += [op(f"aten::op{i}", 10 + i) for i in range(3000)]  # several pieces' worth of names
    events += [op("aten::m\\u006d", 9000), op("ProfilerStep\\u00231", 9001), op("\\u00e9t\\u00e9", 9002),
               op("été", 9003), op("aten::late", 9004), op("aten::mm", 9005)]
    text = json.dumps({"traceEvents": events})
    for esc in ("aten::m\\\\u006d", "ProfilerStep\\\\u00231", "\\\\u00e9t\\\\u00e9"):
        text = text.replace(esc, esc.replace("\\\\", "\\"))
    p = tmp_path / "names.json"
    p.write_text(text, encoding="utf-8")
    from traceana.load import prefetch

    monkeypatch.setattr(prefetch, "PIECE", 1 << 12)  # pieces of 4 KB: names parked and made in many feeds
    fast = _fast_load(p)
    slow = _python_load(p, monkeypatch)
    _same(fast, slow)
    names = [fast.names[c] for c in fast.ops.name.tolist()]
    assert names[-5:] == ["aten::mm", "été", "été", "aten::late", "aten::mm"]
    codes = fast.ops.name.tolist()
    assert codes[-5] == codes[0] == codes[-1]  # aten::mm plain, escaped, plain: one code
    assert codes[-4] == codes[-3]  # été escaped, then plain
    assert len(set(fast.names)) == len(fast.names)  # no name twice
    # aten::mm + record_param_comms + 3000 + été + aten::late = 3004 distinct op names
    assert len(set(codes)) == 3004
    # ProfilerStep#1 plain, then escaped: one step annotation name, met twice
    steps = fast.annotations.name.tolist()
    assert len(steps) == 2 and steps[0] == steps[1] and fast.names[steps[0]] == "ProfilerStep#1"


def test_fixups_and_collectives_listed_per_piece_keep_their_order(tmp_path, monkeypatch):
    """String ids (fixups) and record_param_comms events with args are kept as copies of their text while
    the scanner works without the GIL and listed at the end of each piece: across 4 KB pieces they come out
    as the Python loader reads them, each op with its own collective and its own id."""
    events = []
    for i in range(400):
        events.append(dict(OP, name="record_param_comms", ts=10 * i, dur=1,
                           args={"External id": str(1000 + i), "Collective name": ["allreduce", "allgather"][i % 2],
                                 "In msg nelems": i, "Out msg nelems": 2 * i, "Group size": 8, "dtype": "Float",
                                 "Seq": i}))
    p = tmp_path / "comm.json"
    p.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    from traceana.load import prefetch

    monkeypatch.setattr(prefetch, "PIECE", 1 << 12)
    fast = _fast_load(p)
    slow = _python_load(p, monkeypatch)
    _same(fast, slow)
    assert fast.ops.ext.tolist() == list(range(1000, 1400))  # "1000" ... "1399": fixups, in order
    extra = [dict(fast.ops.extra[i]) for i in range(400)]
    assert [e["in_nelems"] for e in extra] == list(range(400))
    assert [e["collective"] for e in extra[:4]] == ["allreduce", "allgather"] * 2


def _in_parts(monkeypatch, piece=1 << 12, least=1 << 9):
    """Every piece of `piece` bytes from `least` bytes on scanned in parts at once (fragment scanners on two
    worker threads), whatever the machine's cores."""
    from traceana.load import prefetch

    monkeypatch.setattr(prefetch, "PIECE", piece)
    monkeypatch.setattr(feed, "SPLIT_MIN", least)
    monkeypatch.setattr(feed, "scan_workers", lambda: 2)


def _rich_events(n):
    """n steps of everything the scanner reads: ops with shapes, stacks and module paths, launches, kernels,
    string ids (fixups), collectives, Python calls, [memory] events, step annotations, escaped names."""
    py = {"ph": "X", "cat": "python_function", "pid": 1, "tid": 2, "dur": 1}
    mem = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2}
    events = []
    for i in range(n):
        t = 100 * i
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 2, "ts": t, "dur": 90},
            dict(OP, name=f"aten::op{i % 13}", ts=t + 1, dur=5, tid=2 + i % 3,
                 args=dict(OP["args"], **{"External id": str(i) if i % 5 == 0 else i, "Sequence number": i,
                                          "Call stack": f"a.py({i % 4}): f", "Module Hierarchy": f"m{i % 2}(M)",
                                          "Input Dims": [[i % 7, 32], [32, 128]]})),
            dict(LAUNCH, ts=t + 2, tid=2 + i % 3, args={"correlation": i, "External id": i, "kernel": f"k{i % 11}"}),
            dict(KERNEL, name=f"k{i % 11}", ts=t + 3, args=dict(KERNEL["args"], correlation=str(i) if i % 7 == 0 else i,
                                                                bytes=str(i) if i % 9 == 0 else 4 * i)),
            dict(OP, name="record_param_comms", ts=t + 4, dur=1,
                 args={"External id": i, "Collective name": "allreduce", "In msg nelems": i, "Group size": 8}),
            dict(py, name=f"x.py({i % 17}): g", ts=t + 5, tid=i % 4,
                 args={"Python id": i, "Python parent id": str(i - 1), "Python module id": None}),
            dict(mem, ts=t + 6, tid=9 + i % 2, args={"Addr": i, "Bytes": 512 if i % 3 else "7", "Total Allocated": i,
                                                      "Total Reserved": 2.5e6, "Device Type": 1, "Device Id": 0}),
        ]
        if i % 40 == 39:  # now and then a name with an escape: a fragment leaves it to the primary scanner
            events.append(dict(OP, name="aten::\\u00e9t\\u00e9", ts=t + 7, dur=1))
    return events


def test_pieces_scanned_in_parts_take_the_python_rules(tmp_path, monkeypatch):
    """Each piece cut at two guessed event boundaries, each part from the first cut on scanned by a fragment
    scanner on a worker thread and adopted when the scan before it ends exactly there: names, threads, Python
    calls and [memory] threads get the codes the Python loader gives them (first met, first coded), rows and
    event places move past the text before, string ids and collectives keep their rows. Parts holding an
    escaped name are read by the primary scanner itself."""
    text = json.dumps({"traceEvents": _rich_events(400), "traceName": "x"}).replace("\\\\u", "\\u")
    p = _write(tmp_path, text)
    data = p.read_bytes()
    _in_parts(monkeypatch)
    stats: dict = {}
    pieces = [data[i:i + (1 << 12)] for i in range(0, len(data), 1 << 12)]
    parts = feed.scan(pieces, stats=stats)
    assert parts == feed.scan(pieces, split=False)
    # 545,742 bytes in 4 KB pieces: 134 pieces, each cut past 1 KB and past 2 KB: 2 x 134 = 268 parts, all
    # adopted but those holding one of the 10 escaped names (400 / 40; one in the text before a first cut
    # is no part's)
    assert len(data) == 545742 and stats["parts"] == 2 * len(pieces) == 268
    assert 268 - 10 <= stats["parts_adopted"] < 268
    assert len(data) <= stats["fed"] <= 1.3 * len(data)  # events cut by a dropped part's start, read again
    fast = _fast_load(p)
    slow = _python_load(p, monkeypatch)
    _same(fast, slow)
    # per step: the op (its id a string every 5th step: a fixup, moved with its row), the collective, and every
    # 40th step the escaped op (OP's id, 3)
    assert fast.ops.ext.tolist() == [x for i in range(400) for x in ([i, i, 3] if i % 40 == 39 else [i, i])]
    assert len(fast.ops.extra) == 400  # one parsed collective per record_param_comms, none lost or doubled
    # 400 steps x 7 events + 10 escaped ops = 2810 events
    assert len(fast.annotations.name) == 400 and fast.n_events == slow.n_events == 2810


@pytest.mark.parametrize("k", [3, 4])
def test_more_workers_cut_each_piece_in_as_many_parts(tmp_path, monkeypatch, k):
    """With k part-scanning threads (cores - 1, at most MAX_WORKERS) each piece is cut k times (a join's
    length in, then past each k-th of it): the same result as one scanner, each part adopted but where an
    escaped name stops its fragment."""
    text = json.dumps({"traceEvents": _rich_events(400), "traceName": "x"}).replace("\\\\u", "\\u")
    data = text.encode()
    _in_parts(monkeypatch)
    monkeypatch.setattr(feed, "scan_workers", lambda: k)
    pieces = [data[i:i + (1 << 12)] for i in range(0, len(data), 1 << 12)]
    stats: dict = {}
    assert feed.scan(pieces, stats=stats) == feed.scan(pieces, split=False)
    # 134 pieces of 4 KB, k parts each (3 x 134 = 402, 4 x 134 = 536); the 10 escaped names stop <= 10 of them
    assert stats["parts"] == k * len(pieces) == k * 134
    assert k * 134 - 10 <= stats["parts_adopted"] < k * 134


def test_how_many_threads_scan_parts(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.delenv("TRACEANA_SCAN_THREADS", raising=False)
    assert feed.scan_workers() == feed.MAX_WORKERS == 4  # 16 cores: 15, capped (two pieces' parts in flight)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert feed.scan_workers() == 2  # 3 cores: one inflates, two scan parts
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert feed.scan_workers() == 0  # one core: the document's scanner alone
    monkeypatch.setenv("TRACEANA_SCAN_THREADS", "1")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert feed.scan_workers() == 0
    monkeypatch.setenv("TRACEANA_SCAN_THREADS", "3")
    assert feed.scan_workers() == 3


def test_a_wrong_boundary_guess_is_never_adopted(tmp_path, monkeypatch):
    """`},{` inside a string or a nested array looks like an event boundary: a fragment started there is
    dropped (the scan of the text before it does not end between two events there) and the primary scanner
    reads that part itself. A text whose parts are mostly dropped stops being split after GIVE_UP tries."""
    events = []
    for i in range(300):
        events.append(dict(OP, ts=i, name="aten::mm", args=dict(OP["args"], note='{"a": 1}, {"b": 2}' * 40,
                                                                 nested=[{}, {"x": [{}, {}]}] * 20)))
    p = _write(tmp_path, {"traceEvents": events})
    data = p.read_bytes()
    _in_parts(monkeypatch)
    stats: dict = {}
    one: dict = {}
    pieces = [data[i:i + (1 << 12)] for i in range(0, len(data), 1 << 12)]
    assert feed.scan(pieces, stats=stats) == feed.scan(pieces, split=False, stats=one)
    # each event holds 40 `}, {` in a string and 40 in nested arrays: a guess almost always falls there. Pieces
    # are cut one ahead of the scan that counts their parts: 2 parts a piece, the 5th piece's planned when 6
    # had been counted (< 8), the 6th's when 8 had: GIVE_UP + 2 = 10 parts tried
    assert stats["parts"] == feed.GIVE_UP + 2 == 10 and 2 * stats["parts_adopted"] < 10
    # an event a dropped part's start cut in two is read again from its start: at most a piece per part
    assert len(pieces) > 100 and one["fed"] <= stats["fed"] <= one["fed"] + 10 * (1 << 12)
    _same(_fast_load(p), _python_load(p, monkeypatch))


def test_a_fragment_stops_before_what_the_loader_decides(tmp_path, monkeypatch):
    """A value the scanner leaves to the Python loader (here a key twice) in a piece's second half: the
    fragment stops before it, the primary scanner reads it and steps aside, as without the split."""
    events = [dict(OP, ts=i) for i in range(400)]
    text = json.dumps({"traceEvents": events})
    at = text.index('"ts": 300')
    text = text[:at] + '"ts": 299, ' + text[at:]
    data = text.encode()
    _in_parts(monkeypatch)
    pieces = [data[i:i + (1 << 12)] for i in range(0, len(data), 1 << 12)]
    assert feed.scan(pieces) is None and feed.scan(pieces, split=False) is None


def test_no_worker_thread_outlives_the_scan(tmp_path, monkeypatch):
    """The two threads that scan parts are joined when the scan ends, whichever way: at the text's end, and
    when the document scanner steps aside mid-text (a key twice) with parts of the pieces after still queued."""
    import threading

    def workers():
        return [t for t in threading.enumerate() if t.name == "traceana-scan-part"]

    events = [dict(OP, ts=i) for i in range(400)]
    data = json.dumps({"traceEvents": events}).encode()
    _in_parts(monkeypatch)
    pieces = [data[i:i + (1 << 12)] for i in range(0, len(data), 1 << 12)]
    stats: dict = {}
    assert feed.scan(pieces, stats=stats) is not None and stats["parts"] > 0 and not workers()
    text = data.decode()
    at = text.index('"ts": 100')
    bad = (text[:at] + '"ts": 99, ' + text[at:]).encode()
    assert feed.scan([bad[i:i + (1 << 12)] for i in range(0, len(bad), 1 << 12)]) is None and not workers()


def test_adopt_needs_a_scanner_between_events():
    from traceana.load import _scan

    sc, frag = _scan.Scanner(feed._decode), _scan.Scanner(feed._decode, fragment=True)
    ev = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}'
    assert frag.feed(ev + b', {"ph"') == len(ev) + 2  # up to the unfinished event
    sc.feed(b'{"traceEvents": [{"ph": "X"')
    assert not sc.between_events
    with pytest.raises(RuntimeError):
        sc.adopt(frag)
    sc2 = _scan.Scanner(feed._decode)
    head = b'{"traceEvents": [{"ph": "i"}, '
    assert sc2.feed(head) == len(head) and sc2.between_events
    sc2.adopt(frag)
    assert sc2.n_events == 2 and sc2.feed(b'{"ph": "X"}]}', True) == len(b'{"ph": "X"}]}')
    got = sc2.result()
    assert got["names"] == ["k"] and got["n_events"] == 3 and np.frombuffer(got["gp_ord"], np.int64).tolist() == [1]


@pytest.mark.parametrize("path", [TRACES / rel for rel in all_shared_traces()], ids=lambda p: p.name)
def test_every_shared_trace_scans_the_same_in_parts(path, monkeypatch):
    """Every shared trace in 256 KB pieces, each from 16 KB on scanned in parts: the same result dict."""
    with gzip.open(path) as fh:
        data = fh.read()
    pieces = [data[i:i + (1 << 18)] for i in range(0, len(data), 1 << 18)]
    monkeypatch.setattr(feed, "SPLIT_MIN", 1 << 14)
    stats: dict = {}
    assert feed.scan(pieces, split=True, stats=stats) == feed.scan(pieces, split=False)
    # every piece but the last (maybe short of a second cut) in two parts, each adopted
    assert stats["parts_adopted"] == stats["parts"] >= 2 * (len(data) // (1 << 18)) - 1
