"""The fast load: the trace's text streamed through the C scanner (traceana/load/_scan.c).

A producer thread (traceana.load.prefetch.Pieces) reads the file and inflates it a piece at a time;
feed.py feeds each piece to the scanner as it arrives (in a thread started with the process,
when `traceana report` runs), so inflating, scanning and importing the rest of traceana
overlap, and no more than a few pieces of text are ever in memory.
The scanner fills the same columns columns.build_trace does; what needs Python's own
conversion rules comes back as fixups, converted here by the same functions.

`load(path, ...)` returns None whenever the scanner is not built, is switched off
(TRACEANA_PURE_PYTHON=1), or leaves the file to the Python loader (a type the typed decoder
refuses, invalid or truncated JSON, a bare event list...): the caller then loads the file the
Python way, which decides what such a file says. Results are identical either way (tested on
every shared trace).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache

import msgspec
import numpy as np

from traceana.load import prefetch
from traceana.load.columns import _blocks, _small_codes, assemble
from traceana.load.comm_args import comm_both
from traceana.load.decode import _as_int, _finite
from traceana.load.model import Trace
from traceana.load.schema import DOC_DECODER, header_member

try:
    from traceana.load import feed
except ImportError:  # the scanner is not built (no C compiler at install): the Python loader does everything
    feed = None

# the scanner's fixup column numbers, in its order (enum F_* in _scan.c), and how each converts
_FIXUP_COLUMNS = ("gp_device", "gp_pid", "gp_stream", "gp_corr", "gp_ext", "gp_gnode", "gp_bytes", "gp_blocks",
                  "op_ext", "op_kflop", "op_kgb", "la_corr", "la_ext",
                  "py_id", "py_parent", "py_module", "me_addr", "me_nbytes", "me_alloc", "me_reserved", "me_dtype",
                  "me_device", "op_seq")
_FLOAT_FIXUPS = frozenset({"gp_bytes", "op_kflop", "op_kgb", "me_alloc", "me_reserved"})
_MISSING_ZERO = frozenset({"me_addr", "me_nbytes"})  # absent or unreadable: 0, not -1
_DTYPES = {"name": np.int32, "thread": np.int32, "kernel": np.int32, "kind": np.int8, "ts": np.float64,
           "dur": np.float64, "end": np.float64, "bytes": np.float64, "blocks": np.float64, "groups": np.float64,
           "kflop": np.float64, "kgb": np.float64, "alloc": np.float64, "reserved": np.float64}


def available() -> bool:
    """True when the C scanner is built and not switched off."""
    return feed is not None and os.environ.get("TRACEANA_PURE_PYTHON", "") in ("", "0")


def load(path: str, st: os.stat_result, progress: Callable[[float], None] | None = None) -> Trace | None:
    """The trace through the C scanner, or None: the Python loader's turn (see the module doc)."""
    if not available():
        return None
    job = prefetch.take_scan(path, st)  # started when `traceana report` started, if it was
    if job is not None:
        result, pieces = job.result(progress), job.pieces
    else:
        pieces = prefetch.Pieces(path, st)
        try:
            result = feed.scan(pieces, progress)
        finally:
            pieces.close()
    if result is None or pieces.error is not None or not pieces.whole:
        return None
    if "late_names" not in result or "gp_ord" not in result:  # a scanner built from an older _scan.c: Python's turn
        return None
    try:
        doc = _document(result.pop("doc"))
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError):
        return None
    trace = _trace(path, doc, result)
    del result, pieces
    release_free_memory()
    return trace


def release_free_memory() -> None:
    """Hand the C allocator's free memory back to the system (glibc's malloc_trim; elsewhere nothing). The
    inflated pieces and the scanner's buffers, freed by now, are large blocks that glibc keeps for reuse once
    its adaptive threshold has risen past their size: ~100 MB at 1 GB of JSON, which would otherwise sit
    under the analysis' own peak."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's malloc_trim, or None (another C library)."""
    try:
        import ctypes

        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, ImportError):
        return None


def _document(keys: list[tuple[str, bytes]]) -> msgspec.Struct:
    """The document's other keys (deviceProperties, distributedInfo, ...) as the typed decoder
    reads them."""
    enc = msgspec.json.encode
    text = b"{" + b",".join(enc(k) + b":" + v for k, v in header_member(keys)) + b"}"
    return DOC_DECODER.decode(text)


def _late(table: list, local: list, seen: dict | None = None) -> np.ndarray:
    """int32 codes of the local table's entries in `table` (new ones appended, in local order);
    `seen`: table's entries -> codes, kept up to date across calls."""
    out = np.empty(len(local), np.int32)
    if not local:  # (no python_function / [memory] events: no map of every name to build)
        return out
    if seen is None:
        seen = {v: i for i, v in enumerate(table)}
    for i, v in enumerate(local):
        code = seen.get(v)
        if code is None:
            code = seen[v] = len(table)
            table.append(v)
        out[i] = code
    return out


def _strings(raw: dict[int, bytes]) -> dict[int, object]:
    """{op row: decoded value} of the ops' raw "Call stack" / "Module Hierarchy" texts, each distinct
    text decoded once."""
    done: dict[bytes, object] = {}
    out = {}
    for row, text in raw.items():
        v = done.get(text)
        if v is None:
            v = done[text] = msgspec.json.decode(text)
        out[row] = v
    return out


def _column(name: str, buf: bytearray) -> np.ndarray:
    kind = name.split("_", 1)[1]
    return np.frombuffer(buf, dtype=_DTYPES.get(kind, np.int64))


def _trace(path: str, doc, result: dict) -> Trace | None:
    cols = {k: (_column(k, v) if isinstance(v, bytearray) else v) for k, v in result.items()
            if k.startswith(("gp_", "op_", "la_", "an_", "py_", "me_"))}
    for col, row, raw in result["fixups"]:
        name = _FIXUP_COLUMNS[col]
        try:
            value = msgspec.json.decode(raw)
        except (msgspec.DecodeError, RecursionError):  # (a number out of range deep in an odd value)
            return None
        if name == "gp_blocks":
            blocks = _finite(_blocks(value))  # a grid no float holds (400 digits) is unknown, as on the Python path
            cols[name][row] = np.nan if blocks is None else blocks
        elif name in _FLOAT_FIXUPS:
            f = _finite(value)
            cols[name][row] = np.nan if f is None else f
        else:
            cols[name][row] = _as_int(value, 0 if name in _MISSING_ZERO else -1)
    names, threads = result["names"], result["threads"]
    # python_function / [memory] names and threads: their local codes, coded after every other event's
    # (Python calls' names, then their threads, then the [memory] events' threads), as build_trace does
    cols["py_name"] = _late(names, result["late_names"])[cols["py_name"]]
    seen = {t: i for i, t in enumerate(threads)}
    cols["py_thread"] = _late(threads, result["late_py_threads"], seen)[cols["py_thread"]]
    cols["me_thread"] = _late(threads, result["late_me_threads"], seen)[cols["me_thread"]]
    cols["me_dtype"] = _small_codes(cols["me_dtype"])
    try:
        cols["op_stack"], cols["op_hierarchy"] = _strings(cols["op_stack"]), _strings(cols["op_hierarchy"])
    except (msgspec.DecodeError, RecursionError):
        return None
    counts = {k: result[k] for k in ("n_events", "no_ph", "bad_time", "legacy", "t_min", "t_max")}
    trace = assemble(path, doc, [], names, threads, cols, counts)
    for row, raw in result["comm"]:  # record_param_comms ops' args, read from the op's own event
        ex, ids = comm_both(raw)
        if ex:
            trace.ops.extra[row] = ex
        if ids:
            trace.ops.comm_ids[row] = ids
    return trace
