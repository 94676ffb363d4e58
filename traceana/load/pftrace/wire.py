"""The protobuf wire format of a Perfetto trace: the field numbers traceana reads and writes, and
the few encoding primitives (varints, keys, length-delimited fields).

A Perfetto trace file is a `Trace` message: a stream of `packet` fields (number 1, length-delimited),
each a `TracePacket`. The numbers below are those of Perfetto's protos (perfetto/protos/perfetto/trace,
checked against the `perfetto` package's descriptors in tests/test_pftrace_wire.py).
"""

from __future__ import annotations

import struct

# wire types
VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
MAX_FIELD = (1 << 29) - 1  # protobuf field numbers are 29 bits

TRACE_PACKET = 1  # Trace.packet

# TracePacket
class Packet:
    CHROME_EVENTS = 5  # ChromeEventBundle (its `metadata`: the Chrome JSON document's top-level keys)
    CLOCK_SNAPSHOT = 6
    TIMESTAMP = 8
    TRUSTED_SEQUENCE_ID = 10
    TRACK_EVENT = 11
    INTERNED_DATA = 12
    SEQUENCE_FLAGS = 13
    INCREMENTAL_STATE_CLEARED = 41
    PROCESS_DESCRIPTOR = 43  # legacy: the sequence's process
    THREAD_DESCRIPTOR = 44  # legacy: the sequence's thread
    COMPRESSED_PACKETS = 50  # zlib-deflated Trace bytes (more packets)
    TIMESTAMP_CLOCK_ID = 58
    DEFAULTS = 59  # TracePacketDefaults
    TRACK_DESCRIPTOR = 60
    FIRST_PACKET_ON_SEQUENCE = 87


SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2


class Defaults:  # TracePacketDefaults
    TIMESTAMP_CLOCK_ID = 58
    TRACK_EVENT_DEFAULTS = 11  # TrackEventDefaults.track_uuid = 11


class Event:  # TrackEvent
    TIMESTAMP_DELTA_US = 1
    CATEGORY_IIDS = 3
    DEBUG_ANNOTATIONS = 4
    LEGACY_EVENT = 6
    TYPE = 9
    NAME_IID = 10
    TRACK_UUID = 11
    TIMESTAMP_ABSOLUTE_US = 16
    CATEGORIES = 22
    NAME = 23
    COUNTER_VALUE = 30
    FLOW_IDS_OLD = 36
    TERMINATING_FLOW_IDS_OLD = 42
    DOUBLE_COUNTER_VALUE = 44
    FLOW_IDS = 47
    TERMINATING_FLOW_IDS = 48
    CORRELATION_ID = 52


TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4


class Legacy:  # TrackEvent.LegacyEvent
    NAME_IID = 1
    PHASE = 2
    DURATION_US = 3
    BIND_ID = 8
    FLOW_DIRECTION = 13
    PID_OVERRIDE = 18
    TID_OVERRIDE = 19


class Annotation:  # DebugAnnotation
    NAME_IID = 1
    BOOL = 2
    UINT = 3
    INT = 4
    DOUBLE = 5
    STRING = 6
    POINTER = 7
    NESTED = 8  # NestedValue (legacy)
    LEGACY_JSON = 9
    NAME = 10
    DICT_ENTRIES = 11
    ARRAY_VALUES = 12
    STRING_IID = 17


class Nested:  # DebugAnnotation.NestedValue
    TYPE = 1  # 1 DICT, 2 ARRAY
    DICT_KEYS = 2
    DICT_VALUES = 3
    ARRAY_VALUES = 4
    INT = 5
    DOUBLE = 6
    BOOL = 7
    STRING = 8


class Track:  # TrackDescriptor
    UUID = 1
    NAME = 2
    PROCESS = 3
    THREAD = 4
    PARENT_UUID = 5
    COUNTER = 8
    STATIC_NAME = 10


class Process:  # ProcessDescriptor
    PID = 1
    CMDLINE = 2
    NAME = 6
    LABELS = 8


class Thread:  # ThreadDescriptor
    PID = 1
    TID = 2
    NAME = 5
    REFERENCE_TIMESTAMP_US = 6


class Interned:  # InternedData; each entry is {iid = 1, name = 2} (InternedString: {iid = 1, str = 2})
    EVENT_CATEGORIES = 1
    EVENT_NAMES = 2
    DEBUG_ANNOTATION_NAMES = 3
    DEBUG_ANNOTATION_STRING_VALUES = 29


class Clock:  # ClockSnapshot {clocks = 1, primary_trace_clock = 2}; Clock {clock_id 1, timestamp 2, is_incremental 3, unit_multiplier_ns 4}
    CLOCKS = 1
    PRIMARY = 2
    ID = 1
    TIMESTAMP = 2
    INCREMENTAL = 3
    MULTIPLIER_NS = 4


BOOTTIME = 6  # the trace's clock when a packet names none


class Bundle:  # ChromeEventBundle.metadata = 2: ChromeMetadata {name 1, string 2, bool 3, int 4, json 5}
    METADATA = 2
    NAME = 1
    STRING = 2
    BOOL = 3
    INT = 4
    JSON = 5


# ------------------------------------------------------------------ encoding


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = [_varint(i) for i in range(1 << 14)]  # one and two byte varints, made once


def varint(n: int) -> bytes:
    """`n` as a protobuf varint (a negative int64 as its two's complement: ten bytes)."""
    return _SMALL[n] if 0 <= n < 16384 else _varint(n)


_KEYS: dict[tuple[int, int], bytes] = {}


def key(field: int, wire: int) -> bytes:
    k = _KEYS.get((field, wire))
    if k is None:
        k = _KEYS[(field, wire)] = varint(field << 3 | wire)
    return k


def vint(field: int, n: int) -> bytes:
    return key(field, VARINT) + (_SMALL[n] if 0 <= n < 16384 else _varint(int(n)))


def ld(field: int, payload: bytes) -> bytes:
    return key(field, LEN) + varint(len(payload)) + payload


def text(field: int, s: str) -> bytes:
    return ld(field, s.encode("utf-8", "surrogatepass"))


def double(field: int, x: float) -> bytes:
    return key(field, FIXED64) + struct.pack("<d", x)


def fixed64(field: int, n: int) -> bytes:
    return key(field, FIXED64) + struct.pack("<Q", n & ((1 << 64) - 1))


def packet(payload: bytes) -> bytes:
    """One TracePacket as it sits in the Trace stream."""
    return ld(TRACE_PACKET, payload)


# ------------------------------------------------------------------ decoding (the pure-Python path)


class WireError(ValueError):
    """The bytes are not the protobuf the field says (the message names what and where)."""


def read_varint(buf, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`; WireError when it runs past `end` or 10 bytes."""
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & ((1 << 64) - 1), pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def fields(buf, pos: int, end: int):
    """(field number, wire type, value, start, end) of each field of the message in buf[pos:end]:
    value is the int of a varint / fixed field, None for a length-delimited one (its bytes are
    buf[start:end])."""
    while pos < end:
        k, pos = read_varint(buf, pos, end)
        field, wire = k >> 3, k & 7
        if field > MAX_FIELD:
            raise WireError(f"field number {field} out of range")
        if field == 0:
            raise WireError("field number 0")
        if wire == VARINT:
            v, pos = read_varint(buf, pos, end)
            yield field, wire, v, pos, pos
        elif wire == LEN:
            n, pos = read_varint(buf, pos, end)
            if n > end - pos:
                raise WireError(f"length-delimited field {field} runs past the end of its message")
            yield field, wire, None, pos, pos + n
            pos += n
        elif wire == FIXED64:
            if pos + 8 > end:
                raise WireError(f"truncated 64-bit field {field}")
            yield field, wire, int.from_bytes(buf[pos:pos + 8], "little"), pos, pos + 8
            pos += 8
        elif wire == FIXED32:
            if pos + 4 > end:
                raise WireError(f"truncated 32-bit field {field}")
            yield field, wire, int.from_bytes(buf[pos:pos + 4], "little"), pos, pos + 4
            pos += 4
        else:
            raise WireError(f"wire type {wire} (field {field}): not one this format uses")


def signed(v: int) -> int:
    """A varint's 64 bits as the int64 they hold."""
    return v - (1 << 64) if v >= 1 << 63 else v


def as_double(v: int) -> float:
    return struct.unpack("<d", v.to_bytes(8, "little"))[0]


def spans(buf, pos: int = 0, end: int | None = None):
    """(field number, wire type, key start, value start, value end) of each field of the message in
    buf[pos:end] (a varint's or fixed field's value is buf[value start:value end] too)."""
    end = len(buf) if end is None else end
    while pos < end:
        at = pos
        k, pos = read_varint(buf, pos, end)
        field, wire = k >> 3, k & 7
        if wire == VARINT:
            _, p = read_varint(buf, pos, end)
        elif wire == LEN:
            n, pos = read_varint(buf, pos, end)
            p = pos + n
        elif wire == FIXED64:
            p = pos + 8
        elif wire == FIXED32:
            p = pos + 4
        else:
            raise WireError(f"wire type {wire} (field {field}): not one this format uses")
        if p > end:
            raise WireError(f"field {field} runs past the end of its message")
        yield field, wire, at, pos, p
        pos = p
