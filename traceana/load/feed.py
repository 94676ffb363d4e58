"""The trace's text fed, piece by piece, through the C scanner (traceana/load/_scan.c).

Only the scanner here (msgspec when a value needs it), no numpy: `traceana report` starts this in a thread the
moment it starts (traceana.load.prefetch), and since the scanner releases the GIL while it scans,
the main thread imports numpy and the rest of traceana on the other core meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from traceana.load import _scan

#: bytes of the next piece joined to an unfinished event at first (grown while it stays unfinished)
_JOIN = 1 << 16


def scan(pieces: Iterable, progress: Callable[[float], None] | None = None,
         stats: dict | None = None) -> dict | None:
    """Feed the pieces through a Scanner; its result dict, or None when it leaves the text to
    the Python loader. `stats`, when given, gets "fed": the bytes handed to the scanner in all
    (the text's size plus what was scanned again: an unfinished value is re-scanned from its
    start when more text comes, so this shows the scan stays linear in the text)."""
    sc = _scan.Scanner(_decode)
    tail = b""
    held: list = []  # pieces kept back while an unfinished value is longer than what came since
    held_n = 0
    fed = [0]
    try:
        for piece in pieces:
            if len(tail) > len(piece) and held_n + len(piece) < len(tail):
                # one value longer than a piece: try it again only once as much text again has
                # come, so each byte is re-scanned a bounded number of times (a 64 MB value:
                # ~2x its size in all, not once per 8 MB piece from its start: quadratic)
                held.append(piece)
                held_n += len(piece)
            else:
                if held:
                    held.append(piece)
                    piece = b"".join(held)
                    held, held_n = [], 0
                tail = _feed(sc, tail, piece, fed)
            if progress is not None:
                progress(getattr(pieces, "done", 0.0))
        if held:
            tail = _feed(sc, tail, b"".join(held), fed)
        fed[0] += len(tail)
        sc.feed(tail, True)
        return sc.result()
    except _scan.Unsupported:
        return None
    finally:
        if stats is not None:
            stats["fed"] = fed[0]


def _decode(raw: bytes):
    """A value the scanner leaves to JSON (an escaped string, an odd number): msgspec imported on the first
    one, not when the scan starts, where the import would run in this thread alongside the main thread's
    (numpy's) and hold it up."""
    import msgspec

    return msgspec.json.decode(raw)


def _feed(sc, tail: bytes, piece: bytes, fed: list) -> bytes:
    """Feed `tail` (the unfinished end of the text so far) and `piece`; the new unfinished end.
    The event that straddles the two is finished on a short join of the tail and the piece's
    start (grown until it fits), the rest of the piece is scanned in place. A tail longer than
    the join (a value over a piece) is joined to the whole piece at once: scanned once more."""
    view = memoryview(piece)
    start = 0
    k = _JOIN
    while tail:
        if k >= len(piece) or len(tail) > k:
            text = tail + piece
            fed[0] += len(text)
            return text[sc.feed(text):]
        head = tail + view[:k]
        fed[0] += len(head)
        used = sc.feed(head)
        if used >= len(tail):
            start = used - len(tail)
            break
        tail = tail[used:]
        k *= 8
    fed[0] += len(piece) - start
    used = sc.feed(view[start:])
    return bytes(view[start + used:])
