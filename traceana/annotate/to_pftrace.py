"""Chrome JSON trace events -> a Perfetto TrackEvent trace (.pftrace), as torch.profiler's Perfetto
export lays one out: a track per process and thread (GPU streams are threads of the device's
process, labelled as such), every X event a SLICE_BEGIN carrying each arg as a debug annotation and
its SLICE_END, instants, counter tracks, and the launch -> kernel flows as flow ids.

`traceana annotate -o OUT.pftrace` writes its output with this (the verdicts are args by then, the
counter samples "C" events); tests convert the shared traces with it and check that traceana
reads the conversion as it reads the JSON. `Style` picks among the encodings the format allows,
so each is exercised: interned or inline names, with or without categories, BEGIN/END pairs or
complete (legacy 'X') slices, nested args as nested annotations or JSON text, absolute or
sequence-scoped (incremental) timestamps, one sequence or one per thread, deflated packets.

The document's other top-level keys (deviceProperties, distributedInfo, ...) go into a
ChromeEventBundle's metadata, one JSON value each, in the first packet.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import msgspec

from traceana.load.pftrace import wire as w
from traceana.load.pftrace.wire import Annotation as A, Event as E, ld, packet, text, vint

_ENC = msgspec.json.Encoder()
#: the ids of flows that are not launch -> kernel links (those keep the correlation id) start here
_OTHER_FLOWS = 1 << 48
_GPU_FLOW_CATS = frozenset({"ac2g", "async"})
_LIMIT64 = 1 << 64


@dataclass(frozen=True)
class Style:
    interned: bool = True  # event names, categories, annotation names and string values interned per sequence
    categories: bool = True  # False: events carry no category (a reader tells them from track and args)
    slices: str = "pairs"  # "pairs": SLICE_BEGIN then its SLICE_END; "complete": one legacy 'X' event (µs durations)
    order: str = "events"  # "events": the JSON's order; "time": every packet sorted by time (well-nested traces)
    nested: str = "proto"  # "proto": dict_entries / array_values; "json": legacy_json_value text
    correlation: bool = True  # False: drop the "correlation" args; the launch -> kernel link is then the flows alone
    clock: str = "boottime"  # "custom": a sequence-scoped clock offset from boot time; "incremental": deltas
    sequences: str = "one"  # "one", or "thread": a sequence per thread (interning is per sequence)
    reset_every: int = 0  # clear the incremental state every N packets (names interned again)
    compress: int = 0  # > 0: packets deflated into compressed_packets chunks of this many


def ns(t: Any) -> int | None:
    """A JSON time in µs as integer ns (exact for the µs values with up to 3 decimals profilers write)."""
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return None
    if isinstance(t, int):
        return t * 1000
    if t != t or t in (float("inf"), float("-inf")):
        return None
    if abs(t) < 2.0 ** 41:  # t * 1000 is then within 0.4 of the decimal's ns: rounding finds them
        return round(t * 1000)
    return int((Decimal(repr(t)) * 1000).to_integral_value())


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit() and v.strip().isascii():
        return int(v)
    return None


class _Seq:
    """One packet sequence: its id, its interning tables and its clock."""

    def __init__(self, sid: int) -> None:
        self.sid = sid
        self.tables: dict[int, dict[str, int]] = {}
        self.cleared = False
        self.packets = 0
        self.last_ts = 0


class Encoder:
    def __init__(self, style: Style, write: Callable[[bytes], None], first_seq: int = 1) -> None:
        self.style = style
        self.first_seq = first_seq
        self._write = write
        self._chunk: list[bytes] = []
        self.seqs: dict[Any, _Seq] = {}
        self.timed: list[tuple[int, int, int, Any, bytes, int]] = []  # order="time": (ts, end-first, n, key, body, ts)
        self.n = 0

    # ---------------------------------------------------------------- packets

    def emit(self, body: bytes) -> None:
        pk = packet(body)
        if not self.style.compress:
            self._write(pk)
            return
        self._chunk.append(pk)
        if len(self._chunk) >= self.style.compress:
            self._flush_chunk()

    def _flush_chunk(self) -> None:
        if self._chunk:
            self._write(packet(w.ld(w.Packet.COMPRESSED_PACKETS, zlib.compress(b"".join(self._chunk)))))
            self._chunk = []

    def close(self) -> None:
        if self.timed:
            self.timed.sort(key=lambda r: r[:3])
            for _, _, _, k, body, ts in self.timed:
                self._sequenced(k, body, ts)
            self.timed = []
        self._flush_chunk()

    def seq(self, k: Any) -> _Seq:
        k = k if self.style.sequences == "thread" else 0
        s = self.seqs.get(k)
        if s is None:
            s = self.seqs[k] = _Seq(len(self.seqs) + self.first_seq)
        return s

    def event_packet(self, k: Any, ts: int, body: bytes, end_first: int = 1) -> None:
        """A TrackEvent packet (`body`: the TrackEvent's fields, names not yet interned: see _interned) at `ts` ns."""
        if self.style.order == "time":
            self.n += 1
            self.timed.append((ts, end_first, self.n, k, body, ts))
        else:
            self._sequenced(k, body, ts)

    def _sequenced(self, k: Any, body: Any, ts: int) -> None:
        s = self.seq(k)
        st = self.style
        head = vint(w.Packet.TRUSTED_SEQUENCE_ID, s.sid)
        if st.reset_every and s.packets and s.packets % st.reset_every == 0:
            s.cleared = False
        if not s.cleared:  # a packet that clears the sequence's state: its clock and defaults come with it
            s.cleared = True
            s.tables = {}
            first = head + vint(w.Packet.SEQUENCE_FLAGS, w.SEQ_INCREMENTAL_STATE_CLEARED)
            if st.clock != "boottime":
                first += self._clock_snapshot(s)
                first += ld(w.Packet.DEFAULTS, vint(w.Defaults.TIMESTAMP_CLOCK_ID, 64))
            self.emit(first)
        head += vint(w.Packet.SEQUENCE_FLAGS, w.SEQ_NEEDS_INCREMENTAL_STATE)
        s.packets += 1
        event, interned = self._interned(s, body)
        if st.clock == "incremental":
            if ts < s.last_ts:
                raise ValueError("incremental timestamps need packets in time order (Style.order='time')")
            tsf = vint(w.Packet.TIMESTAMP, ts - s.last_ts)
            s.last_ts = ts
        elif st.clock == "custom":
            tsf = vint(w.Packet.TIMESTAMP, ts - _CUSTOM_OFFSET)
        else:
            tsf = vint(w.Packet.TIMESTAMP, ts)
        self.emit(head + tsf + (ld(w.Packet.INTERNED_DATA, interned) if interned else b"")
                  + ld(w.Packet.TRACK_EVENT, event))

    def _clock_snapshot(self, s: _Seq) -> bytes:
        """Clock 64 of this sequence: `custom` reads boot time minus _CUSTOM_OFFSET; `incremental`
        counts ns from boot time in deltas, starting at 0 (the snapshot pairs 0 with boot time 0)."""
        inc = self.style.clock == "incremental"
        own = 0 if inc else 1_000_000
        boot = own if inc else own + _CUSTOM_OFFSET
        clocks = ld(w.Clock.CLOCKS, vint(w.Clock.ID, w.BOOTTIME) + vint(w.Clock.TIMESTAMP, boot))
        mine = vint(w.Clock.ID, 64) + vint(w.Clock.TIMESTAMP, own)
        if inc:
            mine += vint(w.Clock.INCREMENTAL, 1)
            s.last_ts = own
        return ld(w.Packet.CLOCK_SNAPSHOT, clocks + ld(w.Clock.CLOCKS, mine))

    def _interned(self, s: _Seq, body: list) -> tuple[bytes, bytes]:
        """The TrackEvent's bytes with its names interned in `s` (InternedData for the new ones)."""
        new: dict[int, list[bytes]] = {}
        out = self._resolve(s, body, new)
        interned = b"".join(b"".join(v) for _, v in sorted(new.items()))
        return out, interned

    def _resolve(self, s: _Seq, body: list, new: dict) -> bytes:
        out = bytearray()
        for part in body:
            if isinstance(part, bytes):
                out += part
            elif isinstance(part, _Ann):
                out += ld(E.DEBUG_ANNOTATIONS, self._resolve(s, part.parts, new))
            else:
                kind, field, value = part  # ("name" | "cat" | "ann" | "str", its field when inline, the string)
                if not self.style.interned:
                    out += text(field, value)
                    continue
                table = _TABLES[kind]
                ids = s.tables.setdefault(table, {})
                iid = ids.get(value)
                if iid is None:
                    iid = ids[value] = len(ids) + 1
                    new.setdefault(table, []).append(ld(table, vint(1, iid) + text(2, value)))
                out += vint(_IID_FIELD[kind], iid)
        return bytes(out)

    # ---------------------------------------------------------------- annotations

    def annotation(self, name: str | None, v: Any, top: bool) -> list:
        """A DebugAnnotation's parts (strings to intern as tuples). `name` None: an array element."""
        parts: list = []
        if name is not None:
            parts.append(("ann", A.NAME, name) if top else text(A.NAME, name))
        if v is None:
            return parts
        if isinstance(v, bool):
            parts.append(vint(A.BOOL, int(v)))
        elif isinstance(v, int):
            if -(1 << 63) <= v < (1 << 63):
                parts.append(vint(A.INT, v))
            elif 0 <= v < _LIMIT64:
                parts.append(vint(A.UINT, v))
            else:
                parts.append(text(A.LEGACY_JSON, str(v)))
        elif isinstance(v, float):
            parts.append(w.double(A.DOUBLE, v))
        elif isinstance(v, str):
            parts.append(("str", A.STRING, v) if top else text(A.STRING, v))
        elif isinstance(v, (list, dict)):
            if self.style.nested == "json" or (top and not v):
                parts.append(text(A.LEGACY_JSON, _ENC.encode(v).decode()))
            elif isinstance(v, list):
                for x in v:
                    parts.append(ld(A.ARRAY_VALUES, _flat(self.annotation(None, x, False))))
            else:
                for k, x in v.items():
                    parts.append(ld(A.DICT_ENTRIES, _flat(self.annotation(str(k), x, False))))
        return parts


def _flat(parts: list) -> bytes:
    """Nested annotation parts (never interned) as bytes."""
    return b"".join(p if isinstance(p, bytes) else text(p[1], p[2]) for p in parts)


_TABLES = {"name": w.Interned.EVENT_NAMES, "cat": w.Interned.EVENT_CATEGORIES,
           "ann": w.Interned.DEBUG_ANNOTATION_NAMES, "str": w.Interned.DEBUG_ANNOTATION_STRING_VALUES}
_IID_FIELD = {"name": E.NAME_IID, "cat": E.CATEGORY_IIDS, "ann": A.NAME_IID, "str": A.STRING_IID}
_CUSTOM_OFFSET = 5_000_000_000  # the custom clock reads boot time minus 5 s


# ------------------------------------------------------------------ the conversion


class _Tracks:
    """Track uuids and descriptors: a process track per pid, a thread track per (pid, tid) (a named
    child track when the tid is not an integer), a counter track per (pid, counter name, series)."""

    def __init__(self, enc: Encoder, names: dict, labels: dict, first_uuid: int = 1) -> None:
        self.enc = enc
        self.first_uuid = first_uuid
        self.names = names  # ("process" | "thread", pid[, tid]) -> name from the M events
        self.labels = labels  # pid -> process labels
        self.uuids: dict[tuple, int] = {}

    def _new(self, k: tuple, body: bytes) -> int:
        uuid = len(self.uuids) + self.first_uuid
        self.uuids[k] = uuid
        self.enc.emit(ld(w.Packet.TRACK_DESCRIPTOR, vint(w.Track.UUID, uuid) + body))
        return uuid

    def process(self, pid: Any) -> int:
        k = ("p", pid)
        u = self.uuids.get(k)
        if u is not None:
            return u
        ip = _int(pid)
        if ip is None or not -(1 << 31) <= ip < (1 << 31):
            return self._new(k, text(w.Track.NAME, str(pid)))
        desc = vint(w.Process.PID, ip)
        name = self.names.get(("process", pid))
        if isinstance(name, str):
            desc += text(w.Process.NAME, name)
        lab = self.labels.get(pid)
        if isinstance(lab, str) and lab:
            desc += text(w.Process.LABELS, lab)
        return self._new(k, ld(w.Track.PROCESS, desc))

    def thread(self, pid: Any, tid: Any) -> int:
        k = ("t", pid, tid)
        u = self.uuids.get(k)
        if u is not None:
            return u
        parent = self.process(pid)
        ip = _int(pid)
        it = tid if isinstance(tid, int) and not isinstance(tid, bool) else None  # a tid written as text: a named track
        if ip is None or it is None or not -(1 << 31) <= ip < (1 << 31) or not -(1 << 63) <= it < (1 << 63):
            return self._new(k, vint(w.Track.PARENT_UUID, parent) + text(w.Track.NAME, str(tid)))
        desc = vint(w.Thread.PID, ip) + vint(w.Thread.TID, it)
        name = self.names.get(("thread", pid, tid))
        if isinstance(name, str):
            desc += text(w.Thread.NAME, name)
        return self._new(k, vint(w.Track.PARENT_UUID, parent) + ld(w.Track.THREAD, desc))

    def counter(self, pid: Any, name: str, series: str, single: bool) -> int:
        k = ("c", pid, name, series)
        u = self.uuids.get(k)
        if u is not None:
            return u
        parent = self.process(pid)
        label = name if single else f"{name} {series}"
        return self._new(k, vint(w.Track.PARENT_UUID, parent) + text(w.Track.NAME, label) + ld(w.Track.COUNTER, b""))


def _flows(events: list) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Event index -> flow ids it starts, and -> flow ids it ends. A flow event ("s" / "f") binds to
    the X event that starts at its time on its thread; a launch -> kernel flow (ac2g) keeps its id
    (the correlation id), the others get ids of their own."""
    at: dict[tuple, int] = {}
    for i, e in enumerate(events):
        if isinstance(e, dict) and e.get("ph") == "X":
            at.setdefault((e.get("pid"), e.get("tid"), e.get("ts")), i)
    out: dict[int, list[int]] = {}
    end: dict[int, list[int]] = {}
    other: dict[tuple, int] = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") not in ("s", "f", "t"):
            continue
        i = at.get((e.get("pid"), e.get("tid"), e.get("ts")))
        fid = _int(e.get("id"))
        if i is None or fid is None:
            continue
        cat = e.get("cat")
        if cat in _GPU_FLOW_CATS and 0 <= fid < _OTHER_FLOWS:
            uid = fid
        else:
            uid = other.setdefault((cat, fid), _OTHER_FLOWS + len(other))
        (out if e.get("ph") == "s" else end).setdefault(i, []).append(uid)
    return out, end


def _event_body(enc: Encoder, e: dict, track: int, typ: int, flows_out=(), flows_in=(), legacy: bytes = b"") -> list:
    st = enc.style
    body: list = [vint(E.TYPE, typ), vint(E.TRACK_UUID, track)]
    name = e.get("name")
    if isinstance(name, str):
        body.append(("name", E.NAME, name))
    cat = e.get("cat")
    if st.categories and isinstance(cat, str):
        body.append(("cat", E.CATEGORIES, cat))
    args = e.get("args")
    if isinstance(args, dict):
        if not st.correlation:
            args = {k: v for k, v in args.items() if k != "correlation"}
        for k, v in args.items():
            body.append(_Ann(enc.annotation(str(k), v, True)))
    for f in flows_out:
        body.append(w.fixed64(E.FLOW_IDS, f))
    for f in flows_in:
        body.append(w.fixed64(E.TERMINATING_FLOW_IDS, f))
    if legacy:
        body.append(ld(E.LEGACY_EVENT, legacy))
    return body


class _Ann:
    """A top-level debug annotation: its parts (its name and string value may be interned)."""

    def __init__(self, parts: list) -> None:
        self.parts = parts


def convert(doc: dict, write: Callable[[bytes], None], style: Style = Style()) -> int:
    """Write the Chrome JSON document `doc` ({"traceEvents": [...], other keys}) as a Perfetto trace
    through `write` (bytes, a packet or a deflated chunk at a time). The number of packets written."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    events = events if isinstance(events, list) else []
    enc = Encoder(style, write)
    meta = b""
    for k, v in (doc.items() if isinstance(doc, dict) else ()):
        if k == "traceEvents":
            continue
        meta += ld(w.Bundle.METADATA, text(w.Bundle.NAME, str(k)) + text(w.Bundle.JSON, _ENC.encode(v).decode()))
    if meta:
        enc.emit(ld(w.Packet.CHROME_EVENTS, meta))
    names: dict = {}
    labels: dict = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M":
            a = e.get("args") if isinstance(e.get("args"), dict) else {}
            if e.get("name") == "process_name":
                names[("process", e.get("pid"))] = a.get("name")
            elif e.get("name") == "thread_name":
                names[("thread", e.get("pid"), e.get("tid"))] = a.get("name")
            elif e.get("name") == "process_labels":
                labels[e.get("pid")] = a.get("labels")
    tracks = _Tracks(enc, names, labels)
    for e in events:  # descriptors first, in the order the events name them
        if isinstance(e, dict) and e.get("ph") in ("X", "i", "I", "B", "E") and "pid" in e:
            tracks.thread(e.get("pid"), e.get("tid"))
    out, end = _flows(events)
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        t = ns(e.get("ts"))
        if t is None or t < 0 or t >= _LIMIT64:
            continue
        k = (e.get("pid"), e.get("tid"))
        if ph == "X":
            d = ns(e.get("dur"))
            if d is None or d < 0:
                continue
            track = tracks.thread(*k)
            if style.slices == "complete":
                legacy = vint(w.Legacy.PHASE, ord("X")) + vint(w.Legacy.DURATION_US, d // 1000)
                body = _event_body(enc, e, track, 0, out.get(i, ()), end.get(i, ()), legacy)
                enc.event_packet(k, t, body, 1)
            else:
                body = _event_body(enc, e, track, w.TYPE_SLICE_BEGIN, out.get(i, ()), end.get(i, ()))
                enc.event_packet(k, t, body, 1)
                enc.event_packet(k, t + d, [vint(E.TYPE, w.TYPE_SLICE_END), vint(E.TRACK_UUID, track)], 0)
        elif ph in ("i", "I"):
            track = tracks.thread(*k)
            enc.event_packet(k, t, _event_body(enc, e, track, w.TYPE_INSTANT), 1)
        elif ph == "C":
            counter_event(enc, tracks, e, t)
    enc.close()
    return sum(s.packets for s in enc.seqs.values())


def counter_series(e: dict) -> dict:
    """The numeric series of a "C" event (each a counter track of its own)."""
    a = e.get("args") if isinstance(e.get("args"), dict) else {}
    return {s: v for s, v in a.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def counter_event(enc: Encoder, tracks: _Tracks, e: dict, t: int) -> None:
    """A "C" event at `t` ns: one TYPE_COUNTER event per series, on its counter track."""
    nums = counter_series(e)
    for series, v in nums.items():
        track = tracks.counter(e.get("pid"), str(e.get("name")), str(series), len(nums) == 1)
        body: list = [vint(E.TYPE, w.TYPE_COUNTER), vint(E.TRACK_UUID, track)]
        if enc.style.categories and isinstance(e.get("cat"), str):
            body.append(("cat", E.CATEGORIES, e["cat"]))
        if isinstance(v, int) and -(1 << 63) <= v < (1 << 63):
            body.append(vint(E.COUNTER_VALUE, v))
        else:
            body.append(w.double(E.DOUBLE_COUNTER_VALUE, float(v)))
        enc.event_packet(("counter", e.get("pid")), t, body, 1)


def counters_only(events, write: Callable[[bytes], None], first_seq: int, first_uuid: int) -> None:
    """Counter events ("C", JSON form) as counter tracks of their own sequence, with uuids from
    `first_uuid` (added to a trace whose own tracks and sequences they must not meet)."""
    enc = Encoder(Style(interned=False), write, first_seq)
    tracks = _Tracks(enc, {}, {}, first_uuid)
    for e in events:
        t = ns(e.get("ts"))
        if t is not None and 0 <= t < _LIMIT64:
            counter_event(enc, tracks, e, t)
    enc.close()


def write_file(doc: dict, path: str, style: Style = Style()) -> None:
    """`doc` as a .pftrace file at `path` (gzip when the name ends in .gz)."""
    import gzip

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as fh:
        convert(doc, fh.write, style)
