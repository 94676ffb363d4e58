"""The kernel-name grammar's entry point: one parse per distinct name head (see the package doc)."""

from __future__ import annotations

import functools

from traceana.link.kernel_names import attention, blas, comm, conv, native
from traceana.link.kernel_names.parts import HEAD, split
from traceana.link.kernel_names.record import KernelName, finish


def parse(name: str) -> KernelName:
    """What the kernel name says (its first HEAD characters; parsed once per distinct head)."""
    return _parse(name[:HEAD] if len(name) > HEAD else name)


@functools.lru_cache(maxsize=1 << 18)
def _parse(head: str) -> KernelName:
    p = split(head)
    if p.copy_kind:
        return KernelName(library="CUDA/HIP runtime", cls="memcpy/memset", op=p.copy_kind)
    lib = comm.library(head)
    if lib is not None:
        return comm.record(p, lib)
    for family in (blas.parse, conv.parse, attention.parse, native.parse):
        rec = family(p)
        if rec is not None:
            return finish(rec)
    return finish(native.words(p))


def classify(name: str) -> str:
    """The class of one kernel name (one of CLASSES)."""
    return parse(name).cls
