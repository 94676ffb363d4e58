"""The typed decoder: only the trace fields traceana reads, everything else skipped unparsed.

Shape arguments stay as msgspec.Raw (undecoded JSON bytes): ops repeat, so they are decoded
once per distinct signature later, not once per event.
"""

from __future__ import annotations

import re
from typing import Any, Union

import msgspec
from msgspec import Raw, Struct, field

Num = Union[int, float]
Id = Union[int, str, None]


class CommArgs(Struct, forbid_unknown_fields=False):
    """record_param_comms' own args (torch >= 2.1): the collective, its sizes and group. Any
    type is accepted here (never a reason to read the file another way); load.comm_args.comm_extra
    keeps the values of the right type. Part of every event's Args (so both loaders read them
    from the event they belong to); their cost on the decode of other events is not measurable."""

    in_msg_nelems: Any = field(name="In msg nelems", default=None)
    out_msg_nelems: Any = field(name="Out msg nelems", default=None)
    group_size: Any = field(name="Group size", default=None)
    comm_dtype: Any = field(name="dtype", default=None)
    collective_name: Any = field(name="Collective name", default=None)
    pg_ranks: Any = field(name="Process Group Ranks", default=None)
    # which call of which group it is, and its per-peer sizes: the cross-rank matching's keys
    # (load.comm_args.comm_ids; not part of the op's signature)
    comm_seq: Any = field(name="Seq", default=None)
    pg_name: Any = field(name="Process Group Name", default=None)
    in_split: Any = field(name="In split size", default=None)
    out_split: Any = field(name="Out split size", default=None)
    src_rank: Any = field(name="Src Rank", default=None)
    dst_rank: Any = field(name="Dst Rank", default=None)


class Args(CommArgs, forbid_unknown_fields=False):
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
    # the kernel a launch event starts (roctracer writes it on hipLaunchKernel & co.; CUPTI does not):
    # what a graph capture trace knows of each captured kernel (traceana.link.replay)
    kernel: Any = None
    graph_node_id: Id = field(name="graph node id", default=None)  # GPU events replayed from a graph (CUDA >= 12)
    # cpu ops recorded with_stack (older torch) / TorchScript modules: text, kept when a non-empty str
    call_stack: Any = field(name="Call stack", default=None)
    module_hierarchy: Any = field(name="Module Hierarchy", default=None)
    # autograd: a forward op's node number; the backward's evaluate_function op repeats it (traceana.modules)
    seq: Id = field(name="Sequence number", default=None)
    # python_function events (with_stack=True): the Python call tree
    py_id: Any = field(name="Python id", default=None)
    py_parent: Any = field(name="Python parent id", default=None)
    py_module: Any = field(name="Python module id", default=None)
    # [memory] instant events (profile_memory=True). Typed Any, like the two above: a value of an
    # odd type is converted (or made unknown) column-wise, never a reason for the lenient decode.
    addr: Any = field(name="Addr", default=None)
    mem_bytes: Any = field(name="Bytes", default=None)
    total_allocated: Any = field(name="Total Allocated", default=None)
    total_reserved: Any = field(name="Total Reserved", default=None)
    device_type: Any = field(name="Device Type", default=None)
    device_id: Any = field(name="Device Id", default=None)


class Event(Struct, forbid_unknown_fields=False):
    ph: str = ""
    cat: Union[str, None] = None
    name: Union[str, None] = ""
    pid: Id = None
    tid: Id = None
    ts: Union[Num, None] = None
    dur: Union[Num, None] = None
    args: Union[Args, None] = None


class CommEvent(Struct, forbid_unknown_fields=False):
    """A record_param_comms event's args, read from its raw text (the C scanner hands over the
    text of each such event with its op row)."""

    args: Union[CommArgs, None] = None


class TraceDoc(Struct, forbid_unknown_fields=False):
    traceEvents: Union[list[Event], None] = None  # None: the key is missing, so not a trace
    deviceProperties: Union[list[dict[str, Any]], None] = None
    distributedInfo: Union[dict[str, Any], None] = None
    baseTimeNanoseconds: Union[int, None] = None
    record_shapes: Union[int, None] = None
    schemaVersion: Union[int, None] = None
    host_name: Any = None  # the machine that recorded the trace (torch >= 2.4 writes it)
    traceName: Union[str, None] = None
    # an annotated trace's header (traceana.annotate): the counter events it added are not the profiler's
    traceana: Union[dict[str, Any], None] = None


#: the header `traceana annotate` puts first: under "traceana", or "traceana_N" when the input already used
#: the string "traceana" (traceana.annotate.keys); its value starts with this
ANNOTATED_SCHEMA = b'{"schema":"traceana.annotated/'
ANNOTATED_KEY = re.compile(r"traceana_[1-9][0-9]{0,8}\Z")
_ANNOTATED_START = re.compile(rb'(?:\xef\xbb\xbf)?[ \t\r\n]*\{"(traceana_[1-9][0-9]{0,8})":\{"schema":"traceana\.annotated/')


def header_member(keys: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """The document's top-level (key, raw value) pairs with annotate's header, when it is the first under
    a "traceana_N" key, moved to "traceana" (where TraceDoc reads it; a user's own "traceana" member,
    the reason for the suffix, is dropped: it is not the profiler's either)."""
    if keys and ANNOTATED_KEY.match(keys[0][0]) and bytes(keys[0][1]).startswith(ANNOTATED_SCHEMA):
        return [("traceana", keys[0][1])] + [kv for kv in keys[1:] if kv[0] != "traceana"]
    return keys


def adopt_header(doc: TraceDoc, text: bytes) -> None:
    """doc.traceana = annotate's header when the text starts with it under a "traceana_N" key (one more
    decode of the text, skipping all but that member: only for such files)."""
    m = _ANNOTATED_START.match(bytes(text[:64]))
    if m is None:
        return
    head = msgspec.defstruct("_Head", [(m.group(1).decode(), Union[dict[str, Any], None], None)])
    try:
        doc.traceana = getattr(msgspec.json.decode(text, type=head), m.group(1).decode())
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass


DOC_DECODER = msgspec.json.Decoder(TraceDoc)
LIST_DECODER = msgspec.json.Decoder(list[Event])
EVENT_DECODER = msgspec.json.Decoder(Event)
COMM_EVENT_DECODER = msgspec.json.Decoder(CommEvent)
