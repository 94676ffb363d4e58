"""The trace's text rewritten in one streaming pass: each event's bytes kept, verdicts inserted.

The text arrives in pieces (write.text_pieces: read and gzip-inflated 2 MB at a time). Outside the
traceEvents list the text is copied as it is; a small tokenizer (strings with their escapes, nesting
depth) finds the list. Inside it, the C scanner's splice (traceana/load/_scan.c) copies the events
with the insertions below, separators and all, and stops where the buffer ends. Without the scanner
(or for an event splice leaves aside: JSON it does not take), events are split in bulk: the piece is cut
after a `}` that is followed by `,` or `]`, and msgspec decodes `[` + the text up to the cut + `]` as a
list of raw (undecoded) events. That decode succeeds only when the cut falls between two events
of the list (a cut inside a string or a nested value leaves a string or a bracket open), so the
events it returns are exactly the file's; when no cut decodes (an event msgspec refuses: NaN, bad
UTF-8, or an event longer than what is buffered), the next event is delimited by the tokenizer alone.

An event the analysis gave a verdict (its place in the list, the loader's ordinal) gets
`"traceana": {...}` inserted before the closing brace of its args object, or `"args": {"traceana":
{..., "args_added": true}}` before its own closing brace when it has no args; nothing else of
it changes. ("traceana" is the key the input does not use: keys.py; "traceana_1" when it does.) The counter events follow the last event. Memory: the current piece, the one event
that straddles two pieces, and the output of one piece, whatever the size of the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator

import msgspec
import numpy as np

from traceana.annotate.keys import KEY
from traceana.errors import BadInput

_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])


class _Args(msgspec.Struct):
    args: msgspec.Raw = msgspec.Raw()


_ARGS = msgspec.json.Decoder(_Args)
_ARGS_LIST = msgspec.json.Decoder(list[_Args])
_WS = re.compile(rb"[ \t\r\n]*")
_STR_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # the rest of a string after its opening quote
_STRUCT = re.compile(rb'["{}\[\]]')
_SCALAR = re.compile(rb"[^ \t\r\n,\]}]*")
_CUT = re.compile(rb"\}[ \t\r\n]*[,\]]")
_ARGS_KEY = re.compile(rb'"args"[ \t\r\n]*:[ \t\r\n]*\Z')
_BLANK = frozenset(b" \t\r\n")
_MARKED = b'{"schema":"traceana.annotated/'  # how annotate's header starts (write.header)
_CUT_TRIES = 4
_WINDOW = 1 << 16


class _Text:
    """The text as a moving buffer: `buf[pos:]` is what is not consumed yet; more() appends a piece
    (dropping what is consumed, after copying it out when copying is on)."""

    def __init__(self, pieces: Iterable[bytes], emit: Callable[[bytes], None]) -> None:
        self._it = iter(pieces)
        self._emit = emit
        self.buf = b""
        self.pos = 0
        self.copy_from = -1  # >= 0: the consumed text from here on is copied to the output
        self.eof = False
        self.max_buffer = 0

    def more(self) -> bool:
        piece = next(self._it, None)
        if piece is None:
            self.eof = True
            return False
        self.flush()
        self.buf = self.buf[self.pos:] + piece if self.pos < len(self.buf) else piece
        self.pos = 0
        if self.copy_from >= 0:
            self.copy_from = 0
        self.max_buffer = max(self.max_buffer, len(self.buf))
        return True

    def flush(self) -> None:
        if self.copy_from >= 0 and self.pos > self.copy_from:
            self._emit(self.buf[self.copy_from:self.pos])
            self.copy_from = self.pos

    def copying(self, on: bool) -> None:
        if on:
            self.copy_from = self.pos
        else:
            self.flush()
            self.copy_from = -1

    def need(self, n: int) -> None:
        """At least n bytes buffered from pos, unless the text ends first."""
        while len(self.buf) - self.pos < n and self.more():
            pass

    def skip_ws(self) -> int | None:
        """The next non-blank byte (consumed up to it), None at the end of the text."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return None

    def value_end(self) -> int:
        """The end of the JSON value starting at pos (reading more text as needed)."""
        while True:
            end = _value_end(self.buf, self.pos)
            if end is not None:
                return end
            if not self.more():
                raise BadInput("the text ends inside a value")


def _value_end(buf: bytes, pos: int) -> int | None:
    """End offset of the JSON value at buf[pos]; None when buf ends first."""
    c = buf[pos]
    if c == 0x22:  # "
        m = _STR_REST.match(buf, pos + 1)
        return m.end() if m else None
    if c in (0x7B, 0x5B):  # { [
        depth, i = 1, pos + 1
        while True:
            m = _STRUCT.search(buf, i)
            if m is None:
                return None
            ch = buf[m.start()]
            if ch == 0x22:
                s = _STR_REST.match(buf, m.end())
                if s is None:
                    return None
                i = s.end()
                continue
            depth += 1 if ch in (0x7B, 0x5B) else -1
            i = m.end()
            if depth == 0:
                return i
    end = _SCALAR.match(buf, pos).end()
    return end if end < len(buf) else None


def insert(ev: bytes, payload: bytes, args: bytes | None = None, key: bytes = b'"traceana"') -> bytes | None:
    """The event with `"traceana": payload` added to its args (None when its args is not an object,
    or the event cannot be read). `args`: the text of its args value when already decoded (b"": none).
    `key`: the member's name as JSON (with its quotes)."""
    if args is None:
        try:
            args = bytes(_ARGS.decode(ev).args)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # JSON msgspec refuses (NaN,
            # bad UTF-8, nested past its limit...)
            return _insert_slow(ev, payload, key)
    if not args:  # no args: add one
        inner = ev[1:-1].strip()
        return (ev[:-1] + (b',' if inner else b'') + b'"args":{' + key + b':' + payload[:-1]
                + b',"args_added":true}}}')
    if args[0] != 0x7B:  # {
        return None
    n = len(args)
    # where the args value sits: most profilers write it as the event's last member, `"args": {...}}`
    last = len(ev) - 1
    while ev[last - 1] in _BLANK:
        last -= 1
    pos = last - n
    if not (ev.endswith(args, 0, last) and (ev.endswith(b'"args": ', 0, pos) or _ARGS_KEY.search(ev, 0, pos))):
        pos = ev.rfind(args)
        while pos >= 0 and not _ARGS_KEY.search(ev, max(0, pos - 64), pos):
            pos = ev.rfind(args, 0, pos + n - 1)
        if pos < 0:
            return None
    close = pos + n - 1
    sep = key + b':' if _WS.match(args, 1).end() == n - 1 else b',' + key + b':'
    return b"".join((ev[:close], sep, payload, ev[close:]))


def _insert_slow(ev: bytes, payload: bytes, key: bytes) -> bytes | None:
    """insert() by the tokenizer alone: the event's top-level members one by one."""
    try:
        if ev[:1] != b"{":
            return None
        pos = _WS.match(ev, 1).end()
        while ev[pos:pos + 1] == b'"':
            end = _value_end(ev, pos)
            name = ev[pos:end]
            pos = _WS.match(ev, end).end() + 1  # the colon
            pos = _WS.match(ev, pos).end()
            end = _value_end(ev, pos)
            if end is None:
                return None
            if name == b'"args"':
                if ev[pos:pos + 1] != b"{":
                    return None
                close = end - 1
                sep = key + b':' if not ev[pos + 1:close].strip() else b',' + key + b':'
                return ev[:close] + sep + payload + ev[close:]
            pos = _WS.match(ev, end).end()
            if ev[pos:pos + 1] != b",":
                break
            pos = _WS.match(ev, pos + 1).end()
        if ev[pos:pos + 1] != b"}":
            return None
        inner = ev[1:pos].strip()
        return (ev[:pos] + (b',' if inner else b'') + b'"args":{' + key + b':' + payload[:-1]
                + b',"args_added":true}}' + ev[pos:])
    except (TypeError, IndexError):
        return None


class Rewriter:
    """One pass over the text: `run(pieces)` emits the annotated text. `codes[k]`: the payload index of
    the k-th event of traceEvents (-1: none). `counters`: the added events' JSON, comma-separated
    batches. `header`: the JSON object put first in the document under `key` ("traceana", or the
    first "traceana_N" the input does not use: keys.py), the args key of every verdict too."""

    def __init__(self, codes: np.ndarray, payloads: list[bytes], counters: Iterable[bytes], header: bytes,
                 emit: Callable[[bytes], None], key: str = "traceana") -> None:
        self.key = msgspec.json.encode(key)  # as JSON, with its quotes
        self.codes = codes
        self.payloads = payloads
        self.counters = counters
        self.header = header
        self.emit = emit
        self.events = 0  # events of traceEvents seen
        self.annotated = 0
        self.skipped = 0  # events with a verdict whose args is not an object (left unchanged)
        self.max_buffer = 0
        self.splice = _splice()

    def run(self, pieces: Iterable[bytes]) -> None:
        t = _Text(pieces, self.emit)
        c = t.skip_ws()
        if c == 0xEF:
            t.need(3)
            if t.buf.startswith(b"\xef\xbb\xbf", t.pos):  # a UTF-8 byte-order mark
                t.pos += 3
                c = t.skip_ws()
        if c == 0x5B:  # [ a bare event list: written as {"traceana": ..., "traceEvents": [...]}
            t.pos += 1
            self.emit(b'{' + self.key + b':' + self.header + b',"traceEvents":[')
            self._events(t)
            self.emit(b"]}")
        elif c == 0x7B:  # {
            t.pos += 1
            self.emit(b'{' + self.key + b':' + self.header + b",")
            self._document(t)
        else:
            raise BadInput("not a JSON object or list")
        if t.skip_ws() is not None:
            raise BadInput("text after the end of the document")
        self.max_buffer = t.max_buffer

    def _document(self, t: _Text) -> None:
        t.copying(True)
        seen = False
        first = True
        while True:
            c = t.skip_ws()
            if c == 0x7D and first:  # {}
                raise BadInput("not a trace (no 'traceEvents' list)")
            if c != 0x22:
                raise BadInput("not a JSON object")
            end = t.value_end()
            try:
                key = msgspec.json.decode(t.buf[t.pos:end])
            except msgspec.DecodeError:
                key = None  # a key msgspec cannot read is not one of traceana's
            t.pos = end
            if t.skip_ws() != 0x3A:  # :
                raise BadInput("not a JSON object")
            t.pos += 1
            c = t.skip_ws()
            if first and isinstance(key, str) and KEY.match(key) and c == 0x7B and self._marked(t):
                raise BadInput("already annotated by traceana; annotate the original trace")
            if key == "traceEvents" and seen:
                raise BadInput("two top-level 'traceEvents' lists (a JSON reader keeps the last, and so did "
                               "the analysis); keep one")
            if key == "traceEvents" and c == 0x5B:
                seen = True
                t.pos += 1
                t.copying(False)  # the text up to and with the `[`
                self._events(t)
                self.emit(b"]")
                t.copying(True)
            else:
                if c is None:
                    raise BadInput("the text ends early")
                t.pos = t.value_end()
            first = False
            c = t.skip_ws()
            if c == 0x2C:  # ,
                t.pos += 1
                continue
            if c == 0x7D:  # }
                t.pos += 1
                t.copying(False)
                if not seen:
                    raise BadInput("not a trace (no 'traceEvents' list)")
                return
            raise BadInput("not a JSON object")

    @staticmethod
    def _marked(t: _Text) -> bool:
        """Does the object at pos start with traceana's marker (`{"schema":"traceana.annotated/`, as
        annotate writes its header)? A user's own "traceana" member does not."""
        t.need(len(_MARKED))
        return t.buf.startswith(_MARKED, t.pos)

    def _events(self, t: _Text) -> None:
        """From just after `[` to just after the matching `]`: the events, then the counters."""
        c = t.skip_ws()
        first = self.events
        if c != 0x5D and self.splice is not None:
            self._spliced(t)
        else:
            self._events_python(t, c)
        t.pos += 1
        for i, part in enumerate(self.counters):
            self.emit(b"," + part if (i or self.events > first) else part)

    def _spliced(self, t: _Text) -> None:
        """The events by the C scanner's splice (the same insertions, the separators kept as they are);
        an event it leaves aside goes the Python way. Ends at the list's `]`."""
        after = False
        while True:
            out, t.pos, after, k, annotated, skipped, state = self.splice(
                t.buf, t.pos, after, self.codes, self.events, self.payloads, self.key)
            self.emit(out)
            self.events, self.annotated, self.skipped = k, self.annotated + annotated, self.skipped + skipped
            if state == _SP_END:
                return
            if state == _SP_TOO_MANY:
                raise BadInput(f"has more events than when it was analysed ({len(self.codes)}): it changed meanwhile")
            if state == _SP_SLOW:
                if after:  # not a separator where one must be
                    raise BadInput("not valid JSON inside traceEvents")
                if t.skip_ws() == 0x5D:
                    raise BadInput("not valid JSON (a comma before ']')")
                self._some_events(t)
                after = True
            elif not t.more():
                raise BadInput("the text ends inside traceEvents")

    def _events_python(self, t: _Text, c: int | None) -> None:
        first = True
        while c != 0x5D:  # ]
            if c is None:
                raise BadInput("the text ends inside traceEvents")
            if not first:
                self.emit(b",")
            first = False
            self._some_events(t)
            c = t.skip_ws()
            if c == 0x2C:
                t.pos += 1
                c = t.skip_ws()
                if c == 0x5D:
                    raise BadInput("not valid JSON (a comma before ']')")
            elif c != 0x5D:
                raise BadInput("not valid JSON inside traceEvents")

    def _some_events(self, t: _Text) -> None:
        """Events from pos: as many as one decode of the buffered text holds, else exactly one."""
        buf, start = t.buf, t.pos
        for cut in _cuts(buf, start):
            text = b"".join((b"[", memoryview(buf)[start:cut], b"]"))
            try:
                raws = _RAW_LIST.decode(text)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # (nested past its limit)
                continue
            self._emit_events(raws, buf, start, cut, text)
            t.pos = cut
            return
        end = t.value_end()
        buf = t.buf
        self._emit_events([buf[t.pos:end]], buf, t.pos, end)
        t.pos = end

    def _emit_events(self, raws: list, buf: bytes, start: int, end: int, text: bytes | None = None) -> None:
        k, n = self.events, len(raws)
        if k + n > len(self.codes):
            raise BadInput(f"has more events than when it was analysed ({len(self.codes)}): it changed meanwhile")
        self.events = k + n
        codes = self.codes[k:k + n]
        hit = np.flatnonzero(codes >= 0)
        if not len(hit):
            self.emit(buf[start:end])
            return
        parts = list(raws)
        payloads = self.payloads
        # the args of every event of the run in one decode (the text decoded once already: valid)
        args = _ARGS_LIST.decode(text) if text is not None else None
        for p, c in zip(hit.tolist(), codes[hit].tolist()):
            new = insert(bytes(raws[p]), payloads[c], None if args is None else bytes(args[p].args), self.key)
            if new is None:
                self.skipped += 1
                continue
            parts[p] = new
            self.annotated += 1
        self.emit(b",".join(parts))


def top_level_keys(pieces: Iterable[bytes]) -> list[str | None]:
    """The names of the document's top-level members, in order (None for one msgspec cannot read), by the
    tokenizer alone: for telling why the events did not match the analysis (two traceEvents lists)."""
    t = _Text(pieces, lambda _: None)
    if t.skip_ws() == 0xEF:
        t.need(3)
        t.pos += 3 if t.buf.startswith(b"\xef\xbb\xbf", t.pos) else 0
    if t.skip_ws() != 0x7B:
        return []
    t.pos += 1
    keys: list[str | None] = []
    while t.skip_ws() == 0x22:
        end = t.value_end()
        try:
            keys.append(msgspec.json.decode(t.buf[t.pos:end]))
        except msgspec.DecodeError:
            keys.append(None)
        t.pos = end
        if t.skip_ws() != 0x3A:
            break
        t.pos += 1
        if t.skip_ws() is None:
            break
        t.pos = t.value_end()
        if t.skip_ws() != 0x2C:
            break
        t.pos += 1
    return keys


_SP_MORE, _SP_END, _SP_SLOW, _SP_TOO_MANY = range(4)  # splice's states (_scan.c)


def _splice():
    """The C scanner's splice when it is built and not switched off (TRACEANA_PURE_PYTHON=1), else None."""
    if os.environ.get("TRACEANA_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from traceana.load import _scan
    except ImportError:
        return None
    if not getattr(_scan, "SPLICE_KEYED", 0):  # built from an older _scan.c: its splice writes "traceana" only
        return None
    return getattr(_scan, "splice", None)


def _cuts(buf: bytes, start: int) -> Iterator[int]:
    """Candidate ends of a run of whole events in buf[start:]: just after a `}` followed by `,` or `]`,
    the last ones first (a few)."""
    n = len(buf)
    window = _WINDOW
    while True:
        lo = max(start, n - window)
        found = [m.start() + 1 for m in _CUT.finditer(buf, lo)]
        if found or lo == start:
            break
        window *= 8
    yield from reversed(found[-_CUT_TRIES:])
