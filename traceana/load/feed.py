"""The trace's text fed, piece by piece, through the C scanner (traceana/load/_scan.c).

Only msgspec and the scanner here, no numpy: `traceana report` starts this in a thread the
moment it starts (traceana.load.prefetch), and since the scanner releases the GIL while it scans,
the main thread imports numpy and the rest of traceana on the other core meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import msgspec

from traceana.load import _scan

#: bytes of the next piece joined to an unfinished event at first (grown while it stays unfinished)
_JOIN = 1 << 16


def scan(pieces: Iterable, progress: Callable[[float], None] | None = None) -> dict | None:
    """Feed the pieces through a Scanner; its result dict, or None when it leaves the text to
    the Python loader."""
    sc = _scan.Scanner(msgspec.json.decode)
    tail = b""
    try:
        for piece in pieces:
            tail = _feed(sc, tail, piece)
            if progress is not None:
                progress(getattr(pieces, "done", 0.0))
        sc.feed(tail, True)
        return sc.result()
    except _scan.Unsupported:
        return None


def _feed(sc, tail: bytes, piece: bytes) -> bytes:
    """Feed `tail` (the unfinished end of the text so far) and `piece`; the new unfinished end.
    The event that straddles the two is finished on a short join of the tail and the piece's
    start (grown until it fits), the rest of the piece is scanned in place."""
    view = memoryview(piece)
    start = 0
    k = _JOIN
    while tail:
        if k >= len(piece):
            text = tail + piece
            return text[sc.feed(text):]
        head = tail + view[:k]
        used = sc.feed(head)
        if used >= len(tail):
            start = used - len(tail)
            break
        tail = tail[used:]
        k *= 8
    used = sc.feed(view[start:])
    return bytes(view[start + used:])
