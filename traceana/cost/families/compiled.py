"""torch.compile / Triton kernels launched as their own cpu_op (`triton_poi_fused_add_cos_sin_0`, ...).

With torch._inductor.config.benchmark_kernel = True the launch op carries inductor's own estimates,
`kernel_num_gb` (GB moved) and `kernel_flop`: they are used (below). Without them: bytes from the
launch op's recorded tensors. Every tensor argument of a Triton
kernel is a pointer it reads (in_ptr), writes (out_ptr) or updates (in_out_ptr), in that order
but unnamed in the trace; each is counted once at the extent the kernel can touch:
  - its stored size (stride-0 broadcast dims once), capped by the iteration space when the
    launch records it: xnumel for a pointwise kernel (`triton_poi_*`: one access per pointer per
    index), xnumel*rnumel for a reduction (`triton_red_*` / `triton_per_*`) — the scalar int
    arguments after the pointers. A gather from a table or a slice of a larger buffer is then
    charged what the kernel iterates over, not the whole buffer;
  - a pointwise kernel that does not record xnumel (static shapes make it a constant) and has one
    tensor more than 8x every other is a gather / slice source: it is charged at the largest other
    tensor's size (the kernel writes that many elements, so reads at most that many), with a note;
  - a kernel with a single tensor argument updates it in place (in_out_ptr): read and written;
  - Inductor orders a kernel's pointers in_out_ptrs, in_ptrs, out_ptrs, and every kernel writes something
    as large as its output (xnumel elements: one per index of a pointwise kernel, one per row of a
    reduction). When the last tensor argument is smaller than that, it cannot be written, so the kernel
    has no out_ptr and writes its result into its in_out_ptr: the first argument, read and written (an
    Inductor epilogue fused into an extern GEMM's output, e.g. triton_poi_fused_addmm_gelu(in_out_ptr0
    [M, N], in_ptr0 bias [N])).
Otherwise an in_out_ptr is counted once (the pointers are unnamed): a lower bound, said in a note.
FLOPs are not knowable from the pointers: 0, and the Cost is estimated with a note saying how to
get them. Inductor's own kernel_num_gb / kernel_flop, where recorded, are used and marked estimated
(they are Inductor's estimates, not counts), with the pointer model (and, for a GEMM template, 2*M*N*K)
beside them as a cross-check. A GEMM template
(`triton_tem_*`) whose tensors show A [M, K], B [K, N] and an output [M, N] unambiguously gets
2*M*N*K; otherwise it stays unmodelled with the reason.
"""

from __future__ import annotations

from traceana.cost.families._common import shape_problem
from traceana.cost.shapes import Traffic, fmt_flops, fmt_int
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled
from traceana.numbers import ascii_int

NO_FLOPS = "FLOPs not in the trace (set torch._inductor.config.benchmark_kernel=True)"
POINTERS = ("each tensor argument counted once (read or written): a lower bound, since an in_out_ptr "
            "is read and written")
POINTERS_AFTER_INOUT = ("the other arguments counted once each (read or written): a lower bound, since a further "
                        "in_out_ptr would be read and written")


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
        return Unmodelled(bad, cause="bad_shapes")
    tensors = call.tensors()
    kflop, kgb = _amount(call.get("kernel_flop")), _amount(call.get("kernel_num_gb"))
    dtype = _dtype(tensors)
    if kgb is not None:
        return _inductor_estimates(call, tensors, kgb, kflop, dtype)
    if not tensors:
        return Unmodelled(f"{call.name}: no tensor argument recorded (and no kernel_num_gb)", cause="compiled")
    tr, notes = _pointer_traffic(call, tensors)
    if call.name.startswith("triton_tem"):
        g = _gemm(tensors)
        if g is None or g == "ambiguous":
            why = "several" if g else "no"
            return Unmodelled(f"{call.name}: a GEMM template, but its tensors show {why} (A [M, K], B [K, N], "
                              f"out [M, N]) assignment: FLOPs unknown (its pointers are unnamed; Inductor's "
                              "kernel_flop would give them)", cause="compiled")
        m, n, k, a, b = g
        batch = _batch(a)
        flops = 2.0 * batch * m * n * k
        expr = f"2*B*M*N*K = 2*{batch}*{m}*{n}*{k} = {fmt_flops(flops)}"
        notes.append(f"GEMM template: A {a.shape}, B {b.shape} identified from the shapes")
        return Cost(flops, tr.total, "compiled", dtype, True, expr, tr.expr(), True, tuple(notes))
    notes.append(NO_FLOPS)
    return Cost(0.0, tr.total, "compiled", dtype, False, "not recorded = 0", tr.expr(), True, tuple(notes))


def _inductor_estimates(call: OpCall, tensors: list[TensorArg], kgb: float, kflop: float | None,
                        dtype: str) -> Cost:
    """Inductor's kernel_num_gb (and kernel_flop) as the cost, estimated, with the pointer model's bytes and
    a GEMM template's 2*M*N*K beside them when the recorded tensors give them."""
    nbytes = kgb * 1e9
    tr = Traffic().raw("move", "kernel_num_gb", nbytes, f"{kgb:g} GB, Inductor's estimate recorded in the trace")
    notes = ["bytes: Inductor's own estimate (kernel_num_gb), not a count"]
    if tensors:
        ptr, _ = _pointer_traffic(call, tensors)
        if ptr.total > 0:
            ratio = nbytes / ptr.total
            notes.append(f"cross-check: the pointer model gives {fmt_int(ptr.total)} B "
                         f"({ptr.expr()}); Inductor's estimate is {ratio:.3g}x that"
                         + (": they disagree by over 2x" if not 0.5 <= ratio <= 2 else ""))
    gemm = _gemm(tensors) if call.name.startswith("triton_tem") else None
    model = None
    if isinstance(gemm, tuple):
        m, n, k, a, _ = gemm
        model = 2.0 * _batch(a) * m * n * k
    if kflop is None:
        if model is not None:
            notes.append(f"GEMM template: FLOPs 2*B*M*N*K = {fmt_flops(model)} from the shapes")
            return Cost(model, nbytes, "compiled", dtype, True, f"2*B*M*N*K = {fmt_flops(model)}", tr.expr(), True,
                        tuple(notes))
        return Cost(0.0, nbytes, "compiled", dtype, False, "not recorded = 0", tr.expr(), True,
                    tuple(notes + [NO_FLOPS]))
    flops = float(kflop)
    notes.append("FLOPs: Inductor's own estimate (kernel_flop)"
                 + (f"; 2*B*M*N*K from the shapes = {fmt_flops(model)} ({flops / model:.3g}x)" if model else ""))
    return Cost(flops, nbytes, "compiled", dtype, flops > 0 and call.name.startswith("triton_tem"),
                f"kernel_flop recorded by Inductor = {fmt_flops(flops)}", tr.expr(), True, tuple(notes))


def _batch(a: TensorArg) -> int:
    b = 1
    for d in a.shape[:-2]:
        b *= d
    return b


GATHER_RATIO = 8  # a pointwise kernel's tensor this many times larger than all others is a gather source


def _numels(call: OpCall, after: int) -> list[int]:
    """The int scalars recorded after the last tensor argument (xnumel, rnumel, ...)."""
    out = []
    for i in range(after + 1, len(call.dims)):
        v = ascii_int(call.scalar(i))
        if v is not None and v > 0:
            out.append(v)
    return out


def _pointer_traffic(call: OpCall, tensors: list[TensorArg]) -> tuple[Traffic, list[str]]:
    """Bytes of each pointer argument at the extent the kernel can touch (module docstring)."""
    last = max((i for i in range(len(call.dims)) if call.tensor(i) is not None), default=-1)
    numels = _numels(call, last)
    kind = call.name.split("_")[1] if call.name.startswith("triton_") and "_" in call.name[7:] else ""
    space = None
    if numels and kind == "poi":
        space, how = numels[0], f"xnumel = {fmt_int(numels[0])}"
    elif len(numels) >= 2 and kind in ("red", "per"):
        space, how = numels[0] * numels[1], f"xnumel*rnumel = {fmt_int(numels[0])}*{fmt_int(numels[1])}"
    tr, notes = Traffic(), []
    if len(tensors) == 1:
        t = tensors[0]
        n = min(t.stored_numel, space) if space else t.stored_numel
        tr.add("read", "in_out_ptr0", (n,), t.itemsize).add("write", "in_out_ptr0", (n,), t.itemsize)
        notes.append("one tensor argument: updated in place (an in_out_ptr), read and written")
        return tr, notes
    sizes = [t.stored_numel for t in tensors]
    gather = None
    if space is None and kind == "poi" and len(tensors) >= 2:
        big = max(range(len(sizes)), key=sizes.__getitem__)
        rest = max(s for i, s in enumerate(sizes) if i != big)
        if rest and sizes[big] > GATHER_RATIO * rest:
            gather = (big, rest)
    inout = _in_out_first(kind, sizes, numels, gather)
    if inout:
        notes.append(f"the last argument ({fmt_int(sizes[-1])} elements) is smaller than the kernel's output "
                     f"({fmt_int(inout)} elements), so it is no out_ptr: the kernel writes into its first argument, "
                     "an in_out_ptr, read and written")
    capped = 0
    for i, t in enumerate(tensors):
        if i == 0 and inout:
            n = min(t.stored_numel, space) if space else t.stored_numel
            tr.add("read", "in_out_ptr0", (n,), t.itemsize).add("write", "in_out_ptr0", (n,), t.itemsize)
        elif space is not None and t.stored_numel > space:
            tr.add("read or write", f"ptr{i} (up to {how})", (space,), t.itemsize)
            capped += 1
        elif gather and i == gather[0]:
            tr.add("read", f"ptr{i} rows gathered (at most {fmt_int(gather[1])} of {fmt_int(t.stored_numel)})",
                   (gather[1],), t.itemsize)
            notes.append(f"ptr{i} {t.shape} is over {GATHER_RATIO}x every other argument and xnumel is not "
                         f"recorded: a gather or slice source, charged at the largest other argument's "
                         f"{fmt_int(gather[1])} elements (what the kernel writes), not its whole size")
        else:
            tr.add("read or write", f"ptr{i}", t.stored_shape, t.itemsize)
    if capped:
        notes.append(f"{capped} argument{'s' if capped > 1 else ''} larger than the iteration space ({how}): "
                     "charged at it (a slice or gather touches only that much)")
    notes.append(POINTERS_AFTER_INOUT if inout else POINTERS)
    return tr, notes


def _in_out_first(kind: str, sizes: list[int], numels: list[int], gather: tuple[int, int] | None) -> int | None:
    """The kernel's output size (elements) when its first argument must be an in_out_ptr (module docstring),
    else None. The output is xnumel elements: a pointwise kernel writes one per index, a reduction one per
    row; a pointwise kernel that does not record xnumel writes as many as its largest argument that is no
    gather source."""
    out = None
    if kind == "poi":
        out = numels[0] if numels else max((n for i, n in enumerate(sizes) if not gather or i != gather[0]),
                                           default=None)
    elif kind in ("red", "per") and len(numels) >= 2:
        out = numels[0]
    if out is None or len(sizes) < 2 or sizes[-1] >= out or sizes[0] < out:
        return None
    return out
