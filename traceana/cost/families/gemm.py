"""Matrix multiplies: mm, addmm, bmm, baddbmm, addbmm, mv, addmv, dot, matmul, linear, _scaled_mm.

FLOPs are 2*M*N*K multiply-adds per output, exactly what torch.utils.flop_counter counts
(it ignores the bias add of addmm / baddbmm / linear, and so do we: the M*N adds are noted).
Bytes are the minimum DRAM traffic of one fused kernel: every operand read once at its
stored size, the output written once in the output dtype.
"""

from __future__ import annotations

from math import prod

from traceana.cost.families._common import ITEMSIZE, dtype_from_enum, make, need
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, broadcast, product_expr
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

BIAS_NOTE = "bias add (M*N adds) not counted in FLOPs, as torch.utils.flop_counter"


def _gemm(
    call: OpCall,
    batch: tuple[int, ...],
    m: int,
    n: int,
    k: int,
    reads: list[tuple[str, TensorArg]],
    out_shape: tuple[int, ...],
    out_dtype: str,
    notes: list[str] | tuple[str, ...] = (),
) -> Cost:
    b = prod(batch)
    factors = [("2", 2)] + ([("B", b)] if batch else []) + [("M", m), ("N", n), ("K", k)]
    flops = 2 * b * m * n * k
    tr = Traffic()
    for label, t in reads:
        tr.read(label, t)
    tr.write("C", out_shape, ITEMSIZE[out_dtype])
    dtype = reads[0][1].dtype
    notes = list(notes)
    if reads[0][1].dtype != reads[1][1].dtype:
        notes.append(f"mixed input dtypes {reads[0][1].dtype} x {reads[1][1].dtype}: roof taken from the first")
    return make(flops, tr, "gemm", dtype, product_expr(factors, flops), notes=notes)


def out_tensor(call: OpCall, inputs: int) -> TensorArg | None:
    """The out= tensor of an .out overload: a tensor as the last argument, after the inputs.

    Keyword-only arguments are recorded positionally, so `addmm(bias, A, B, beta=1, alpha=1,
    out=C)` has six arguments, as many as the `.dtype` overload `addmm(bias, A, B, out_dtype,
    beta, alpha)`: only the kind of the last argument (a tensor, or a number) tells them apart."""
    last = len(call.dims) - 1
    return call.tensor(last) if last >= inputs else None


def _out_dtype(call: OpCall, pos: int, default: str, inputs: int, arity: int) -> str:
    """The output dtype: the out= tensor's, else the ScalarType at pos when the call has the
    `.dtype` overload's arity, else default."""
    out = out_tensor(call, inputs)
    if out is not None:
        return out.dtype
    if len(call.dims) == arity:
        return dtype_from_enum(call.scalar(pos)) or default
    return default


def _bias(call: OpCall, pos: int) -> list[tuple[str, TensorArg]]:
    t = call.tensor(pos)
    return [("bias", t)] if t is not None else []


@formula("mm")
def mm(call: OpCall) -> Cost | Unmodelled:
    (a, b), err = need(call, 0, 1, max_args=4)
    if err:
        return err
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return Unmodelled(f"mm needs [M,K] x [K,N], got {a.shape} x {b.shape}", cause="bad_shapes")
    (m, k), n = a.shape, b.shape[1]
    out = _out_dtype(call, 2, a.dtype, 2, 3)
    return _gemm(call, (), m, n, k, [("A", a), ("B", b)], (m, n), out)


@formula("addmm")
def addmm(call: OpCall) -> Cost | Unmodelled:
    (bias, a, b), err = need(call, 0, 1, 2, max_args=7)
    if err:
        return err
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return Unmodelled(f"addmm needs [M,K] x [K,N], got {a.shape} x {b.shape}", cause="bad_shapes")
    (m, k), n = a.shape, b.shape[1]
    if broadcast(bias.shape, (m, n)) != (m, n):
        return Unmodelled(f"addmm bias {bias.shape} does not broadcast to {(m, n)}", cause="bad_shapes")
    out = _out_dtype(call, 3, a.dtype, 3, 6)
    return _gemm(call, (), m, n, k, [("A", a), ("B", b), ("bias", bias)], (m, n), out, [BIAS_NOTE])


@formula("bmm")
def bmm(call: OpCall) -> Cost | Unmodelled:
    (a, b), err = need(call, 0, 1, max_args=4)
    if err:
        return err
    if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        return Unmodelled(f"bmm needs [B,M,K] x [B,K,N], got {a.shape} x {b.shape}", cause="bad_shapes")
    bs, m, k = a.shape
    n = b.shape[2]
    out = _out_dtype(call, 2, a.dtype, 2, 3)
    return _gemm(call, (bs,), m, n, k, [("A", a), ("B", b)], (bs, m, n), out)


@formula("baddbmm")
def baddbmm(call: OpCall) -> Cost | Unmodelled:
    (bias, a, b), err = need(call, 0, 1, 2, max_args=7)
    if err:
        return err
    if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        return Unmodelled(f"baddbmm needs [B,M,K] x [B,K,N], got {a.shape} x {b.shape}", cause="bad_shapes")
    bs, m, k = a.shape
    n = b.shape[2]
    if broadcast(bias.shape, (bs, m, n)) != (bs, m, n):
        return Unmodelled(f"baddbmm bias {bias.shape} does not broadcast to {(bs, m, n)}", cause="bad_shapes")
    out = _out_dtype(call, 3, a.dtype, 3, 6)
    reads = [("A", a), ("B", b), ("bias", bias)]
    return _gemm(call, (bs,), m, n, k, reads, (bs, m, n), out, [BIAS_NOTE])


@formula("addbmm")
def addbmm(call: OpCall) -> Cost | Unmodelled:
    """sum over b of A[b] @ B[b], plus bias: 2*B*M*N*K, output [M, N]."""
    (bias, a, b), err = need(call, 0, 1, 2, max_args=6)
    if err:
        return err
    if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        return Unmodelled(f"addbmm needs [B,M,K] x [B,K,N], got {a.shape} x {b.shape}", cause="bad_shapes")
    bs, m, k = a.shape
    n = b.shape[2]
    return _gemm(call, (bs,), m, n, k, [("A", a), ("B", b), ("bias", bias)], (m, n), a.dtype, [BIAS_NOTE])


@formula("mv", "addmv")
def mv(call: OpCall) -> Cost | Unmodelled:
    """[M,K] x [K] -> [M]: 2*M*K (N = 1). addmv(bias, mat, vec)."""
    off = 1 if call.name.endswith("addmv") else 0
    (a, v), err = need(call, off, off + 1, max_args=6)
    if err:
        return err
    if len(a.shape) != 2 or len(v.shape) != 1 or a.shape[1] != v.shape[0]:
        return Unmodelled(f"mv needs [M,K] x [K], got {a.shape} x {v.shape}", cause="bad_shapes")
    m, k = a.shape
    notes = [BIAS_NOTE] if off else []
    return _gemm(call, (), m, 1, k, [("A", a), ("x", v)] + _bias(call, 0)[:off], (m,), a.dtype, notes)


@formula("dot", "vdot")
def dot(call: OpCall) -> Cost | Unmodelled:
    (a, b), err = need(call, 0, 1, max_args=3)
    if err:
        return err
    if len(a.shape) != 1 or a.shape != b.shape:
        return Unmodelled(f"dot needs two equal 1-D tensors, got {a.shape} x {b.shape}")
    return _gemm(call, (), 1, 1, a.shape[0], [("a", a), ("b", b)], (), a.dtype)


def matmul_dims(a: tuple[int, ...], b: tuple[int, ...]):
    """(batch, M, N, K, out_shape) of torch.matmul on these shapes, or None if they do not match."""
    if not a or not b:
        return None
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        return None
    batch = broadcast(a2[:-2], b2[:-2])
    if batch is None:
        return None
    m, k, n = a2[-2], a2[-1], b2[-1]
    out = batch + ((m,) if len(a) > 1 else ()) + ((n,) if len(b) > 1 else ())
    return batch, m, n, k, out


@formula("matmul")
def matmul(call: OpCall) -> Cost | Unmodelled:
    (a, b), err = need(call, 0, 1, max_args=3)
    if err:
        return err
    dims = matmul_dims(a.shape, b.shape)
    if dims is None:
        return Unmodelled(f"matmul shapes {a.shape} x {b.shape} do not match", cause="bad_shapes")
    batch, m, n, k, out = dims
    notes = []
    if batch and (a.shape[:-2] != batch or b.shape[:-2] != batch):
        notes.append("broadcast batch dims: each operand read once (an expand copy, if made, is not counted)")
    return _gemm(call, batch, m, n, k, [("A", a), ("B", b)], out, a.dtype, notes)


def _linear(call: OpCall, x: TensorArg, w: TensorArg, out_dtype: str, notes=()) -> Cost | Unmodelled:
    if not x.shape or len(w.shape) != 2 or x.shape[-1] != w.shape[1]:
        return Unmodelled(f"linear needs input [..., K] and weight [N, K], got {x.shape} and {w.shape}")
    n, k = w.shape
    lead = x.shape[:-1]
    bias = _bias(call, 2)
    notes = list(notes) + ([BIAS_NOTE] if bias else [])
    reads = [("input", x), ("weight", w)] + bias
    return _gemm(call, (), prod(lead), n, k, reads, lead + (n,), out_dtype, notes)


@formula("linear")
def linear(call: OpCall) -> Cost | Unmodelled:
    """input [..., K] @ weight[N, K]^T (+ bias[N]) -> [..., N]; M = prod(leading dims)."""
    (x, w), err = need(call, 0, 1, max_args=4)
    if err:
        return err
    return _linear(call, x, w, x.dtype)


@formula("aiter::gemm_a16w16", "vllm::rocm_unquantized_gemm")
def ext_linear_gemm(call: OpCall) -> Cost | Unmodelled:
    """Extension GEMMs with F.linear's layout (A [M, K], weight [N, K], bias?)."""
    (x, w), err = need(call, 0, 1)
    if err:
        return err
    out = dtype_from_enum(call.scalar(3)) or x.dtype
    return _linear(call, x, w, out, ["assumed F.linear layout: weight is [N, K]"])


@formula("_scaled_mm")
def scaled_mm(call: OpCall) -> Cost | Unmodelled:
    """fp8 GEMM: (A, B, scale_a, scale_b, bias?, scale_result?, out_dtype?, use_fast_accum)."""
    (a, b), err = need(call, 0, 1, max_args=9)
    if err:
        return err
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return Unmodelled(f"_scaled_mm needs [M,K] x [K,N], got {a.shape} x {b.shape}", cause="bad_shapes")
    (m, k), n = a.shape, b.shape[1]
    reads = [("A", a), ("B", b)]
    for pos, label in ((2, "scale_a"), (3, "scale_b"), (4, "bias"), (5, "scale_result")):
        t = call.tensor(pos)
        if t is not None:
            reads.append((label, t))
    t = out_tensor(call, 2)
    out = t.dtype if t is not None and len(call.dims) > 8 else dtype_from_enum(call.scalar(6))
    notes = []
    if out is None:
        out = "bf16"
        notes.append("out_dtype not recorded: output assumed bf16")
    return _gemm(call, (), m, n, k, reads, (m, n), out, notes)
