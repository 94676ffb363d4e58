"""Read a trace file (JSON or gzip JSON) into a Trace: one parse, typed, then columns."""

from __future__ import annotations

import gzip
import math
import os
import zlib
from typing import Any

import msgspec
import numpy as np

from traceana.errors import BadInput
from traceana.load.model import Annotations, CpuOps, GpuEvents, Launches, Trace
from traceana.load.schema import DOC_DECODER, EVENT_DECODER, LIST_DECODER, Event, TraceDoc

OP_CATS = frozenset({"cpu_op", "Operator", "operator"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
GPU_KIND = {"kernel": 0, "Kernel": 0, "gpu_memcpy": 1, "Memcpy": 1, "gpu_memset": 2, "Memset": 2}
ANNOTATION_CATS = frozenset({"user_annotation"})
LEGACY_CATS = frozenset({"Operator", "Runtime", "Kernel"})


def read_bytes(path: str) -> bytes:
    """The file's JSON text, gunzipped when it is gzip. One clear BadInput on any failure."""
    if os.path.isdir(path):
        raise BadInput(f"{path}: is a directory, expected a trace file")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise BadInput(f"{path}: corrupt or truncated gzip data ({exc})") from None
    if not data.strip():
        raise BadInput(f"{path}: file is empty")
    return data


def _decode(path: str, data: bytes) -> tuple[TraceDoc, list[str]]:
    """Typed decode; on a type mismatch fall back to a lenient per-event decode."""
    warnings: list[str] = []
    try:
        return DOC_DECODER.decode(data), warnings
    except msgspec.ValidationError as exc:
        if str(exc).startswith("Expected `object`, got `array`"):
            try:
                return TraceDoc(traceEvents=LIST_DECODER.decode(data)), warnings
            except msgspec.ValidationError:
                pass
            except msgspec.DecodeError as exc2:
                raise BadInput(f"{path}: not valid JSON ({_short(exc2)})") from None
        first_error = str(exc)
    except msgspec.DecodeError as exc:
        raise BadInput(f"{path}: not valid JSON ({_short(exc)})") from None
    return _decode_lenient(path, data, first_error)


def _decode_lenient(path: str, data: bytes, first_error: str) -> tuple[TraceDoc, list[str]]:
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise BadInput(f"{path}: not valid JSON ({_short(exc)})") from None
    if isinstance(raw, list):
        raw = {"traceEvents": raw}
    if not isinstance(raw, dict):
        raise BadInput(f"{path}: not a trace (top level is {type(raw).__name__}, expected an object)")
    events = raw.get("traceEvents")
    if not isinstance(events, list):
        raise BadInput(f"{path}: not a trace (no 'traceEvents' list)")
    kept: list[Event] = []
    bad = 0
    encode = msgspec.json.encode
    for ev in events:
        try:
            kept.append(EVENT_DECODER.decode(encode(ev)))
        except (msgspec.ValidationError, msgspec.DecodeError, TypeError):
            bad += 1
    meta: dict[str, Any] = {}
    for key, typ in (("deviceProperties", list), ("distributedInfo", dict),
                     ("baseTimeNanoseconds", int), ("record_shapes", int)):
        val = raw.get(key)
        if isinstance(val, typ) and not isinstance(val, bool):
            meta[key] = val
    props = [p for p in meta.get("deviceProperties", []) if isinstance(p, dict)]
    doc = TraceDoc(traceEvents=kept, deviceProperties=props, distributedInfo=meta.get("distributedInfo"),
                   baseTimeNanoseconds=meta.get("baseTimeNanoseconds"), record_shapes=meta.get("record_shapes"))
    warnings = [f"the trace has fields of unexpected types ({first_error}); "
                f"{bad} of {len(events)} events could not be read and were skipped"] if bad else []
    return doc, warnings


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def _as_int(v: Any) -> int:
    if v is None or isinstance(v, bool):
        return -1
    if isinstance(v, int):
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


def _finite(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def load_trace(path: str) -> Trace:
    """Parse the file once and split its events into columns by role."""
    data = read_bytes(path)
    doc, warnings = _decode(path, data)
    del data
    return build_trace(path, doc, warnings)


def build_trace(path: str, doc: TraceDoc, warnings: list[str]) -> Trace:
    names: dict[str, int] = {}
    threads: dict[tuple, int] = {}
    op = {k: [] for k in ("name", "thread", "ts", "end", "ext", "dims", "types", "strides", "concrete", "kflop", "kgb")}
    la = {k: [] for k in ("name", "thread", "ts", "end", "corr", "ext")}
    gp = {k: [] for k in ("name", "kind", "device", "stream", "ts", "dur", "corr", "ext", "bytes")}
    an = {k: [] for k in ("name", "thread", "ts", "end")}
    legacy = 0
    bad_time = 0
    t_min = math.inf
    t_max = -math.inf
    name_code = names.setdefault

    for ev in doc.traceEvents:
        if ev.ph != "X":
            continue
        cat = ev.cat
        if cat is None:
            continue
        kind = GPU_KIND.get(cat)
        is_op = cat in OP_CATS
        is_launch = cat in LAUNCH_CATS
        is_ann = cat in ANNOTATION_CATS
        if kind is None and not (is_op or is_launch or is_ann):
            continue
        ts = _finite(ev.ts)
        dur = _finite(ev.dur)
        if ts is None or dur is None or dur < 0 or abs(ts) > 1e17 or dur > 1e13:
            bad_time += 1
            continue
        if cat in LEGACY_CATS:
            legacy += 1
        name = ev.name if isinstance(ev.name, str) else ""
        code = name_code(name, len(names))
        if ts < t_min:
            t_min = ts
        if ts + dur > t_max:
            t_max = ts + dur
        a = ev.args
        if kind is not None:
            gp["name"].append(code)
            gp["kind"].append(kind)
            gp["ts"].append(ts)
            gp["dur"].append(dur)
            if a is None:
                gp["device"].append(_as_int(ev.pid))
                gp["stream"].append(_as_int(ev.tid))
                gp["corr"].append(-1)
                gp["ext"].append(-1)
                gp["bytes"].append(math.nan)
            else:
                dev = _as_int(a.device)
                gp["device"].append(dev if dev >= 0 else _as_int(ev.pid))
                gp["stream"].append(_as_int(a.stream) if a.stream is not None else _as_int(ev.tid))
                gp["corr"].append(_as_int(a.correlation))
                gp["ext"].append(_as_int(a.external_id if a.external_id is not None else a.external_id_2021))
                b = _finite(a.bytes)
                gp["bytes"].append(b if b is not None else math.nan)
            continue
        tkey = (ev.pid, ev.tid)
        thread = threads.get(tkey)
        if thread is None:
            thread = threads[tkey] = len(threads)
        if is_op and not name.startswith("ProfilerStep#"):
            op["name"].append(code)
            op["thread"].append(thread)
            op["ts"].append(ts)
            op["end"].append(ts + dur)
            if a is None:
                op["ext"].append(-1)
                for k in ("dims", "types", "strides", "concrete"):
                    op[k].append(b"")
                op["kflop"].append(math.nan)
                op["kgb"].append(math.nan)
            else:
                op["ext"].append(_as_int(a.external_id if a.external_id is not None else a.external_id_2021))
                op["dims"].append(bytes(a.input_dims))
                op["types"].append(bytes(a.input_types))
                op["strides"].append(bytes(a.input_strides))
                op["concrete"].append(bytes(a.concrete))
                kf = _finite(a.kernel_flop)
                kg = _finite(a.kernel_num_gb)
                op["kflop"].append(kf if kf is not None else math.nan)
                op["kgb"].append(kg if kg is not None else math.nan)
        elif is_launch:
            la["name"].append(code)
            la["thread"].append(thread)
            la["ts"].append(ts)
            la["end"].append(ts + dur)
            la["corr"].append(_as_int(a.correlation) if a is not None else -1)
            la["ext"].append(_as_int(a.external_id if a.external_id is not None else a.external_id_2021)
                             if a is not None else -1)
        else:
            an["name"].append(code)
            an["thread"].append(thread)
            an["ts"].append(ts)
            an["end"].append(ts + dur)

    if bad_time:
        warnings.append(f"{bad_time} events had missing, negative or non-finite ts/dur and were skipped")
    i32, i64, f64 = np.int32, np.int64, np.float64
    ops = CpuOps(np.array(op["name"], i32), np.array(op["thread"], i32), np.array(op["ts"], f64),
                 np.array(op["end"], f64), np.array(op["ext"], i64), op["dims"], op["types"],
                 op["strides"], op["concrete"], np.array(op["kflop"], f64), np.array(op["kgb"], f64))
    launches = Launches(np.array(la["name"], i32), np.array(la["thread"], i32), np.array(la["ts"], f64),
                        np.array(la["end"], f64), np.array(la["corr"], i64), np.array(la["ext"], i64))
    gpu = GpuEvents(np.array(gp["name"], i32), np.array(gp["kind"], np.int8), np.array(gp["device"], i64),
                    np.array(gp["stream"], i64), np.array(gp["ts"], f64), np.array(gp["dur"], f64),
                    np.array(gp["corr"], i64), np.array(gp["ext"], i64), np.array(gp["bytes"], f64))
    anns = Annotations(np.array(an["name"], i32), np.array(an["thread"], i32), np.array(an["ts"], f64),
                       np.array(an["end"], f64))
    props = [p for p in (doc.deviceProperties or []) if isinstance(p, dict)]
    record_shapes = bool(doc.record_shapes) or any(op["dims"][i] for i in range(min(len(op["dims"]), 2000)))
    span = (t_max - t_min) if t_max > t_min else 0.0
    fmt = "kineto-2021" if legacy else "kineto"
    return Trace(path=path, format=fmt, names=list(names), threads=[f"{p}/{t}" for p, t in threads],
                 ops=ops, launches=launches, gpu=gpu, annotations=anns, device_properties=props,
                 distributed=doc.distributedInfo if isinstance(doc.distributedInfo, dict) else None,
                 record_shapes=record_shapes, n_events=len(doc.traceEvents), span_us=span,
                 warnings=warnings)
