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
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable

from traceana.load.pftrace import wire as w
from traceana.load.pftrace.values import (  # noqa: F401  (the arg types: re-exported)
    BOOL, DOUBLE, INT, JSON, NULL, STRING, UINT, Values, fmt_double, json_str,
)
from traceana.load.pftrace.wire import WireError, as_double, fields, read_varint, signed

# row kinds (Table.ev_kind)
SLICE, INSTANT, COUNTER, OPEN = range(4)
# track kinds (Table.tr_kind)
PLAIN, PROCESS, THREAD, COUNTER_TRACK = range(4)
_I63 = 1 << 63
MAX_CATS, MAX_FLOWS = 16, 64  # categories and flow ids kept of one event (as the C decoder keeps)
_LEGACY_TRACK = 1 << 63  # uuids of the tracks made for legacy thread descriptors and pid/tid overrides


def legacy_uuid(pid: int, tid: int) -> int:
    return _LEGACY_TRACK | (pid & 0x7FFFFFFF) << 32 | (tid & 0xFFFFFFFF)


class _Seq:
    def __init__(self) -> None:
        self.valid = False  # has its incremental state been set (cleared once)?
        self.tables: dict[int, dict[int, int]] = {}
        self.clock_id = 0  # the defaults' timestamp_clock_id (0: none)
        self.track = None  # the defaults' track_uuid
        self.clocks: dict[int, list] = {}  # custom id -> [incremental, multiplier, last, own_ns, ref_clock, ref_ns]
        self.thread = None  # legacy ThreadDescriptor (pid, tid, reference_timestamp_us)
        self.last_us = 0


class Decoder(Values):
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
        self.seqs: dict[int, _Seq] = {}
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
            sq = self.seqs[seq_id or 0] = _Seq()
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

    def interned(self, buf, pos, end, sq: _Seq) -> None:
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

    def defaults(self, buf, pos, end, sq: _Seq) -> None:
        for f, wt, v, s, e in fields(buf, pos, end):
            if f == w.Defaults.TIMESTAMP_CLOCK_ID and wt == w.VARINT:
                sq.clock_id = v
            elif f == w.Defaults.TRACK_EVENT_DEFAULTS and wt == w.LEN:
                for f2, wt2, v2, s2, e2 in fields(buf, s, e):
                    if f2 == 11 and wt2 == w.VARINT:
                        sq.track = v2

    def snapshot(self, buf, pos, end, sq: _Seq) -> None:
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

    def legacy_thread(self, buf, pos, end, sq: _Seq) -> None:
        pid = tid = 0
        ref = 0
        for f, wt, v, s, e in fields(buf, pos, end):
            if f == w.Thread.PID and wt == w.VARINT:
                pid = signed(v)
            elif f == w.Thread.TID and wt == w.VARINT:
                tid = signed(v)
            elif f == w.Thread.REFERENCE_TIMESTAMP_US and wt == w.VARINT:
                ref = signed(v)
        sq.thread = (pid, tid)
        sq.last_us = ref
        self._legacy_track(pid, tid)

    def _legacy_track(self, pid: int, tid: int) -> int:
        uuid = legacy_uuid(pid, tid)
        if uuid not in self.legacy_tracks:
            self.legacy_tracks.add(uuid)
            self._track_row(uuid, 0, THREAD, pid, tid, -1, -1)
        return uuid

    def _track_row(self, uuid, parent, kind, pid, tid, name, labels) -> None:
        c = self.cols
        c["tr_uuid"].append(uuid)
        c["tr_parent"].append(parent)
        c["tr_kind"].append(kind)
        c["tr_pid"].append(pid)
        c["tr_tid"].append(tid)
        c["tr_name"].append(name)
        c["tr_labels"].append(labels)

    def track(self, buf, pos, end) -> None:
        uuid = parent = 0
        kind, pid, tid, name, labels = PLAIN, 0, 0, -1, -1
        for f, wt, v, s, e in fields(buf, pos, end):
            if f == w.Track.UUID and wt == w.VARINT:
                uuid = v
            elif f == w.Track.PARENT_UUID and wt == w.VARINT:
                parent = v
            elif f in (w.Track.NAME, w.Track.STATIC_NAME) and wt == w.LEN:
                if name < 0 or kind == PLAIN:
                    name = self.code(buf[s:e])
            elif f == w.Track.PROCESS and wt == w.LEN:
                kind = PROCESS
                labs = []
                for f2, wt2, v2, s2, e2 in fields(buf, s, e):
                    if f2 == w.Process.PID and wt2 == w.VARINT:
                        pid = signed(v2)
                    elif f2 == w.Process.NAME and wt2 == w.LEN:
                        name = self.code(buf[s2:e2])
                    elif f2 == w.Process.LABELS and wt2 == w.LEN:
                        labs.append(bytes(buf[s2:e2]))
                if labs:
                    labels = self.code(b",".join(labs))
            elif f == w.Track.THREAD and wt == w.LEN:
                kind = THREAD
                for f2, wt2, v2, s2, e2 in fields(buf, s, e):
                    if f2 == w.Thread.PID and wt2 == w.VARINT:
                        pid = signed(v2)
                    elif f2 == w.Thread.TID and wt2 == w.VARINT:
                        tid = signed(v2)
                    elif f2 == w.Thread.NAME and wt2 == w.LEN:
                        name = self.code(buf[s2:e2])
            elif f == w.Track.COUNTER and wt == w.LEN:
                kind = COUNTER_TRACK
        self._track_row(uuid, parent, kind, pid, tid, name, labels)

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

    # ---------------------------------------------------------------- events

    def _time(self, sq: _Seq, ts, clock) -> tuple[int, int] | None:
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

    def event(self, buf, pos, end, sq: _Seq, ts, clock, pk: int) -> None:
        typ = 0
        name = cat = -1
        cats: list[int] = []
        track = None
        anns: list[tuple[int, int]] = []
        flows: list[tuple[int, int]] = []
        value = math.nan
        corr = -1
        legacy = None
        us_abs = us_delta = None
        for f, wt, v, s, e in fields(buf, pos, end):
            if f == w.Event.TYPE and wt == w.VARINT:
                typ = v
            elif f == w.Event.NAME_IID and wt == w.VARINT:
                name = sq.tables.get(w.Interned.EVENT_NAMES, {}).get(v, -1)
            elif f == w.Event.NAME and wt == w.LEN:
                name = self.code(buf[s:e])
            elif f == w.Event.CATEGORY_IIDS:
                for iid in _repeated_varints(buf, wt, v, s, e):
                    if len(cats) < MAX_CATS:
                        cats.append(sq.tables.get(w.Interned.EVENT_CATEGORIES, {}).get(iid, -1))
            elif f == w.Event.CATEGORIES and wt == w.LEN:
                if len(cats) < MAX_CATS:
                    cats.append(self.code(buf[s:e]))
            elif f == w.Event.TRACK_UUID and wt == w.VARINT:
                track = v
            elif f == w.Event.DEBUG_ANNOTATIONS:
                if wt != w.LEN:
                    raise WireError(f"a debug annotation has wire type {wt}, not length-delimited")
                anns.append((s, e))
            elif f == w.Event.COUNTER_VALUE and wt == w.VARINT:
                value = float(signed(v))
            elif f == w.Event.DOUBLE_COUNTER_VALUE and wt == w.FIXED64:
                value = as_double(v)
            elif f in (w.Event.FLOW_IDS, w.Event.TERMINATING_FLOW_IDS):
                for fid in _repeated_fixed64(buf, wt, v, s, e):
                    flows.append((fid, int(f == w.Event.TERMINATING_FLOW_IDS)))
            elif f in (w.Event.FLOW_IDS_OLD, w.Event.TERMINATING_FLOW_IDS_OLD):
                for fid in _repeated_varints(buf, wt, v, s, e):
                    flows.append((fid, int(f == w.Event.TERMINATING_FLOW_IDS_OLD)))
            elif f == w.Event.CORRELATION_ID and wt == w.VARINT:
                corr = v & (_I63 - 1)
            elif f == w.Event.LEGACY_EVENT and wt == w.LEN:
                legacy = (s, e)
            elif f == w.Event.TIMESTAMP_ABSOLUTE_US and wt == w.VARINT:
                us_abs = signed(v)
            elif f == w.Event.TIMESTAMP_DELTA_US and wt == w.VARINT:
                us_delta = signed(v)
        dur_us = None
        if legacy is not None:
            phase, pid_o, tid_o = 0, None, None
            for f, wt, v, s, e in fields(buf, *legacy):
                if f == w.Legacy.PHASE and wt == w.VARINT:
                    phase = v
                elif f == w.Legacy.DURATION_US and wt == w.VARINT:
                    dur_us = signed(v)
                elif f == w.Legacy.NAME_IID and wt == w.VARINT and name < 0:
                    name = sq.tables.get(w.Interned.EVENT_NAMES, {}).get(v, -1)
                elif f == w.Legacy.PID_OVERRIDE and wt == w.VARINT:
                    pid_o = signed(v)
                elif f == w.Legacy.TID_OVERRIDE and wt == w.VARINT:
                    tid_o = signed(v)
            if typ == 0:
                typ = {ord("X"): -1, ord("B"): w.TYPE_SLICE_BEGIN, ord("E"): w.TYPE_SLICE_END,
                       ord("i"): w.TYPE_INSTANT, ord("I"): w.TYPE_INSTANT, ord("C"): w.TYPE_COUNTER}.get(phase, 0)
            if pid_o is not None or tid_o is not None:
                base = sq.thread or (0, 0)
                track = self._legacy_track(pid_o if pid_o is not None else base[0],
                                           tid_o if tid_o is not None else base[1])
        if typ not in (-1, w.TYPE_SLICE_BEGIN, w.TYPE_SLICE_END, w.TYPE_INSTANT, w.TYPE_COUNTER):
            return
        if track is None:
            track = sq.track
        if track is None and sq.thread is not None:
            track = self._legacy_track(*sq.thread)
        if track is None:
            track = 0
        # the time
        if ts is None and us_abs is not None:
            t = (w.BOOTTIME, us_abs * 1000)
        elif ts is None and us_delta is not None:
            sq.last_us += us_delta
            t = (w.BOOTTIME, sq.last_us * 1000)
        else:
            t = self._time(sq, ts or 0, clock)
        if t is None:
            self.counts["unknown_clock"] += 1
            return
        c = self.cols
        if typ == w.TYPE_SLICE_END:
            stack = self.stacks.get(track)
            if not stack:
                self.counts["unmatched_end"] += 1
                return
            row = stack.pop()
            c["ev_end"][row] = t[1]
            c["ev_kind"][row] = SLICE
        else:
            row = len(c["ev_kind"])
            kind = {w.TYPE_SLICE_BEGIN: OPEN, -1: SLICE, w.TYPE_INSTANT: INSTANT, w.TYPE_COUNTER: COUNTER}[typ]
            if cats:
                cat = cats[0] if len(cats) == 1 else self.code(
                    ",".join(self.strings[x] for x in cats if x >= 0).encode("utf-8", "surrogatepass"))
            c["ev_kind"].append(kind)
            c["ev_track"].append(track)
            c["ev_name"].append(name)
            c["ev_cat"].append(cat)
            c["ev_ts"].append(t[1])
            c["ev_end"].append(t[1] + (dur_us or 0) * 1000 if typ == -1 else t[1])
            c["ev_clock"].append(t[0])
            c["ev_value"].append(value)
            c["ev_corr"].append(corr)
            c["ev_pkt"].append(pk)
            if typ == w.TYPE_SLICE_BEGIN:
                self.stacks.setdefault(track, []).append(row)
        if corr >= 0 and typ == w.TYPE_SLICE_END:
            c["ev_corr"][row] = corr
        for s, e in anns:
            self.annotation(buf, s, e, sq, row)
        for fid, term in flows:
            c["fl_event"].append(row)
            c["fl_id"].append(fid)
            c["fl_term"].append(term)

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


def _repeated_varints(buf, wt: int, v, s: int, e: int):
    if wt == w.VARINT:
        yield v
    elif wt == w.LEN:  # packed
        p = s
        while p < e:
            x, p = read_varint(buf, p, e)
            yield x


def _repeated_fixed64(buf, wt: int, v, s: int, e: int):
    if wt == w.FIXED64:
        yield v
    elif wt == w.LEN:  # packed
        if (e - s) % 8:
            raise WireError("a packed list of 64-bit flow ids whose length is not a multiple of 8")
        for p in range(s, e, 8):
            yield int.from_bytes(buf[p:p + 8], "little")
