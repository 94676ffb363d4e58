"""Read a trace file (JSON or gzip JSON) into a Trace: one parse, typed, then columns."""

from __future__ import annotations

import gc
import json
import math
import os
import re
import stat
import zlib
from array import array
from bisect import bisect_right
from itertools import accumulate
from collections.abc import Callable, Iterable
from typing import Any, Union

import msgspec
import numpy as np

from traceana.errors import BadInput
from traceana import prefetch
from traceana.prefetch import gunzip as _gunzip
from traceana.load.model import Annotations, CpuOps, GpuEvents, Launches, Trace
from traceana.load.schema import COMM_EVENT_DECODER, DOC_DECODER, EVENT_DECODER, LIST_DECODER, Event, TraceDoc

OP_CATS = frozenset({"cpu_op", "Operator", "operator"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
GPU_KIND = {"kernel": 0, "Kernel": 0, "gpu_memcpy": 1, "Memcpy": 1, "gpu_memset": 2, "Memset": 2}
ANNOTATION_CATS = frozenset({"user_annotation"})
LEGACY_CATS = frozenset({"Operator", "Runtime", "Kernel"})


def read_bytes(path: str) -> bytes:
    """The file's JSON text, gunzipped when it is gzip. One clear BadInput on any failure."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise BadInput(_directory_message(path))
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block forever, /dev/zero never ends
        raise BadInput(f"{path}: is not a regular file (a FIFO, device or socket); save the trace to a file first")
    data = prefetch.take(path, st)  # read and gunzipped meanwhile by `traceana report`, if it could
    if data is None:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            raise BadInput(f"{path}: no such file") from None
        except OSError as exc:
            raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None
        if data[:2] == b"\x1f\x8b":
            try:
                data = _gunzip(data)
            except (OSError, EOFError, zlib.error) as exc:
                raise BadInput(f"{path}: corrupt or truncated gzip data ({_short(exc)})") from None
    if data[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark (Windows editors): not JSON, harmless
        data = data[3:]
    if not data or data.isspace():  # (not data.strip(): that copies a 1 GB text to test it)
        raise BadInput(f"{path}: file is empty")
    return data


def _directory_message(path: str) -> str:
    try:
        names = os.listdir(path)
    except OSError as exc:
        return f"{path}: is a directory (cannot list it: {exc.strerror or exc}); give a trace file"
    traces = [n for n in names if n.endswith((".json", ".json.gz"))]
    if not traces:
        return f"{path}: is a directory with no trace files (*.json, *.json.gz); give a trace file"
    return (f"{path}: is a directory ({len(traces)} trace file{'s' if len(traces) != 1 else ''}); give one trace file "
            "(a directory of per-rank traces is not supported yet)")


_READ_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)


def _decode(path: str, data: bytes) -> tuple[TraceDoc, list[str]]:
    """Typed decode; on a type mismatch fall back to a lenient per-event decode; on JSON the
    fast parser refuses (NaN/Infinity, lone surrogates, bad UTF-8, numbers out of range)
    normalise it once with the standard library and say so in a warning."""
    try:
        return _decode_typed(path, data)
    except _READ_ERRORS as exc:
        first = exc
    data, notes = _normalize(path, data, first)
    try:
        doc, warnings = _decode_typed(path, data)
    except _READ_ERRORS as exc:  # not expected after _normalize; still one line, never a traceback
        raise BadInput(f"{path}: not valid JSON ({_short(exc)})") from None
    return doc, notes + warnings


def _decode_typed(path: str, data: bytes) -> tuple[TraceDoc, list[str]]:
    try:
        doc = DOC_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        if str(exc).startswith("Expected `object`, got `array`"):
            try:
                return TraceDoc(traceEvents=LIST_DECODER.decode(data)), []
            except msgspec.ValidationError:
                pass
        first_error = str(exc)
    else:
        if doc.traceEvents is None:
            raise BadInput(f"{path}: not a trace (no 'traceEvents' list)")
        return doc, []
    return _decode_lenient(path, data, first_error)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _normalize(path: str, data: bytes, first: BaseException) -> tuple[bytes, list[str]]:
    """Strict JSON bytes for text the standard library can read; BadInput otherwise."""
    notes: list[str] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        notes.append("the trace has bytes that are not UTF-8; they were read as U+FFFD")
    odd: list[str] = []

    def constant(token: str) -> None:
        odd.append(token)
        return None

    def number(token: str) -> float | None:
        v = float(token)
        if math.isfinite(v):
            return v
        odd.append(token)
        return None

    try:
        raw = json.loads(text, parse_constant=constant, parse_float=number)
        del text
        out = json.dumps(raw, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:
        raise BadInput(f"{path}: not a trace (JSON nested too deeply)") from None
    except ValueError:  # json.JSONDecodeError: report the fast parser's message
        if isinstance(first, UnicodeDecodeError):
            raise BadInput(f"{path}: not valid JSON (not UTF-8 text)") from None
        raise BadInput(f"{path}: not valid JSON ({_short(first)})") from None
    del raw
    if odd:
        notes.append(f"the trace has {len(odd)} NaN, Infinity or out-of-range numbers (not valid JSON, "
                     f"e.g. {odd[0][:20]}); they were read as missing values")
    if _SURROGATE.search(out):
        notes.append("the trace has strings with lone UTF-16 surrogates (e.g. \\ud800); they were read as U+FFFD")
        out = _SURROGATE.sub("\ufffd", out)
    return out.encode("utf-8"), notes


def _decode_lenient(path: str, data: bytes, first_error: str) -> tuple[TraceDoc, list[str]]:
    raw = msgspec.json.decode(data)  # errors go to _normalize via _decode
    if isinstance(raw, list):
        raw = {"traceEvents": raw}
    if not isinstance(raw, dict):
        raise BadInput(f"{path}: not a trace (top level is {type(raw).__name__}, expected an object)")
    events = raw.get("traceEvents")
    if not isinstance(events, list):
        raise BadInput(f"{path}: not a trace (no 'traceEvents' list)")
    kept: list[Event] = []
    bad = fixed = 0
    for ev in events:
        event, dropped = _salvage(ev)
        if event is None:
            bad += 1
        else:
            kept.append(event)
            fixed += dropped > 0
    if events and not kept:
        raise BadInput(f"{path}: not a trace (none of its {len(events)} events is an object with trace fields)")
    meta: dict[str, Any] = {}
    ignored = []
    for key, typ in (("deviceProperties", list), ("distributedInfo", dict),
                     ("baseTimeNanoseconds", int), ("record_shapes", int)):
        val = raw.get(key)
        if isinstance(val, typ) and not isinstance(val, bool):
            meta[key] = val
        elif val is not None:
            ignored.append(key)
    props = [p for p in meta.get("deviceProperties", []) if isinstance(p, dict)]
    doc = TraceDoc(traceEvents=kept, deviceProperties=props, distributedInfo=meta.get("distributedInfo"),
                   baseTimeNanoseconds=meta.get("baseTimeNanoseconds"), record_shapes=meta.get("record_shapes"))
    warnings = []
    if bad or fixed:
        what = []
        if fixed:
            what.append(f"{fixed} had fields that could not be read, which were ignored")
        if bad:
            what.append(f"{bad} could not be read at all and were skipped")
        warnings.append(f"the trace has fields of unexpected types ({first_error}); of {len(events)} events, "
                        + " and ".join(what))
    if ignored:
        warnings.append(f"the trace's top-level {', '.join(ignored)} has an unexpected type and was ignored")
    return doc, warnings


_AT = re.compile(r" - at `\$\.([^`]+)`$")
_ENCODE = msgspec.json.encode


def _salvage(ev: Any) -> tuple[Event | None, int]:
    """The event with every mistyped field it has dropped (None when it is not an object),
    and how many fields were dropped. msgspec names the first bad field; drop it and retry."""
    if not isinstance(ev, dict):
        return None, 0
    dropped = 0
    for _ in range(32):
        try:
            return EVENT_DECODER.decode(_ENCODE(ev)), dropped
        except (msgspec.ValidationError, msgspec.DecodeError, TypeError, RecursionError) as exc:
            m = _AT.search(str(exc))
            if m is None:
                return None, dropped
            key, _, sub = m.group(1).partition(".")
            if key not in ev:
                return None, dropped
            ev = dict(ev)
            if sub and isinstance(ev[key], dict) and sub in ev[key]:
                ev[key] = {k: v for k, v in ev[key].items() if k != sub}
            else:
                del ev[key]
            dropped += 1
    return None, dropped


# Unicode bidirectional controls (an unbalanced U+202E in a kernel name would display the rest of
# a report line, the verdict or a warning, reversed) and C0 controls other than tab and newlines
# (a NUL makes the HTML report a "binary" file). No profiler writes them; they become U+FFFD.
_ODD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
BIDI_WARNING = ("the trace has names with control or bidirectional-override characters (which can make "
                "text display in a misleading order); they were replaced with U+FFFD")


def clean_text(value: str) -> str:
    """A trace string safe to show inline: control and bidi-override characters become U+FFFD."""
    return _ODD_CHARS.sub("\ufffd", value)


def _clean_values(d: dict[str, Any]) -> dict[str, Any]:
    return {k: clean_text(v) if isinstance(v, str) else v for k, v in d.items()}


def _clean_strings(names: list[str], props: list[dict], distributed: dict | None):
    """Names, deviceProperties and distributedInfo with bidi controls replaced; True when any were."""
    dicts = [*props, distributed or {}]
    if not any(_ODD_CHARS.search(n) for n in names) and not any(
            isinstance(v, str) and _ODD_CHARS.search(v) for d in dicts for v in d.values()):
        return names, props, distributed, False
    return ([clean_text(n) for n in names], [_clean_values(p) for p in props],
            _clean_values(distributed) if distributed else distributed, True)


def _sane_props(props: list[dict], warnings: list[str]) -> list[dict]:
    """deviceProperties without numbers no GPU has (an int beyond int64: e.g. numSms = 1e400
    written as an integer); such fields are dropped, and said so."""
    out = []
    for p in props:
        bad = [k for k, v in p.items() if type(v) is int and not -2**63 <= v < 2**63]
        if bad:
            warnings.append(f"deviceProperties entry {_as_int(p.get('id'))}: {', '.join(map(str, bad[:5]))} "
                            "out of range; ignored")
            p = {k: v for k, v in p.items() if k not in bad}
        out.append(p)
    return out


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def _as_int(v: Any) -> int:
    if v is None or isinstance(v, bool):
        return -1
    try:
        i = v if isinstance(v, int) else int(v)
    except (TypeError, ValueError, OverflowError):
        return -1
    return i if -2**63 <= i < 2**63 else -1  # ids beyond int64 cannot be real; never overflow numpy


def _finite(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def load_trace(path: str, stage: Callable[[str], None] | None = None) -> Trace:
    """Parse the file once and split its events into columns by role. `stage(name)` is told
    when each stage starts (read, decode, columns): the progress bar, never per event."""
    if stage:
        stage("read")
    data = read_bytes(path)
    if stage:
        stage("decode")
    # The decode makes two objects per event and none of them is in a reference cycle: the
    # cyclic collector would only walk them over and over (~1/3 of the decode's time).
    enabled = gc.isenabled()
    gc.disable()
    try:
        trace = _load_chunked(path, data, stage)
        if trace is not None:
            return trace
        doc, warnings = _decode(path, data)
        del data
        if stage:
            stage("columns")
        return build_trace(path, doc, warnings)
    finally:
        if enabled:
            gc.enable()


class _RawDoc(TraceDoc):
    """The document with each event left as raw JSON (a zero-copy view into the text)."""

    traceEvents: Union[list[msgspec.Raw], None] = None  # noqa: N815 (the trace's own key)


_RAW_DOC_DECODER = msgspec.json.Decoder(_RawDoc)
#: Events decoded at a time: the decoded structs (~650 B/event) then live only one chunk long.
CHUNK_EVENTS = 20_000


def _load_chunked(path: str, data: bytes, stage: Callable[[str], None] | None) -> Trace | None:
    """The lean path: split the event list into raw events (cheap: no objects but a view per
    event), then decode and column them CHUNK_EVENTS at a time, so the typed events never all
    exist at once (a 1.1 GB trace: peak 3.4 GB -> about 1.6). None when the file is anything
    but a well-formed, well-typed {"traceEvents": [...]} document: the caller then takes the
    one-shot path, whose error handling and lenient fallbacks decide what the file says."""
    try:
        doc = _RAW_DOC_DECODER.decode(data)
    except (*_READ_ERRORS, msgspec.ValidationError):
        return None
    raws = doc.traceEvents
    if raws is None:
        return None

    comm: list[tuple] = []

    def chunks():
        for i in range(0, len(raws), CHUNK_EVENTS):
            part = raws[i:i + CHUNK_EVENTS]
            # one copy of the chunk's text: the brackets ride on its first and last events
            part[0] = b"[" + bytes(part[0])
            part[-1] = (bytes(part[-1]) if len(part) > 1 else part[-1]) + b"]"
            text = b",".join(part)
            # a search or two per chunk; only collectives with args to read are decoded again
            if _COMM_MARK in text and (b'"Collective name"' in text or b'"In msg nelems"' in text):
                comm.extend(comm_events(part, text))
            yield LIST_DECODER.decode(text)

    if stage:
        stage("columns")
    try:
        trace = build_trace(path, doc, [], chunks())
    except _READ_ERRORS:
        return None
    if comm:
        attach_comm(trace, comm)
    return trace


# Event roles by `cat`: 0 GPU event (kernel / memcpy / memset), 1 cpu op, 2 launch, 3 annotation.
_ROLE = {**{c: 1 for c in OP_CATS}, **{c: 2 for c in LAUNCH_CATS}, **{c: 3 for c in ANNOTATION_CATS},
         **{c: 0 for c in GPU_KIND}}
_NAN = math.nan
_BIG = 1 << 1000  # ints below this convert to float without OverflowError


def build_trace(path: str, doc: TraceDoc, warnings: list[str], chunks: Iterable[list[Event]] | None = None) -> Trace:
    """Split the decoded events into columns by role. The loop is the hot path of a load (one
    pass over every event): it does only what must be done per event (role, time checks, name
    and thread codes) and appends raw id / number fields, which `_ints` / `_floats` convert
    column-wise afterwards, exactly as `_as_int` / `_finite` would one by one. `chunks`: the
    events as successive lists, instead of doc.traceEvents (the chunked decode)."""
    names: dict[str, int] = {}
    threads: dict[tuple, int] = {}
    # times go straight into C doubles (no float object per value); ids stay raw (see _ints)
    op = {k: array("d") if k in ("ts", "end") else [] for k in
          ("name", "thread", "ts", "end", "ext", "dims", "types", "strides", "concrete", "kflop", "kgb")}
    la = {k: array("d") if k in ("ts", "end") else [] for k in ("name", "thread", "ts", "end", "corr", "ext")}
    gp = {k: array("d") if k in ("ts", "dur") else [] for k in
          ("name", "kind", "device", "pid", "stream", "ts", "dur", "corr", "ext", "bytes")}
    an = {k: array("d") if k in ("ts", "end") else [] for k in ("name", "thread", "ts", "end")}
    # shape args repeat (ops repeat): one bytes object per distinct value, not one per op
    shapes: dict[bytes, bytes] = {}
    same = shapes.setdefault
    legacy = 0
    bad_time = 0
    no_ph = 0
    t_min = math.inf
    t_max = -math.inf
    role_of, kind_of, legacy_cats = _ROLE.get, GPU_KIND.get, LEGACY_CATS
    names_get, threads_get = names.get, threads.get
    g_name, g_kind, g_dev, g_pid, g_stream = (gp[k].append for k in ("name", "kind", "device", "pid", "stream"))
    g_ts, g_dur, g_corr, g_ext, g_bytes = (gp[k].append for k in ("ts", "dur", "corr", "ext", "bytes"))
    o_name, o_thread, o_ts, o_end, o_ext = (op[k].append for k in ("name", "thread", "ts", "end", "ext"))
    o_dims, o_types, o_strides, o_conc, o_kflop, o_kgb = (
        op[k].append for k in ("dims", "types", "strides", "concrete", "kflop", "kgb"))
    l_name, l_thread, l_ts, l_end, l_corr, l_ext = (la[k].append for k in ("name", "thread", "ts", "end", "corr", "ext"))
    a_name, a_thread, a_ts, a_end = (an[k].append for k in ("name", "thread", "ts", "end"))
    finite = _finite
    empty = b""

    n_events = 0
    for events in (chunks if chunks is not None else (doc.traceEvents,)):
        n_events += len(events)
        for ev in events:
            if ev.ph != "X":
                no_ph += not ev.ph
                continue
            cat = ev.cat
            role = role_of(cat)  # None for a missing or uninteresting category
            if role is None:
                continue
            ts = ev.ts
            if type(ts) is not float:  # ints (older traces) convert exactly as _finite would
                ts = float(ts) if type(ts) is int and -_BIG < ts < _BIG else finite(ts)
            dur = ev.dur
            if type(dur) is not float:
                dur = float(dur) if type(dur) is int and -_BIG < dur < _BIG else finite(dur)
            # NaN fails every comparison (ts != ts); +-inf fails the magnitude checks
            if ts is None or dur is None or ts != ts or dur != dur or dur < 0 or abs(ts) > 1e17 or dur > 1e13:
                bad_time += 1
                continue
            if cat in legacy_cats:
                legacy += 1
            name = ev.name
            if type(name) is not str:
                name = name if isinstance(name, str) else ""
            code = names_get(name)
            if code is None:
                code = names[name] = len(names)
            end = ts + dur
            if ts < t_min:
                t_min = ts
            if end > t_max:
                t_max = end
            a = ev.args
            if role == 0:
                g_name(code)
                g_kind(kind_of(cat))
                g_ts(ts)
                g_dur(dur)
                g_pid(ev.pid)
                if a is None:
                    g_dev(None)
                    g_stream(ev.tid)
                    g_corr(None)
                    g_ext(None)
                    g_bytes(None)
                else:
                    g_dev(a.device)
                    s = a.stream
                    g_stream(s if s is not None else ev.tid)
                    g_corr(a.correlation)
                    x = a.external_id
                    g_ext(x if x is not None else a.external_id_2021)
                    g_bytes(a.bytes)
                continue
            tkey = (ev.pid, ev.tid)
            thread = threads_get(tkey)
            if thread is None:
                thread = threads[tkey] = len(threads)
            if role == 1:
                if name.startswith("ProfilerStep#"):
                    a_name(code)
                    a_thread(thread)
                    a_ts(ts)
                    a_end(end)
                    continue
                o_name(code)
                o_thread(thread)
                o_ts(ts)
                o_end(end)
                if a is None:
                    o_ext(None)
                    o_dims(empty)
                    o_types(empty)
                    o_strides(empty)
                    o_conc(empty)
                    o_kflop(None)
                    o_kgb(None)
                else:
                    x = a.external_id
                    o_ext(x if x is not None else a.external_id_2021)
                    b = bytes(a.input_dims)
                    o_dims(same(b, b))
                    b = bytes(a.input_types)
                    o_types(same(b, b))
                    b = bytes(a.input_strides)
                    o_strides(same(b, b))
                    b = bytes(a.concrete)
                    o_conc(same(b, b))
                    o_kflop(a.kernel_flop)
                    o_kgb(a.kernel_num_gb)
            elif role == 2:
                l_name(code)
                l_thread(thread)
                l_ts(ts)
                l_end(end)
                if a is None:
                    l_corr(None)
                    l_ext(None)
                else:
                    l_corr(a.correlation)
                    x = a.external_id
                    l_ext(x if x is not None else a.external_id_2021)
            else:
                a_name(code)
                a_thread(thread)
                a_ts(ts)
                a_end(end)
        events = None  # free this chunk before the next one is decoded

    if n_events and no_ph == n_events:
        raise BadInput(f"{path}: not a trace (none of its {no_ph} events has a 'ph' field)")
    if bad_time:
        warnings.append(f"{bad_time} events had missing, negative or non-finite ts/dur and were skipped")
    i32, f64 = np.int32, np.float64
    ops = CpuOps(np.array(op["name"], i32), np.array(op["thread"], i32), np.array(op["ts"], f64),
                 np.array(op["end"], f64), _ints(op["ext"]), op["dims"], op["types"],
                 op["strides"], op["concrete"], _floats(op["kflop"]), _floats(op["kgb"]))
    launches = Launches(np.array(la["name"], i32), np.array(la["thread"], i32), np.array(la["ts"], f64),
                        np.array(la["end"], f64), _ints(la["corr"]), _ints(la["ext"]))
    device = _ints(gp["device"])
    device = np.where(device >= 0, device, _ints(gp["pid"]))
    gpu = GpuEvents(np.array(gp["name"], i32), np.array(gp["kind"], np.int8), device,
                    _ints(gp["stream"]), np.array(gp["ts"], f64), np.array(gp["dur"], f64),
                    _ints(gp["corr"]), _ints(gp["ext"]), _floats(gp["bytes"]))
    anns = Annotations(np.array(an["name"], i32), np.array(an["thread"], i32), np.array(an["ts"], f64),
                       np.array(an["end"], f64))
    props = [p for p in (doc.deviceProperties or []) if isinstance(p, dict)]
    distributed = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else None
    name_list, props, distributed, cleaned = _clean_strings(list(names), props, distributed)
    if cleaned:
        warnings.append(BIDI_WARNING)
    props = _sane_props(props, warnings)
    record_shapes = bool(doc.record_shapes) or any(op["dims"][i] for i in range(min(len(op["dims"]), 2000)))
    span = (t_max - t_min) if t_max > t_min else 0.0
    fmt = "kineto-2021" if legacy else "kineto"
    # Trace.path is only displayed (the report's file name): no control or bidi characters.
    return Trace(path=clean_text(path), format=fmt, names=name_list, threads=[f"{p}/{t}" for p, t in threads],
                 ops=ops, launches=launches, gpu=gpu, annotations=anns, device_properties=props,
                 distributed=distributed,
                 record_shapes=record_shapes, n_events=n_events, span_us=span,
                 warnings=warnings)


_COMM_MARK = b'"record_param_comms"'


def comm_events(part: list, text: bytes) -> list[tuple]:
    """(ts, External id, comm_extra) of the record_param_comms cpu ops among these raw events;
    text is the events joined by commas (the mark is found there, then its event by offset)."""
    out = []
    ends = list(accumulate(len(r) + 1 for r in part))  # offset just past each event's comma
    hits = []
    pos = text.find(_COMM_MARK)
    while pos >= 0:
        j = bisect_right(ends, pos)
        if j < len(part) and (not hits or hits[-1] != j):
            hits.append(j)
        pos = text.find(_COMM_MARK, pos + 1)
    for j in hits:
        b = bytes(part[j])
        try:
            ev = COMM_EVENT_DECODER.decode(b.lstrip(b"[").rstrip(b"]"))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            continue
        if ev.name != "record_param_comms" or ev.cat not in OP_CATS or ev.args is None:
            continue
        ts = _finite(ev.ts)
        ex = comm_extra(ev.args)
        if ts is not None and ex:
            out.append((ts, _as_int(ev.args.external_id), ex))
    return out


def attach_comm(trace: Trace, comm: list[tuple]) -> None:
    """Put each collective's args on its op (matched by start time and External id): ops.extra."""
    code = trace.names.index("record_param_comms") if "record_param_comms" in trace.names else -1
    ops = trace.ops
    where = {(float(ops.ts[i]), int(ops.ext[i])): i for i in np.flatnonzero(ops.name == code).tolist()}
    for ts, ext, ex in comm:
        i = where.get((ts, ext))
        if i is not None:
            ops.extra[i] = ex


# record_param_comms args carried into OpCall.extra: (key, CommArgs attribute, type)
_COMM_ARGS = (("collective", "collective_name", str), ("in_nelems", "in_msg_nelems", int),
              ("out_nelems", "out_msg_nelems", int), ("group_size", "group_size", int),
              ("dtype", "comm_dtype", str), ("group_ranks", "pg_ranks", str))


def comm_extra(a: Any) -> tuple:
    """The collective's recorded args as sorted (key, value) pairs; values of the wrong type, out
    of range or overlong are dropped (a list of ranks is kept only as its length)."""
    out = []
    for key, attr, typ in _COMM_ARGS:
        v = getattr(a, attr)
        if key == "group_ranks" and isinstance(v, list):
            out.append(("group_ranks_n", len(v)))
            continue
        if typ is int:
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            if type(v) is not int or not 0 <= v < 2**62:
                continue
        elif not isinstance(v, str) or not v or len(v) > 100_000:
            continue
        elif key == "group_ranks":
            v = v.count(",") + 1 if v.strip("[] ") else 0
            key = "group_ranks_n"
        else:
            v = clean_text(v[:80])
        out.append((key, v))
    return tuple(sorted(out))


_INT_TYPES = frozenset({int})
_INT_OR_NONE = frozenset({int, type(None)})
_FLOAT_TYPES = frozenset({int, float, type(None)})


def _ints(values: list) -> np.ndarray:
    """int64 column equal to [_as_int(v) for v in values], vectorised when the values are ints
    (and None): the common case of every real trace."""
    types = set(map(type, values))
    if types <= _INT_OR_NONE:
        vals = values if types <= _INT_TYPES else [-1 if v is None else v for v in values]
        try:
            return np.array(vals, dtype=np.int64)
        except OverflowError:  # an id beyond int64: _as_int makes it -1
            pass
    return np.array([_as_int(v) for v in values], dtype=np.int64)


def _floats(values: list) -> np.ndarray:
    """float64 column equal to [_finite(v) or nan for v in values], vectorised for numbers / None."""
    if set(map(type, values)) <= _FLOAT_TYPES:
        try:
            arr = np.array(values, dtype=np.float64)  # None -> nan
        except OverflowError:
            pass
        else:
            arr[~np.isfinite(arr)] = _NAN
            return arr
    out = []
    for v in values:
        f = _finite(v)
        out.append(f if f is not None else _NAN)
    return np.array(out, dtype=np.float64)
