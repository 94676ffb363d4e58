"""Reading a Perfetto trace file: is it one (sniff), its bytes (gzip inflated) fed to the decoder a
piece at a time, one clear BadInput when it is not a valid trace, and the Trace (load)."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterator

from traceana.errors import BadInput
from traceana.load.pftrace.sniff import SUFFIXES, named_perfetto, sniff  # noqa: F401 (re-exported)
from traceana.load.pftrace.wire import WireError

_PIECE = 8 << 20
_READ = 1 << 20
_MAX_CHUNK = 1 << 28  # a compressed_packets chunk inflating past 256 MiB is not a profiler's


def _decoder(wanted: frozenset[bytes] | None):
    """The C decoder when it is built and not switched off (TRACEANA_PURE_PYTHON=1), else Python's."""
    if os.environ.get("TRACEANA_PURE_PYTHON", "") in ("", "0"):
        try:
            from traceana.load.pftrace._decode import Decoder

            return Decoder(inflate, WireError, None if wanted is None else set(wanted))
        except ImportError:
            pass
    from traceana.load.pftrace.pydecode import Decoder

    return Decoder(inflate, None if wanted is None else set(wanted))


def inflate(data: bytes) -> bytes:
    """A compressed_packets chunk: zlib (what Perfetto writes), or raw deflate."""
    for wbits in (15, -15):
        d = zlib.decompressobj(wbits)
        try:
            out = d.decompress(data, _MAX_CHUNK)
        except zlib.error:
            continue
        if d.unconsumed_tail:
            raise WireError(f"compressed packets that inflate past {_MAX_CHUNK >> 20} MiB")
        if d.eof:
            return out
    raise WireError("compressed packets that do not inflate (not zlib or deflate data)")


def pieces(path: str) -> Iterator[bytes]:
    """The file's bytes (gzip inflated, several members too) in pieces of about 8 MB."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        if not gz:
            while data := fh.read(_PIECE):
                yield data
            return
        d = zlib.decompressobj(31)
        while data := fh.read(_READ):
            while data:
                if d.eof:
                    d = zlib.decompressobj(31)
                out = d.decompress(data, _PIECE)
                if out:
                    yield out
                data = d.unused_data if d.eof else d.unconsumed_tail
        while not d.eof and (out := d.decompress(b"", _PIECE)):
            yield out
        if not d.eof:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")


def decode(path: str, progress: Callable[[float], None] | None = None, wanted: frozenset[bytes] | None = None) -> dict:
    """The file's table (see table.py), with the args named in `wanted` (None: every arg). BadInput, one
    line, when it is not a Perfetto trace."""
    dec = _decoder(wanted)
    size = max(os.path.getsize(path), 1)
    tail = b""
    seen = 0
    first = True
    try:
        for piece in pieces(path):
            if first:
                first = False
                if piece[:1] != b"\x0a":
                    raise BadInput(f"{path}: not a Perfetto trace (it starts with bytes {piece[:4].hex(' ')}, "
                                   "not a trace packet's 0a)")
            buf = tail + piece if tail else piece
            used = dec.feed(buf)
            tail = bytes(buf[used:])
            seen += len(piece)
            if progress is not None:
                progress(min(seen / size, 1.0))
        if first:
            raise BadInput(f"{path}: file is empty")
        if tail:
            dec.feed(tail, True)
    except WireError as exc:
        raise BadInput(f"{path}: not a valid Perfetto trace ({exc})") from None
    except (EOFError, zlib.error) as exc:
        raise BadInput(f"{path}: corrupt or truncated gzip data ({exc})") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None
    result = dec.result()
    if not len(result["ev_kind"]):
        raise BadInput(f"{path}: a Perfetto trace without track events (TrackEvent packets): nothing traceana "
                       "reads (a system trace?)")
    return result


def load(path: str, progress: Callable[[float], None] | None = None):
    """The Trace of a Perfetto trace file."""
    from traceana.load.pftrace.table import WANTED, build

    return build(path, decode(path, progress, WANTED))
