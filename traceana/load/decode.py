"""Decoding the JSON text: the typed fast path, and the lenient path that salvages what it can
from odd traces (NaN literals, lone surrogates, mistyped fields), plus value cleaning helpers."""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from traceana.errors import BadInput
from traceana.load.schema import DOC_DECODER, EVENT_DECODER, LIST_DECODER, Event, TraceDoc
from traceana.numbers import finite

_READ_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)


def _decode(path: str, data: bytes, first: BaseException | None = None) -> tuple[TraceDoc, list[str]]:
    """Typed decode; on a type mismatch fall back to a lenient per-event decode; on JSON the
    fast parser refuses (NaN/Infinity, lone surrogates, bad UTF-8, numbers out of range)
    normalise it once with the standard library and say so in a warning. `first`: the fast
    parser's error on this text, when it is already known (no typed decode is tried then)."""
    if first is None:
        try:
            return _decode_typed(path, data)
        except _READ_ERRORS as exc:
            first = exc
    if isinstance(first, RecursionError):
        raise BadInput(f"{path}: not a trace (JSON nested too deeply)")
    if not _normalizable(data, first):  # a syntax error no normalising mends: said at once
        raise BadInput(f"{path}: not valid JSON ({_short(first)})")
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
_INVALID_AT = re.compile(r"invalid character \(byte (\d+)\)")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _normalizable(data: bytes, exc: BaseException) -> bool:
    """Could _normalize read what the fast parser refused? Only text that is JSON but for NaN /
    Infinity literals, numbers out of range, lone surrogate escapes (msgspec says "truncated" or "hex escape" for those) or bytes that
    are not UTF-8. Any other error (a trailing comma, a missing bracket) is the file's: normalising
    would build the whole document with the standard library (GBs for a large trace) to fail too."""
    if isinstance(exc, UnicodeDecodeError):
        return True
    text = str(exc)
    m = _INVALID_AT.search(text)
    if m is not None:
        at = int(m.group(1))
        return bytes(data[at:at + 9]).startswith((b"NaN", b"Infinity", b"-Infinity"))
    if text.startswith("Number out of range"):
        return True
    if "truncated" in text or "escape" in text:  # how msgspec says "lone surrogate"
        return _SURROGATE_ESCAPE.search(data) is not None
    return False


def _normalize(path: str, data: bytes, first: BaseException) -> tuple[bytes, list[str]]:
    """Strict JSON bytes for text the standard library can read; BadInput otherwise."""
    import json  # (only for a text the fast parser refused: not on every report's path)

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
                     ("baseTimeNanoseconds", int), ("record_shapes", int), ("traceana", dict), ("host_name", str)):
        val = raw.get(key)
        if isinstance(val, typ) and not isinstance(val, bool):
            meta[key] = val
        elif val is not None:
            ignored.append(key)
    props = [p for p in meta.get("deviceProperties", []) if isinstance(p, dict)]
    doc = TraceDoc(traceEvents=kept, deviceProperties=props, distributedInfo=meta.get("distributedInfo"),
                   baseTimeNanoseconds=meta.get("baseTimeNanoseconds"), record_shapes=meta.get("record_shapes"),
                   traceana=meta.get("traceana"), host_name=meta.get("host_name"))
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


def _as_int(v: Any, missing: int = -1) -> int:
    """An int64 value as a trace records it (an int, or a float / str int() reads); `missing` when
    absent, a bool, unreadable or beyond int64."""
    if v is None or isinstance(v, bool):
        return missing
    try:
        i = v if isinstance(v, int) else int(v)
    except (TypeError, ValueError, OverflowError):
        return missing
    return i if -2**63 <= i < 2**63 else missing  # ids beyond int64 cannot be real; never overflow numpy


_finite = finite  # a value no float holds is unknown
