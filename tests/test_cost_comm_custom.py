"""Collectives, serving / FBGEMM custom ops, compiled (Triton) kernels and the recovery pre-pass,
on OpCalls built the way the profiler records them. Expected values written with their arithmetic."""

from __future__ import annotations

import pytest

from traceana.cost import Cost, OpCall, Unmodelled, op_cost
from traceana.cost.recover import cost_variants, recover
from traceana.roofline.judge import judge

BF16, F32 = "c10::BFloat16", "float"


def call(name, dims, types, concrete=None, kernels=(), extra=()):
    return OpCall(name, tuple(tuple(d) if isinstance(d, list) else d for d in dims), tuple(types), None,
                  tuple(concrete) if concrete is not None else None, tuple(kernels), tuple(sorted(extra)))


def cost(*a, **k) -> Cost:
    c = op_cost(call(*a, **k))
    assert isinstance(c, Cost), c
    return c


# ---------------------------------------------------------------- collectives


def test_all_reduce_from_record_param_comms_args():
    c = cost("record_param_comms", [((8816192,),), (), ()], ["TensorList", "", ""],
             extra=[("collective", "allreduce"), ("in_nelems", 8816192), ("out_nelems", 8816192),
                    ("group_size", 8), ("dtype", "BFloat16")])
    s = 8816192 * 2  # 17,632,384 B
    assert c.family == "comm" and c.flops == 0 and not c.estimated
    assert c.bytes == pytest.approx(2 * 7 / 8 * s)  # ring: 2(n-1)/n * S = 30,856,672 B
    v = judge(c, mean_us=1000.0, kernel_us=1000.0, peaks={"bf16_tc": 1000.0}, dram_gbps=5000.0)
    assert v.bound == "communication" and v.roof_pct is None and v.roofline_us is None
    assert v.achieved_gbps == pytest.approx(30856672 / 1e6)  # bytes / (1000 us * 1e3) = 30.9 GB/s bus bandwidth


@pytest.mark.parametrize("algo,factor", [("allgather", 7 / 8), ("reduce_scatter", 7 / 8), ("all_to_all", 7 / 8),
                                         ("broadcast", 1.0)])
def test_bus_factors(algo, factor):
    # all_gather: S = out; reduce_scatter: S = in; the other: S = the message
    in_n, out_n = {"allgather": (100, 800), "reduce_scatter": (800, 100)}.get(algo, (800, 800))
    c = cost("record_param_comms", [((in_n,),), ()], ["TensorList", ""],
             extra=[("collective", algo), ("in_nelems", in_n), ("out_nelems", out_n), ("group_size", 8),
                    ("dtype", "Float")])
    assert c.bytes == pytest.approx(800 * 4 * factor)


def test_allgather_base_group_from_ratio_and_old_record_from_kernel_name():
    c = cost("c10d::_allgather_base_", [(1073741824,), (16777216,), ()], ["signed char", "signed char", ""])
    assert dict(c.detail)["group_size"] == 64  # 1073741824 / 16777216
    assert c.bytes == pytest.approx(1073741824 * 63 / 64) and not c.estimated
    old = cost("record_param_comms", [(655421,), (), ()], ["int", "Scalar", "Scalar"],
               kernels=["ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"],
               extra=[("world_size", 16)])
    assert old.bytes == pytest.approx(655421 * 4 * 15 / 16)  # taken as all_to_all over the world size
    assert old.estimated and any("world size" in n for n in old.notes)


def test_unknown_collective_and_group_stay_unmodelled_with_reason():
    r = op_cost(call("record_param_comms", [(10,), ()], ["float", "Scalar"]))
    assert isinstance(r, Unmodelled) and "collective not recorded" in r.reason
    r = op_cost(call("c10d::allreduce_", [((10,),), ()], ["TensorList", ""]))
    assert isinstance(r, Unmodelled) and "element size" in r.reason  # a TensorList has no dtype
    kernel = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
    r = op_cost(call("c10d::allreduce_", [((10,),), ()], ["TensorList", ""], kernels=[kernel]))
    assert isinstance(r, Unmodelled) and "group size" in r.reason
    c = cost("c10d::allreduce_", [((10,),), ()], ["TensorList", ""], kernels=[kernel], extra=[("world_size", 4)])
    assert c.bytes == pytest.approx(10 * 4 * 2 * 3 / 4) and c.estimated  # fp32 from the kernel name


# ---------------------------------------------------------------- serving kernels


def test_silu_and_mul_reads_2d_writes_d():
    c = cost("sgl_kernel::silu_and_mul", [(4, 8), (4, 16)], [BF16, BF16])
    assert c.bytes == 4 * 16 * 2 + 4 * 8 * 2  # read [4, 16] + write [4, 8], bf16
    assert c.flops == 4 * 8 * 12  # silu 11 + multiply 1 per output element


def test_rmsnorm_and_add_rmsnorm():
    c = cost("aiter::rmsnorm", [(10, 128), (10, 128), (128,), ()], [BF16, BF16, BF16, "Scalar"])
    assert c.bytes == (10 * 128 * 2) * 2 + 128 * 2 and c.flops == 10 * 128 * 4
    c = cost("aiter::add_rmsnorm", [(10, 64)] * 4 + [(64,), ()], [BF16] * 5 + ["Scalar"])
    assert c.bytes == 10 * 64 * 2 * 4 + 64 * 2  # input, residual_in read; out, residual_out written; weight


def test_reshape_and_cache_flash_touches_only_the_new_rows():
    c = cost("_C_cache_ops::reshape_and_cache_flash", [(16, 8, 64), (16, 8, 64), (1000, 32, 8, 64),
                                                      (1000, 32, 8, 64), (16,), (), (), ()],
             [BF16] * 4 + ["long int", "", F32, F32])
    assert c.bytes == 2 * (16 * 8 * 64 * 2) * 2 + 16 * 8  # k, v read and written into the cache; slots read


def test_mha_batch_prefill_exact_when_every_sequence_is_full():
    c = cost("aiter::mha_batch_prefill", [(3 * 128, 8, 64), (5000, 2, 64), (5000, 2, 64), (4,), (4,), (400,)]
             + [()] * 7, [BF16] * 3 + ["int"] * 3 + ["Scalar"] * 7,
             ["", "", "", "", "", "", "128", "128", "0.", "0.125", "0.", "False", "True"])
    assert c.flops == 4 * 8 * 64 * (3 * 128 * 128) and not c.estimated  # 4*Hq*D*sum(Sq*Sk)
    assert c.bytes == 384 * 8 * 64 * 2 * 2 + 2 * (384 * 2 * 64 * 2) + 400 * 4  # q, out; K/V rows used; pages


def test_unified_attention_is_estimated_with_the_reason():
    c = cost("vllm::unified_attention_with_output", [(32, 4, 16), (32, 2, 16), (32, 2, 16), (32, 4, 16)],
             [BF16] * 4)
    assert c.estimated and c.flops == 2 * 4 * 32 * 32 * 32  # 2*Hq*T*T*(D+Dv)
    assert any("not recorded" in n for n in c.notes)


def test_permute_2d_sparse_data_is_a_gather():
    c = cost("fbgemm::permute_2D_sparse_data", [(3,), (3, 4), (50,), (), ()], ["int", "int", "int", "", "Scalar"])
    assert c.bytes == (3 + 12 + 50) * 4 + (12 + 50) * 4 and not c.estimated
    c = cost("fbgemm::permute_2D_sparse_data", [(6,), (3, 4), (50,), (), ()], ["int", "int", "int", "", "Scalar"])
    assert c.estimated  # 6 of 3 features: permuted index count estimated as 50*6/3


# ---------------------------------------------------------------- compiled kernels


def test_triton_kernel_bytes_from_pointers_flops_unknown():
    c = cost("triton_poi_fused_add_cos_sin_0", [(10, 10), (10, 10), (10, 10), ()], [F32] * 3 + ["Scalar"],
             ["", "", "", "100"])
    assert c.family == "compiled" and c.flops == 0 and c.estimated and c.bytes == 3 * 100 * 4
    assert any("benchmark_kernel=True" in n for n in c.notes)


def test_kernel_num_gb_and_kernel_flop_are_used_as_estimates_and_cross_checked():
    c = cost("triton_tem_fused_mm_0", [(64, 32), (32, 16), (64, 16)], [BF16] * 3,
             extra=[("kernel_flop", 65536.0), ("kernel_num_gb", 0.000008)])
    # Inductor's estimates, used and marked estimated (they are Inductor's, not counts)
    assert c.flops == 65536 and c.bytes == pytest.approx(8000) and c.estimated and c.matrix
    # cross-checks: 2*M*N*K = 2*64*16*32 = 65,536 FLOPs (1x); pointers (64*32 + 32*16 + 64*16)*2 B = 7,168 B
    assert any("2*B*M*N*K from the shapes = 65,536 (1x)" in n for n in c.notes), c.notes
    assert any("pointer model gives 7,168 B" in n and "1.12x that" in n for n in c.notes), c.notes
    c = cost("triton_poi_fused_0", [(8,)], [F32], extra=[("kernel_num_gb", 1e-6)])
    # 1e-6 GB = 1,000 B against the pointer model's 8*4 read + 8*4 written = 64 B: flagged
    assert c.bytes == pytest.approx(1000) and c.flops == 0 and c.estimated
    assert any("15.6x that: they disagree by over 2x" in n for n in c.notes), c.notes
    # a GEMM template with kernel_num_gb only: FLOPs from its shapes
    g = cost("triton_tem_fused_mm_1", [(64, 32), (32, 16), (64, 16)], [BF16] * 3, extra=[("kernel_num_gb", 8e-6)])
    assert g.flops == 2 * 64 * 16 * 32 and g.estimated


def test_in_out_ptr_is_read_and_written():
    # Inductor's epilogue on an extern addmm: triton_poi_fused_addmm_gelu_view(in_out_ptr0 [M, N], in_ptr0 bias [N],
    # xnumel = M*N). The last argument (the bias, 2,048 elements) is smaller than the output (xnumel), so it is
    # no out_ptr: the first argument is read and written
    m, n = 4096, 2048
    c = cost("triton_poi_fused_addmm_gelu_view_0", [(m, n), (n,), ()], [BF16, BF16, "Scalar"], ["", "", str(m * n)])
    assert c.bytes == 2 * m * n * 2 + n * 2  # 33,554,432 + 4,096 = 33,558,528 B (was 16,781,312: half)
    assert any("in_out_ptr, read and written" in x for x in c.notes)
    # a reduction writing into its in_out_ptr (one value per row, xnumel = 512 rows of 1,024): the last argument,
    # a weight of 256 elements, cannot be its output either
    r = cost("triton_per_fused_mean_rsqrt_0", [(512, 1), (512, 1024), (256,), (), ()],
             [F32, BF16, BF16, "Scalar", "Scalar"], ["", "", "", "512", "1024"])
    assert r.bytes == 2 * 512 * 4 + 512 * 1024 * 2 + 256 * 2  # 4,096 + 1,048,576 + 512 = 1,053,184 B
    # pointwise with its output last (in, in, out): each counted once, as before
    p = cost("triton_poi_fused_add_0", [(64, 64), (64,), (64, 64), ()], [F32, F32, F32, "Scalar"],
             ["", "", "", "4096"])
    assert p.bytes == (4096 + 64 + 4096) * 4


def test_gemm_template_flops_from_shapes():
    c = cost("triton_tem_fused_mm_0", [(64, 32), (32, 16), (64, 16)], [BF16] * 3)
    assert c.flops == 2 * 64 * 16 * 32 and c.matrix
    assert cost("triton_tem_fused_mm_1", [(8, 8)] * 3, [BF16] * 3).flops == 2 * 8 * 8 * 8  # any assignment
    r = op_cost(call("triton_tem_fused_mm_2", [(4, 8), (8, 4), (4, 4), (8, 8)], [BF16] * 4))
    assert isinstance(r, Unmodelled) and "GEMM template" in r.reason  # 4x8 @ 8x4 or 8x4 @ 4x8?


# ---------------------------------------------------------------- recovery pre-pass


def test_conv_backward_weight_recovered_from_the_backward_parent():
    x, go = (2, 4, 8, 8), (2, 6, 4, 4)
    bw = call("aten::cudnn_convolution_backward_weight", [(), go, x] + [()] * 7,
              ["GenericList", F32, F32] + ["GenericList"] * 3 + ["Int", "Bool", "Bool", "Bool"])
    parent = call("aten::cudnn_convolution_backward", [x, go, (6, 4, 3, 3)] + [()] * 8, [F32] * 3 + [""] * 8)
    fwd = call("aten::cudnn_convolution", [x, (6, 4, 3, 3)] + [()] * 7, [F32, F32] + [""] * 7)
    found = recover([bw, fwd], [5, 5], [(parent, 5)])
    variants, how = found[0]
    assert [v.concrete[0] for v, _ in variants] == ["[6, 4, 3, 3]"] and "backward pass" in how
    c = cost_variants(variants, how, 5, op_cost)
    assert c.flops == 2 * 2 * 6 * 4 * 4 * 4 * 3 * 3 and not c.estimated  # 2*N*Cout*OH*OW*Cin*KH*KW
    fv, _ = found[1][0][0]  # the forward gets its stride / padding: 8 -> 4 with a 3x3 kernel
    assert fv.scalar(3) == "[2, 2]" and fv.scalar(2) == "[1, 1]"
    c = cost_variants(*found[1], 5, op_cost)
    assert c.flops == 2 * 2 * 6 * 4 * 4 * 4 * 3 * 3 and not c.estimated


def test_two_weights_with_the_same_shapes_give_the_call_weighted_mean():
    x = go = (1, 2, 4, 4)
    bw = call("aten::cudnn_convolution_backward_weight", [(), go, x] + [()] * 7, ["", F32, F32] + [""] * 7)
    f1 = call("aten::cudnn_convolution", [x, (2, 2, 1, 1)] + [()] * 7, [F32, F32] + [""] * 7)
    f3 = call("aten::cudnn_convolution", [x, (2, 2, 3, 3)] + [()] * 7, [F32, F32] + [""] * 7)
    found = recover([bw, f1, f3], [4, 1, 3])
    c = cost_variants(*found[0], 4, op_cost)
    one = 2 * 1 * 2 * 4 * 4 * 2  # 1x1: 2*N*Cout*OH*OW*Cin = 128
    assert c.flops == pytest.approx((1 * one + 3 * one * 9) / 4) and not c.estimated


def test_garbage_with_extras_never_raises():
    import random

    from tests.test_cost_garbage import _garbage
    from traceana.cost.families.compiled import compiled

    r = random.Random(3)
    keys = ["collective", "in_nelems", "out_nelems", "group_size", "dtype", "world_size", "kernel_flop",
            "kernel_num_gb", "group_ranks_n"]
    values = ["allreduce", "allgather", "reduce_scatter", "all_to_all", "broadcast", "barrier", "x", 0, 1, 7, 8,
              -1, 2**40, 0.5, "Float", "BFloat16", None]
    names = ["record_param_comms", "c10d::allreduce_", "c10d::_allgather_base_", "c10d::_reduce_scatter_base_",
             "_c10d_functional::all_gather_into_tensor", "triton_poi_fused_0", "triton_tem_fused_mm_0"]
    for _ in range(600):
        g = _garbage(r.choice(names), r)
        extra = tuple(sorted({r.choice(keys): r.choice(values) for _ in range(r.randint(0, 4))}.items(),
                             key=lambda kv: kv[0]))
        c = OpCall(g.name, g.dims, g.types, g.strides, g.concrete, g.kernel_names, extra)
        res = op_cost(c)
        assert isinstance(res, (Cost, Unmodelled))
        if isinstance(res, Cost):
            assert res.bytes >= 0 and res.flops >= 0, (c, res)
        if g.name.startswith("triton_"):
            assert isinstance(compiled(c), (Cost, Unmodelled))


def test_memory_bound_transcendental_explanation_says_so(tmp_path):
    from tests import synth as s
    from traceana.analysis import analyze

    ev = [s.op("aten::sigmoid", 10, 20, ext=1, dims=[[8192, 8192]], types=["float"]),
          s.launch(12, corr=100, ext=1), s.kernel("void at::native::vectorized_elementwise_kernel<4>(int)", 100, 2200,
                                                  corr=100)]
    a = analyze(s.write(tmp_path, s.trace(ev)))  # T4: 320 GB/s; 512 MiB in 2.2 ms is memory-bound
    op = a["ops"][0]
    assert op["bound"] == "memory" and op["flops"] == 8192 * 8192 * 10  # sigmoid: 10 FLOPs per element
    lines = a["explanations"][0]["lines"]
    assert any("runs at the memory roof" in line and "transcendental" in line for line in lines)


def test_block_bucketize_with_my_size_from_the_world_size():
    dims = [(45056,), (689849,), (), (), (11,), (), ()]
    types = ["int", "int", "Scalar", "Scalar", "int", "Scalar", ""]
    c = cost("fbgemm::block_bucketize_sparse_features", dims, types, extra=[("world_size", 16)])
    # read lengths 45056*4 + indices 689849*4 + block_sizes 11*4; write new lengths 16*45056*4 + indices 689849*4
    assert c.bytes == 45056 * 4 + 689849 * 4 + 11 * 4 + 16 * 45056 * 4 + 689849 * 4 == 8582644
    assert c.flops == 689849 * 2 and c.estimated  # a divide and a remainder per index = 1,379,698
    r = op_cost(call("fbgemm::block_bucketize_sparse_features", dims, types))
    assert isinstance(r, Unmodelled) and "my_size" in r.reason


def test_attention_output_written_at_its_own_dtype():
    fp8 = "c10::Float8_e4m3fn"
    # unified_attention_with_output(q, k, v, out): fp8 q/k/v [32, 4|2, 16] (1 B), a bf16 output [32, 4, 16] (2 B)
    c = cost("vllm::unified_attention_with_output", [(32, 4, 16), (32, 2, 16), (32, 2, 16), (32, 4, 16)],
             [fp8, fp8, fp8, BF16])
    # read q 32*4*16*1 + k, v 32*2*16*1 each; write out 32*4*16*2 (not at the query's 1 B)
    assert c.bytes == 2048 + 1024 + 1024 + 4096  # 8,192 B
    # mha_batch_prefill(..., out_ at a later argument): fp8 q [384, 8, 64], a bf16 out_ of the query's shape
    dims = [(384, 8, 64), (5000, 2, 64), (5000, 2, 64), (4,), (4,), (400,)] + [()] * 11 + [(384, 8, 64)]
    types = [fp8, fp8, fp8, "int", "int", "int"] + ["Scalar"] * 11 + [BF16]
    conc = [""] * 6 + ["128", "128"] + [""] * 4 + ["True"] + [""] * 5
    p = cost("aiter::mha_batch_prefill", dims, types, conc)
    # q 384*8*64*1 = 196,608; K/V rows used 3*128*2*64*1 each = 49,152; pages 400*4 = 1,600; out 384*8*64*2 = 393,216
    assert p.bytes == 196_608 + 2 * 49_152 + 1_600 + 393_216


# ---------------------------------------------------------------- a missing input is not a missing formula


def test_missing_inputs_are_opaque_with_their_cause():
    # vllm::moe_forward(hidden_states [T, H], router_logits [T, E], layer_name): the layer holds the weights and
    # nothing recorded a view of them: the formula exists, the input does not
    m = op_cost(call("vllm::moe_forward", [(32, 2880), (32, 128), ()], [BF16, BF16, "str"]))
    assert isinstance(m, Unmodelled) and m.cause == "input_not_recorded" and "32 tokens over 128 experts" in m.reason
    # an all_reduce with its message but neither a group size nor distributedInfo: bytes per rank unknown
    g = op_cost(call("c10d::allreduce_", [(1024,)], [F32], kernels=("ncclDevKernel_AllReduce_Sum_f32_RING_LL",)))
    assert isinstance(g, Unmodelled) and g.cause == "comm_unsized"  # its advice: torch >= 2.1 records Group size
    # upsample backward without its input_size scalar
    u = op_cost(call("aten::upsample_nearest2d_backward", [(2, 3, 16, 16), (), ()], [F32, "", ""], ["", "", ""]))
    assert isinstance(u, Unmodelled) and u.cause == "scalars_not_recorded"


def test_records_that_do_not_fit_the_op_are_bad_shapes_and_unknown_dtypes_unmodelled():
    # pow recorded with 5 arguments, two of them earlier ops' (old profilers appended those): cannot broadcast
    p = op_cost(call("aten::pow", [(256, 6948), (256,), (2048, 3474), (2048, 3474), ()], [F32] * 4 + ["Scalar"]))
    assert isinstance(p, Unmodelled) and p.cause == "bad_shapes"
    # eq with no tensor at all where the op takes one
    e = op_cost(call("aten::eq", [(), (), (), ()], ["Scalar", "Scalar", "int", "Scalar"]))
    assert isinstance(e, Unmodelled) and e.cause == "bad_shapes"
    # mm [4, 8] x [4, 8]: impossible for a matmul
    mm = op_cost(call("aten::mm", [(4, 8), (4, 8)], [F32, F32]))
    assert isinstance(mm, Unmodelled) and mm.cause == "bad_shapes"
    # a dtype traceana cannot size is traceana's gap: unmodelled, with the reason
    x = op_cost(call("aten::mul", [(4, 8), (4, 8)], ["c10::SomeNewType", "c10::SomeNewType"]))
    assert isinstance(x, Unmodelled) and x.cause is None
    # no formula at all: unmodelled
    n = op_cost(call("aten::bucketize", [(8,), (4,)], [F32, F32]))
    assert isinstance(n, Unmodelled) and n.cause is None and n.reason == "no formula for aten::bucketize"


def test_report_keeps_unmodelled_for_missing_formulas_only(tmp_path):
    from tests import synth
    from traceana.analysis import analyze

    ev = [synth.op("vllm::moe_forward", 100.0, 50.0, ext=1, dims=[[32, 2880], [32, 128], []],
                   types=["c10::BFloat16", "c10::BFloat16", "str"]),
          synth.launch(105.0, 1, ext=1), synth.kernel("fused_moe_kernel", 110.0, 30.0, 1, ext=1),
          synth.op("aten::bucketize", 200.0, 20.0, ext=2, dims=[[8], [4]], types=["float", "float"]),
          synth.launch(205.0, 2, ext=2), synth.kernel("bucketize_kernel", 210.0, 10.0, 2, ext=2)]
    a = analyze(synth.write(tmp_path, synth.trace(ev)))
    cov = a["coverage"]
    assert cov["opaque_by_cause"] == {"input_not_recorded": 30.0}  # the MoE: its weights, not its formula
    assert cov["unmodeled_by_op"] == {"aten::bucketize": 10.0}  # no formula: listed by name
    (moe,) = [r for r in a["ops"] if r["name"] == "vllm::moe_forward"]
    assert moe["bound"] == "opaque" and "the layer holds them" in moe["reason"]
