"""What the kernels of an opaque torch.compile region are, from their names alone.

A region whose kernels cannot be costed (cause "compiled": AOTAutograd's `CompiledFunction` /
`CompiledFunctionBackward`, or a compiled graph's runtime wrapper, launching kernels with no
shaped op around them) still says a lot through its kernel names:
  - vendor GEMM kernels (cuBLAS / CUTLASS / hipBLASLt / rocBLAS) are Inductor's extern matmuls:
    their shapes live in the compiled graph, not in the trace;
  - Triton kernels named `triton_<kind>_fused_<ops>_<n>` (torch >= 2.1) list the fused aten ops
    and their kind (poi = pointwise, red / per = reduction, tem = GEMM template);
  - Triton kernels named `triton__0d1d2d...` (torch 2.0) encode only their arguments' alignment
    (d = divisible by 16), not what they compute.
`explain(kernels)` turns a row's [(name, time_us, count)] into a sentence with the time shares and
what to record so the region can be costed. Pure function; no trace access.
"""

from __future__ import annotations

import re

from traceana.kernel_classes import classify

_FUSED = re.compile(r"^triton_(poi|red|per|tem|for|mix)_fused_(.+?)_\d+$")
_TORCH20 = re.compile(r"^triton__\d")
_KIND = {"poi": "pointwise", "red": "reduction", "per": "persistent reduction", "tem": "GEMM template",
         "for": "foreach", "mix": "mixed"}
TOP_OPS = 6


def _fused_ops(name: str) -> tuple[str, list[str]] | None:
    m = _FUSED.match(name)
    if not m:
        return None
    return _KIND[m.group(1)], [op for op in m.group(2).split("_") if op and not op.isdigit()]


def explain(kernels: list[tuple[str, float, int]]) -> str | None:
    """One sentence on what an opaque compiled region ran, or None when it ran nothing."""
    total = sum(t for _, t, _ in kernels)
    if total <= 0:
        return None
    gemm = named = torch20 = aten = other = 0.0
    ops: dict[str, float] = {}
    for name, t, _ in kernels:
        cls = classify(name)
        fused = _fused_ops(name)
        if fused:
            named += t
            for op in fused[1]:
                ops[op] = ops.get(op, 0.0) + t
        elif _TORCH20.match(name):
            torch20 += t
        elif cls in ("gemm", "convolution", "attention"):
            gemm += t
        elif "at::native::" in name:
            aten += t
        else:
            other += t
    share = lambda t: f"{t / total * 100:.0f}%" if t / total >= 0.005 else "<1%"  # noqa: E731
    parts = []
    if gemm:
        parts.append(f"{share(gemm)} vendor GEMM / convolution / attention kernels (Inductor's extern "
                     "calls: their shapes are in the compiled graph, not the trace)")
    if named:
        top = ", ".join(sorted(ops, key=lambda k: -ops[k])[:TOP_OPS])
        parts.append(f"{share(named)} Triton kernels whose names list the fused ops ({top})")
    if torch20:
        parts.append(f"{share(torch20)} Triton kernels named `triton__0d1d…` (torch 2.0 names: argument "
                     "alignment only, not the fused ops)")
    if aten:
        parts.append(f"{share(aten)} ATen kernels (ops the compiled graph falls back to, run with no op record)")
    if other:
        parts.append(f"{share(other)} other kernels")
    advice = ("to cost it, profile with torch >= 2.1 and torch._inductor.config.benchmark_kernel = True "
              "(each Triton launch then records its shapes, kernel_flop and kernel_num_gb), or profile the "
              "eager model once")
    return f"this region ran {'; '.join(parts)}: {advice}"
