"""C++ kernel names made readable: the part of 'void at::native::vectorized_elementwise_kernel<4,
at::native::FillFunctor<float>, …>(int, …)' a person reads, and, in a table of several, names
that would read the same told apart by the template arguments in which they differ.

Formatting only (units.py hands both functions on: every renderer formats through it).
"""

from __future__ import annotations

from typing import Any

from traceana import lazy_re
from traceana.units import text


_ANON = lazy_re.compile(r"\(anonymous namespace\)::")
#: Kernel templates that only wrap the real kernel, named by their first template argument.
_WRAPPERS = frozenset({"Kernel", "Kernel2", "device_kernel", "kernel", "KernelFunc", "launch_kernel",
                       "kernel_entry", "global_kernel", "generic_kernel"})


#: the characters _split_template and template_args look at: they jump from one to the next
_ANGLES = lazy_re.compile(r"[<>]")
_ARG_MARKS = lazy_re.compile(r"[<({\[>)}\],]")


def _split_template(s: str) -> tuple[str, str]:
    """'a::b<x, y<z>>(...)' -> ('a::b', 'x, y<z>'): the name before its first '<' and what
    the matching '>' closes ('' when there is no template list)."""
    i = s.find("<")
    if i <= 0:
        return s, ""
    depth = 0
    for m in _ANGLES.finditer(s, i):  # from one angle bracket to the next, not every character
        if m.group() == "<":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return s[:i], s[i + 1:m.start()]
    return s[:i], s[i + 1:]


def _first_arg(args: str) -> str:
    return (template_args(args, 1) or [""])[0]


def _core(name: Any) -> tuple[str, str, bool]:
    """(readable base, its template arguments, is a C++ signature) of a kernel name, wrappers
    unwrapped: what kernel_name shows and what kernel_names tells apart."""
    s = " ".join(text(name).split())
    cpp = s.startswith("void ") or "<" in s or ("::" in s and s.endswith(")"))
    if not cpp or s.startswith("aten::"):
        return s, "", False
    s = _ANON.sub("", s)
    if s.startswith("void "):
        s = s[5:]
    for _ in range(4):
        base, args = _split_template(s)
        if base.endswith(")") and "(" in base:  # no template list: drop the parameter list
            base = base[: base.find("(")]
        base = base.rsplit("::", 1)[-1].strip()
        first = _first_arg(args)
        if base in _WRAPPERS and first and (first[0].isalpha() or first[0] == "_"):
            s = first
            continue
        return base or s, args, True
    return s, "", True


def kernel_name(name: Any, limit: int = 80) -> str:
    """The readable core of a C++ kernel name: no 'void ', no parameter list, no template
    arguments, no namespaces ('void at::native::vectorized_elementwise_kernel<4, …>(int, …)' ->
    'vectorized_elementwise_kernel'). A wrapper template names what it wraps
    ('cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>' -> that argument).
    Names that are not C++ signatures (aten::mm, ampere_sgemm_128x64_nn, Memcpy HtoD (…),
    nccl:all_reduce) are kept as they are."""
    return text(_core(name)[0], limit)


def template_args(args: str, limit: int | None = None) -> list[str]:
    """A template argument list split at its top-level commas (the first `limit` of them when given)."""
    out, depth, start = [], 0, 0
    for m in _ARG_MARKS.finditer(args):
        c = m.group()
        if c in "<({[":
            depth += 1
        elif c != ",":
            depth -= 1
        elif depth == 0:
            out.append(args[start:m.start()].strip())
            start = m.end()
            if limit is not None and len(out) >= limit:
                return out
    tail = args[start:].strip()
    return out + [tail] if tail or out else out


_QUALIFIER = lazy_re.compile(r"\b(?:[A-Za-z_]\w*::)+(?=[A-Za-z_~])")
_SCOPE_PARAMS = lazy_re.compile(r"(?<=[\w>])\((?:[^()]|\([^()]*\))*\)(?=::)")  # f(args):: -> f::
_CALL_OP = lazy_re.compile(r"::operator\(\)\(\)(?: const)?")
_LAMBDA_CHAIN = lazy_re.compile(r"(?:\{lambda\([^()]*\)#\d+\}::)+(?=\{lambda)")  # keep the innermost lambda
_LAMBDA = lazy_re.compile(r"\{lambda\(([^()]*)\)#\d+\}")
_INNERMOST = lazy_re.compile(r"<[^<>]*>")


def _clean(arg: str) -> str:
    """A C++ name without namespaces, without the parameter lists of the functions a lambda
    lives in, a chain of nested lambdas as its innermost one ('lambda(float)'), '> >' as '>>'."""
    s = _LAMBDA_CHAIN.sub("", _CALL_OP.sub("", _ANON.sub("", arg)))
    s = _QUALIFIER.sub("", _SCOPE_PARAMS.sub("", s)).replace("> >", ">>").strip()
    return _LAMBDA.sub(r"lambda(\1)", s)


def _compact(arg: str, limit: int = 60) -> str:
    """A cleaned name (see _clean) made short but whole: over `limit`, nested argument lists
    become '<…>' from the innermost out, so brackets always pair (never cut inside a template)."""
    s = arg
    while len(s) > limit:
        hidden = s.replace("<…>", "\0")
        m = _INNERMOST.search(hidden)
        if not m:
            break
        s = (hidden[: m.start()] + "\0" + hidden[m.end():]).replace("\0", "<…>")
    return s if len(s) <= limit or "<" in s else text(s, limit)


def _template(s: str) -> tuple[str, list[str], str] | None:
    """'head<a, b<c>>tail' -> ('head', ['a', 'b<c>'], 'tail'); None without a template list."""
    head, args = _split_template(s)
    if not args and "<" not in s:
        return None
    tail = s[len(head) + len(args) + 2:]
    return head, template_args(args), tail


def _tell_apart(values: list[str], depth: int = 0) -> dict[str, str]:
    """A short label per distinct (cleaned) value, distinct where the values allow: values
    sharing a template's head and tail are told apart by the fewest arguments that do it (the
    most varied first), each told apart the same way in turn; other values are compacted."""
    distinct = list(dict.fromkeys(values))
    whole = {v: _compact(v) for v in distinct}
    if depth and len(set(whole.values())) == len(distinct) and max(map(len, whole.values())) <= 32:
        return whole  # short enough to read whole ('GemmShape<128, 128, 8>')
    parsed = [_template(v) for v in distinct]
    if depth < 4 and len(distinct) > 1 and all(parsed) and len({(p[0], p[2]) for p in parsed}) == 1:
        head, tail = parsed[0][0], parsed[0][2]
        width = max(len(p[1]) for p in parsed)
        cols = [[p[1][k] if k < len(p[1]) else "" for p in parsed] for k in range(width)]
        chosen: list[int] = []
        for k in sorted(range(width), key=lambda k: (-len(set(cols[k])), k)):
            if len({tuple(cols[j][i] for j in chosen) for i in range(len(distinct))}) == len(distinct):
                break
            if len(set(cols[k])) > 1:
                chosen.append(k)
        labels = {k: _tell_apart(cols[k], depth + 1) for k in chosen}
        out = {}
        for i, v in enumerate(distinct):
            parts: list[str] = []
            for k in range(width):
                if k in labels:
                    parts.append(labels[k][cols[k][i]] or "—")
                elif not parts or parts[-1] != "…":
                    parts.append("…")
            out[v] = f"{_compact(head, 60)}<{', '.join(parts)}>{_compact(tail, 30)}"
        return out
    return whole


def _tokens_apart(values: list[str], limit: int) -> dict[str, str]:
    """Names joined by '_' that read alike when cut at `limit`, each as its first tokens, '…' and the tokens
    in which the names differ (position by position), cut at `limit` only when that is still longer."""
    distinct = list(dict.fromkeys(values))
    toks = [v.split("_") for v in distinct]
    width = max(len(t) for t in toks)
    cols = [[t[k] if k < len(t) else "" for t in toks] for k in range(width)]
    differ = [k for k in range(width) if len(set(cols[k])) > 1]
    out = {}
    for v, t in zip(distinct, toks):
        keep = sorted(set(range(min(2, len(t)))) | {k for k in differ if k < len(t)})
        parts, last = [], -1
        for k in keep:
            if k > last + 1:
                parts.append("…")
            parts.append(t[k])
            last = k
        if last < len(t) - 1:
            parts.append("…")
        label = "_".join(parts).replace("_…_", "…").replace("_…", "…")
        out[v] = label if len(label) <= limit else text(label, limit)
    return out


def kernel_names(names: list[Any], limit: int = 80) -> list[str]:
    """kernel_name of each of `names`, with the names that would read the same told apart by
    the template arguments in which they differ ('vectorized_elementwise_kernel<…,
    MulFunctor<float>, …>'), each argument whole (see _compact); names that still read the same
    (they differ only in what _compact leaves out) are numbered ('GemmKernel<…> (2)'). Names
    equal in full stay equal (a table's shape column tells them apart)."""
    cores = [_core(n) for n in names]
    out = [text(c[0], limit) for c in cores]
    groups: dict[str, list[int]] = {}
    for i, label in enumerate(out):
        groups.setdefault(label, []).append(i)
    for label, idx in groups.items():
        if len({text(names[i]) for i in idx}) < 2:
            continue
        if not any(cores[i][1] for i in idx) and len({cores[i][0] for i in idx}) > 1:
            # plain names cut alike (hipBLASLt 'Cijk_Alik_Bljk_…_MT256x128x64_…'): the tokens that differ
            told = _tokens_apart([cores[i][0] for i in idx], limit)
            for i in idx:
                out[i] = told[cores[i][0]]
            idx = [i for i in idx if list(told.values()).count(out[i]) > 1]  # numbered below when still alike
            if not idx:
                continue
        clean = {i: _clean(f"{label}<{cores[i][1]}>") if cores[i][1] else label for i in idx}
        labels = _tell_apart(list(clean.values()))
        for i in idx:
            out[i] = labels[clean[i]]
        seen: dict[str, list[int]] = {}
        for i in idx:
            seen.setdefault(out[i], []).append(i)
        for same in seen.values():
            fulls = list(dict.fromkeys(text(names[i]) for i in same))
            if len(fulls) > 1:
                for i in same:
                    out[i] = f"{out[i]} ({fulls.index(text(names[i])) + 1})"
    return out
