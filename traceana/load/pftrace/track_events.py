"""Track events for the Python decoder (pydecode.py): a TrackEvent (or its legacy form) becomes an
event row (the table's `ev_*` columns): a slice, an instant, a counter sample, or a slice left open
until its track's next SLICE_END closes it; with its debug annotations (`ar_*`) and flow ids (`fl_*`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from traceana.load.pftrace import wire as w
from traceana.load.pftrace.wire import WireError, as_double, fields, read_varint, signed

if TYPE_CHECKING:
    from traceana.load.pftrace.pydecode import Seq

# row kinds (Table.ev_kind)
SLICE, INSTANT, COUNTER, OPEN = range(4)
_I63 = 1 << 63
MAX_CATS, MAX_FLOWS = 16, 64  # categories and flow ids kept of one event (as the C decoder keeps)


class TrackEvents:
    """The event method of pydecode.Decoder (which holds the strings, sequences, stacks and columns)."""

    def event(self, buf, pos, end, sq: Seq, ts, clock, pk: int) -> None:
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
