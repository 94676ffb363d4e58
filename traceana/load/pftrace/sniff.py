"""Is a file a Perfetto trace? Its name and first bytes say so (the report path asks this of every trace
it opens; the decoder, load/pftrace/read.py, is imported only for a file that is one)."""

from __future__ import annotations

import os
import zlib

#: names that say a file is a Perfetto trace (whatever its first bytes look like)
SUFFIXES = (".pftrace", ".perfetto-trace", ".perfetto", ".pb", ".proto", ".protobuf")
_BLANK = b" \t\r\n"


def named_perfetto(path: str) -> bool:
    p = path.lower()
    if p.endswith(".gz"):
        p = p[:-3]
    return p.endswith(SUFFIXES)


def _head(path: str, n: int = 64) -> bytes:
    """The file's first bytes (inflated when it is gzip); b"" when they cannot be read."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(4096)
    except OSError:
        return b""
    if data[:2] == b"\x1f\x8b":
        try:
            return zlib.decompressobj(31).decompress(data, n)
        except zlib.error:
            return b""
    return data[:n]


def sniff(path: str) -> bool:
    """Is the file a Perfetto trace? Its first byte is a trace packet's key (0x0a) and it does not read
    as JSON text ({ or [ after whitespace), unless its name says Perfetto; a file named .pftrace that
    is JSON is read as JSON (what torch writes when its backend has no Perfetto export)."""
    head = _head(path)
    if not head:
        return named_perfetto(path) and os.path.isfile(path) and os.path.getsize(path) > 0
    looks_json = head.lstrip(_BLANK)[:1] in (b"{", b"[")
    if head[:1] == b"\x0a" and (not looks_json or named_perfetto(path)):
        return True
    return named_perfetto(path) and not looks_json
