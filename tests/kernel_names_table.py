"""The kernel-name table (tests/kernel_names.tsv): real kernel names with what the grammar must read from
each. One row per name: the name (its parameter list cut off: the grammar does not read it), then library,
class, op, a (input dtype), b (second operand's, when it differs), acc, out, tensor_cores (yes / no / empty:
not told), math (what the tensor cores multiply in), tile ("128x128" / "128x128x32"), split, and where the
name comes from (a shared trace's folder, or "public": the library's documented naming). Empty = None."""

from __future__ import annotations

from pathlib import Path

TABLE = Path(__file__).with_name("kernel_names.tsv")
FIELDS = ("library", "cls", "op", "a", "b", "acc", "out", "tensor_cores", "math", "tile", "split")


def cut(name: str) -> str:
    """The name up to its parameter list (the first '(' outside any template list that does not open
    '(anonymous namespace)'), trailing spaces dropped; mangled and plain names whole."""
    depth = 0
    i = 0
    while i < len(name):
        c = name[i]
        if c == "<":
            depth += 1
        elif c == ">" and depth:
            depth -= 1
        elif c == "(" and depth == 0:
            if name.startswith("(anonymous namespace)", i):
                i += len("(anonymous namespace)")
                continue
            return name[:i].rstrip()
        i += 1
    return name


def fmt(k, field: str) -> str:
    """A KernelName field as the table writes it."""
    v = getattr(k, field)
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, tuple):
        return "x".join(map(str, v))
    return str(v)


def rows() -> list[tuple[str, dict[str, str], str]]:
    """(name, {field: expected}, source) per row of the table."""
    out = []
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.split("\t")
        name, vals, src = parts[0], parts[1:1 + len(FIELDS)], parts[1 + len(FIELDS)]
        out.append((name, dict(zip(FIELDS, vals)), src))
    return out
