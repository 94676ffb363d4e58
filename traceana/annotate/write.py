"""`traceana annotate`: the analysis, then the trace written again with its verdicts (streaming).

prepare() turns the Analysis and its Parts into what the streaming pass needs (a payload code per
event place, the payloads, the counter tracks) so the caller can drop the trace's columns before
the text is read again; write() streams the original file through rewrite.Rewriter into OUT
(gzip when OUT ends in .gz) via safe_write (a temporary file renamed into place).

The annotated document starts with `{"traceana":{"schema":"traceana.annotated/1",...},` — the
marker ownership.py reads to tell an annotated trace traceana wrote (inflating the first bytes of a
.gz) — followed by the original document's members, unchanged but for the added args and events.
Every addition lives under one key, "traceana" unless the input uses that string (then "traceana_1",
...: keys.py), found in a first pass over the text, so stripping gives back every user value.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec
import numpy as np

from traceana import __version__
from traceana.analysis import Parts
from traceana.annotate import counters
from traceana.annotate.keys import free_key
from traceana.annotate.rewrite import Rewriter, top_level_keys
from traceana.annotate.verdicts import event_codes
from traceana.errors import BadInput
from traceana.output.safe_write import replace_file

SCHEMA = "traceana.annotated/1"
#: the first bytes of every annotated trace traceana writes (inflated, for .gz), when its key is "traceana"
MARKER = b'{"traceana":{"schema":"' + SCHEMA.encode() + b'"'
_OUT_PIECE = 1 << 20
PIECE = 2 << 20  # bytes of text per piece
_READ = 1 << 20  # compressed bytes read at a time


@dataclass
class Prepared:
    codes: np.ndarray  # int32 payload index per place in traceEvents, -1: none
    payloads: list[bytes]
    tracks: dict  # counters.tracks
    n_counters: int


@dataclass(frozen=True)
class Written:
    events: int  # events of the original traceEvents
    annotated: int  # of which carry a verdict now
    skipped: int  # with a verdict but args that is not an object (left unchanged)
    counters: int  # counter events added
    max_buffer: int  # the largest text buffer the pass held (bytes)


def prepare(analysis: dict, parts: Parts) -> Prepared:
    codes, payloads = event_codes(analysis, parts)
    tracks = counters.tracks(analysis, parts)
    return Prepared(codes, payloads, tracks, counters.count(tracks))


def header(source: str, prep: Prepared, key: str = "traceana") -> bytes:
    """The document's first member's value (its first key is `schema`: the ownership marker). `key`: the
    member's name, the args key and the added events' category (keys.free_key)."""
    head = {"schema": SCHEMA, "tool": f"traceana {__version__}", "source": source,
            "args_key": key, "events_cat": key, "counter_events": prep.n_counters,
            "strip": f"remove this member, args.{key} from every event (and args itself where "
                     f"args.{key}.args_added is true), and every event whose cat is '{key}': the original"}
    return msgspec.json.encode(head)


class _Sink:
    """Bytes to a file descriptor, deflated to gzip when asked, in writes of about _OUT_PIECE."""

    def __init__(self, fd: int, gz: bool) -> None:
        self.fd = fd
        self.z = _deflater() if gz else None
        self.parts: list[bytes] = []
        self.size = 0

    def __call__(self, data) -> None:
        if not len(data):
            return
        self.parts.append(data)
        self.size += len(data)
        if self.size >= _OUT_PIECE:
            self._out(b"".join(self.parts))
            self.parts, self.size = [], 0

    def _out(self, data: bytes) -> None:
        if self.z is not None:
            data = self.z.compress(data)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def close(self) -> None:
        self._out(b"".join(self.parts))
        self.parts = []
        if self.z is not None:
            tail = self.z.flush()
            self.z = None
            self._out(tail)


def _deflater():
    """A gzip compressor: ISA-L's (several times faster than zlib at its fast levels) when installed."""
    lib = _zlib()
    return lib.compressobj(1, lib.DEFLATED, 31)


def write(trace_path: str, st: os.stat_result, out: str, prep: Prepared) -> Written:
    """Stream `trace_path` (the file `st` describes: the one analysed) into `out`, annotated."""
    try:
        with open(trace_path, "rb") as fh:
            key = free_key(text_pieces(fh))
    except (OSError, EOFError, zlib.error, _zlib().error) as exc:
        raise _read_error(trace_path, exc) from None
    head = header(os.path.basename(trace_path), prep, key)
    done: list[Written] = []

    def fill(fd: int) -> None:
        sink = _Sink(fd, out.endswith(".gz"))
        rw = Rewriter(prep.codes, prep.payloads, counters.encoded(prep.tracks, key), head, sink, key)
        try:
            with open(trace_path, "rb") as fh:
                rw.run(text_pieces(fh))
        except BadInput as exc:
            _two_lists(trace_path)
            raise BadInput(f"{trace_path}: cannot annotate: {exc}") from None
        except (OSError, EOFError, zlib.error, _zlib().error) as exc:
            raise _read_error(trace_path, exc) from None
        if rw.events != len(prep.codes):
            _two_lists(trace_path)
            raise BadInput(f"{trace_path}: cannot annotate: {rw.events} events in traceEvents, "
                           f"{len(prep.codes)} when it was analysed (events that could not be read, or it changed)")
        if _key(os.stat(trace_path)) != _key(st):
            raise BadInput(f"{trace_path}: changed while it was being annotated")
        sink.close()
        done.append(Written(rw.events, rw.annotated, rw.skipped, prep.n_counters, rw.max_buffer))

    replace_file(out, fill)
    return done[0]


def _two_lists(trace_path: str) -> None:
    """BadInput when the document has two top-level traceEvents members (the real reason its events and
    the analysis's differ: the loaders read the last list, as JSON readers do; the rewrite met the first)."""
    try:
        with open(trace_path, "rb") as fh:
            n = top_level_keys(text_pieces(fh)).count("traceEvents")
    except (BadInput, OSError, EOFError, zlib.error, _zlib().error):
        return
    if n > 1:
        raise BadInput(f"{trace_path}: cannot annotate: {n} top-level 'traceEvents' lists (a JSON reader keeps "
                       "the last, and so did the analysis); keep one")


def text_pieces(fh, piece: int = PIECE) -> Iterator[bytes]:
    """The file's text in pieces of at most `piece` bytes, gzip inflated as it goes (several members
    too; ISA-L's inflate when installed). EOFError when a gzip stream is cut short."""
    gz = fh.read(2) == b"\x1f\x8b"
    fh.seek(0)
    if not gz:
        while data := fh.read(piece):
            yield data
        return
    lib = _zlib()
    d = lib.decompressobj(31)
    while data := fh.read(_READ):
        while data:
            if d.eof:  # another gzip member follows (cat a.gz b.gz)
                d = lib.decompressobj(31)
            out = d.decompress(data, piece)
            if out:
                yield out
            data = d.unused_data if d.eof else d.unconsumed_tail
    while not d.eof and (out := d.decompress(b"", piece)):  # output still held back
        yield out
    if not d.eof:
        raise EOFError("compressed file ended before the end-of-stream marker was reached")


def _zlib():
    try:
        from isal import isal_zlib

        return isal_zlib
    except ImportError:
        return zlib


def _key(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read_error(path: str, exc: BaseException) -> BadInput:
    return BadInput(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}")
