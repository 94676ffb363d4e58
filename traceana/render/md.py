"""Markdown's one escaping function and the small block builders every markdown writer uses
(the report, the diff, the cross-rank report).

Every string that comes from a trace, a file name or a saved document goes through `md_text`
before it reaches a markdown document, so on GitHub it is text and nothing else:
- no HTML: `&`, `<` and `>` become entities (no tag, no comment, no `<http://…>` autolink);
- no markdown: `\\ ` * _ [ ] | ~ $` are backslash-escaped (no link, image, emphasis, code span,
  table cell border or math), and a text that opens a block has its `#`, `-`, `+`, `=`, `>` or
  `1.` escaped (`line_start`);
- one line: newlines, tabs, CR, U+2028/U+2029 and other whitespace become single spaces;
  control and bidirectional-override characters become U+FFFD;
- nothing GitHub links by itself: a zero-width space (U+200B) is put after the `@` of a
  would-be mention or e-mail address, after the `#` of an issue reference (`#12`), inside
  `://` and after `www`, so GitHub's autolinker and mention filter see no URL, address,
  user or issue. The text reads the same; only a copy of it carries the invisible space.

`<summary>` lines hold only traceana's own words and numbers (GitHub applies no markdown
escapes inside HTML blocks).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from traceana.units import text

ZWSP = "\u200b"
#: Op and kernel names in a markdown table are at most this long (kernel_names tells names that read
#: alike apart by what differs): one long kernel name must not widen the whole table.
MD_NAME_CHARS = 48
# control characters, bidirectional overrides/isolates, the BOM: never shown as they are
_ODD = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~$])")
_BLOCK_START = re.compile(r"^([#+\-=>]|\d+(?=[.)]))")
_BACKTICKS = re.compile(r"`+")
# what GitHub turns into a link or a notification by itself: @user / a@b.c, #123, scheme://, www.
_MENTION = re.compile(r"@(?=[\w.-])")
_ISSUE = re.compile(r"#(?=\d)")
_SCHEME = re.compile(r":(?=//)")
_WWW = re.compile(r"(?i)\b(www)(?=\.)")


def md_text(value: Any, limit: int | None = 200, line_start: bool = False) -> str:
    """Untrusted text as inert inline markdown on one line (see the module docstring).

    `line_start`: the text opens a block (a list item's body), so a leading `#`, `-`, `+`,
    `=`, `>` or `1.` would start a heading, list or quote; escape it."""
    s = _ODD.sub("\ufffd", text(value, limit))
    s = " ".join(s.split())  # newlines, tabs, CR, U+2028/9, U+0085 become single spaces
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = _MENTION.sub("@" + ZWSP, s)
    s = _ISSUE.sub("#" + ZWSP, s)
    s = _SCHEME.sub(":" + ZWSP, s)
    s = _WWW.sub(r"\1" + ZWSP, s)
    if line_start:
        m = _BLOCK_START.match(s)
        if m and m.group(1)[0].isdigit():
            s = m.group(1) + "\\" + s[m.end():]
        elif m:
            s = "\\" + s
    return s


def code_block(lines: list[str]) -> str:
    """A fenced block whose fence is longer than any backtick run inside it (its text is
    literal: no link, mention or HTML is made inside a fence)."""
    body = "\n".join(_ODD.sub("\ufffd", ln) for ln in lines)
    longest = max((len(m.group(0)) for m in _BACKTICKS.finditer(body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{body}\n{fence}"


def table_row(cells: list[str]) -> str:
    """One table row of cells already made inert (md_text or our own numbers)."""
    return "| " + " | ".join(cells) + " |"


def size(s: str) -> int:
    """A markdown text's size in UTF-8 bytes, what the short report's budget counts: µ, ×, → and … are
    2-3 bytes each, and a tool measuring the comment's file (or a byte-limited API) counts bytes."""
    return len(s.encode("utf-8", "surrogatepass"))  # a lone surrogate is written as U+FFFD: 3 bytes either way


def fold(summary: str, items: list[str], budget: int, *, head: str = "", sep: str = "\n",
         more: Callable[[int], str] | None = None) -> str:
    """A <details> block holding as many whole `items` as fit in `budget` (UTF-8 bytes, size()).

    `head` (e.g. a table header) opens the body; `more(n)` says that n items did not fit.
    Returns "" when not even one item fits.
    """
    if not items:
        return ""
    opening = f"<details><summary>{summary}</summary>\n\n" + (head + "\n" if head else "")
    closing = "\n\n</details>"
    reserve = 120 if more else 0  # room for the "n more" line
    used = size(opening) + size(closing) + reserve
    body: list[str] = []
    for it in items:
        cost = size(it) + (size(sep) if body else 0)
        if used + cost > budget:
            break
        body.append(it)
        used += cost
    if not body:
        return ""
    tail = ""
    if more and len(body) < len(items):
        tail = "\n\n" + more(len(items) - len(body))
    return opening + sep.join(body) + tail + closing


def fit(blocks: list[str], budget: int, sep: str = "\n\n") -> str:
    """Whole blocks joined, in order, while they fit in `budget` bytes (size(); a block that does
    not fit is left out; a later, smaller one may still fit)."""
    out: list[str] = []
    used = 0
    for b in blocks:
        if not b:
            continue
        cost = size(b) + (size(sep) if out else 0)
        if used + cost <= budget:
            out.append(b)
            used += cost
    return sep.join(out)
