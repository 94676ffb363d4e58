"""A kernel name cut into the parts the libraries' grammars read: the function's namespaces, its own
name, its template arguments; a wrapper template's wrapped kernel; the identifiers of an
Itanium-mangled name. Pure string work over the name's head, one pass per name.

  demangled C++   `void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, …>(int, …)`:
                  a return type ('void ', `std::enable_if<…>::type `) and `(anonymous namespace)::`
                  are dropped, the parameter list (the first `(` outside any template list) ends it
  wrappers        `cutlass::Kernel<cutlass_80_tensorop_s1688gemm_…>`, `cutlass::device_kernel<…>`: the
                  wrapped kernel (the first template argument) is the one named
  mangled         `_ZN5aiter24add_rmsnorm_quant_kernelIDF16b…`: the nested name's identifiers
                  (aiter, add_rmsnorm_quant_kernel), then its template arguments; every
                  length-prefixed identifier in it is one of its words (Rmsnorm2dFwd, FmhaFwdKernel)
  plain           `volta_sgemm_128x64_nn`, `triton_poi_fused_add_0`, `Cijk_…`: the name itself
"""

from __future__ import annotations

import msgspec

from traceana import lazy_re
from traceana.cxx_names import template_args

#: characters of a name that are read (the rest is template arguments or parameters nobody reads)
HEAD = 4096
_ANON = "(anonymous namespace)::"
WRAPPERS = frozenset({"Kernel", "Kernel2", "device_kernel", "kernel_entry", "KernelFunc", "launch_kernel",
                      "global_kernel", "generic_kernel", "kentry"})
_BUILTIN = frozenset({"int", "unsigned", "long", "float", "double", "bool", "char", "short", "signed", "void"})
_IDENT = lazy_re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MANGLED_ID = lazy_re.compile(r"(?:(?<=[A-Z_])|^)(\d{1,4})(?=[A-Za-z_])")


class Parts(msgspec.Struct, frozen=True):
    head: str  # the name as read (at most HEAD characters)
    sig: str  # without return type, anonymous namespaces and parameter list
    ns: tuple[str, ...]  # the function's namespaces, outermost first
    base: str  # the function's own name (the wrapped kernel's, for a wrapper template)
    targs: str  # the template arguments' text ("" when none)
    mangled: bool
    words: tuple[str, ...]  # identifiers of a mangled name (its namespaces, its name, its template types)
    copy_kind: str | None = None  # "memcpy" / "memset": a runtime copy or fill, not a kernel

    @property
    def low(self) -> str:
        return self.base.lower()

    @property
    def qual(self) -> str:
        """namespaces::base."""
        return "::".join(self.ns + (self.base,))


def split(head: str) -> Parts:
    s = " ".join(head.split()) if "\n" in head or "  " in head else head.strip()
    low = s[:6].lower()
    if low.startswith(("memcpy", "memset")):
        return Parts(s, s, (), s, "", False, (), "memcpy" if low.startswith("memcpy") else "memset")
    if s.startswith("_Z"):
        return _mangled(s)
    if _ANON in s:
        s = s.replace(_ANON, "")
    if s.startswith("void "):
        s = s[5:]
    sig = _signature(s)
    lt = _top_level_lt(sig)
    qual, targs = (sig[:lt], _close(sig, lt)) if lt >= 0 else (sig, "")
    names = tuple(x for x in qual.split("::") if x)
    ns, base = (names[:-1], names[-1]) if names else ((), qual)
    if base in WRAPPERS and targs:
        inner = next((a for a in template_args(targs, 8) if a[:1].isalpha() or a[:1] == "_"), "")
        inner_names = tuple(x for x in inner.split("<", 1)[0].split("::") if x)
        if inner_names and inner_names[-1] not in _BUILTIN:
            lt2 = inner.find("<")
            return Parts(head, sig, ns + inner_names[:-1], inner_names[-1], _close(inner, lt2) if lt2 >= 0 else "",
                         False, ())
    return Parts(head, sig, ns, base, targs, False, ())


#: the characters _signature looks at (brackets and spaces): it jumps from one to the next
_SIG_MARKS = lazy_re.compile(r"[<\[{(>\]}) ]")
#: the characters _close looks at
_ANGLES = lazy_re.compile(r"[<>]")


def _signature(s: str) -> str:
    """The qualified name and template list of the function: the text after the last top-level space
    (a return type before it) and before the first top-level '(' (its parameter list)."""
    depth, start = 0, 0
    for m in _SIG_MARKS.finditer(s):  # (a walk over every character was a third of a name's parse)
        c = m.group()
        if c in "<[{(":
            if c == "(" and depth == 0 and m.start() > start:
                return s[start:m.start()]
            depth += 1
        elif c == " ":
            if depth == 0:
                start = m.end()
        elif depth:
            depth -= 1
    return s[start:]


def _top_level_lt(sig: str) -> int:
    """Index of the '<' that opens the function's template list (the first one), -1 when none."""
    return sig.find("<")


def _close(s: str, lt: int) -> str:
    """The text between s[lt] == '<' and its matching '>' (to the end when unmatched)."""
    depth = 0
    for m in _ANGLES.finditer(s, lt):
        if m.group() == "<":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return s[lt + 1:m.start()]
    return s[lt + 1:]


def _mangled(s: str) -> Parts:
    """An Itanium-mangled name: the nested name's identifiers, its template arguments, and every
    length-prefixed identifier as a word."""
    nested = s.startswith("_ZN")
    i = 3 if nested else 2
    names: list[str] = []
    while i < len(s) and s[i].isdigit():
        j = i
        while j < len(s) and s[j].isdigit():
            j += 1
        n = int(s[i:j])
        names.append(s[j:j + n])
        i = j + n
        if not nested:
            break
    rest = s[i:]
    words = []
    for m in _MANGLED_ID.finditer(s):
        n, at = int(m.group(1)), m.end()
        w = s[at:at + n]
        if len(w) == n and _IDENT.fullmatch(w):
            words.append(w)
    ns, base = (tuple(names[:-1]), names[-1]) if names else ((), s)
    return Parts(s, s, ns, base, rest[1:] if rest.startswith("I") else "", True, tuple(words))
