"""Track descriptors for the Python decoder (pydecode.py): a TrackDescriptor packet (a process, a
thread, a counter or a plain track, its parent and name) and a legacy ThreadDescriptor (the
sequence's thread, with a track made for it) become track rows (the table's `tr_*` columns).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceana.load.pftrace import wire as w
from traceana.load.pftrace.wire import fields, signed

if TYPE_CHECKING:
    from traceana.load.pftrace.pydecode import Seq

# track kinds (Table.tr_kind)
PLAIN, PROCESS, THREAD, COUNTER_TRACK = range(4)
_LEGACY_TRACK = 1 << 63  # uuids of the tracks made for legacy thread descriptors and pid/tid overrides


def legacy_uuid(pid: int, tid: int) -> int:
    return _LEGACY_TRACK | (pid & 0x7FFFFFFF) << 32 | (tid & 0xFFFFFFFF)


class Descriptors:
    """The track methods of pydecode.Decoder (which holds the strings and columns)."""

    def legacy_thread(self, buf, pos, end, sq: Seq) -> None:
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
