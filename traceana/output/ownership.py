"""Is this file one traceana wrote? Then a new run may replace it without --force.

A file counts as traceana's only when it carries a marker traceana alone writes, in the place
traceana alone puts it — never because it mentions traceana somewhere (a user's notes about the
tool, a pyproject.toml that depends on it). Per format:

- HTML: `<meta name="generator" content="traceana …">` among the leading <meta> tags of the fixed
  head every traceana page starts with (`<!DOCTYPE html><html lang="en">\\n<head>\\n<meta charset…`);
- markdown: the last line is MD_MARKER (a hidden HTML comment, after a blank line);
- JSON: a top-level `"schema": "traceana.…"` member of an indented object that closes at the end of
  the file (top level is told by indentation: the first member's indent, since a JSON string cannot
  hold a raw newline);
- SVG: the `<!-- traceana roofline chart -->` comment on the line right after the root <svg> tag;
- PNG: the tEXt chunk "Software: traceana" right after IHDR (cli/ci.tag_png writes it);
- an annotated trace (`traceana annotate`, .json or .json.gz): the text starts with the document's
  first member `{"traceana":{"schema":"traceana.annotated/…"` (or "traceana_N": the key annotate
  chose because the input used "traceana"; a .gz is inflated for its first bytes); a profiler never
  writes such a member, let alone first, and a user's own top-level "traceana" member has no schema;
  an annotated .pftrace: its first packet's metadata entry "traceana" holds that header.

An empty (or blank) file is nobody's: it may be a placeholder the user made on purpose.
"""

from __future__ import annotations

import os
import re
import struct
import zlib

#: The last line of every markdown report, diff and cross-rank report (hidden when rendered).
MD_MARKER = "<!-- written by traceana; the next run replaces this file -->"

_HEAD = 4096
_HTML = re.compile(rb'\A<!DOCTYPE html><html lang="en">\n<head>\n<meta charset="utf-8">\n'
                   rb'(?:<meta (?!name="generator")[^<>\n]*>\n){0,4}<meta name="generator" content="traceana[ "]')
_SVG = re.compile(rb'\A<\?xml version="1\.0" encoding="UTF-8"\?>\n<svg xmlns="http://www\.w3\.org/2000/svg"'
                  rb'[^<>\n]*>\n<!-- traceana roofline chart -->\n')
_PNG = b"\x89PNG\r\n\x1a\n"
_JSON_START = re.compile(rb'\A\{\n( +)"')
_ANNOTATED = re.compile(rb'\{"traceana(?:_[1-9][0-9]{0,8})?":\{"schema":"traceana\.annotated/')
_ANNOTATED_LEN = len(b'{"traceana_999999999":{"schema":"traceana.annotated/')
_GZIP = b"\x1f\x8b"


def stamp_markdown(text: str) -> str:
    """`text` with MD_MARKER as its last line (a blank line before it ends any table or list)."""
    return text.rstrip("\n") + "\n\n" + MD_MARKER + "\n"


def written_by_traceana(path: str) -> bool:
    """True when the file at `path` carries traceana's marker where traceana puts it."""
    with open(path, "rb") as fh:
        head = fh.read(_HEAD)
        if not head.strip():
            return False
        if head.startswith(b"<!DOCTYPE"):
            return bool(_HTML.match(head))
        if head.startswith(b"<?xml"):
            return bool(_SVG.match(head))
        if head.startswith(_PNG):
            return _png_tagged(head)
        if head.startswith(_GZIP):
            inflated = _inflated_head(head)
            return bool(_ANNOTATED.match(inflated)) or _perfetto_annotated(inflated)
        if _ANNOTATED.match(head) or _perfetto_annotated(head):
            return True
        if head.startswith(b"{"):
            return _json_schema(fh, head)
        return _tail(fh, len(MD_MARKER) + 2) == ("\n" + MD_MARKER + "\n").encode()


def annotated(path: str) -> bool:
    """Is the file at `path` an annotated trace traceana wrote (its marker first, a .gz inflated)?"""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD)
    except OSError:
        return False
    if head.startswith(_GZIP):
        head = _inflated_head(head)
    return bool(_ANNOTATED.match(head.lstrip(b" \t\r\n")))


def _tail(fh, n: int) -> bytes:
    size = os.fstat(fh.fileno()).st_size
    fh.seek(max(0, size - n))
    return fh.read(n)


def _inflated_head(head: bytes) -> bytes:
    """The first bytes of a gzip file's text (b"" when they cannot be inflated)."""
    try:
        return zlib.decompressobj(31).decompress(head, max(_ANNOTATED_LEN, 128))
    except zlib.error:
        return b""


def _varint_end(b: bytes, i: int) -> int:
    """The position after the varint at b[i] (len(b) + 1 when it does not end within b)."""
    while i < len(b) and b[i] & 0x80:
        i += 1
    return i + 1


def _perfetto_annotated(head: bytes) -> bool:
    """An annotated Perfetto trace: its first packet is a ChromeEventBundle whose first metadata entry
    is named "traceana" and holds the header JSON (packet 0a, bundle 2a, metadata 12, name 0a 08,
    json_value 2a, each with its length)."""
    if head[:1] != b"\x0a":
        return False
    i = _varint_end(head, 1)
    if head[i:i + 1] != b"\x2a":
        return False
    i = _varint_end(head, i + 1)
    if head[i:i + 1] != b"\x12":
        return False
    i = _varint_end(head, i + 1)
    if head[i:i + 10] != b"\x0a\x08traceana" or head[i + 10:i + 11] != b"\x2a":
        return False
    i = _varint_end(head, i + 11)
    return head[i:].startswith(b'{"schema":"traceana.annotated/')


def _png_tagged(head: bytes) -> bool:
    """The chunk right after IHDR is tEXt "Software\\0traceana"."""
    if head[12:16] != b"IHDR":
        return False
    at = 8 + 8 + struct.unpack(">I", head[8:12])[0] + 4
    chunk = head[at:at + 8 + 17]
    return chunk[4:8] == b"tEXt" and chunk[8:].startswith(b"Software\x00traceana")


def _json_schema(fh, head: bytes) -> bool:
    """A top-level "schema": "traceana.…" member. Read from the end backwards: sorted keys put
    "schema" after the bulk of a report ("analyses", "ops"), near the end."""
    m = _JSON_START.match(head)
    if not m or not _tail(fh, 3).rstrip(b"\n").endswith(b"\n}"):
        return False  # the top-level object closes in column 0, at the end of the file
    marker = b"\n" + m.group(1) + b'"schema": "traceana.'
    size = os.fstat(fh.fileno()).st_size
    end, step, carry = size, 1 << 20, b""
    while end > 0:
        start = max(0, end - step)
        fh.seek(start)
        block = fh.read(end - start) + carry
        if marker in block:
            return True
        carry, end = block[: len(marker) - 1], start
    return False
