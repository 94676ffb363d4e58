"""The GPU architecture a kernel was built for, as its name says: a lower bound on the GPU that ran it.

A kernel compiled for one architecture runs on that one and later ones (an sm_80 cuBLAS kernel runs on
an A100, an RTX 4090 and an H100 alike), never on an earlier one; so the newest architecture any kernel
of a trace names is the oldest the GPU can be. For a trace without deviceProperties this is what says
which rows of the device table are candidates. Names read (NVIDIA only: ROCm's names rarely carry the
gfx target):

  cuBLAS / cuDNN     volta_ / turing_ / ampere_ / ada_ / hopper_ / blackwell_ prefixes
  xmma               sm80_xmma_…, sm90_xmma_…, sm100_xmma_…
  CUTLASS            cutlass_80_…, cutlass3x_sm90_…, cutlass::arch::Sm80 in template arguments
  cuBLASLt           nvjet_sm90_…, nvjet_sm100_…
  FlashAttention-3   …Sm90 kernels (FlashAttnFwdSm90), and the same Sm<cc> tag anywhere in a name
"""

from __future__ import annotations

from collections.abc import Iterable

from traceana import lazy_re

#: compute capability x 10 of an architecture's first part (the prefix names the family)
FAMILY_CC = {"volta": 70, "turing": 75, "ampere": 80, "ada": 89, "hopper": 90, "blackwell": 100}
#: the family of a compute capability x 10, for the sentence
_FAMILIES = ((120, "Blackwell (GeForce / RTX PRO)"), (100, "Blackwell"), (90, "Hopper"), (89, "Ada"),
             (80, "Ampere"), (75, "Turing"), (70, "Volta"))

_RX = lazy_re.compile(
    r"(?<![A-Za-z0-9])(?P<fam>volta|turing|ampere|ada|hopper|blackwell)_(?=[a-z0-9_]*(?:gemm|cudnn|gemv|conv))"
    r"|(?<![A-Za-z0-9])(?:cutlass3x_|nvjet_)?sm_?(?P<sm>[1-9]\d{1,2})a?_"
    r"|(?<![A-Za-z0-9_])cutlass_(?P<cut>[1-9]\d)_"
    r"|(?<![A-Z])Sm(?P<tag>[1-9]\d{1,2})(?![0-9])")


def built_for(name: str) -> int | None:
    """The compute capability x 10 (80 for sm_80) the kernel's name says it was built for; None when it says
    nothing. Only the head of a long name is read (architecture tags come first)."""
    best = None
    for m in _RX.finditer(name[:2048]):
        fam, sm, cut, tag = m.group("fam", "sm", "cut", "tag")
        cc = FAMILY_CC[fam] if fam else int(sm or cut or tag)
        if 50 <= cc <= 130 and (best is None or cc > best):
            best = cc
    return best


def newest(names: Iterable[str]) -> tuple[int, str] | None:
    """(compute capability x 10, a kernel naming it) for the newest architecture among `names`."""
    best: tuple[int, str] | None = None
    for n in names:
        cc = built_for(n)
        if cc is not None and (best is None or cc > best[0]):
            best = (cc, n)
    return best


def family(cc: int) -> str:
    """'Hopper' for 90: the architecture family of a compute capability x 10 (the newest at or below it)."""
    return next((f for c, f in _FAMILIES if cc >= c), "pre-Volta")


def sentence(cc: int, kernel: str) -> str:
    """What a trace without deviceProperties can still say of its GPU."""
    k = kernel if len(kernel) <= 80 else kernel[:79] + "…"
    return (f"its kernels need compute capability {cc // 10}.{cc % 10} or newer ({family(cc)} or later: "
            f"{k!r} is built for it), so the GPU is one of those")
