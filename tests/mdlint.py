"""Markdown lint for the PR-comment outputs: tables keep their columns, blocks stay closed.

Counts what GitHub's renderer would: a table row's cells are split by pipes that are not
backslash-escaped and not inside a code span; code fences toggle on lines of 3+ backticks
(a fence closes only with a run at least as long); `<details>` must nest and close.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^(`{3,})")
_RUN = re.compile(r"`+")


def pipes(line: str) -> int:
    """Unescaped pipes outside code spans (a span closes on a backtick run of equal length)."""
    count, i, n = 0, 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c == "`":
            run = _RUN.match(line, i).group(0)
            close = next((m for m in _RUN.finditer(line, i + len(run)) if len(m.group(0)) == len(run)), None)
            i = close.end() if close else i + len(run)
            continue
        if c == "|":
            count += 1
        i += 1
    return count


def problems(md: str) -> list[str]:
    """Everything wrong with `md` (empty: clean)."""
    out: list[str] = []
    fence: str | None = None
    depth = 0
    table: list[str] = []
    lines = md.split("\n")

    def end_table() -> None:
        if table:
            want = pipes(table[0])
            for row in table[1:]:
                if pipes(row) != want:
                    out.append(f"table row has {pipes(row)} pipes, header {want}: {row[:120]!r}")
            if len(table) < 2 or not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", table[1].replace(" ", "")):
                out.append(f"table without a delimiter row: {table[0][:120]!r}")
            table.clear()

    for ln in lines:
        if fence is not None:
            m = _FENCE.match(ln)
            if m and len(m.group(1)) >= len(fence) and ln.strip("`") == "":
                fence = None
            continue
        m = _FENCE.match(ln)
        if m:
            end_table()
            fence = m.group(1)
            continue
        if ln.startswith("|"):
            table.append(ln)
            continue
        end_table()
        opened = ln.count("<details>") + ln.count("<details ")
        closed = ln.count("</details>")
        depth += opened - closed
        if depth < 0:
            out.append("</details> without <details>")
            depth = 0
    end_table()
    if fence is not None:
        out.append(f"unclosed code fence {fence}")
    if depth:
        out.append(f"{depth} unclosed <details>")
    return out
