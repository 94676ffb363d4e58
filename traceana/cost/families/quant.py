"""Quantization kernels and low-precision GEMMs of the serving engines (vllm, sglang, aiter).

Quantization (fp8 per-tensor static / dynamic, per-token, per-token-group; int8; fp4 nvfp4/mxfp4
packing): bytes = the input read + the quantized output written at its stored size (fp4: two
values a byte) + the scales written (dynamic) or read (static). FLOPs per element: 2 for a static
scale (multiply, clamp-and-convert), 3 when the scale is found on the fly (+ the abs-max). A
dynamic per-tensor kernel reads the input twice (abs-max pass, then quantize): counted once, the
DRAM minimum, with a note.

Low-precision GEMMs: 2*M*N*K with K the logical inner size (two fp4 values a byte), every
operand read once at its stored size (scales included), the output written once. Cost.dtype is
the operands' (fp8 / int8 / fp4), so roofline.choose_peak holds them to that tensor-core roof.
"""

from __future__ import annotations

from math import prod

from traceana.cost.families._common import dtype_from_enum, make, need, shape_problem
from traceana.cost.registry import formula
from traceana.cost.shapes import Traffic, fmt_flops, per_element_expr
from traceana.cost.types import Cost, OpCall, TensorArg, Unmodelled

STATIC, DYNAMIC = 2, 3  # FLOPs per element: scale + clamp/convert; + abs-max when dynamic

# name -> (input, quantized output, scale, scale found on the fly, per-tensor dynamic (two passes))
_QUANT = {
    "_C::static_scaled_fp8_quant": (1, 0, 2, False, False),
    "_C::dynamic_scaled_fp8_quant": (1, 0, 2, True, True),
    "_C::dynamic_per_token_scaled_fp8_quant": (1, 0, 2, True, False),
    "_C::static_scaled_int8_quant": (1, 0, 2, False, False),
    "_C::dynamic_scaled_int8_quant": (1, 0, 2, True, False),
    "_C::per_token_group_fp8_quant": (0, 1, 2, True, False),
    "_C::per_token_group_fp8_quant_packed": (0, 1, 2, True, False),
    "_C::per_token_group_quant_int8": (0, 1, 2, True, False),
    "_C::per_token_group_quant_mxfp4": (0, 1, 2, True, False),
    "sgl_kernel::sgl_per_token_group_quant_fp8": (0, 1, 2, True, False),
    "sgl_kernel::sgl_per_token_group_quant_int8": (0, 1, 2, True, False),
    "sgl_kernel::sgl_per_token_group_quant_8bit": (0, 1, 2, True, False),
    "sgl_kernel::sgl_per_token_quant_fp8": (0, 1, 2, True, False),
    "sgl_kernel::sgl_per_tensor_quant_fp8": (0, 1, 2, True, True),
    "aiter::static_per_tensor_quant": (1, 0, 2, False, False),
    "aiter::dynamic_per_tensor_quant": (1, 0, 2, True, True),
    "aiter::dynamic_per_token_scaled_quant": (1, 0, 2, True, False),
}
_PASSES = "per-tensor dynamic scale: the input is read twice (abs-max, then quantize); counted once"


@formula(*_QUANT)
def quantize(call: OpCall) -> Cost | Unmodelled:
    """Positions from each op's schema (vllm: (result!, input, scale!, ...) or (input, output_q!,
    output_s!, group_size, ...); sgl_kernel: (input, output_q!, output_s!, ...); aiter: (out!, input,
    scale!, ...)). sgl_per_tensor_quant_fp8's is_static (argument 3) makes the scale an input."""
    ip, op, sp, dynamic, passes = _QUANT[call.name]
    (x, q, s), err = need(call, ip, op, sp)
    if err:
        return err
    if call.name == "sgl_kernel::sgl_per_tensor_quant_fp8" and call.scalar(3) == "True":
        dynamic, passes = False, False
    if q.numel not in (x.numel, x.numel // 2) or not x.numel:
        return Unmodelled(f"{call.name}: output {q.shape} does not hold input {x.shape}", cause="bad_shapes")
    tr = Traffic().read("input", x)
    if dynamic:
        tr.write("quantized", q.shape, q.itemsize).write("scales", s.shape, s.itemsize)
    else:
        tr.read("scale", s).write("quantized", q.shape, q.itemsize)
    per = DYNAMIC if dynamic else STATIC
    flops = x.numel * per
    notes = [_PASSES] if passes else []
    if q.numel * 2 == x.numel:
        notes.append("two 4-bit values a byte")
    return make(flops, tr, "quant", x.dtype, per_element_expr(x.shape, per, flops), notes=notes)


@formula("_C::scaled_fp4_quant", "sgl_kernel::scaled_fp4_quant")
def scaled_fp4_quant(call: OpCall) -> Cost | Unmodelled:
    """nvfp4: (output [M, K/2]!, input [M, K], output_scale!, input_scale) or, functional, (input,
    input_scale, is_sf_swizzled_layout) -> (output, output_scale). One fp8 scale per 16 values; the
    swizzled layout pads the scale rows to 128 and its columns to 4: [ceil(M/128)*128, ceil(K/64)*4]."""
    if shape_problem(call):
        return Unmodelled(shape_problem(call), cause="bad_shapes")
    a, b = call.tensor(0), call.tensor(1)
    if a is not None and b is not None and len(a.shape) >= 2 and b.shape[:-1] == a.shape[:-1] \
            and b.shape[-1] == 2 * a.shape[-1]:
        (out, x, sf, gs), err = need(call, 0, 1, 2, 3)
        if err:
            return err
        sf_shape, sf_size, notes = sf.shape, sf.itemsize, []
    elif a is not None and len(a.shape) >= 2 and a.dtype in ("bf16", "fp16", "fp32") and b is not None:
        x, gs = a, b
        m, k = prod(x.shape[:-1]), x.shape[-1]
        out = TensorArg(x.shape[:-1] + (k // 2,), "unsigned char")
        sf_shape, sf_size = (-(-m // 128) * 128, -(-k // 64) * 4), 1
        notes = ["outputs not recorded (returned): packed [M, K/2] and swizzled fp8 scales assumed"]
    else:
        return Unmodelled(f"{call.name}: expected (output [M, K/2], input [M, K], ...) or (input [M, K], "
                          f"input_scale, ...), got {call.dims[:2]}")
    tr = Traffic().read("input", x).read("input_scale", gs).write("packed fp4", out.shape, out.itemsize)
    tr.write("block scales(fp8)", sf_shape, sf_size)
    flops = x.numel * DYNAMIC
    return make(flops, tr, "quant", x.dtype, per_element_expr(x.shape, DYNAMIC, flops),
                notes=notes + ["one fp8 scale per 16 values (abs-max per block), two 4-bit values a byte"])


# ---------------------------------------------------------------- low-precision GEMMs

# name -> (a, b, b's layout, out position or None, scale/bias positions, values per stored element)
_GEMM = {
    "_C::cutlass_scaled_mm": (1, 2, "kn", 0, (3, 4, 5), 1),
    "_C::cutlass_scaled_mm_azp": (1, 2, "kn", 0, (3, 4, 5, 6, 7), 1),
    "_C::cutlass_scaled_fp4_mm": (1, 2, "nk", 0, (3, 4, 5), 2),
    "sgl_kernel::cutlass_scaled_fp4_mm": (1, 2, "nk", 0, (3, 4, 5), 2),
    "sgl_kernel::fp8_scaled_mm": (0, 1, "kn", None, (2, 3, 5), 1),
    "sgl_kernel::int8_scaled_mm": (0, 1, "kn", None, (2, 3, 5), 1),
    "sgl_kernel::fp8_blockwise_scaled_mm": (0, 1, "kn", None, (2, 3), 1),
    "aiter::gemm_a8w8": (0, 1, "nk", 4, (2, 3, 5), 1),
    "aiter::gemm_a8w8_CK": (0, 1, "nk", 4, (2, 3, 5), 1),
    "aiter::gemm_a8w8_blockscale": (0, 1, "nk", 4, (2, 3), 1),
    "aiter::gemm_a8w8_blockscale_CK": (0, 1, "nk", 4, (2, 3), 1),
}


@formula(*_GEMM)
def scaled_gemm(call: OpCall) -> Cost | Unmodelled:
    """vllm cutlass_scaled_mm(out!, a [M, K], b [K, N], a_scales, b_scales, bias?) (b column-major
    [K, N]); the fp4 ones (out!, a [M, K/2], b [N, K/2], a_blockscale, b_blockscale, alpha);
    sgl_kernel (mat_a, mat_b [K, N], scales_a, scales_b, out_dtype, bias?) -> out; aiter gemm_a8w8
    (XQ [M, K], WQ [N, K], x_scale, w_scale, Out!, ...)."""
    ap, bp, layout, outp, extra, pack = _GEMM[call.name]
    (a, b), err = need(call, ap, bp)
    if err:
        return err
    if len(a.shape) < 2 or len(b.shape) != 2:
        return Unmodelled(f"{call.name}: expected a [M, K] and a 2-D b, got {a.shape}, {b.shape}")
    k = a.shape[-1] * pack
    m = prod(a.shape[:-1])
    kb, n = (b.shape[0], b.shape[1]) if layout == "kn" else (b.shape[1], b.shape[0])
    if kb * pack != k:
        return Unmodelled(f"{call.name}: inner dims differ: a {a.shape}, b {b.shape} ({layout})", cause="bad_shapes")
    tr = Traffic().read("a", a).read("b", b)
    for i in extra:
        t = call.tensor(i)
        if t is not None:
            tr.read(f"arg{i}", t)
    notes = []
    out = call.tensor(outp) if outp is not None else None
    if out is not None:
        tr.write("out", out.shape, out.itemsize)
    else:
        od = dtype_from_enum(call.scalar(4)) if call.name.startswith("sgl_kernel") else None
        if od is None:
            od = "bf16"
            notes.append("out_dtype not recorded: output assumed bf16")
        tr.write(f"out({od})", (m, n), 4 if od == "fp32" else 2)
    dtype = "fp4" if pack == 2 else a.dtype
    if dtype not in ("fp8", "int8", "fp4"):
        notes.append(f"operands stored as {a.dtype}: their roof applies")
    flops = 2 * m * n * k
    expr = f"2*M*N*K = 2*{m}*{n}*{k} = {fmt_flops(flops)}"
    if pack == 2:
        notes.append("two 4-bit values a byte: K = 2 x the stored inner dim")
    return Cost(flops, tr.total, "gemm", dtype, True, expr, tr.expr(), False, tuple(notes))
