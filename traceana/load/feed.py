"""The trace's text fed, piece by piece, through the C scanner (traceana/load/_scan.c).

Only the scanner here (msgspec when a value needs it), no numpy: `traceana report` starts this in a thread the
moment it starts (traceana.load.prefetch), and since the scanner releases the GIL while it scans,
the main thread imports numpy and the rest of traceana on the other core meanwhile.
"""

from __future__ import annotations

import os
import queue
import re
import threading
from collections.abc import Callable, Iterable

from traceana.load import _scan

#: bytes of the next piece joined to an unfinished event at first (grown while it stays unfinished)
_JOIN = 1 << 16
#: text of a piece from which most of it is scanned by fragment scanners on worker threads
SPLIT_MIN = 1 << 20
#: part-scanning threads at most (scan_workers)
MAX_WORKERS = 4
#: fragments tried before a text whose fragments are mostly dropped is scanned in one thread (_unrewarding)
GIVE_UP = 8
#: where an event may start: after `},` (whitespace around the comma allowed); only a guess, which the
#: scanner of the text before it confirms (see _finish)
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")


def scan(pieces: Iterable, progress: Callable[[float], None] | None = None,
         stats: dict | None = None, split: bool | None = None) -> dict | None:
    """Feed the pieces through a Scanner; its result dict, or None when it leaves the text to
    the Python loader. `stats`, when given, gets "fed": the bytes handed to the scanner in all
    (the text's size plus what was scanned again: an unfinished value is re-scanned from its
    start when more text comes, so this shows the scan stays linear in the text), "parts": the parts
    of pieces that fragment scanners scanned, "parts_adopted": those whose events were kept.
    `split`: scan most of each piece in fragments on worker threads (default: scan_workers() of them, none
    on one core; True: at least two); the result is the same either way."""
    n_workers = scan_workers() if split is None else max(2, scan_workers()) if split else 0
    sc = _scan.Scanner(_decode)
    tail = b""
    held: list = []  # pieces kept back while an unfinished value is longer than what came since
    held_n = 0
    fed = [0, 0, 0]  # bytes fed; fragments scanned; ... adopted
    workers = _Workers(n_workers) if n_workers else None  # (its threads start with the first fragment)
    ahead: _Plan | None = None  # the piece before, finished once this one's fragments are queued
    plan: _Plan | None = None
    try:
        for piece in pieces:
            plan = _plan(piece, fed, workers) if workers is not None else None
            if ahead is not None:
                tail = _finish(sc, tail, ahead, fed)
                ahead = None
            if len(tail) > len(piece) and held_n + len(piece) < len(tail):
                # one value longer than a piece: try it again only once as much text again has
                # come, so each byte is re-scanned a bounded number of times (a 64 MB value:
                # ~2x its size in all, not once per 8 MB piece from its start: quadratic)
                _drop(plan)
                held.append(piece)
                held_n += len(piece)
            elif held or plan is None:
                _drop(plan)
                if held:
                    held.append(piece)
                    piece = b"".join(held)
                    held, held_n = [], 0
                tail = _feed(sc, tail, piece, fed)
            else:
                ahead = plan
            if progress is not None:
                progress(getattr(pieces, "done", 0.0))
        if ahead is not None:
            tail = _finish(sc, tail, ahead, fed)
        if held:
            tail = _feed(sc, tail, b"".join(held), fed)
        fed[0] += len(tail)
        sc.feed(tail, True)
        return sc.result()
    except _scan.Unsupported:
        return None
    finally:
        if workers is not None:  # (on the way out early: what is still queued is not scanned)
            _drop(plan)
            _drop(ahead)
            workers.close()
        if stats is not None:
            stats["fed"] = fed[0]
            stats["parts"] = fed[1]
            stats["parts_adopted"] = fed[2]


def _decode(raw: bytes):
    """A value the scanner leaves to JSON (an escaped string, an odd number): msgspec imported on the first
    one, not when the scan starts, where the import would run in this thread alongside the main thread's
    (numpy's) and hold it up."""
    import msgspec

    return msgspec.json.decode(raw)


def scan_workers() -> int:
    """Threads that scan parts of pieces beside the document's scanner: none on one core; on more, one fewer
    than the cores this process may run on (one inflates), at least 2 and at most MAX_WORKERS (the parts of
    two pieces are in flight: more would hold more text than they gain where the inflating already keeps up
    only with ~4). TRACEANA_SCAN_THREADS=N sets it (1: the document's scanner alone)."""
    env = os.environ.get("TRACEANA_SCAN_THREADS", "").strip()
    if env.isdigit() and int(env) >= 1:
        n = int(env)
        return 0 if n == 1 else min(n, MAX_WORKERS)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return 0 if cores < 2 else min(max(2, cores - 1), MAX_WORKERS)


def _feed(sc, tail: bytes, piece: bytes, fed: list) -> bytes:
    """Feed `tail` (the unfinished end of the text so far) and `piece`; the new unfinished end.
    The event that straddles the two is finished on a short join of the tail and the piece's
    start (grown until it fits), the rest of the piece is scanned in place. A tail longer than
    the join (a value over a piece) is joined to the whole piece at once: scanned once more."""
    view = memoryview(piece)
    start = _join(sc, tail, view, fed)
    if start is None:
        view = memoryview(tail + piece)
        start = 0
    fed[0] += len(view) - start
    return bytes(view[start + sc.feed(view[start:]):])


def _join(sc, tail: bytes, view: memoryview, fed: list, k: int = _JOIN) -> int | None:
    """Finish the event that straddles `tail` and the piece (`view`) on joins of the tail and the piece's
    first k bytes (k grown while it stays unfinished); where in the piece the scanner got to, or None when
    the tail needs the whole piece."""
    while tail:
        if k >= len(view) or len(tail) > k:
            return None
        head = tail + view[:k]
        fed[0] += len(head)
        used = sc.feed(head)
        if used >= len(tail):
            return used - len(tail)
        tail = tail[used:]
        k *= 8
    return 0


def _unrewarding(fed: list) -> bool:
    """Have the fragments mostly been dropped so far (at least GIVE_UP tried, fewer than half kept)?
    A text whose `},{` often falls inside strings, or whose names are escaped throughout, then stops being
    split: each dropped fragment was scanned twice."""
    return fed[1] >= GIVE_UP and 2 * fed[2] < fed[1]


class _Job:
    """A fragment scanner over view[start:stop] (stop None: to the piece's end), scanned by a worker."""

    __slots__ = ("done", "dropped", "frag", "start", "stop", "used")

    def __init__(self, start: int, stop: int | None) -> None:
        self.start, self.stop = start, stop
        self.frag = _scan.Scanner(_decode, fragment=True)
        self.used: int | None = None  # bytes the fragment consumed; None: it failed (or was dropped)
        self.done = threading.Event()
        self.dropped = False  # of no use any more: a worker that has not started it skips it


class _Workers:
    """n threads that scan fragments in the order they are queued, so the cores stay busy while the
    scanner that adopts them waits for the one it needs next (a second thread per piece, joined before
    the next piece, left a core idle whenever one half ended first: ~1.55 of 2 cores busy on a 1.1 GB
    trace). Started with the first fragment; closed (joined) when the scan ends, whichever way."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(self, view: memoryview, job: _Job) -> None:
        if not self._threads:
            self._threads = [threading.Thread(target=self._run, name="traceana-scan-part", daemon=True)
                             for _ in range(self.n)]
            for t in self._threads:
                t.start()
        self._q.put((view, job))

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            view, job = item
            try:
                if not job.dropped:
                    job.used = job.frag.feed(view[job.start:job.stop])
            except Exception:  # noqa: BLE001, S110 -- the fragment's failure: the adopting scanner reads that text
                pass
            finally:
                job.done.set()

    def close(self) -> None:
        for _ in self._threads:
            self._q.put(None)
        for t in self._threads:
            t.join()


class _Plan:
    """A piece and its fragments (queued to the workers as soon as the piece came)."""

    __slots__ = ("jobs", "piece", "view")

    def __init__(self, piece: bytes, view: memoryview, jobs: list[_Job]) -> None:
        self.piece, self.view, self.jobs = piece, view, jobs


def _plan(piece: bytes, fed: list, workers: _Workers) -> _Plan:
    """The piece cut where events may start (guesses: `},{` a join's length in, and past each k-th of it
    for k workers: past its middle for two), each part from the first guess on queued to the workers as a
    fragment; none when it is short or the fragments have mostly been dropped."""
    view = memoryview(piece)
    n = len(view)
    jobs: list[_Job] = []
    if n >= SPLIT_MIN and not _unrewarding(fed):
        cuts: list[int] = []
        k = workers.n
        for at in (min(_JOIN, n // (2 * k)), *(n * i // k for i in range(1, k))):
            m = _BOUNDARY.search(view, max(at, cuts[-1] + 1 if cuts else 0))
            if m is not None:
                cuts.append(m.end() - 1)
        for i, cut in enumerate(cuts):
            jobs.append(_Job(cut, cuts[i + 1] if i + 1 < len(cuts) else None))
        for job in jobs:
            workers.submit(view, job)
    return _Plan(piece, view, jobs)  # (one view of the piece: the workers' and the adopting scanner's)


def _drop(plan: _Plan | None) -> None:
    """A plan not used (its piece is held back, or joined to a long tail): its fragments are skipped."""
    if plan is not None:
        for job in plan.jobs:
            job.dropped = True


def _finish(sc, tail: bytes, plan: _Plan, fed: list) -> bytes:
    """Feed `tail` and the planned piece; the new unfinished end. This scanner scans the join and
    whatever no fragment can stand for; a fragment's events are adopted when this scanner stands exactly
    at the fragment's start between two events, which proves the guess (its scan is the document's own,
    from the start); one that consumed all its part leaves this scanner between events at the next
    fragment's start. Otherwise, or when the fragment failed, this scanner reads its part itself. A
    fragment stops before anything that is not an event (the list's end, a value it leaves to the loader):
    this scanner reads on from there too, so errors are raised by it, as without the split."""
    view = plan.view
    pos = _join(sc, tail, view, fed, plan.jobs[0].start if plan.jobs else _JOIN)  # (ends at the first cut)
    if pos is None:  # the tail needs the whole piece: scanned here, the fragments let go
        _drop(plan)
        view = memoryview(tail + plan.piece)
        fed[0] += len(view)
        return bytes(view[sc.feed(view):])
    for job in plan.jobs:
        if pos < job.start:  # up to the fragment's start
            fed[0] += job.start - pos
            pos += sc.feed(view[pos:job.start])
        fed[1] += 1
        if pos == job.start and sc.between_events:
            job.done.wait()
            if job.used is not None:
                sc.adopt(job.frag)
                fed[0] += job.used
                fed[2] += 1
                pos = job.start + job.used
            job.frag = None  # (its columns are this scanner's now)
        else:  # the guess is not proven: a worker that has not started the part skips it
            job.dropped = True
        if job.stop is not None and pos < job.stop:  # the rest of its part (the last part's: below)
            fed[0] += job.stop - pos
            pos += sc.feed(view[pos:job.stop])
    fed[0] += len(view) - pos
    return bytes(view[pos + sc.feed(view[pos:]):])


