"""torch.compile / Triton kernels launched as their own cpu_op (`triton_poi_fused_add_cos_sin_0`, ...).

With torch._inductor.config.benchmark_kernel = True the launch op carries inductor's own estimates,
`kernel_num_gb` (GB moved) and, for templates, `kernel_flop`: they are used as they are.
Without them: bytes from the launch op's recorded tensors. Every tensor argument of a Triton
kernel is a pointer it reads (in_ptr), writes (out_ptr) or updates (in_out_ptr); each is counted
once, at its stored size, which is the minimum (an in_out_ptr is really read and written). The
scalar arguments are the element counts (xnumel, rnumel). FLOPs are not knowable from the
pointers: 0, and the Cost is estimated with a note saying how to get them. A GEMM template
(`triton_tem_*`) whose tensors show A [M, K], B [K, N] and an output [M, N] unambiguously gets
2*M*N*K; otherwise it stays unmodelled with the reason.
"""

from __future__ import annotations

from traceana.cost.families._common import shape_problem
from traceana.cost.shapes import Traffic, fmt_flops, fmt_int
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

NO_FLOPS = "FLOPs not in the trace (set torch._inductor.config.benchmark_kernel=True)"
POINTERS = ("each tensor argument counted once (read or written): a lower bound, since an in_out_ptr "
            "is read and written")


def _amount(v) -> float | None:
    """A recorded kernel_flop / kernel_num_gb if it is a finite number >= 0."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
        return None
    return float(v)


def is_compiled(call: OpCall) -> bool:
    """A Triton / inductor kernel launch op, or any op carrying inductor's kernel estimates."""
    return call.name.startswith("triton_") or call.get("kernel_num_gb") is not None \
        or call.get("kernel_flop") is not None


def _dtype(tensors: list[TensorArg]) -> str:
    floats = [t.dtype for t in tensors if t.dtype in ("fp32", "fp16", "bf16", "fp64", "fp8")]
    return max(floats, key=floats.count) if floats else (tensors[0].dtype if tensors else "fp32")


def _gemm(tensors: list[TensorArg]) -> tuple[int, int, int, TensorArg, TensorArg] | None | str:
    """(M, N, K, A, B) when exactly one (A [.., M, K], B [.., K, N], out [.., M, N]) triple exists;
    "ambiguous" when several do; None when none."""
    found = []
    mats = [t for t in tensors if len(t.shape) in (2, 3)]
    for a in mats:
        for b in mats:
            if a is b or len(a.shape) != len(b.shape) or a.shape[-1] != b.shape[-2]:
                continue
            m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
            for o in mats:
                if o is a or o is b or o.shape[-2:] != (m, n) or o.shape[:-2] != a.shape[:-2]:
                    continue
                found.append((m, n, k, a, b, o))
    uniq = {(m, n, k, a.shape, b.shape) for m, n, k, a, b, _ in found}
    if not found:
        return None
    if len(uniq) > 1:
        return "ambiguous"
    m, n, k, a, b, _ = found[0]
    return m, n, k, a, b


def compiled(call: OpCall) -> Cost | Unmodelled:
    bad = shape_problem(call)
    if bad:
        return Unmodelled(bad)
    tensors = call.tensors()
    kflop, kgb = _amount(call.get("kernel_flop")), _amount(call.get("kernel_num_gb"))
    dtype = _dtype(tensors)
    if kgb is not None:
        nbytes = kgb * 1e9
        tr = Traffic().raw("move", "kernel_num_gb", nbytes, f"{kgb:g} GB, inductor's estimate recorded in the trace")
        notes = ["bytes as recorded by inductor (kernel_num_gb)"]
        if kflop is not None:
            flops, fexpr = float(kflop), f"kernel_flop recorded by inductor = {fmt_flops(float(kflop))}"
            notes.append("FLOPs as recorded by inductor (kernel_flop)")
            return Cost(flops, nbytes, "compiled", dtype, flops > 0 and call.name.startswith("triton_tem"),
                        fexpr, tr.expr(), False, tuple(notes))
        return Cost(0.0, nbytes, "compiled", dtype, False, "not recorded = 0", tr.expr(), True,
                    tuple(notes + [NO_FLOPS]))
    if not tensors:
        return Unmodelled(f"{call.name}: no tensor argument recorded (and no kernel_num_gb)")
    tr = Traffic()
    for i, t in enumerate(tensors):
        tr.add("read or write", f"ptr{i}", t.stored_shape, t.itemsize)
    notes = [POINTERS]
    if call.name.startswith("triton_tem"):
        g = _gemm(tensors)
        if g is None or g == "ambiguous":
            why = "several" if g else "no"
            return Unmodelled(f"{call.name}: a GEMM template, but its tensors show {why} (A [M, K], B [K, N], "
                              f"out [M, N]) assignment: FLOPs unknown")
        m, n, k, a, b = g
        batch = 1
        for d in a.shape[:-2]:
            batch *= d
        flops = 2.0 * batch * m * n * k
        expr = f"2*B*M*N*K = 2*{batch}*{m}*{n}*{k} = {fmt_flops(flops)}"
        notes.append(f"GEMM template: A {a.shape}, B {b.shape} identified from the shapes")
        return Cost(flops, tr.total, "compiled", dtype, True, expr, tr.expr(), True, tuple(notes))
    notes.append(NO_FLOPS)
    n = sum(t.stored_numel for t in tensors)
    return Cost(0.0, tr.total, "compiled", dtype, False, f"not recorded = 0 ({fmt_int(n)} elements touched)",
                tr.expr(), True, tuple(notes))
