"""What an opaque kernel of a torch.compile region or a graph replay is, from its name alone.

A region whose kernels cannot be costed (cause "compiled": AOTAutograd's `CompiledFunction` /
`CompiledFunctionBackward`, or a compiled graph's runtime wrapper, launching kernels with no
shaped op around them), or a CUDA/HIP graph replayed with no capture trace, still says a lot
through its kernel names:
  - vendor GEMM kernels (cuBLAS / CUTLASS / hipBLASLt / rocBLAS) are Inductor's extern matmuls:
    their shapes live in the compiled graph, not in the trace;
  - Triton kernels named `triton_<kind>_fused_<ops>_<n>` (torch >= 2.1) list the fused aten ops
    and their kind (poi = pointwise, red / per = reduction, tem = GEMM template);
  - Triton kernels named `triton__0d1d2d...` (torch 2.0) encode only their arguments' alignment
    (d = divisible by 16), not what they compute.
Kernels of graph replays and compiled regions are reported one kernel name at a time
(signatures.BY_KERNEL); `kernel_facts(name)` says what a name tells (replay_account gathers them
with the shares and the recipe). Pure function; no trace access.
"""

from __future__ import annotations

import re
from functools import lru_cache

from traceana.diagnose.gemm_shape import parse_tile
from traceana.link.kernel_names import parse

_FUSED = re.compile(r"^triton_(poi|red|per|tem|for|mix)_fused_(.+?)_\d+$")
_TORCH20 = re.compile(r"^triton__\d")
_KIND = {"poi": "pointwise", "red": "reduction", "per": "persistent reduction", "tem": "GEMM template",
         "for": "foreach", "mix": "mixed"}
TOP_OPS = 6


def _fused_ops(name: str) -> tuple[str, list[str]] | None:
    """(kind, the aten ops fused) of an Inductor kernel name. Inductor joins the ops' names with "_", so
    a name like `_to_copy` or `native_layer_norm` spans several pieces: the longest run of pieces that
    names an aten op traceana knows is taken as one op, else one piece."""
    m = _FUSED.match(name)
    if not m:
        return None
    known = _aten_names()
    parts = m.group(2).split("_")
    ops: list[str] = []
    i = 0
    while i < len(parts):
        j = next((j for j in range(min(len(parts), i + 6), i + 1, -1) if "_".join(parts[i:j]) in known), i + 1)
        op = "_".join(parts[i:j])
        if op.strip("_") and not op.isdigit():
            ops.append(op)
        i = j
    return _KIND[m.group(1)], ops


@lru_cache(maxsize=1)
def _aten_names() -> frozenset[str]:
    """aten op names (without the namespace) the cost registry has formulas for."""
    import traceana.cost  # noqa: F401  (fills the registry)
    from traceana.cost.registry import registered_names

    return frozenset(n[6:] for n in registered_names() if n.startswith("aten::"))


def kernel_facts(name: str) -> str | None:
    """What one kernel name says about the kernel (a phrase), or None when it says nothing more than
    its class: a Triton kernel's kind and the ops it fused, a GEMM's tile (BLAS m x n and library), the
    collective a communication kernel runs."""
    fused = _fused_ops(name)
    if fused:
        kind, ops = fused
        return f"a Triton {kind} kernel from Inductor fusing {', '.join(ops[:TOP_OPS]) or 'no named op'}"
    if _TORCH20.match(name):
        return "a Triton kernel with a torch 2.0 name (`triton__0d1d…`: argument alignment only, not the fused ops)"
    if name.startswith("triton_"):
        return "a Triton kernel from Inductor"
    k = parse(name)
    cls = k.cls
    if cls == "gemm":
        tile = parse_tile(name)
        return (f"a GEMM kernel, tile {tile[0]}x{tile[1]} ({tile[2]})" if tile else
                "a GEMM kernel (its name shows no tile)")
    if cls == "communication":
        what = _COLLECTIVES.get(k.op or "")
        if what and k.library == "custom all-reduce":
            what += " (custom)"
        return f"a collective: {what}" if what else "a communication kernel"
    if k.library == "ATen":
        return f"an ATen {cls} kernel"
    return f"a kernel of class {cls}" if cls != "other" else None


# the collectives of communication kernels (the grammar's op), as sentences name them
_COLLECTIVES = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
                "all_to_all": "all-to-all", "send_recv": "send/receive", "broadcast": "broadcast"}
