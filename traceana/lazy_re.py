"""Regular expressions compiled the first time they are used, not when their module is imported.

CPython compiles a pattern in Python code (re._parser, re._compiler): the kernel-name grammar's ~70
patterns cost ~25 ms at every report's start, yet a trace meets only the few kernel families its own
kernels come from (the grammar picks a family by the name's prefix before it reads that family's
patterns). `compile(source, flags)` here returns a stand-in that compiles on its first use.
"""

from __future__ import annotations

import re
from typing import Any

#: what the stand-in takes over from the compiled pattern on its first use
_ATTRIBUTES = ("match", "search", "fullmatch", "finditer", "findall", "sub", "subn", "split", "pattern", "flags",
               "groups", "groupindex")


class LazyPattern:
    """A re.Pattern, compiled when first used. The first use of any attribute compiles it and sets the
    pattern's own attributes (bound methods) on the stand-in, so every later `rx.search(...)` is the
    pattern's own call: only that first lookup goes through __getattr__ (which is costly: ~2 us a call
    when every call went through it)."""

    def __init__(self, source: str, flags: int = 0) -> None:
        self._source = source
        self._flags = flags

    def compiled(self) -> re.Pattern:
        """The compiled pattern (compiling it now if it was not)."""
        return re.compile(self._source, self._flags)  # (re's own cache: the same object each time)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy / pickle probing: not a use of the pattern
            raise AttributeError(name)
        rx = self.compiled()
        for attr in _ATTRIBUTES:  # (two threads may both get here: they set the same values)
            setattr(self, attr, getattr(rx, attr))
        return getattr(rx, name)

    def __repr__(self) -> str:
        return f"LazyPattern({self._source!r}, {self._flags!r})"


def compile(source: str, flags: int = 0) -> LazyPattern:  # noqa: A001 - re.compile's name, on purpose
    """The pattern `source`, compiled when first used (see the module doc)."""
    return LazyPattern(source, flags)
