"""The Perfetto trace decoded in Python: the reference for the C decoder (_decode.c), and the
decoder when that is not built. Both fill the same table (see `Table` in table.py for its columns):
one row per slice, instant and counter sample, one per top-level debug annotation, one per flow
id, one per track descriptor, one per builtin clock of each clock snapshot; strings by code
into one table (names, categories, annotation names and values, nested values as JSON text).

What it resolves as it goes, per packet sequence: interned names (reset when the sequence clears
its incremental state; packets that need that state before it exists are dropped and counted),
the packet's clock (a sequence-scoped clock, incremental or not, is turned into the builtin clock
its snapshot pairs it with), and the slice stack of each track (an END closes the track's
innermost open slice; its annotations and flows join that slice).

This module reads the stream, the packets and each sequence's state (interned names, defaults,
clocks), and ChromeEventBundle metadata; the Decoder's other methods are its parts' own:
track_events.py (TrackEvent -> event rows), descriptors.py (track descriptors -> track rows),
values.py (debug annotation values -> arg rows).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

from traceana.load.pftrace import wire as w
from traceana.load.pftrace.descriptors import Descriptors
from traceana.load.pftrace.track_events import TrackEvents
from traceana.load.pftrace.values import BOOL, INT, JSON, NULL, STRING, Values
from traceana.load.pftrace.wire import WireError, fields, read_varint, signed


class Seq:
    """What one packet sequence has set so far (trusted_packet_sequence_id)."""

    def __init__(self) -> None:
        self.valid = False  # has its incremental state been set (cleared once)?
        self.tables: dict[int, dict[int, int]] = {}
        self.clock_id = 0  # the defaults' timestamp_clock_id (0: none)
        self.track = None  # the defaults' track_uuid
        self.clocks: dict[int, list] = {}  # custom id -> [incremental, multiplier, last, own_ns, ref_clock, ref_ns]
        self.thread = None  # legacy ThreadDescriptor (pid, tid, reference_timestamp_us)
        self.last_us = 0


class Decoder(Values, Descriptors, TrackEvents):
    """Feed the Trace's bytes in pieces (`feed` takes whole packets and returns how many bytes it
    used); `result()` is the table. WireError on bytes that are not a Perfetto trace. `wanted`: the
    arg names (bytes) to keep (None: all)."""

    def __init__(self, inflate: Callable[[bytes], bytes], wanted: set[bytes] | None = None) -> None:
        self.inflate = inflate
        self.wanted = wanted  # the arg names (bytes) to keep; None: all
        self.strings: list[str] = []
        self._codes: dict[bytes, int] = {}
        c = {k: array(t) for k, t in (("ev_kind", "b"), ("ev_track", "Q"), ("ev_name", "i"), ("ev_cat", "i"),
                                      ("ev_ts", "q"), ("ev_end", "q"), ("ev_clock", "B"), ("ev_value", "d"),
                                      ("ev_corr", "q"), ("ev_pkt", "q"),
                                      ("ar_event", "i"), ("ar_key", "i"), ("ar_type", "b"), ("ar_int", "q"),
                                      ("ar_dbl", "d"), ("ar_str", "i"),
                                      ("fl_event", "i"), ("fl_id", "Q"), ("fl_term", "b"),
                                      ("tr_uuid", "Q"), ("tr_parent", "Q"), ("tr_kind", "b"), ("tr_pid", "q"),
                                      ("tr_tid", "q"), ("tr_name", "i"), ("tr_labels", "i"),
                                      ("sn_id", "i"), ("sn_clock", "I"), ("sn_ns", "q"))}
        self.cols = c
        self.seqs: dict[int, Seq] = {}
        self.stacks: dict[int, list[int]] = {}
        self.counts = {"packets": 0, "dropped": 0, "unmatched_end": 0, "unknown_clock": 0, "snapshots": 0,
                       "primary_clock": 0, "bytes": 0}
        self.legacy_tracks: set[int] = set()

    # ---------------------------------------------------------------- strings

    def code(self, b) -> int:
        b = bytes(b)
        c = self._codes.get(b)
        if c is None:
            c = self._codes[b] = len(self.strings)
            self.strings.append(b.decode("utf-8", "replace"))
        return c

    # ---------------------------------------------------------------- the stream

    def feed(self, buf, final: bool = False) -> int:
        """Decode the whole packets at the start of `buf`; the bytes used. At `final`, a packet cut
        short is a WireError."""
        pos, end = 0, len(buf)
        while pos < end:
            at = pos
            if not final and not _complete_varint(buf, pos, end):
                break
            try:
                k, p = read_varint(buf, pos, end)
                if k != (w.TRACE_PACKET << 3 | w.LEN):
                    raise WireError(f"field {k >> 3} (wire type {k & 7}) where a trace packet (field 1, "
                                    "length-delimited) should be")
                if not final and not _complete_varint(buf, p, end):
                    break
                n, p = read_varint(buf, p, end)
            except WireError as exc:
                raise WireError(f"byte {self.counts['bytes'] + at}: {exc}") from None
            if p + n > end:
                if final:
                    raise WireError(f"the last packet (at byte {self.counts['bytes'] + at}) is cut short: "
                                    f"{n} bytes announced, {end - p} there")
                break
            try:
                self.packet(buf, p, p + n)
            except WireError as exc:
                raise WireError(f"packet at byte {self.counts['bytes'] + at}: {exc}") from None
            pos = p + n
        self.counts["bytes"] += pos
        return pos

    def packet(self, buf, pos: int, end: int) -> None:
        pk = self.counts["packets"]
        self.counts["packets"] += 1
        ts = clock = seq_id = flags = None
        cleared = False
        interned = defaults = event = track = snapshot = bundle = compressed = thread = None
        for f, wt, v, s, e in fields(buf, pos, end):
            if f == w.Packet.TIMESTAMP and wt == w.VARINT:
                ts = v
            elif f == w.Packet.TIMESTAMP_CLOCK_ID and wt == w.VARINT:
                clock = v
            elif f == w.Packet.TRUSTED_SEQUENCE_ID and wt == w.VARINT:
                seq_id = v
            elif f == w.Packet.SEQUENCE_FLAGS and wt == w.VARINT:
                flags = v
            elif f == w.Packet.INCREMENTAL_STATE_CLEARED and wt == w.VARINT:
                cleared = cleared or bool(v)
            elif f in _LD_FIELDS:
                if wt != w.LEN:
                    raise WireError(f"field {f} of a trace packet has wire type {wt}, not length-delimited")
                if f == w.Packet.INTERNED_DATA:
                    interned = (s, e)
                elif f == w.Packet.DEFAULTS:
                    defaults = (s, e)
                elif f == w.Packet.TRACK_EVENT:
                    event = (s, e)
                elif f == w.Packet.TRACK_DESCRIPTOR:
                    track = (s, e)
                elif f == w.Packet.CLOCK_SNAPSHOT:
                    snapshot = (s, e)
                elif f == w.Packet.CHROME_EVENTS:
                    bundle = (s, e)
                elif f == w.Packet.COMPRESSED_PACKETS:
                    compressed = (s, e)
                elif f == w.Packet.THREAD_DESCRIPTOR:
                    thread = (s, e)
        if compressed is not None:
            self.counts["packets"] -= 1  # the chunk is not a packet; its packets are
            data = self.inflate(bytes(buf[compressed[0]:compressed[1]]))
            saved = self.counts["bytes"]
            self.counts["bytes"] = 0
            try:
                self.feed(data, True)
            except WireError as exc:
                raise WireError(f"in its compressed packets: {exc}") from None
            finally:
                self.counts["bytes"] = saved
            return
        sq = self.seqs.get(seq_id or 0)
        if sq is None:
            sq = self.seqs[seq_id or 0] = Seq()
        if cleared or (flags or 0) & w.SEQ_INCREMENTAL_STATE_CLEARED:
            sq.valid = True
            sq.tables = {}
            sq.clock_id = 0
            sq.track = None
            sq.clocks = {}
        if track is not None:
            self.track(buf, *track)
        if bundle is not None:
            self.bundle(buf, *bundle)
        if snapshot is not None:
            self.snapshot(buf, *snapshot, sq)
        if thread is not None:
            self.legacy_thread(buf, *thread, sq)
        if (flags or 0) & w.SEQ_NEEDS_INCREMENTAL_STATE and not sq.valid:
            if event is not None:
                self.counts["dropped"] += 1
            return
        if defaults is not None:
            self.defaults(buf, *defaults, sq)
        if interned is not None:
            self.interned(buf, *interned, sq)
        if event is not None:
            self.event(buf, *event, sq, ts, clock, pk)

    # ---------------------------------------------------------------- packet parts

    def interned(self, buf, pos, end, sq: Seq) -> None:
        for f, wt, v, s, e in fields(buf, pos, end):
            if f in (w.Interned.EVENT_CATEGORIES, w.Interned.EVENT_NAMES, w.Interned.DEBUG_ANNOTATION_NAMES,
                     w.Interned.DEBUG_ANNOTATION_STRING_VALUES) and wt == w.LEN:
                iid, name = 0, b""
                for f2, wt2, v2, s2, e2 in fields(buf, s, e):
                    if f2 == 1 and wt2 == w.VARINT:
                        iid = v2
                    elif f2 == 2 and wt2 == w.LEN:
                        name = buf[s2:e2]
                sq.tables.setdefault(f, {})[iid] = self.code(name)

    def defaults(self, buf, pos, end, sq: Seq) -> None:
        for f, wt, v, s, e in fields(buf, pos, end):
            if f == w.Defaults.TIMESTAMP_CLOCK_ID and wt == w.VARINT:
                sq.clock_id = v
            elif f == w.Defaults.TRACK_EVENT_DEFAULTS and wt == w.LEN:
                for f2, wt2, v2, s2, e2 in fields(buf, s, e):
                    if f2 == 11 and wt2 == w.VARINT:
                        sq.track = v2

    def snapshot(self, buf, pos, end, sq: Seq) -> None:
        clocks = []
        for f, wt, v, s, e in fields(buf, pos, end):
            if f == w.Clock.CLOCKS and wt == w.LEN:
                cid, ts, inc, mult = 0, 0, False, 1
                for f2, wt2, v2, s2, e2 in fields(buf, s, e):
                    if f2 == w.Clock.ID and wt2 == w.VARINT:
                        cid = v2
                    elif f2 == w.Clock.TIMESTAMP and wt2 == w.VARINT:
                        ts = v2
                    elif f2 == w.Clock.INCREMENTAL and wt2 == w.VARINT:
                        inc = bool(v2)
                    elif f2 == w.Clock.MULTIPLIER_NS and wt2 == w.VARINT:
                        mult = v2 or 1
                clocks.append((cid, ts, inc, mult))
            elif f == w.Clock.PRIMARY and wt == w.VARINT:
                self.counts["primary_clock"] = v
        builtin = [(c, t * m) for c, t, _, m in clocks if c < 64]
        ref = next(((c, t) for c, t in builtin if c == w.BOOTTIME), builtin[0] if builtin else None)
        sid = self.counts["snapshots"]
        self.counts["snapshots"] += 1
        for c, t in builtin:
            self.cols["sn_id"].append(sid)
            self.cols["sn_clock"].append(c)
            self.cols["sn_ns"].append(signed(t & 0xFFFFFFFFFFFFFFFF))
        if ref is None:
            return
        for c, t, inc, m in clocks:
            if c >= 64:
                sq.clocks[c] = [inc, m, t, t * m, ref[0], ref[1]]

    def bundle(self, buf, pos, end) -> None:
        for f, wt, v, s, e in fields(buf, pos, end):
            if f != w.Bundle.METADATA or wt != w.LEN:
                continue
            name, typ, iv, sv = -1, NULL, 0, -1
            for f2, wt2, v2, s2, e2 in fields(buf, s, e):
                if f2 == w.Bundle.NAME and wt2 == w.LEN:
                    name = self.code(buf[s2:e2])
                elif f2 == w.Bundle.STRING and wt2 == w.LEN:
                    typ, sv = STRING, self.code(buf[s2:e2])
                elif f2 == w.Bundle.JSON and wt2 == w.LEN:
                    typ, sv = JSON, self.code(buf[s2:e2])
                elif f2 == w.Bundle.INT and wt2 == w.VARINT:
                    typ, iv = INT, signed(v2)
                elif f2 == w.Bundle.BOOL and wt2 == w.VARINT:
                    typ, iv = BOOL, int(bool(v2))
            if name >= 0:
                self._arg(-1, name, typ, iv, 0.0, sv)

    def _arg(self, row, key, typ, iv, dv, sv) -> None:
        c = self.cols
        c["ar_event"].append(row)
        c["ar_key"].append(key)
        c["ar_type"].append(typ)
        c["ar_int"].append(iv)
        c["ar_dbl"].append(dv)
        c["ar_str"].append(sv)

    # ---------------------------------------------------------------- an event's time (track_events.py)

    def _time(self, sq: Seq, ts, clock) -> tuple[int, int] | None:
        """(builtin clock, ns) of the packet's timestamp; None when its clock is not defined."""
        cid = clock if clock is not None else (sq.clock_id or w.BOOTTIME)
        if cid < 64:
            return cid, signed(ts)
        c = sq.clocks.get(cid)
        if c is None:
            return None
        inc, mult, last, own_ns, ref_clock, ref_ns = c
        value = last + ts if inc else ts
        if inc:
            c[2] = value
        return ref_clock, signed((ref_ns + value * mult - own_ns) & 0xFFFFFFFFFFFFFFFF)

    # ---------------------------------------------------------------- the end

    def result(self) -> dict:
        out = dict(self.cols)
        out["strings"] = self.strings
        out.update(self.counts)
        return out


_LD_FIELDS = frozenset({w.Packet.INTERNED_DATA, w.Packet.DEFAULTS, w.Packet.TRACK_EVENT, w.Packet.TRACK_DESCRIPTOR,
                        w.Packet.CLOCK_SNAPSHOT, w.Packet.CHROME_EVENTS, w.Packet.COMPRESSED_PACKETS,
                        w.Packet.THREAD_DESCRIPTOR})


def _complete_varint(buf, pos: int, end: int) -> bool:
    """Does a whole varint start at `pos` (its last byte, < 0x80, within 10 bytes before `end`)?"""
    for i in range(pos, min(end, pos + 10)):
        if buf[i] < 0x80:
            return True
    return end - pos >= 10
