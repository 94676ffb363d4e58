"""Read a trace file (JSON or gzip JSON; a Perfetto trace: load/pftrace) into a Trace: one parse, typed,
then columns."""


from __future__ import annotations

import gc
import os
import stat
import zlib
from collections.abc import Callable
from typing import Union

import msgspec

from traceana.errors import BadInput
from traceana.load import pftrace
from traceana.load import prefetch
from traceana.load import stream
from traceana.load.model import Trace
from traceana.load.schema import LIST_DECODER, TraceDoc, adopt_header
from traceana.load.comm_parents import adopt_parent_messages
from traceana.load.layer_weights import attach_layer_weights
from traceana.load.columns import build_trace
from traceana.load.decode import _READ_ERRORS, _decode, _short


def _regular_file(path: str) -> os.stat_result:
    """The file's stat; one clear BadInput when it is missing, a directory or not a regular file."""
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
    return st


def read_bytes(path: str) -> bytes | bytearray:
    """The file's JSON text, gunzipped when it is gzip. One clear BadInput on any failure.
    Read by prefetch.read_text: inflated a bounded piece at a time, stopped early where the
    text cannot be JSON (its first byte, a NUL byte), whitespace padding kept short; so memory
    is bounded by what the text holds, not by how far it inflates."""
    st = _regular_file(path)
    data = prefetch.take(path, st)  # read and gunzipped meanwhile by `traceana report`, if it could
    if data is None:
        try:
            data = prefetch.read_text(path)
        except FileNotFoundError:
            raise BadInput(f"{path}: no such file") from None
        except (EOFError, zlib.error) as exc:
            raise BadInput(f"{path}: corrupt or truncated gzip data ({_short(exc)})") from None
        except OSError as exc:
            import gzip  # (its error class only: not on every report's path)

            if isinstance(exc, gzip.BadGzipFile):
                raise BadInput(f"{path}: corrupt or truncated gzip data ({_short(exc)})") from None
            raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None
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


def _named_gz_but_not_gzip(path: str) -> bool:
    """True when the file's name promises gzip (`.gz`) but its first bytes are not gzip's magic."""
    if not path.lower().endswith(".gz"):
        return False
    try:
        with open(path, "rb") as fh:
            return fh.read(2) != b"\x1f\x8b"
    except OSError:
        return False


def load_trace(path: str, stage: Callable[[str], None] | None = None,
               progress: Callable[[float], None] | None = None) -> Trace:
    """Parse the file once and split its events into columns by role. `stage(name)` is told
    when each stage starts (read, decode, columns): the progress bar, never per event;
    `progress(fraction)` how much of the file the streaming load has read (per piece)."""
    if stage:
        stage("read")
    # The decode makes millions of objects and none of them is in a reference cycle: the
    # cyclic collector would only walk them over and over (~1/3 of the decode's time).
    enabled = gc.isenabled()
    gc.disable()
    try:
        st = _regular_file(path)
        if stage:
            stage("decode")
        if pftrace.sniff(path):  # a Perfetto trace (torch.profiler's .pftrace export)
            trace = _load_perfetto(path, st, stage, progress)
        else:
            trace = stream.load(path, st, progress)  # the C scanner, streaming; None: the Python way
        if trace is not None and stage:
            stage("columns")
        if trace is None:
            trace = _load_python(path, stage)
        adopt_parent_messages(trace)
        attach_layer_weights(trace)
        return trace
    finally:
        if enabled:
            gc.enable()


def _load_perfetto(path: str, st: os.stat_result, stage: Callable[[str], None] | None,
                   progress: Callable[[float], None] | None) -> Trace:
    job = prefetch.take_scan(path, st)  # a JSON scan `traceana report` may have started: not needed
    if job is not None:
        job.close()
    trace = pftrace.load(path, progress)
    if stage:
        stage("columns")
    return trace


def _load_python(path: str, stage: Callable[[str], None] | None) -> Trace:
    data = read_bytes(path)
    first = None
    try:
        raw = _RAW_DOC_DECODER.decode(data)
    except msgspec.ValidationError:  # (a DecodeError too: first) JSON, of another shape
        raw = None
    except _READ_ERRORS as exc:  # not JSON msgspec reads: _decode decides from this error alone
        raw, first = None, exc
    if raw is not None:
        adopt_header(raw, data)  # an annotated trace's header under "traceana_N"
    trace = _load_chunked(path, raw, stage) if raw is not None else None
    if trace is None:
        try:
            doc, warnings = _decode(path, data, first)
        except BadInput as exc:
            if "not valid JSON" in str(exc) and _named_gz_but_not_gzip(path):
                raise BadInput(f"{path}: not gzip (the name ends in .gz but the file does not start with "
                               "gzip's magic bytes 1f 8b) and not JSON text either") from None
            raise
        del data
        if stage:
            stage("columns")
        trace = build_trace(path, doc, warnings)
    return trace


class _RawDoc(TraceDoc):
    """The document with each event left as raw JSON (a zero-copy view into the text)."""

    traceEvents: Union[list[msgspec.Raw], None] = None  # noqa: N815 (the trace's own key)


_RAW_DOC_DECODER = msgspec.json.Decoder(_RawDoc)
#: Events decoded at a time: the decoded structs (~650 B/event) then live only one chunk long.
CHUNK_EVENTS = 20_000


def _load_chunked(path: str, doc: _RawDoc, stage: Callable[[str], None] | None) -> Trace | None:
    """The lean path: split the event list into raw events (cheap: no objects but a view per
    event), then decode and column them CHUNK_EVENTS at a time, so the typed events never all
    exist at once (a 1.1 GB trace: peak 3.4 GB -> about 1.6). None when the file is anything
    but a well-formed, well-typed {"traceEvents": [...]} document: the caller then takes the
    one-shot path, whose error handling and lenient fallbacks decide what the file says.
    `doc`: the text decoded as a _RawDoc."""
    raws = doc.traceEvents
    if raws is None:
        return None

    def chunks():
        for i in range(0, len(raws), CHUNK_EVENTS):
            part = raws[i:i + CHUNK_EVENTS]
            # one copy of the chunk's text: the brackets ride on its first and last events
            part[0] = b"[" + bytes(part[0])
            part[-1] = (bytes(part[-1]) if len(part) > 1 else part[-1]) + b"]"
            yield LIST_DECODER.decode(b",".join(part))

    if stage:
        stage("columns")
    try:
        return build_trace(path, doc, [], chunks())
    except _READ_ERRORS:
        return None


# Event roles by `cat`: 0 GPU event (kernel / memcpy / memset), 1 cpu op, 2 launch, 3 annotation.
