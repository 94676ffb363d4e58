"""A decoded Perfetto trace as Chrome JSON trace events (what `traceana annotate x.pftrace -o
out.json.gz` writes): one event per table row in row order (the row is the event's place, so the
analysis' per-event verdicts land on it), then the process / thread names as metadata events and
the launch -> kernel flows as flow events. Reading that JSON back gives the Trace the .pftrace gives.

Each event: ph X (a slice; ts and dur the exact µs table.us gives), i (an instant) or C (a counter
sample, its track's name and the value), pid / tid the track's (tracks.py), the category when there
is one, and the args as their JSON values.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from traceana.load.pftrace.track_events import COUNTER, INSTANT, SLICE
from traceana.load.pftrace.table import _BAD, Args, columns, us
from traceana.load.pftrace.tracks import Tracks


def metadata(result: dict) -> dict:
    """The document's other keys (deviceProperties, ...) as JSON values."""
    t = columns(result)
    args = Args(t, list(result["strings"]))
    out = {}
    for j in args.meta.tolist():
        v = args.python(int(j))
        if v is not _BAD:
            out[args.strings[t["ar_key"][j]]] = v
    return out


def events(result: dict) -> Iterator[tuple[int, dict]]:
    """(row, event) for every row the Chrome format can say (slices that never ended are left out),
    then (-1, event) for the metadata and flow events."""
    t = columns(result)
    strings = list(result["strings"])
    args = Args(t, strings)
    tracks = Tracks(t, strings)
    track = tracks.index(t["ev_track"])
    kind, name, cat = t["ev_kind"], t["ev_name"], t["ev_cat"]
    ts = us(t["ev_ts"]).tolist()
    dur = us(t["ev_end"] - t["ev_ts"]).tolist()
    n = len(kind)
    # each row's args: arg rows grouped by event
    ev = t["ar_event"].astype(np.int64)
    order = np.argsort(ev, kind="stable")
    order = order[ev[order] >= 0]
    starts = np.searchsorted(ev[order], np.arange(n + 1))
    keys = t["ar_key"]
    bad = _BAD
    for i in range(n):
        k = int(kind[i])
        if k not in (SLICE, INSTANT, COUNTER):
            continue
        pid, tid = tracks.thread_keys[tracks.thread_key[track[i]]]
        e: dict = {"ph": "X" if k == SLICE else "i" if k == INSTANT else "C",
                   "name": strings[name[i]] if name[i] >= 0 else (tracks.track_name(int(t["ev_track"][i]))
                                                                 if k == COUNTER else ""),
                   "pid": pid, "tid": tid, "ts": ts[i]}
        if cat[i] >= 0:
            e["cat"] = strings[cat[i]]
        if k == SLICE:
            e["dur"] = dur[i]
        a = {}
        for j in order[starts[i]:starts[i + 1]].tolist():
            v = args.python(j)
            if v is not bad:
                a[strings[keys[j]]] = v
        if k == COUNTER:
            a = {"value": float(t["ev_value"][i])}
            e.pop("tid")
        if a or k == SLICE:
            e["args"] = a
        yield i, e
    for (pid, tid), name_ in tracks.names().items():
        yield -1, {"ph": "M", "name": "thread_name" if tid is not None else "process_name", "pid": pid,
                   **({"tid": tid} if tid is not None else {}), "args": {"name": name_}}
    fe, fid, term = t["fl_event"].astype(np.int64), t["fl_id"], t["fl_term"]
    for r, f, e_ in zip(fe.tolist(), fid.tolist(), term.tolist()):
        if kind[r] != SLICE:
            continue
        pid, tid = tracks.thread_keys[tracks.thread_key[track[r]]]
        ev_ = {"ph": "f" if e_ else "s", "id": f, "pid": pid, "tid": tid, "ts": ts[r], "cat": "flow", "name": "flow"}
        if e_:
            ev_["bp"] = "e"
        yield -1, ev_
