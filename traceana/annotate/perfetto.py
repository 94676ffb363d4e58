"""`traceana annotate` with a Perfetto trace on either side (the JSON -> JSON pass is write.py's).

- .pftrace -> .pftrace: the packets are copied as they are (compressed chunks inflated, their packets
  copied one by one), and the TrackEvent of each event with a verdict gets one more debug annotation,
  `traceana`, holding the verdict as a dict; the counter tracks follow as tracks and TYPE_COUNTER
  events of a sequence of their own (uuids and sequence ids far from the profiler's). The first packet
  is a ChromeEventBundle whose metadata `traceana` is the header write.py puts first in a JSON trace
  (its schema string is the ownership marker; counter_events counts the counter samples added, one per
  series).
- .pftrace -> .json(.gz): the events as Chrome JSON (load.pftrace.chrome), each verdict in its args.
- .json(.gz) -> .pftrace: the annotated JSON (write.py's pass, into a temporary file) converted by
  to_pftrace.
"""

from __future__ import annotations

import os
import tempfile
import zlib
from collections.abc import Iterator

import msgspec
import numpy as np

from traceana.annotate import counters, write as jw
from traceana.annotate.to_pftrace import Encoder, Style, convert, counter_series, counters_only
from traceana.errors import BadInput
from traceana.load import pftrace
from traceana.load.pftrace import chrome, wire as w
from traceana.output.safe_write import replace_file

#: the counter tracks' uuids and sequence id: far above what profilers number their own from
FIRST_UUID = 0x7472_6163_6561_0000  # "traceana"-ish
SEQUENCE = 0x7472_6163
_ENC = msgspec.json.Encoder()
_BATCH = 4096


def is_perfetto_output(out: str) -> bool:
    return pftrace.named_perfetto(out)


def write_any(trace_path: str, st: os.stat_result, out: str, prep: jw.Prepared) -> jw.Written:
    src, dst = pftrace.sniff(trace_path), is_perfetto_output(out)
    if not src and not dst:
        return jw.write(trace_path, st, out, prep)
    if src and dst:
        return _perfetto_to_perfetto(trace_path, out, prep)
    if src:
        return _perfetto_to_json(trace_path, out, prep)
    return _json_to_perfetto(trace_path, st, out, prep)


def _header(source: str, prep: jw.Prepared, n_counters: int) -> bytes:
    head = msgspec.json.decode(jw.header(source, prep))
    head["counter_events"] = n_counters
    return _ENC.encode(head)


def _counter_rows(prep: jw.Prepared) -> int:
    """Counter samples the Perfetto form adds: one per series of each "C" event."""
    return sum(len(counter_series(e)) for e in counters.events(prep.tracks))


def header_packet(head: bytes) -> bytes:
    meta = w.ld(w.Bundle.METADATA, w.text(w.Bundle.NAME, "traceana") + w.ld(w.Bundle.JSON, head))
    return w.packet(w.ld(w.Packet.CHROME_EVENTS, meta))


def _annotation(payload: bytes) -> bytes:
    """The `traceana` debug annotation (a dict of the verdict's fields) of a JSON payload."""
    enc = Encoder(Style(interned=False), lambda b: None)
    parts = enc.annotation("traceana", msgspec.json.decode(payload), False)
    return b"".join(p if isinstance(p, bytes) else w.text(p[1], p[2]) for p in parts)


def flat_packets(path: str) -> Iterator[bytes]:
    """Each packet's bytes, in the decoder's order: a compressed chunk's packets in its place."""
    tail = b""
    for piece in pftrace.read.pieces(path):
        buf = tail + piece if tail else piece
        pos, end = 0, len(buf)
        while pos < end:
            try:
                k, p = w.read_varint(buf, pos, end)
                n, p = w.read_varint(buf, p, end)
            except w.WireError:
                break
            if p + n > end:
                break
            yield from _unpacked(bytes(buf[p:p + n]))
            pos = p + n
        tail = bytes(buf[pos:])


def _unpacked(pk: bytes) -> Iterator[bytes]:
    if b"\x92\x03" in pk:  # the key of compressed_packets (field 50, length-delimited) may be in it
        for f, wt, _, s, e in w.spans(pk):
            if f == w.Packet.COMPRESSED_PACKETS and wt == w.LEN:
                inner = pftrace.read.inflate(pk[s:e])
                for _, _, _, s2, e2 in w.spans(inner):
                    yield from _unpacked(inner[s2:e2])
                return
    yield pk


def _inject(pk: bytes, ann: bytes) -> bytes:
    """The packet with one more debug annotation in its TrackEvent."""
    for f, wt, at, s, e in w.spans(pk):
        if f == w.Packet.TRACK_EVENT and wt == w.LEN:
            return pk[:at] + w.ld(w.Packet.TRACK_EVENT, pk[s:e] + w.ld(w.Event.DEBUG_ANNOTATIONS, ann)) + pk[e:]
    return pk


def _perfetto_to_perfetto(trace_path: str, out: str, prep: jw.Prepared) -> jw.Written:
    result = pftrace.decode(trace_path)
    pkt = np.frombuffer(result["ev_pkt"], np.int64)
    codes = prep.codes
    rows = np.flatnonzero(codes >= 0)
    rows = rows[rows < len(pkt)]
    target = dict(zip(pkt[rows].tolist(), codes[rows].tolist()))
    anns: dict[int, bytes] = {}
    n_counters = _counter_rows(prep)
    head = _header(os.path.basename(trace_path), prep, n_counters)
    done: list[jw.Written] = []

    def fill(fd: int) -> None:
        sink = jw._Sink(fd, out.endswith(".gz"))
        sink(header_packet(head))
        n = annotated = 0
        try:
            for pk in flat_packets(trace_path):
                code = target.get(n)
                if code is not None:
                    ann = anns.get(code)
                    if ann is None:
                        ann = anns[code] = _annotation(prep.payloads[code])
                    pk = _inject(pk, ann)
                    annotated += 1
                sink(w.packet(pk))
                n += 1
        except (w.WireError, OSError, EOFError, zlib.error) as exc:
            raise BadInput(f"{trace_path}: cannot annotate: {exc}") from None
        counters_only(counters.events(prep.tracks), sink, SEQUENCE, FIRST_UUID)
        sink.close()
        done.append(jw.Written(len(pkt), annotated, 0, n_counters, 0))

    replace_file(out, fill)
    return done[0]


def _perfetto_to_json(trace_path: str, out: str, prep: jw.Prepared) -> jw.Written:
    result = pftrace.decode(trace_path)
    meta = chrome.metadata(result)
    codes = prep.codes
    head = jw.header(os.path.basename(trace_path), prep)
    done: list[jw.Written] = []

    def fill(fd: int) -> None:
        sink = jw._Sink(fd, out.endswith(".gz"))
        sink(b'{"traceana":' + head)
        for k, v in meta.items():
            if k not in ("traceana", "traceEvents"):
                sink(b"," + _ENC.encode(k) + b":" + _ENC.encode(v))
        sink(b',"traceEvents":[')
        batch: list = []
        first = True
        events = annotated = 0
        for row, e in chrome.events(result):
            if row >= 0:
                events += 1
                c = int(codes[row]) if row < len(codes) else -1
                if c >= 0:
                    e.setdefault("args", {})["traceana"] = msgspec.Raw(prep.payloads[c])
                    annotated += 1
            batch.append(e)
            if len(batch) >= _BATCH:
                sink((b"" if first else b",") + _ENC.encode(batch)[1:-1])
                first, batch = False, []
        if batch:
            sink((b"" if first else b",") + _ENC.encode(batch)[1:-1])
            first = False
        for chunk in counters.encoded(prep.tracks):
            sink((b"" if first else b",") + chunk)
            first = False
        sink(b"]}")
        sink.close()
        done.append(jw.Written(events, annotated, 0, prep.n_counters, 0))

    replace_file(out, fill)
    return done[0]


def _json_to_perfetto(trace_path: str, st: os.stat_result, out: str, prep: jw.Prepared) -> jw.Written:
    folder = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix=".traceana-annotate-", suffix=".json", dir=folder)
    os.close(fd)
    try:
        written = jw.write(trace_path, st, tmp, prep)
        with open(tmp, "rb") as fh:
            doc = msgspec.json.decode(fh.read())
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    head = doc.get("traceana")
    n_counters = sum(len(counter_series(e)) for e in doc.get("traceEvents") or ()
                     if isinstance(e, dict) and e.get("ph") == "C" and e.get("cat") == counters.CAT)
    if isinstance(head, dict):
        head["counter_events"] = n_counters

    def fill(fd_: int) -> None:
        sink = jw._Sink(fd_, out.endswith(".gz"))
        convert(doc, sink, Style())
        sink.close()

    replace_file(out, fill)
    return jw.Written(written.events, written.annotated, written.skipped, n_counters, written.max_buffer)
