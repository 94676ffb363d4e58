"""Regular expressions compiled the first time they are used, not when their module is imported.

CPython compiles a pattern in Python code (re._parser, re._compiler): the kernel-name grammar's ~70
patterns cost ~25 ms at every report's start, yet a trace meets only the few kernel families its own
kernels come from (the grammar picks a family by the name's prefix before it reads that family's
patterns). `compile(source, flags)` here returns a stand-in that compiles on its first use and then
passes every attribute (match, search, finditer, sub, pattern, ...) to the compiled pattern.
"""

from __future__ import annotations

import re
from typing import Any


class LazyPattern:
    """A re.Pattern, compiled when first used."""

    __slots__ = ("_source", "_flags", "_compiled")

    def __init__(self, source: str, flags: int = 0) -> None:
        self._source = source
        self._flags = flags
        self._compiled: re.Pattern | None = None

    def compiled(self) -> re.Pattern:
        rx = self._compiled
        if rx is None:  # (two threads may both compile it: the same pattern either way)
            rx = self._compiled = re.compile(self._source, self._flags)
        return rx

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compiled(), name)

    def __repr__(self) -> str:
        return f"LazyPattern({self._source!r}, {self._flags!r})"


def compile(source: str, flags: int = 0) -> LazyPattern:  # noqa: A001 - re.compile's name, on purpose
    """The pattern `source`, compiled when first used (see the module doc)."""
    return LazyPattern(source, flags)
