"""Module paths as a tree of parent pointers: each path is its enclosing path's index and its own last
name, so a path costs one entry whatever its depth (a tuple of names per path costs its depth: 5,000
nested modules made 12.5 million entries, 445 MB).

Paths deeper than MAX_DEPTH modules are cut there: what ran in the deeper modules counts in their
ancestor at that depth (a real model nests a few dozen levels at most; a deeper chain is a recursion
in the model or an odd trace, and a report cannot show it anyway). `cut` counts the cuts, for a warning.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

#: module levels a path keeps
MAX_DEPTH = 64


class Paths:
    """Distinct module paths, numbered in the order they are made; a path's enclosing path always has a
    smaller number than it (so a pass in number order meets parents first). `paths[i]` is path i's names
    from the top, as a tuple (made on demand: at most MAX_DEPTH names)."""

    def __init__(self) -> None:
        self.parent: list[int] = []  # the enclosing path's number, -1 for a top-level module
        self.name: list[str] = []  # the path's last name
        self.depth: list[int] = []  # names in the path (1 for a top-level module)
        self.cut = 0  # paths given deeper than MAX_DEPTH, cut to it
        self._ids: dict[tuple[int, str], int] = {}

    def __len__(self) -> int:
        return len(self.parent)

    def child(self, parent: int, name: str) -> int:
        """The number of path `parent` + `name` (made when new)."""
        key = (parent, name)
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.parent)
            self.parent.append(parent)
            self.name.append(name)
            self.depth.append(1 + (self.depth[parent] if parent >= 0 else 0))
        return i

    def add(self, names: Sequence[str]) -> int:
        """The number of the path of `names` from the top (cut at MAX_DEPTH); -1 for no names."""
        if len(names) > MAX_DEPTH:
            names = names[:MAX_DEPTH]
            self.cut += 1
        i = -1
        for nm in names:
            i = self.child(i, nm)
        return i

    def __getitem__(self, i: int) -> tuple[str, ...]:
        out = []
        while i >= 0:
            out.append(self.name[i])
            i = self.parent[i]
        return tuple(reversed(out))

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        for i in range(len(self.parent)):
            yield self[i]

    def joined(self, i: int, sep: str) -> str:
        return sep.join(self[i])
