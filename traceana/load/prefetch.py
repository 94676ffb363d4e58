"""Read, inflate and scan a trace in background threads while the interpreter imports the rest.

`traceana report TRACE` spends its first ~0.2 s importing numpy, jinja2 and the cost formulas;
reading the file, inflating it and scanning it (zlib, ISA-L and the C scanner all release the
GIL) can run meanwhile on the other core.

Two ways, chosen by `start(path, pieces=...)`:
- pieces (the C scanner is built): a `Pieces` producer reads and inflates the file a piece of
  PIECE bytes of text at a time into a bounded queue, so at most DEPTH pieces are ever held,
  and a `Scan` thread feeds them to the scanner as they come. `take_scan(path, stat)` hands
  the scan over (None when the file changed since, or nothing was started).
- whole (the Python loader): the whole text is read into memory; `take(path, stat)` waits for
  it and returns it only if the file is still the one read (same inode, size and mtime).
Any failure in the thread is kept, not raised: the loader then reads the file again its own
way and reports it, so errors are unchanged. Only the standard library here, so starting
costs nothing.

No thread outlives its work: every one is stopped (an event checked around each queue put and
get, and between pieces) and joined on every way out: the load taken over, the command failing
before it loads (`discard()`, which the command line runs when any command ends), an iterator
left unfinished (its generator's close stops the producer). A scan or read started and then
forgotten used to stay blocked on its queue for the life of the process, holding its pieces.
"""

from __future__ import annotations

import os
import queue
import re
import stat
import threading
import zlib
from collections.abc import Iterator

_jobs: dict[str, tuple[threading.Thread, list, tuple]] = {}
_streams: dict[str, Scan] = {}

#: bytes of JSON text per piece, and pieces the queue holds at most
PIECE = 8 << 20
DEPTH = 3  # 24 MB of text: the inflating keeps ahead of the scanner, which is the slower of the two
_READ = 1 << 20  # compressed bytes read at a time


#: whitespace kept of one run (padding): the rest of the run is dropped as it is inflated
MAX_BLANK = 1 << 20
_BLANK = b" \t\r\n"
_QUOTE_OR_ESCAPE = re.compile(rb'\\.|"', re.S)


def read_text(path: str, stop: threading.Event | None = None) -> bytearray:
    """The file's text (gzip inflated a bounded piece at a time, its CRC and size checked),
    bounded by what the text holds, not by how long it is:
    - a UTF-8 byte-order mark at the start is dropped;
    - a file whose first byte that is not whitespace is neither `{` nor `[` is not JSON text:
      reading stops there (the decode then names that byte);
    - the text ends at its first NUL byte: no JSON text holds one, so nothing after it can make
      the file readable (a 10 GiB gzip of zeros stops after its first piece);
    - a run of whitespace between tokens that goes on over whole pieces (padding) keeps
      MAX_BLANK of it; a run inside a string (spaces only: JSON strings hold no raw newline or
      tab) is kept whole.
    A bytearray (grown in place, never copied whole: peak = text + a piece). OSError, EOFError
    and zlib.error as the file and zlib raise them. `stop`: when set, reading ends at the next
    piece (Stopped: the text is not whole)."""
    out = bytearray()
    blank = 0  # length of the whitespace run `out` ends with
    strings = _Strings()
    started = False
    with open(path, "rb") as fh:
        for text in _inflated(fh):
            if stop is not None and stop.is_set():
                raise Stopped(path)
            if not started:
                if not out and text[:3] == b"\xef\xbb\xbf":
                    text = text[3:]
                head = text.lstrip(_BLANK)
                if not head:  # whitespace before the first token: none of it matters
                    blank = min(blank + len(text), MAX_BLANK)
                    out[:] = b" " * blank
                    continue
                started = True
                if head[:1] not in (b"{", b"["):  # not JSON text: enough for the decode to name the byte
                    out += text[:len(text) - len(head) + 64]
                    return out
            nul = text.find(b"\0")
            if nul >= 0:
                out += text[:nul + 1]
                return out
            body = text.lstrip(_BLANK)
            lead = len(text) - len(body)
            if blank + lead > MAX_BLANK and strings.droppable(out, blank, text[:lead]):
                keep = max(0, MAX_BLANK - blank)
                out += text[:keep]
                blank += keep
                text = body
                if not body:  # the run goes on over the whole piece
                    continue
            out += text
            blank = blank + len(text) if not body else len(text) - len(text.rstrip(_BLANK))
    return out


class Stopped(Exception):
    """A read stopped before its end (the reading was discarded)."""


class _Strings:
    """Is a place in the text inside a string? Found by scanning for quotes and escapes, only
    when asked (a long whitespace run), and only the text not scanned before."""

    def __init__(self) -> None:
        self.pos = 0
        self.inside = False

    def droppable(self, out: bytearray, blank: int, more: bytes) -> bool:
        """Can `more` whitespace, continuing the run of `blank` bytes `out` ends with, be
        dropped? Yes when the run holds a newline, tab or CR (so it is between tokens, or the
        text is not JSON anyway) or starts outside every string."""
        if any(c in more for c in b"\t\r\n") or any(c in out[len(out) - blank:] for c in b"\t\r\n"):
            return True
        end = len(out) - blank
        for m in _QUOTE_OR_ESCAPE.finditer(out, self.pos, end):
            if m.end() - m.start() == 1:
                self.inside = not self.inside
        self.pos = end
        return not self.inside


def _inflated(fh, lib=zlib, on_read=None) -> Iterator[bytes]:
    """The file's bytes in pieces of at most PIECE: inflated by `lib` (zlib or ISA-L's) when it
    is gzip (several members too), as they are otherwise. `on_read(n)`: n more bytes read."""
    gz = fh.read(2) == b"\x1f\x8b"
    fh.seek(0)
    d = lib.decompressobj(31) if gz else None
    while True:
        data = fh.read(_READ if gz else PIECE)
        if not data:
            break
        if on_read is not None:
            on_read(len(data))
        if d is None:
            yield data
            continue
        while True:
            if d.eof and data:  # another gzip member follows (cat a.gz b.gz)
                d = lib.decompressobj(31)
            out = d.decompress(data, PIECE)
            if out:
                yield out
            data = d.unused_data if d.eof else d.unconsumed_tail
            if not data and (d.eof or not out):  # (input used up with output pending: call again)
                break
    if d is not None and not d.eof:
        raise EOFError("compressed file ended before the end-of-stream marker was reached")


def _key(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _inflater():
    """ISA-L's zlib (the isal package: inflates ~3.5x faster, same checks and errors' meaning)
    when installed, else zlib. Imported in the reading thread, so it costs the main one nothing."""
    try:
        from isal import isal_zlib

        return isal_zlib
    except ImportError:
        return zlib


class Pieces:
    """The file's JSON text as pieces of up to PIECE bytes (gzip inflated, its CRC and size checked by
    zlib). Iterate it once; when reading failed, iteration ends early and `error` holds why (the caller
    then reads the file its own way); `whole` says whether every piece was handed over (not when closed
    meanwhile). `done` is the fraction of the file read so far (the progress bar).

    Who inflates: a daemon thread into a queue of DEPTH pieces, so that inflating and scanning run on
    two cores. With `inline_until` (an Event), the consumer inflates each piece itself until the event
    is set, and the thread takes over from there: while `traceana report` imports on the main thread,
    a second reading thread would only share the one free core three ways (the imports slowed by ~10%,
    OWLv2's load no sooner done); once the main thread waits for the load, the cores are free for both."""

    def __init__(self, path: str, st: os.stat_result, inline_until: threading.Event | None = None) -> None:
        self.path = path
        self.key = _key(st)
        self.size = max(st.st_size, 1)
        self.read = 0
        self.error: BaseException | None = None
        self.whole = False  # iteration reached the end marker: every piece was handed over
        self._q: queue.Queue = queue.Queue(DEPTH)
        self._stop = threading.Event()
        self._inline = inline_until
        self._starting = threading.Lock()  # the thread started, or the reading stopped: one or the other
        self._source = self._pieces()  # the pieces, produced by whichever thread runs it (never two at once)
        self._thread = threading.Thread(target=self._run, name="traceana-pieces", daemon=True)
        if inline_until is None:
            self._thread.start()

    @property
    def done(self) -> float:
        return min(self.read / self.size, 1.0)

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _texts(self, fh) -> Iterator[bytes]:
        def count(n: int) -> None:
            self.read += n

        return _inflated(fh, _inflater(), count)

    def _pieces(self) -> Iterator[bytes]:
        """The text in pieces of up to PIECE bytes (each inflated part of a quarter piece or more as it is,
        smaller ones joined up to that); a failure is kept in `error` and ends them."""
        try:
            with open(self.path, "rb") as fh:
                parts: list[bytes] = []
                size = 0
                for text in self._texts(fh):
                    if self._stop.is_set():
                        return
                    # inflated text comes in parts of up to PIECE (the rest of each compressed read
                    # smaller): a part of a quarter piece or more is a piece as it is, only smaller ones
                    # are joined (joining every piece to a full one copied ~3% of the report's CPU)
                    if len(text) >= PIECE // 4:
                        if parts:
                            yield b"".join(parts)
                            parts, size = [], 0
                        yield text
                        continue
                    parts.append(text)
                    size += len(text)
                    if size >= PIECE // 4:
                        yield b"".join(parts)
                        parts, size = [], 0
                if parts:
                    yield b"".join(parts)
        except GeneratorExit:  # closed: stopped
            raise
        except BaseException as exc:  # noqa: BLE001 - the loader reads again and says what is wrong
            self.error = exc

    def _run(self) -> None:
        for piece in self._source:
            if not self._put(piece):
                self._source.close()
                return
        self._put(None)

    def __iter__(self) -> Iterator[bytes]:
        """The pieces in order; ends early when closed (or the producer ended without its end
        marker). Left unfinished, the generator's close (or its collection) stops the producer."""
        try:
            if self._inline is not None:
                while not self._inline.is_set():
                    piece = next(self._source, None)
                    if piece is None:
                        self.whole = not self._stop.is_set()  # (a failure is in `error`)
                        return
                    if self._stop.is_set():
                        return
                    yield piece
                with self._starting:
                    if self._stop.is_set():
                        return
                    self._thread.start()  # the rest inflated on the other core, meanwhile
            while not self._stop.is_set():
                try:
                    item = self._q.get(timeout=0.1)
                except queue.Empty:
                    if not self._thread.is_alive() and self._q.empty():
                        break
                    continue
                if item is None:
                    self.whole = True  # (a failure is in `error`)
                    return
                if self._stop.is_set():
                    break
                yield item
        finally:
            self._stop.set()
            with self._starting:
                if self._thread.ident is None:  # inflated here all along: the file closed now, not at collection
                    self._source.close()

    def close(self) -> None:
        """Stop the thread (it ends at its next piece or queue put), drop what it queued, and
        wait for it to end."""
        self._stop.set()
        self._drain()
        with self._starting:
            started = self._thread.ident is not None
        if started and self._thread is not threading.current_thread():
            self._thread.join()
        self._drain()

    def _drain(self) -> None:
        try:
            while True:
                self._q.get_nowait()
        except queue.Empty:
            pass


def scanner_built() -> bool:
    """Is the C scanner built (traceana/load/_scan*.so) and not switched off? Checked by file
    name, so that no import of the loader is paid for before the prefetch starts."""
    if os.environ.get("TRACEANA_PURE_PYTHON", "") not in ("", "0"):
        return False
    from importlib.machinery import EXTENSION_SUFFIXES

    here = os.path.dirname(os.path.abspath(__file__))
    return any(os.path.exists(os.path.join(here, "_scan" + suffix)) for suffix in EXTENSION_SUFFIXES)


class Scan:
    """The C scanner run over a Pieces producer in a daemon thread (traceana.load.feed; imported
    in that thread, and it needs no numpy). The scanner releases the GIL while it scans, so the
    main thread goes on importing meanwhile. `result(progress)` waits for it."""

    def __init__(self, pieces: Pieces, waiting: threading.Event | None = None) -> None:
        self.pieces = pieces
        self._waiting = waiting  # set when the main thread waits for the result (Pieces' inline_until)
        self.key = pieces.key
        self._out: list = []
        self._thread = threading.Thread(target=self._run, name="traceana-scan", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            from traceana.load import feed

            out = feed.scan(self.pieces)
            if self.pieces.whole:  # (closed meanwhile: a part of the text, of no use)
                self._out.append(out)
        except BaseException:  # noqa: BLE001 - (an import or memory error) the loader then reads the Python way
            pass
        finally:
            self.pieces.close()

    def result(self, progress=None) -> dict | None:
        """The scanner's result dict, or None (it stepped aside, or failed)."""
        if self._waiting is not None:
            self._waiting.set()  # this thread only waits from now on: the reading may take the other core
        while self._thread.is_alive():
            self._thread.join(0.1)
            if progress is not None:
                progress(self.pieces.done)
        self.pieces.close()
        return self._out[0] if self._out else None

    def close(self) -> None:
        """Stop the producer (the scan then ends at the text it has) and wait for both threads."""
        self.pieces.close()
        self._thread.join()
        self._out.clear()


def start(path: str, pieces: bool | None = None) -> None:
    """Begin reading `path` in a daemon thread (regular files only: a FIFO would block): as
    pieces scanned meanwhile by the C scanner (the default when it is built), or whole."""
    discard()
    if pieces is None:
        pieces = scanner_built()
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return
    if not stat.S_ISREG(st.st_mode):
        return
    if pieces:
        waiting = threading.Event()
        _streams[path] = Scan(Pieces(path, st, inline_until=waiting), waiting)
        return
    box: list = []
    stop = threading.Event()

    def work() -> None:
        try:
            box.append(read_text(path, stop))
        except BaseException:  # noqa: BLE001 - read_bytes reads again and says what is wrong
            pass

    t = threading.Thread(target=work, name="traceana-prefetch", daemon=True)
    t.start()
    _jobs[path] = (t, box, _key(st), stop)


def take(path: str, st: os.stat_result) -> bytes | None:
    """The prefetched text of `path` if it is still the same file, else None."""
    stream = _streams.pop(path, None)
    if stream is not None:  # started for the scanner, which then could not be loaded
        stream.close()
    job = _jobs.pop(path, None)
    if job is None:
        return None
    t, box, key, _ = job
    t.join()
    if box and key == _key(st):
        return box[0]
    return None


def take_scan(path: str, st: os.stat_result) -> Scan | None:
    """The scan started for `path` if it is still the same file, else None (and it stops)."""
    job = _streams.pop(path, None)
    if job is not None and job.key != _key(st):
        job.close()
        return None
    return job


def discard() -> None:
    """Stop every prefetch not taken over and wait for its threads to end (whole reads stop at
    their next piece; scans at the text they have)."""
    jobs, streams = list(_jobs.values()), list(_streams.values())
    _jobs.clear()
    _streams.clear()
    for t, _, _, stop in jobs:
        stop.set()
    for scan in streams:
        scan.close()
    for t, _, _, _ in jobs:
        t.join()
