"""The trace's text fed, piece by piece, through the C scanner (traceana/load/_scan.c).

Only the scanner here (msgspec when a value needs it), no numpy: `traceana report` starts this in a thread the
moment it starts (traceana.load.prefetch), and since the scanner releases the GIL while it scans,
the main thread imports numpy and the rest of traceana on the other core meanwhile.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable

from traceana.load import _scan

#: bytes of the next piece joined to an unfinished event at first (grown while it stays unfinished)
_JOIN = 1 << 16
#: text of a piece from which its second half is scanned by a second thread (a fragment scanner)
SPLIT_MIN = 1 << 20
#: second halves tried before a text whose halves are mostly dropped is scanned in one thread (_unrewarding)
GIVE_UP = 8
#: where an event may start: after `},` (whitespace around the comma allowed); only a guess, which the
#: scanner of the text before it confirms (see _two_halves)
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")


def scan(pieces: Iterable, progress: Callable[[float], None] | None = None,
         stats: dict | None = None, split: bool | None = None) -> dict | None:
    """Feed the pieces through a Scanner; its result dict, or None when it leaves the text to
    the Python loader. `stats`, when given, gets "fed": the bytes handed to the scanner in all
    (the text's size plus what was scanned again: an unfinished value is re-scanned from its
    start when more text comes, so this shows the scan stays linear in the text), "halves": the pieces
    whose second half a second thread scanned, "halves_adopted": those whose second half was kept.
    `split`: scan each piece's second half in a second thread (default: when this process may run on
    two cores or more, unless TRACEANA_SCAN_THREADS=1); the result is the same either way."""
    if split is None:
        split = two_cores()
    sc = _scan.Scanner(_decode)
    tail = b""
    held: list = []  # pieces kept back while an unfinished value is longer than what came since
    held_n = 0
    fed = [0, 0, 0]  # bytes fed; pieces scanned in two halves; ... whose second half was adopted
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
                tail = _feed(sc, tail, piece, fed, split)
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
            stats["halves"] = fed[1]
            stats["halves_adopted"] = fed[2]


def _decode(raw: bytes):
    """A value the scanner leaves to JSON (an escaped string, an odd number): msgspec imported on the first
    one, not when the scan starts, where the import would run in this thread alongside the main thread's
    (numpy's) and hold it up."""
    import msgspec

    return msgspec.json.decode(raw)


def two_cores() -> bool:
    """Whether a second scanning thread can run beside the first: two cores or more for this process."""
    if os.environ.get("TRACEANA_SCAN_THREADS", "").strip() == "1":
        return False
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return n >= 2


def _feed(sc, tail: bytes, piece: bytes, fed: list, split: bool = False) -> bytes:
    """Feed `tail` (the unfinished end of the text so far) and `piece`; the new unfinished end.
    The event that straddles the two is finished on a short join of the tail and the piece's
    start (grown until it fits), the rest of the piece is scanned in place. A tail longer than
    the join (a value over a piece) is joined to the whole piece at once: scanned once more."""
    view = memoryview(piece)
    start = 0
    k = _JOIN
    while tail:
        if k >= len(piece) or len(tail) > k:
            view = memoryview(tail + piece)
            return bytes(view[_rest(sc, view, 0, fed, split):])
        head = tail + view[:k]
        fed[0] += len(head)
        used = sc.feed(head)
        if used >= len(tail):
            start = used - len(tail)
            break
        tail = tail[used:]
        k *= 8
    return bytes(view[_rest(sc, view, start, fed, split):])


def _rest(sc, view: memoryview, start: int, fed: list, split: bool) -> int:
    """Scan view[start:] (start: an event's start, or between two); the position reached (the rest
    is an unfinished event). A long one in two halves at once when `split`."""
    n = len(view)
    if split and n - start >= SPLIT_MIN and not _unrewarding(fed):
        m = _BOUNDARY.search(view, start + (n - start) // 2)
        if m is not None:
            return _two_halves(sc, view, start, m.end() - 1, fed)
    fed[0] += n - start
    return start + sc.feed(view[start:])


def _unrewarding(fed: list) -> bool:
    """Have the second halves mostly been dropped so far (at least GIVE_UP tried, fewer than half kept)?
    A text whose `},{` often falls inside strings, or whose names are escaped throughout, then stops being
    split: each dropped half was scanned twice."""
    return fed[1] >= GIVE_UP and 2 * fed[2] < fed[1]


def _two_halves(sc, view: memoryview, start: int, half: int, fed: list) -> int:
    """Scan view[start:half] here while a fragment scanner scans view[half:] in a thread, `half` being
    where an event may start. The fragment's events are adopted when this scanner stops exactly at
    `half` between two events, which proves the guess (its scan is the document's own, from the
    start); otherwise, or when the fragment failed, this scanner reads on from where it stopped. The
    fragment stops before anything that is not an event (the list's end, a value it leaves to the
    loader): this scanner reads on from there too, so errors are raised by it, as without the split."""
    frag = _scan.Scanner(_decode, fragment=True)
    got: list[int] = []

    def run() -> None:
        try:
            got.append(frag.feed(view[half:]))
        except Exception:  # noqa: BLE001, S110 -- the fragment's failure: this scanner reads that text itself
            pass

    th = threading.Thread(target=run, name="traceana-scan-half", daemon=True)
    th.start()
    try:
        used = sc.feed(view[start:half])
    finally:
        th.join()
    fed[0] += len(view) - start
    fed[1] += 1
    if used == half - start and sc.between_events and got:
        sc.adopt(frag)
        fed[2] += 1
        pos = half + got[0]
    else:
        pos = start + used
    fed[0] += len(view) - pos
    return pos + sc.feed(view[pos:])
