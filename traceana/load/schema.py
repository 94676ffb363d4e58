"""The typed decoder: only the trace fields traceana reads, everything else skipped unparsed.

Shape arguments stay as msgspec.Raw (undecoded JSON bytes): ops repeat, so they are decoded
once per distinct signature later, not once per event.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec
from msgspec import Raw, Struct, field

Num = Union[int, float]
Id = Union[int, str, None]


class Args(Struct, forbid_unknown_fields=False):
    external_id: Id = field(name="External id", default=None)
    external_id_2021: Id = field(name="external id", default=None)
    correlation: Id = None
    input_dims: Raw = field(name="Input Dims", default=Raw())
    input_types: Raw = field(name="Input type", default=Raw())
    input_strides: Raw = field(name="Input Strides", default=Raw())
    concrete: Raw = field(name="Concrete Inputs", default=Raw())
    device: Id = None
    stream: Id = None
    bytes: Union[int, float, str, None] = None
    grid: Any = None
    block: Any = None
    kernel_flop: Union[int, float, str, None] = None
    kernel_num_gb: Union[int, float, str, None] = None
    kernel_backend: Any = None


class Event(Struct, forbid_unknown_fields=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: Union[str, None] = ""
    pid: Id = None
    tid: Id = None
    ts: Union[Num, None] = None
    dur: Union[Num, None] = None
    args: Union[Args, None] = None


class TraceDoc(Struct, forbid_unknown_fields=False):
    traceEvents: Union[list[Event], None] = None  # None: the key is missing, so not a trace
    deviceProperties: Union[list[dict[str, Any]], None] = None
    distributedInfo: Union[dict[str, Any], None] = None
    baseTimeNanoseconds: Union[int, None] = None
    record_shapes: Union[int, None] = None
    schemaVersion: Union[int, None] = None
    traceName: Union[str, None] = None


DOC_DECODER = msgspec.json.Decoder(TraceDoc)
LIST_DECODER = msgspec.json.Decoder(list[Event])
EVENT_DECODER = msgspec.json.Decoder(Event)
