"""The key an annotated trace's additions live under: one the input does not use.

`traceana annotate` adds three things, all under one key K: the document's first member (the header,
K: {"schema": "traceana.annotated/1", ...}), a member K in the args of each event it judged, and
counter events whose category is K. Stripping removes what is under K and gives the original back.
K is "traceana" unless the input already holds that string (a user's own `args.traceana`, a
top-level "traceana" member, events of category "traceana"...): then it is the first of
"traceana_1", "traceana_2", ... the input does not hold. The header records K ("args_key",
"events_cat"), and the ownership marker (output/ownership.py) accepts any K of that form.

The input's strings are found in one pass over its text (each piece searched at memchr speed): a
JSON string spelled plainly ("traceana_2"), or with \\u escapes of ASCII letters ("tr\\u0061ceana",
rare: each such string is decoded to tell). Any string counts, not only keys: a value "traceana"
costs nothing but a suffix, while a missed key would shadow the user's value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

BASE = "traceana"
#: a key of annotate's own: "traceana" or "traceana_N"
KEY = re.compile(r"traceana(?:_([1-9][0-9]{0,8}))?\Z")
_PLAIN = re.compile(rb'"traceana(?:_([1-9][0-9]{0,8}))?"')
_ESCAPED_ASCII = re.compile(rb"\\u00[2-7][0-9A-Fa-f]")  # a printable ASCII character written as \u00XX
_LONGEST = 2 + 6 * len("traceana_999999999")  # a candidate string's text, every character escaped
_OVERLAP = _LONGEST + 8  # text kept from one piece to the next (a string across the boundary)


def key_name(n: int) -> str:
    return BASE if n == 0 else f"{BASE}_{n}"


def free_key(pieces: Iterable[bytes]) -> str:
    """The first of "traceana", "traceana_1", ... that is no JSON string of the text in `pieces`."""
    taken: set[int] = set()
    tail = b""
    for piece in pieces:
        text = tail + piece if tail else piece
        _taken(text, taken)
        tail = text[-_OVERLAP:]
    n = 0
    while n in taken:
        n += 1
    return key_name(n)


def _taken(text: bytes, taken: set[int]) -> None:
    if b"traceana" in text:
        for m in _PLAIN.finditer(text):
            taken.add(int(m.group(1) or 0))
    if b"\\u00" not in text:
        return
    for m in _ESCAPED_ASCII.finditer(text):
        s = _string_around(text, m.start())
        if s is None:
            continue
        try:
            value = msgspec.json.decode(s)
        except msgspec.DecodeError:
            continue
        k = KEY.match(value) if isinstance(value, str) else None
        if k:
            taken.add(int(k.group(1) or 0))


def _string_around(text: bytes, at: int) -> bytes | None:
    """The quoted string holding the escape at `at` when it is short enough to be a key of ours (its
    opening quote is the nearest unescaped quote before `at`: a string holding an escaped quote is not
    one of ours anyway)."""
    lo = max(0, at - _LONGEST)
    start = text.rfind(b'"', lo, at)
    while start >= 0 and _escaped(text, start):
        start = text.rfind(b'"', lo, start)
    if start < 0:
        return None
    end = at
    while True:
        end = text.find(b'"', end, start + _LONGEST)
        if end < 0:
            return None
        if not _escaped(text, end):
            return text[start:end + 1]
        end += 1


def _escaped(text: bytes, pos: int) -> bool:
    """Is the byte at pos escaped (an odd run of backslashes before it)?"""
    n = 0
    while pos - n - 1 >= 0 and text[pos - n - 1] == 0x5C:
        n += 1
    return n % 2 == 1
