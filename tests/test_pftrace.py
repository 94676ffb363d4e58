"""Perfetto traces (.pftrace) read into the same Trace as the JSON they were converted from.

Every shared trace is converted (traceana.annotate.to_pftrace, as torch.profiler's Perfetto export
lays a trace out; cached across sessions by tests/pftrace_files.py) and loaded both ways: the Trace
is the same column by column, and on a sample the whole JSON report is the same but for the file
name and the event count (a JSON file also counts its metadata and flow events). Then each encoding
the format allows (interned or inline names, no categories, complete slices, nested args as JSON text,
sequence-scoped and incremental clocks, one sequence per thread with the state cleared every few
packets, deflated chunks, gzip), the launch -> kernel link as flows alone, counter tracks, and the
exact µs of ns timestamps.
"""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest

from tests.conftest import all_shared_traces, shared_trace
from tests.pftrace_files import converted, read_doc, same_trace, write
from traceana.analysis import analyze_trace
from traceana.annotate.to_pftrace import Style, convert
from traceana.load import pftrace
from traceana.load.pftrace.table import us
from traceana.load.reader import load_trace
from traceana.render.json_out import render_json

OWL = "tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"
SMALL = ["tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz", "hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
         "tracelens/sglang_decode/sglang_Qwen3-8B_decode.json.gz", "hta/triton_example.json.gz"]


def _pair(rel: str, style: Style = Style(), gz: bool = False):
    path = shared_trace(rel)
    return load_trace(path), load_trace(converted(path, style, gz))


@pytest.mark.parametrize("rel", all_shared_traces())
def test_every_shared_trace_reads_identically(rel):
    js, pf = _pair(rel)
    same_trace(js, pf, rel)
    assert len(pf.gpu) == len(js.gpu) and len(pf.ops) == len(js.ops)


def _report(trace) -> dict:
    doc = json.loads(render_json(analyze_trace(trace)))
    doc["trace"].pop("file")
    doc["trace"].pop("events")
    return doc


@pytest.mark.parametrize("rel", [OWL, "kineto/worker0.1623143089861.pt.trace.json.gz",
                                 "tracelens/mi300/resnet_act_checkpoint.json.gz"])
def test_the_report_is_the_json_reports(rel):
    js, pf = _pair(rel)
    a, b = _report(js), _report(pf)
    assert a == b
    assert a["ops"] and a["findings"]


def test_owlv2_numbers():
    """The OWLv2 conversion's own numbers, for the record: 117,635 events (132,152 in the JSON: its
    14,457 flow and 60 metadata events are no events in Perfetto), 24,378 ops, 5,165 GPU events."""
    js, pf = _pair(OWL)
    assert (pf.n_events, js.n_events) == (117_635, 132_152)
    # 132,152 - 117,635 = 14,517 = 14,457 ac2g flow events + 60 metadata events
    assert (len(pf.ops), len(pf.gpu), len(pf.python), len(pf.memory)) == (24_378, 5_165, 65_313, 13_474)


# ------------------------------------------------------------------ encodings


STYLES = {
    "inline": Style(interned=False),
    "json-args": Style(nested="json"),
    "custom-clock": Style(clock="custom", sequences="thread", reset_every=7),
    "deflated": Style(compress=50),
}


@pytest.mark.parametrize("name", sorted(STYLES))
@pytest.mark.parametrize("rel", SMALL)
def test_each_encoding_reads_the_same(rel, name):
    js, pf = _pair(rel, STYLES[name])
    same_trace(js, pf, f"{rel} {name}")


def test_gzip_and_plain_read_the_same():
    js, pf = _pair(SMALL[0], gz=True)
    same_trace(js, pf)


def test_complete_slices_with_whole_microseconds():
    """Complete (legacy 'X') slices carry whole-µs durations: exact for a trace written in whole µs
    (Kineto 2021: integer ts and dur)."""
    js, pf = _pair("kineto/worker0.1623143089861.pt.trace.json.gz", Style(slices="complete"))
    same_trace(js, pf)


def test_incremental_clock_in_time_order(tmp_path):
    """Packets sorted by time on one sequence, each timestamp a delta from the one before (clock 64,
    incremental, paired with boot time by a ClockSnapshot)."""
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1000.5, "dur": 10.25,
         "args": {"External id": 1, "Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1002.0, "dur": 3.0,
         "args": {"External id": 1, "correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1006.0, "dur": 2.5,
         "args": {"External id": 1, "correlation": 7, "device": 0, "stream": 7, "grid": [2, 1, 1], "block": [64, 1, 1]}},
    ]}
    js = load_trace(write_json(tmp_path / "t.json", doc))
    pf = load_trace(write(doc, tmp_path / "t.pftrace", Style(order="time", clock="incremental")))
    same_trace(js, pf)
    assert pf.gpu.ts.tolist() == [1006.0] and pf.gpu.dur.tolist() == [2.5] and pf.gpu.blocks.tolist() == [2.0]
    assert pf.launches.corr.tolist() == pf.gpu.corr.tolist() == [7]


def write_json(path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def test_flows_alone_link_launches_to_kernels():
    """Without correlation args the launch -> kernel links are the flows: the same kernels get the
    same ops, so the report is the JSON's."""
    rel = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    js, pf = _pair(rel, Style(correlation=False))
    # every GPU event a flow reaches has its launch's correlation id (the flow's id), as the JSON says
    # (the trace keeps some kernels' flows but not their launches: those are unlinked both ways)
    assert np.array_equal(pf.gpu.corr, js.gpu.corr)
    linked = pf.launches.corr >= 0
    assert np.array_equal(pf.launches.corr[linked], js.launches.corr[linked])
    # the launches without a kernel (cudaFuncGetAttributes, ...) have no flow, so no id: nothing to link
    assert not np.isin(js.launches.corr[~linked], js.gpu.corr).any()
    assert _report(js)["ops"] == _report(pf)["ops"]


def test_without_categories_the_gpu_side_is_told_from_tracks_and_args():
    """No event carries a category: GPU events are told by their stream tracks and their links, launches
    by their correlation ids, Python calls by their ids; the GPU columns come out the same."""
    for rel in SMALL[:3] + [OWL]:
        js, pf = _pair(rel, Style(categories=False))
        same_trace(js.gpu, pf.gpu, f"{rel} gpu")
        same_trace(js.launches, pf.launches, f"{rel} launches")
        same_trace(js.python, pf.python, f"{rel} python")
        same_trace(js.memory, pf.memory, f"{rel} memory")


def test_without_categories_a_recorded_training_step_reads_the_same(recorded_trace, tmp_path):
    """A real training step (transformers on CPU: forward, loss, backward, AdamW; with_stack and
    profile_memory, tests/recorded.py): its ops all name operator schemas, so the whole Trace comes out
    the same without categories."""
    path = recorded_trace.train_step()
    js = load_trace(path)
    pf = load_trace(write(read_doc(path), tmp_path / "step.pftrace", Style(categories=False)))
    same_trace(js, pf)
    assert len(pf.ops) > 100 and len(pf.python) > 100 and len(pf.memory) > 100


def test_counter_tracks_are_events_but_not_ops(tmp_path):
    doc = read_doc(shared_trace(SMALL[3]))
    base = len(doc["traceEvents"])
    doc["traceEvents"] += [{"ph": "C", "name": "GPU memory", "pid": 0, "ts": 2413669096100149 + i, "args":
                            {"allocated": i * 1024, "reserved": 4096.5}} for i in range(3)]
    pf_path = write(doc, tmp_path / "c.pftrace")
    res = pftrace.decode(pf_path)
    kind = np.frombuffer(res["ev_kind"], np.int8)
    assert int((kind == 2).sum()) == 6  # 3 samples x 2 series, each its own counter track
    values = np.frombuffer(res["ev_value"], np.float64)[kind == 2]
    assert sorted(values.tolist()) == [0.0, 1024.0, 2048.0, 4096.5, 4096.5, 4096.5]
    js = load_trace(write_json(tmp_path / "c.json", doc))
    pf = load_trace(pf_path)
    same_trace(js, pf)
    assert js.n_events == base + 3


def test_us_is_the_nearest_double_to_ns_over_1000():
    rng = random.Random(5)
    ns = [rng.randrange(0, 1 << 62) for _ in range(20000)] + [rng.randrange(0, 1 << 53) for _ in range(2000)]
    ns += [1623142623460111000, 1419116104994671000, 9007199254740993, (1 << 53) + 125, 2 ** 62 + 500]
    got = us(np.array(ns, np.int64))
    want = np.array([n / 1000 for n in ns])  # Python's int / int is correctly rounded
    assert np.array_equal(got, want)


def test_a_json_file_named_pftrace_is_read_as_json(tmp_path):
    p = tmp_path / "x.pftrace"
    p.write_bytes(read_doc_bytes(shared_trace(SMALL[3])))
    same_trace(load_trace(shared_trace(SMALL[3])), load_trace(str(p)))


def read_doc_bytes(path: str) -> bytes:
    return json.dumps(read_doc(path)).encode()


def test_sniff():
    pf = converted(shared_trace(SMALL[3]))
    assert pftrace.sniff(pf) and not pftrace.sniff(shared_trace(SMALL[3]))


def test_the_converter_writes_what_perfettos_protos_read():
    """The perfetto package's own protobuf classes parse the conversion: the field numbers are Perfetto's."""
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    buf = io.BytesIO()
    convert(read_doc(shared_trace(SMALL[3])), buf.write, Style(interned=False, clock="custom"))
    trace = pb.Trace.FromString(buf.getvalue())
    events = [p.track_event for p in trace.packet if p.HasField("track_event")]
    begins = [e for e in events if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN]
    assert len(begins) == 8 and len(events) == 8 * 2 + 2  # 8 slices (begin + end), 2 instants
    kernel = next(e for e in begins if list(e.categories) == ["kernel"])
    assert kernel.name == "triton_poi_fused_add_cos_sin_0"
    grid = next(a for a in kernel.debug_annotations if a.name == "grid")
    assert [v.int_value for v in grid.array_values] == [1, 1, 1]
    corr = next(a for a in kernel.debug_annotations if a.name == "correlation").int_value
    launch = next(e for e in begins if list(e.flow_ids) == [corr])  # the launch -> kernel flow: its id is the correlation id
    assert list(kernel.terminating_flow_ids) == [corr] and launch.name == "cuLaunchKernel"  # Triton launches so
    assert any(p.HasField("clock_snapshot") for p in trace.packet)


def _pb_trace(pb) -> bytes:
    """A trace built with Perfetto's own protobuf classes (not traceana's encoder): one sequence with
    interned names, a process and a thread track, a GPU stream track, a launch and its kernel joined by
    a flow, nested debug annotations, a legacy NestedValue and an interned string value."""
    t = pb.Trace()

    def packet(**kw):
        p = t.packet.add()
        p.trusted_packet_sequence_id = 3
        for k, v in kw.items():
            setattr(p, k, v)
        return p

    p = packet()
    p.track_descriptor.uuid = 10
    p.track_descriptor.process.pid = 42
    p.track_descriptor.process.process_name = "python3"
    p = packet()
    p.track_descriptor.uuid = 11
    p.track_descriptor.parent_uuid = 10
    p.track_descriptor.thread.pid = 42
    p.track_descriptor.thread.tid = 43
    p = packet()
    p.track_descriptor.uuid = 20
    p.track_descriptor.process.pid = 0
    p.track_descriptor.process.process_labels.append("GPU 0")
    p = packet()
    p.track_descriptor.uuid = 21
    p.track_descriptor.parent_uuid = 20
    p.track_descriptor.name = "stream 7"
    p = packet(timestamp=5_000_000, sequence_flags=1)
    p.interned_data.event_names.add(iid=1, name="aten::mm")
    p.interned_data.event_categories.add(iid=1, name="cpu_op")
    p.interned_data.debug_annotation_names.add(iid=1, name="Input Dims")
    p.interned_data.debug_annotation_string_values.add(iid=1, str=b"float")
    e = p.track_event
    e.type = pb.TrackEvent.TYPE_SLICE_BEGIN
    e.track_uuid = 11
    e.name_iid = 1
    e.category_iids.append(1)
    a = e.debug_annotations.add(name_iid=1)
    for dims in ([4, 8], [8, 16]):
        row = a.array_values.add()
        for x in dims:
            row.array_values.add(int_value=x)
    a = e.debug_annotations.add(name="Input type")
    a.array_values.add(string_value_iid=1)
    a.array_values.add(string_value="float")
    a = e.debug_annotations.add(name="External id")
    a.uint_value = 5
    p = packet(timestamp=5_001_000, sequence_flags=2)
    e = p.track_event
    e.type = pb.TrackEvent.TYPE_SLICE_BEGIN
    e.track_uuid = 11
    e.name = "cudaLaunchKernel"
    e.categories.append("cuda_runtime")
    e.flow_ids.append(99)
    e.debug_annotations.add(name="External id", int_value=5)
    p = packet(timestamp=5_003_000, sequence_flags=2)
    p.track_event.type = pb.TrackEvent.TYPE_SLICE_END
    p.track_event.track_uuid = 11
    p = packet(timestamp=5_010_000, sequence_flags=2)
    p.track_event.type = pb.TrackEvent.TYPE_SLICE_END
    p.track_event.track_uuid = 11
    p = packet(timestamp=5_020_000, sequence_flags=2)
    e = p.track_event
    e.type = pb.TrackEvent.TYPE_SLICE_BEGIN
    e.track_uuid = 21
    e.name = "gemm_kernel"
    e.categories.append("kernel")
    e.terminating_flow_ids.append(99)
    e.debug_annotations.add(name="device", int_value=0)
    a = e.debug_annotations.add(name="grid")
    a.nested_value.nested_type = pb.DebugAnnotation.NestedValue.ARRAY
    for x in (3, 2, 1):
        a.nested_value.array_values.add(int_value=x)
    e.debug_annotations.add(name="External id", int_value=5)
    p = packet(timestamp=5_022_500, sequence_flags=2)
    p.track_event.type = pb.TrackEvent.TYPE_SLICE_END
    p.track_event.track_uuid = 21
    return t.SerializeToString()


def test_a_trace_perfettos_protos_wrote_reads_as_its_json(tmp_path):
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    p = tmp_path / "pb.pftrace"
    p.write_bytes(_pb_trace(pb))
    tr = load_trace(str(p))
    names = tr.names
    assert [names[i] for i in tr.ops.name] == ["aten::mm"]
    assert tr.ops.dims == [b"[[4, 8], [8, 16]]"] and tr.ops.types == [b'["float", "float"]']
    assert tr.ops.ts.tolist() == [5000.0] and tr.ops.end.tolist() == [5010.0]  # 5,000,000 ns = 5,000 µs
    assert [names[i] for i in tr.launches.name] == ["cudaLaunchKernel"]
    assert tr.launches.end.tolist() == [5003.0] and tr.launches.corr.tolist() == [99]  # the flow id
    assert tr.gpu.corr.tolist() == [99] and tr.gpu.stream.tolist() == [-1] and tr.gpu.device.tolist() == [0]
    assert tr.gpu.dur.tolist() == [2.5] and tr.gpu.blocks.tolist() == [6.0]  # 3*2*1 blocks
    assert tr.threads == ["42/43"]


def test_the_wire_numbers_are_perfettos():
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from traceana.load.pftrace import wire as w

    def num(msg, field):
        return msg.DESCRIPTOR.fields_by_name[field].number

    for cls, msg in ((w.Packet, pb.TracePacket), (w.Event, pb.TrackEvent), (w.Annotation, pb.DebugAnnotation),
                     (w.Track, pb.TrackDescriptor), (w.Process, pb.ProcessDescriptor), (w.Thread, pb.ThreadDescriptor),
                     (w.Legacy, pb.TrackEvent.LegacyEvent), (w.Nested, pb.DebugAnnotation.NestedValue),
                     (w.Interned, pb.InternedData)):
        names = {"Packet": {"CHROME_EVENTS": "chrome_events", "CLOCK_SNAPSHOT": "clock_snapshot",
                            "TRUSTED_SEQUENCE_ID": "trusted_packet_sequence_id", "DEFAULTS": "trace_packet_defaults",
                            "TRACK_DESCRIPTOR": "track_descriptor", "TRACK_EVENT": "track_event"},
                 "Event": {"DEBUG_ANNOTATIONS": "debug_annotations"},
                 "Annotation": {"BOOL": "bool_value", "UINT": "uint_value", "INT": "int_value", "DOUBLE": "double_value",
                                "STRING": "string_value", "POINTER": "pointer_value", "NESTED": "nested_value",
                                "LEGACY_JSON": "legacy_json_value", "STRING_IID": "string_value_iid"},
                 "Track": {"PARENT_UUID": "parent_uuid"}, "Process": {"NAME": "process_name", "LABELS": "process_labels"},
                 "Thread": {"NAME": "thread_name"}, "Legacy": {}, "Nested": {"TYPE": "nested_type", "INT": "int_value",
                                                                            "DOUBLE": "double_value", "BOOL": "bool_value",
                                                                            "STRING": "string_value"},
                 "Interned": {}}[cls.__name__]
        for attr, value in vars(cls).items():
            if attr.startswith("_") or not isinstance(value, int):
                continue
            field = names.get(attr, attr.lower())
            assert num(msg, field) == value, f"{cls.__name__}.{attr}"


def test_bad_files_say_one_line(tmp_path):
    good = open(converted(shared_trace(SMALL[3])), "rb").read()
    cases = {
        "cut.pftrace": good[:len(good) // 2],  # the file ends mid-packet
        "garbage.pftrace": b"\x13\x37 not a trace at all",
        "wiretype.pftrace": b"\x0a\x02\x58\x01",  # track_event (field 11) as a varint: key 11 << 3 | 0 = 0x58
        "varint.pftrace": b"\x0a\x02\x40\xff",  # a timestamp whose varint never ends
        "empty.pftrace": b"",
        "system.pftrace": b"\x0a\x02\x50\x01",  # a packet with only a sequence id: no track events
    }
    want = {"cut.pftrace": "the last packet (at byte", "garbage.pftrace": "not a Perfetto trace",
            "wiretype.pftrace": "field 11 of a trace packet has wire type 0", "varint.pftrace": "truncated varint",
            "empty.pftrace": "file is empty", "system.pftrace": "without track events"}
    from traceana.errors import BadInput

    for name, data in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(BadInput) as exc:
            load_trace(str(p))
        msg = str(exc.value)
        assert want[name] in msg and "\n" not in msg, (name, msg)


def test_bad_file_cli_exit(tmp_path, capsys):
    from traceana.cli import main

    good = open(converted(shared_trace(SMALL[3])), "rb").read()
    p = tmp_path / "cut.pftrace"
    p.write_bytes(good[:100])
    assert main(["report", str(p), "-o", str(tmp_path / "r.json"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a valid Perfetto trace (the last packet (at byte" in err, err
    assert not (tmp_path / "r.json").exists()


# ------------------------------------------------------------------ the two decoders agree


def _resolved(res: dict) -> dict:
    from traceana.load.pftrace.table import DTYPES

    s = res["strings"]
    out = {k: res[k] for k in ("packets", "dropped", "unmatched_end", "unknown_clock", "snapshots")}
    for k, t in DTYPES.items():
        a = np.frombuffer(res[k], t).tolist()
        if k in ("ev_name", "ev_cat", "ar_key", "ar_str", "tr_name", "tr_labels"):
            a = [s[x] if x >= 0 else None for x in a]
        out[k] = [repr(x) for x in a] if t == np.float64 else a
    return out


def _decode_both(data: bytes):
    from traceana.load.pftrace._decode import Decoder as CDecoder
    from traceana.load.pftrace.pydecode import Decoder
    from traceana.load.pftrace.read import inflate
    from traceana.load.pftrace.wire import WireError

    out = []
    for make in (lambda: CDecoder(inflate, WireError), lambda: Decoder(inflate)):
        d = make()
        try:
            d.feed(data, True)
            out.append(_resolved(d.result()))
        except WireError as exc:
            out.append(str(exc))
    return out


def test_the_c_and_python_decoders_agree():
    """The same table or the same error message, on the small traces in several encodings and on
    damaged copies of them (cut short, bytes changed, a run of bytes dropped; a fixed seed)."""
    pytest.importorskip("traceana.load.pftrace._decode")
    bases = []
    for rel in SMALL:
        for style in (Style(), Style(interned=False, nested="json"), Style(clock="custom", sequences="thread",
                                                                           reset_every=7, compress=20),
                      Style(slices="complete", categories=False)):
            buf = io.BytesIO()
            convert(read_doc(shared_trace(rel)), buf.write, style)
            bases.append(buf.getvalue())
    datas = list(bases)
    rng = random.Random(32)
    for _ in range(250):
        d = bytearray(bases[rng.randrange(len(bases))])
        how = rng.randrange(3)
        i = rng.randrange(len(d))
        if how == 0:
            d = d[:i]
        elif how == 1:
            for _ in range(rng.randrange(1, 4)):
                d[rng.randrange(len(d))] = rng.randrange(256)
        else:
            del d[i:i + rng.randrange(1, 30)]
        datas.append(bytes(d))
    errors = 0
    for n, data in enumerate(datas):
        c, p = _decode_both(data)
        assert c == p, n
        errors += isinstance(c, str)
    assert 100 < errors < len(datas) - len(bases)  # damage mostly, not always, makes the bytes unreadable


def test_the_python_decoder_builds_the_same_trace(monkeypatch):
    """Without the C decoder (TRACEANA_PURE_PYTHON=1, as when no compiler built it) the same Trace."""
    rel = SMALL[0]
    js, pf = _pair(rel, Style(clock="custom", compress=40))
    monkeypatch.setenv("TRACEANA_PURE_PYTHON", "1")
    slow = load_trace(converted(shared_trace(rel), Style(clock="custom", compress=40)))
    same_trace(pf, slow)
    same_trace(js, slow)


def test_diff_and_the_api_take_pftrace(tmp_path, capsys):
    import traceana
    from traceana.cli import main

    js = shared_trace(SMALL[0])
    pf = converted(js)
    a, b = traceana.analyze(pf), traceana.analyze(js)
    assert a.raw["ops"] == b.raw["ops"] and a.raw["trace"]["file"].endswith(".pftrace")
    out = tmp_path / "d.md"
    assert main(["diff", pf, js, "-o", str(out), "-q"]) == 0
    text = out.read_text()
    assert "0 new, 0 vanished" in text and "0 slower and 0 faster" in text
