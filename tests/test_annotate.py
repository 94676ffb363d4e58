"""traceana annotate: the original trace with the verdicts added (args.traceana, counter tracks).

Strip what was added and the original events come back exactly; the annotated trace is valid JSON
and loads back with an identical analysis; the counters carry the right numbers; the pass over the
text holds a bounded buffer whatever the file's size."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import msgspec
import pytest

from tests import synth
from tests.conftest import REPO, shared_trace
from traceana.analysis import Options, analyze, analyze_parts
from traceana.annotate import counters
from traceana.annotate.rewrite import Rewriter, insert
from traceana.annotate.strip import strip, strip_event
from traceana.annotate.write import prepare, write
from traceana.cli import main
from traceana.output.ownership import written_by_traceana


def _load(path: str):
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)  # the standard library's parser: valid JSON or it raises


def _annotate(src: str, out: str, opts: Options = Options()):
    st = os.stat(src)
    analysis, parts = analyze_parts(src, opts)
    return analysis, write(src, st, out, prepare(analysis, parts))


def _check_round_trip(src: str, out: str, opts: Options = Options()) -> dict:
    """Strip gives the original document; the annotated trace analyses identically (but its file name)."""
    before, w = _annotate(src, out, opts)
    orig, ann = _load(src), _load(out)
    assert strip(ann) == (orig if isinstance(orig, dict) else {"traceEvents": orig})
    assert ann["traceana"]["counter_events"] == w.counters
    assert len(ann["traceEvents"]) == w.events + w.counters
    after = analyze(out, opts)
    assert after["trace"]["file"] == os.path.basename(out)
    after["trace"]["file"] = before["trace"]["file"]
    assert after == before
    return ann


# ---------------------------------------------------------------- a small trace, numbers by hand

def _small(tmp_path):
    """Two aten::mm [64x128] @ [128x32] fp32 on streams 7 and 8 (kernels 105-115 and 108-118 µs, 10 µs
    each), then aten::add [64x32] + [64x32] (kernel 200-204 µs), launched at 195 µs: after the device
    went idle at 118 µs."""
    mm = dict(dims=[[64, 128], [128, 32]], types=["float", "float"])
    ev = [
        synth.op("aten::mm", 100, 20, 1, **mm), synth.launch(102, 1, 1),
        synth.kernel("ampere_sgemm_64x32", 105, 10, 1, 1),
        synth.op("aten::mm", 100, 20, 3, tid=2, **mm), synth.launch(103, 3, 3, tid=2),
        synth.kernel("ampere_sgemm_64x32", 108, 10, 3, 3, stream=8),
        synth.op("aten::add", 190, 20, 2, dims=[[64, 32], [64, 32], []], types=["float", "float", "Scalar"]),
        synth.launch(195, 2, 2), synth.kernel("vectorized_elementwise_kernel", 200, 4, 2, 2),
        {"ph": "i", "name": "marker", "pid": 1, "tid": 1, "ts": 90, "s": "t"},  # no args, not annotated
    ]
    return synth.write(tmp_path, synth.trace(ev), "small.json")


def test_small_trace_verdicts_and_counters(tmp_path):
    src = _small(tmp_path)
    out = str(tmp_path / "small.annotated.json")
    a = _check_round_trip(src, out)
    analysis = analyze(src)
    rows = {r["name"]: r for r in analysis["ops"]}
    mm, add = rows["aten::mm"], rows["aten::add"]
    assert mm["flops"] == 524288  # 2*M*N*K = 2*64*128*32
    assert mm["mean_time_us"] == 10.0  # two calls, 10 µs each
    evs = a["traceEvents"]
    kernels = [e for e in evs if e.get("cat") == "kernel"]
    ops = [e for e in evs if e.get("cat") == "cpu_op"]
    assert len(kernels) == 3 and len(ops) == 3
    for e in kernels[:2] + ops[:2]:
        v = e["args"]["traceana"]
        assert v["op"] == mm["id"] and v["name"] == "aten::mm" and v["bound"] == mm["bound"]
        assert v["flops"] == 524288 and v["bytes"] == mm["bytes"]
        assert v["roof"] == f"{mm['peak_dtype']} {mm['peak_tflops']:g} TFLOP/s" or v["roof"].startswith("DRAM")
        # findings: the same ids as the JSON report's, for the findings that name this row
        ids = [f["id"] for f in analysis["findings"] if mm["id"] in (f.get("ops") or ())]
        assert [f["id"] for f in v.get("findings", [])] == ids
    assert kernels[2]["args"]["traceana"]["op"] == add["id"]
    assert "traceana" not in str(next(e for e in evs if e.get("name") == "marker"))

    c = [e for e in evs if e.get("cat") == counters.CAT]
    assert all(e["ph"] == "C" and e["pid"] == 0 for e in c)
    tf = [(e["ts"], e["args"]["TFLOP/s"]) for e in c if e["name"] == counters.TFLOPS]
    # one mm kernel: 524288 FLOP / 10 µs = 0.0524288 TFLOP/s; both (108-115 µs): 0.1048576;
    # add: 2048 FLOP (64*32) / 4 µs = 0.000512 TFLOP/s
    assert add["flops"] == 2048
    assert tf == [(105.0, 0.0524288), (108.0, 0.1048576), (115.0, 0.0524288), (118.0, 0.0),
                  (200.0, 0.000512), (204.0, 0.0)]
    gb = [(e["ts"], e["args"]["GB/s"]) for e in c if e["name"] == counters.DRAM]
    # mm reads 64*128 + 128*32 fp32 and writes 64*32: (8192 + 4096 + 2048) * 4 = 57344 B per call / 10 µs
    # = 5.7344 GB/s; add reads two and writes one 64x32 fp32: 3 * 2048 * 4 = 24576 B / 4 µs = 6.144 GB/s
    assert mm["bytes"] == 57344 and add["bytes"] == 24576
    assert gb == [(105.0, 5.7344), (108.0, 11.4688), (115.0, 5.7344), (118.0, 0.0), (200.0, 6.144), (204.0, 0.0)]
    idle = [(e["ts"], {k: v for k, v in e["args"].items() if v}) for e in c if e["name"] == counters.IDLE]
    # the one gap, 118 -> 200 µs (82 µs > the 30 µs launch gap): add was launched at 195 µs, after the
    # device went idle: the host set the pace
    assert idle == [(118.0, {"host_dispatch": 1}), (200.0, {})]
    assert analysis["ledger"]["idle"]["by_cause"]["host_dispatch"] == 82.0  # the report's account: 200 - 118
    assert a["traceana"]["counter_events"] == len(tf) + len(gb) + len(idle) == 14


@pytest.mark.parametrize("rel", [None, "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"])
def test_pure_python_gives_the_same(tmp_path, monkeypatch, rel):
    """The loader's ordinals and the rewrite, on the C scanner and the Python way: the same annotated trace."""
    src = _small(tmp_path) if rel is None else shared_trace(rel)
    out_c = str(tmp_path / "c.json.gz")
    _annotate(src, out_c)
    monkeypatch.setenv("TRACEANA_PURE_PYTHON", "1")
    out_py = str(tmp_path / "py.json.gz")
    _check_round_trip(src, out_py)
    assert _load(out_c) == _load(out_py)


# ---------------------------------------------------------------- the rewrite on odd text

def _rewrite(text: bytes, codes, piece: int) -> tuple[bytes, Rewriter]:
    out: list[bytes] = []
    import numpy as np

    rw = Rewriter(np.array(codes, dtype=np.int32), [b'{"v":1}'], [b'{"ph":"C","cat":"traceana","name":"n",'
                                                                   b'"pid":0,"ts":1,"args":{"x":1}}'],
                  b'{"schema":"traceana.annotated/1"}', out.append)
    rw.run(text[i:i + piece] for i in range(0, len(text), piece))
    return b"".join(bytes(x) for x in out), rw


ODD = (b'\xef\xbb\xbf {"before": {"a": [1, {"traceEvents": 2}], "s": "}],\\"{"},\n "traceEvents" : [\n'
       b' {"name": "a}, {\\"args\\": {}}", "ph": "X", "args": {"k": "v}"}} ,\n'
       b'{"ph":"X","args":{}},{"ph":"X"},{"ph":"X","args":null},{},\n'
       b'{"ph": "X", "args": {"nested": {"args": {"x": 1}}}, "tail": "\\u00e9\xc3\xa9"},\n'
       b'{"ph": "X", "ts": NaN, "args": {"z": 1}}\n ], "after": "]}"}\n')


@pytest.fixture(params=["C", "Python"])
def way(request, monkeypatch):
    """The C scanner's splice, and the Python way (msgspec runs of events, the tokenizer)."""
    if request.param == "Python":
        monkeypatch.setenv("TRACEANA_PURE_PYTHON", "1")
    else:
        monkeypatch.delenv("TRACEANA_PURE_PYTHON", raising=False)
        from traceana.annotate.rewrite import _splice

        if _splice() is None:
            pytest.skip("the C scanner is not built")
    return request.param


@pytest.mark.parametrize("piece", [1, 3, 7, 64, 1 << 20])
def test_rewrite_keeps_every_byte_of_every_event(piece, way):
    codes = [0, 0, 0, 0, 0, 0, 0]  # every event gets the payload
    text, rw = _rewrite(ODD, codes, piece)
    # the standard library reads NaN; everything else is strict JSON
    doc = json.loads(text)
    orig = json.loads(ODD[3:])
    assert strip(doc) == orig
    assert doc["traceana"] == {"schema": "traceana.annotated/1"}
    evs = doc["traceEvents"]
    assert evs[0]["args"] == {"k": "v}", "traceana": {"v": 1}}
    assert evs[1]["args"] == {"traceana": {"v": 1}}
    assert evs[2]["args"] == {"traceana": {"v": 1, "args_added": True}}
    assert evs[3]["args"] is None  # null args: left as they are
    assert evs[4] == {"args": {"traceana": {"v": 1, "args_added": True}}}
    assert evs[5]["args"]["nested"] == {"args": {"x": 1}} and evs[5]["args"]["traceana"] == {"v": 1}
    assert evs[6]["args"] == {"z": 1, "traceana": {"v": 1}}
    assert evs[7] == {"ph": "C", "cat": "traceana", "name": "n", "pid": 0, "ts": 1, "args": {"x": 1}}
    assert (rw.events, rw.annotated, rw.skipped) == (7, 6, 1)
    # the original bytes of each event are all there, in order (the inserted member aside)
    assert b'{"name": "a}, {\\"args\\": {}}", "ph": "X", "args": {"k": "v}","traceana":{"v":1}}' in text


def test_insert_finds_the_events_own_args():
    ev = b'{"name": "\\"args\\": {}", "args": {}}'
    assert insert(ev, b'{"v":1}') == b'{"name": "\\"args\\": {}", "args": {"traceana":{"v":1}}}'
    assert strip_event(json.loads(insert(b'{"a": 1}', b'{"v":1}'))) == {"a": 1}


def test_bare_event_list_becomes_a_document(way):
    text, rw = _rewrite(b'[{"ph": "X", "args": {"a": 1}}]', [0], 5)
    assert json.loads(text) == {"traceana": {"schema": "traceana.annotated/1"},
                                "traceEvents": [{"ph": "X", "args": {"a": 1, "traceana": {"v": 1}}},
                                                {"ph": "C", "cat": "traceana", "name": "n", "pid": 0, "ts": 1,
                                                 "args": {"x": 1}}]}


# ---------------------------------------------------------------- shared and recorded traces

@pytest.mark.parametrize("rel", ["hta/rank0.json.gz", "kineto/worker0.1623143089861.pt.trace.json.gz",
                                 "tracelens/mi210/gpu_only_trace.json.gz",
                                 "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"])
def test_shared_traces_round_trip(tmp_path, rel):
    src = shared_trace(rel)
    ann = _check_round_trip(src, str(tmp_path / "a.json.gz"))
    with_verdict = [e for e in ann["traceEvents"] if "traceana" in (e.get("args") or {})]
    assert with_verdict and all(e.get("cat") in ("kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset",
                                                 "Memset", "cpu_op", "Operator") for e in with_verdict)


def test_graph_replay_trace_round_trips_with_its_capture(tmp_path):
    src = shared_trace("tracelens/sglang_decode/sglang_Qwen3-8B_decode.json.gz")
    opts = Options(capture=os.path.join(os.path.dirname(src), "capture_traces"))
    ann = _check_round_trip(src, str(tmp_path / "a.json.gz"), opts)
    replayed = [e for e in ann["traceEvents"] if e.get("cat") == "kernel" and "traceana" in e.get("args", {})]
    assert replayed


def test_recorded_trace_round_trips(tmp_path, recorded_trace):
    ann = _check_round_trip(recorded_trace("bert_train"), str(tmp_path / "bert.annotated.json.gz"))
    names = {e["args"]["traceana"]["name"] for e in ann["traceEvents"] if "traceana" in (e.get("args") or {})}
    assert "aten::addmm" in names or "aten::mm" in names


# ---------------------------------------------------------------- bounded memory

_BIG = r"""
import gzip, os, resource, sys
import numpy as np
from traceana.annotate.rewrite import Rewriter
from traceana.annotate.write import text_pieces
path, n = sys.argv[1], int(sys.argv[2])
ev = (b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": %d, "dur": 1, '
      b'"args": {"device": 0, "stream": 7, "correlation": %d, "grid": [1, 1, 1]}}')
with gzip.open(path, "wb", compresslevel=1) as fh:
    fh.write(b'{"traceEvents": [\n')
    for k in range(0, n, 10000):
        fh.write(b",\n".join(ev % (i, i) for i in range(k, min(n, k + 10000))) + (b",\n" if k + 10000 < n else b""))
    fh.write(b"\n]}")
codes = np.zeros(n, dtype=np.int32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
written = [0]
def sink(b):
    written[0] += len(b)
rw = Rewriter(codes, [b'{"op":"op1","bound":"memory"}'], [], b'{"schema":"traceana.annotated/1"}', sink)
with open(path, "rb") as fh:
    rw.run(text_pieces(fh, 1 << 18))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(rw.events, rw.annotated, rw.max_buffer, written[0], (after - before) * 1024)
"""


def test_bounded_memory_on_a_big_trace(tmp_path):
    n = 400_000  # ~50 MB of text
    out = subprocess.run([sys.executable, "-c", _BIG, str(tmp_path / "big.json.gz"), str(n)], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    assert out.returncode == 0, out.stderr
    events, annotated, max_buffer, written, grew = map(int, out.stdout.split())
    assert events == annotated == n
    assert written > 50e6  # every event written back, each with its verdict
    # pieces of 256 KiB of text: the buffer holds at most a piece and the unfinished event before it
    assert max_buffer <= (1 << 18) + 1000
    # the process grew by far less than the text (a piece, its output, numpy's 1.6 MB codes)
    assert grew < written / 4


# ---------------------------------------------------------------- the command line

def test_cli_annotate_and_ownership(tmp_path, capsys):
    src = _small(tmp_path)
    out = str(tmp_path / "small.annotated.json.gz")
    assert main(["annotate", src, "-o", out]) == 0
    assert "annotated trace written to" in capsys.readouterr().out
    assert written_by_traceana(out)
    assert main(["annotate", src, "-o", out, "-q"]) == 0  # its own output: replaced without --force
    assert main(["report", src, "-o", str(tmp_path / "r.json"), "--annotate", str(tmp_path / "r.json.gz"),
                 "-q"]) == 0
    assert _load(str(tmp_path / "r.json.gz"))["traceEvents"] == _load(out)["traceEvents"]
    capsys.readouterr()

    foreign = tmp_path / "foreign.json.gz"
    foreign.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert main(["annotate", src, "-o", str(foreign)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not written by traceana; pass --force" in err
    assert main(["annotate", src, "-o", str(foreign), "--force", "-q"]) == 0

    assert main(["annotate", src, "-o", src]) == 2
    assert "is the input trace" in capsys.readouterr().err
    assert main(["annotate", out, "-o", str(tmp_path / "again.json")]) == 2
    assert "already annotated" in capsys.readouterr().err
    assert not (tmp_path / "again.json").exists()
    assert main(["annotate", src, "-o", str(tmp_path / "x.html")]) == 2
    assert ".json or .json.gz" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    assert main(["annotate", str(bad), "-o", str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("traceana: ") and err.count("\n") == 1


def test_a_plain_trace_is_not_traceanas(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [], "traceana": {"schema": "traceana.annotated/1"}}))
    assert not written_by_traceana(str(p))  # the marker counts only as the document's first member
    msgspec.json.decode(p.read_bytes())


def test_cpu_only_recorded_trace_carries_the_cpu_verdicts(tmp_path):
    """A trace recorded on CPU (no GPU events): each op of a judged signature carries its CPU verdict."""
    torch = pytest.importorskip("torch")
    from tests.recorded import record

    lin = torch.nn.Linear(256, 512)
    x = torch.randn(32, 256)
    lin(x)
    doc = record(lambda: lin(x))
    src = str(tmp_path / "cpu.json")
    with open(src, "w") as fh:
        json.dump(doc, fh)
    ann = _check_round_trip(src, str(tmp_path / "cpu.annotated.json"))
    assert ann["traceana"]["counter_events"] == 0  # no device, no counter tracks
    rows = {r["name"]: r for r in analyze(src)["cpu"]["roofline"]["verdicts"]}
    addmm = [e for e in ann["traceEvents"] if e.get("name") == "aten::addmm"]
    assert addmm and all(e["args"]["traceana"]["bound"] == rows["aten::addmm"]["bound"] for e in addmm)
    # 2*M*N*K = 2*32*256*512 = 8388608 FLOPs (bias added on top, as the report counts it)
    assert addmm[0]["args"]["traceana"]["flops"] == rows["aten::addmm"]["flops"] >= 8388608


def test_recorded_train_step_with_stacks_and_memory(tmp_path, recorded_trace):
    """BertForMaskedLM forward + backward + AdamW step recorded with with_stack and profile_memory (its
    python_function and [memory] events kept as they are), as recorded on CPU and shaped as a GPU run."""
    from tests.recorded import gpu_shaped, write as write_gz

    cpu = recorded_trace.train_step()
    ann = _check_round_trip(cpu, str(tmp_path / "cpu.annotated.json.gz"))
    kinds = {e.get("cat") for e in ann["traceEvents"]}
    assert {"python_function", "cpu_instant_event"} <= kinds  # the stacks and the [memory] events, kept
    assert any("traceana" in (e.get("args") or {}) for e in ann["traceEvents"] if e.get("cat") == "cpu_op")
    gpu = write_gz(gpu_shaped(_load(cpu)), tmp_path / "gpu.pt.trace.json.gz")
    ann = _check_round_trip(gpu, str(tmp_path / "gpu.annotated.json.gz"))
    assert any(e.get("name") == counters.TFLOPS for e in ann["traceEvents"])
    with_verdict = {e.get("cat") for e in ann["traceEvents"] if "traceana" in (e.get("args") or {})}
    # kernels, the .item() copies (gpu_memcpy) and the ops that launched them; never a python_function,
    # [memory] or runtime event
    assert with_verdict == {"kernel", "gpu_memcpy", "cpu_op"}
