"""Serving families (serving.py, attention_paged.py, moe.py, quant.py) and the serving engines' own
collectives (comm.CUSTOM_COMM): worked examples on OpCalls built as the profiler records them, and
the ops of the shared vllm / sglang traces. Expected values written with their arithmetic."""

from __future__ import annotations

import pytest

from tests.conftest import shared_trace
from traceana.cost import Cost, OpCall, Unmodelled, op_cost
from traceana.link.kernel_classes import classify
from traceana.roofline.judge import choose_peak

BF16, F32, FP8, FP4, U8, I32, I64 = ("c10::BFloat16", "float", "c10::Float8_e4m3fn", "c10::Float4_e2m1fn_x2",
                                      "unsigned char", "int", "long int")


def call(name, dims, types, concrete=None, extra=()):
    return OpCall(name, tuple(tuple(d) for d in dims), tuple(types), None,
                  tuple(concrete) if concrete is not None else None, (), tuple(sorted(extra)))


def cost(*a, **k) -> Cost:
    c = op_cost(call(*a, **k))
    assert isinstance(c, Cost), c
    return c


# ---------------------------------------------------------------- norms, activations, cache writes


def test_functional_rms_norm_of_aiter_and_vllm_rocm():
    # aiter::rms_norm(input [32, 2880], weight [2880], eps, use_model_sensitive) -> out, as recorded
    c = cost("aiter::rms_norm", [(32, 2880), (2880,), (), ()], [BF16, BF16, "Scalar", "Scalar"])
    assert c.bytes == 32 * 2880 * 2 * 2 + 2880 * 2  # input read + out written (184,320 B each) + weight 5,760
    assert c.flops == 32 * 2880 * 4  # RMS_NORM = 4 per element = 368,640
    c2 = cost("vllm::rocm_aiter_rms_norm", [(32, 2880), (2880,), ()], [BF16, BF16, "Scalar"])
    assert c2.bytes == c.bytes


def test_rmsnorm2d_with_add_ck_and_the_vllm_wrapper():
    # (out, input, residual_in, residual_out, weight, eps, flag): 2 reads + 2 writes of [32, 2880] bf16 + weight
    c = cost("aiter::rmsnorm2d_fwd_with_add_ck", [(32, 2880)] * 4 + [(2880,), (), ()], [BF16] * 5 + ["Scalar"] * 2)
    assert c.bytes == 4 * 32 * 2880 * 2 + 2880 * 2  # 4 * 184,320 + 5,760 = 743,040
    assert c.flops == 32 * 2880 * 5  # residual add 1 + RMS_NORM 4
    w = cost("vllm::rocm_aiter_rmsnorm2d_fwd_with_add", [(32, 2880), (32, 2880), (2880,), ()], [BF16] * 3 + ["Scalar"])
    assert w.bytes == c.bytes  # (x, residual) -> (out, residual_out): the same two reads and two writes


def test_swigluoai_and_mul():
    c = cost("_C::swigluoai_and_mul", [(4, 8), (4, 16), (), ()], [BF16, BF16, "Scalar", "Scalar"])
    assert c.flops == 4 * 8 * (10 + 5 + 1)  # sigmoid 10 + clamps/scale/add 5, + 1 multiply per output
    assert c.bytes == 4 * 16 * 2 + 4 * 8 * 2


def test_unified_kv_cache_update_is_estimated():
    c = cost("vllm::unified_kv_cache_update", [(32, 8, 64), (32, 8, 64), ()], [BF16, BF16, ""])
    # k, v read (2 * 32*8*64*2 = 65,536) + slots 32*8 = 256 + k, v rows written 65,536
    assert c.bytes == 2 * 65536 + 256 and c.estimated and c.flops == 0


# ---------------------------------------------------------------- attention


def test_paged_attention_v1_upper_bound_from_max_seq_len():
    # out, query [B=4, Hq=8, D=64], key_cache [100, 2, 8, 16, 8], value_cache [100, 2, 64, 16], 2, 0.125,
    # block_tables [4, 10], seq_lens [4], block_size 16, max_seq_len 150
    dims = [(4, 8, 64), (4, 8, 64), (100, 2, 8, 16, 8), (100, 2, 64, 16), (), (), (4, 10), (4,), (), ()]
    types = [BF16] * 4 + ["Int", "Double", I32, I32, "Int", "Int"]
    c = cost("_C::paged_attention_v1", dims, types, ["", "", "", "", "2", "0.125", "", "", "16", "150"])
    assert c.flops == 4 * 4 * 8 * 64 * 150  # 4*B*Hq*D*max_seq_len = 1,228,800
    kv = 2 * 4 * 150 * 2 * 64 * 2  # k and v rows: B*L*Hk*D*2 B each = 307,200
    assert c.bytes == 4 * 8 * 64 * 2 * 2 + kv + 4 * 10 * 4 + 4 * 4  # q, out 4,096 each; tables 160; lens 16
    assert c.estimated and c.matrix


def test_flash_attn_varlen_exact_when_every_sequence_is_full():
    # q [3*128, 8, 64], k/v [3*256, 2, 64], cu [4], cu [4], max_q 128, max_k 256, dropout, scale, causal
    dims = [(384, 8, 64), (768, 2, 64), (768, 2, 64), (4,), (4,)] + [()] * 5
    c = cost("flash_attn::_flash_attn_varlen_forward", dims, [BF16] * 3 + [I32, I32] + ["Int"] * 2 + ["Double"] * 2
             + ["Bool"], ["", "", "", "", "", "128", "256", "0.0", "0.125", "True"])
    assert c.flops == 2 * 8 * (3 * 128 * 256) * (64 + 64)  # 2*Hq*sum(Sq*Sk)*(Dq+Dv) = 201,326,592
    assert not c.estimated and any("causal" in n for n in c.notes)
    # q 384*8*64*2 = 393,216; k, v 768*2*64*2 = 196,608 each; cu_seqlens 16 + 16; out 393,216; lse 8*384*4
    assert c.bytes == 393216 + 2 * 196608 + 32 + 393216 + 8 * 384 * 4  # = 1,191,968


def test_flash_attn_varlen_upper_bound_when_lengths_differ():
    dims = [(300, 8, 64), (300, 8, 64), (300, 8, 64), (4,), (4,)] + [()] * 5
    c = cost("flash_attn::_flash_attn_varlen_forward", dims, [BF16] * 3 + [I32, I32] + ["Int"] * 5,
             ["", "", "", "", "", "200", "200", "0.0", "0.125", "False"])
    assert c.flops == 2 * 8 * min(300 * 200, 300 * 200) * 128 and c.estimated  # min(Tq*max_k, Tk*max_q)


# ---------------------------------------------------------------- mixture of experts


def test_fused_experts_bf16_worked_example():
    # T = 4 tokens, H = 64, E = 8 experts, I = 32 (gated: w1 [8, 64, 64]), top_k = 2
    dims = [(4, 64), (8, 64, 64), (8, 64, 32), (4, 2), (4, 2)]
    c = cost("vllm::outplace_fused_experts", dims, [BF16, BF16, BF16, F32, I32])
    assert c.flops == 2 * 4 * 2 * (64 * 64 + 64 * 32)  # 2*T*k*(N1*H + H*I) = 98,304
    used = min(8, 4 * 2)  # 8 experts touched (upper bound)
    weights = used * (64 * 64 + 64 * 32) * 2  # 98,304 B
    assert c.bytes == 4 * 64 * 2 + weights + 4 * 2 * 4 + 4 * 2 * 4 + 4 * 64 * 2  # x, w, topk w, ids, out
    assert c.estimated and c.family == "moe" and c.matrix and c.dtype == "bf16"


def test_fused_experts_fp8_uses_few_experts_and_block_scales():
    # decode: T = 1, k = 2 of E = 16: 2 experts read; w1_scale [16, 1, 1] per expert at 3 positions later
    dims = [(1, 128), (16, 256, 128), (16, 128, 128), (1, 2), (1, 2)] + [()] * 10 + [(16, 2, 1), (16, 1, 1)]
    types = [BF16, FP8, FP8, F32, I32] + ["Scalar"] * 10 + [F32, F32]
    c = cost("sglang::inplace_fused_experts", dims, types)
    assert c.dtype == "fp8"  # fp8 weights: held to the fp8 tensor-core roof
    w = 2 * (256 * 128 + 128 * 128) * 1  # 2 experts' fp8 weights = 98,304 B
    scales = 2 * 2 * 4 + 2 * 1 * 4  # the 2 experts' rows of each scale tensor = 24 B
    assert c.bytes == 128 * 2 + w + scales + 8 + 8 + 128 * 2
    assert c.flops == 2 * 1 * 2 * (256 * 128 + 128 * 128)  # 196,608


def test_fused_experts_packed_fp4_weights():
    # mxfp4 weights two to a byte: w1 [E=4, 2I=64, H/2=32], w2 [4, H=64, I/2=16]
    dims = [(8, 64), (4, 64, 32), (4, 64, 16), (8, 1), (8, 1)]
    c = cost("vllm::rocm_aiter_fused_moe", dims, [BF16, U8, U8, F32, I32])
    assert c.flops == 2 * 8 * 1 * (64 * 64 + 64 * 32)  # I = 16*2 = 32, N1 = 64 = 2I: 98,304
    assert c.dtype == "bf16" and any("two to a byte" in n for n in c.notes)


def test_moe_forward_says_why_it_is_unmodelled():
    r = op_cost(call("vllm::moe_forward", [(32, 3072), (32, 32), (), ()], [BF16, BF16, "", ""]))
    assert isinstance(r, Unmodelled) and "intermediate size" in r.reason


def test_topk_softmax_and_triton_routing():
    c = cost("_moe_C::topk_softmax", [(16, 2), (16, 2), (16, 2), (16, 8)], [F32, I32, I32, F32])
    assert c.flops == 16 * 8 * (4 + 8 + 1)  # SOFTMAX 12 (exp 8) + log2(2) = 1 compare per logit
    assert c.bytes == 16 * 8 * 4 + 3 * 16 * 2 * 4  # gating read 512 + three [16, 2] 4-byte outputs 384
    t = cost("TopK", [(32, 32)] + [()] * 6, [BF16] + ["Scalar"] * 4 + ["", ""], ["", "4", "True", "1", "True", "", ""])
    # read x 2,048 + values 32*4*2 = 256 + int16 indices 256 + bitmatrix 32*1*4 = 128
    assert t.bytes == 2048 + 256 + 256 + 128
    assert t.flops == 32 * 32 * 2 + 32 * 4 * 12  # log2(4) = 2 compares per logit + a softmax of the 4 picked
    assert isinstance(op_cost(call("TopK", [(10,), ()], [F32, "Scalar"], ["", "0.4"])), Unmodelled)
    s = cost("SortTokens", [(32, 4), (32, 4), ()], [BF16, "short int", "Scalar"], ["", "", "32"])
    assert s.bytes == 256 + 256 + 32 * 4 + 2 * 128 * 4 + 128 * 2  # reads; hist, two index arrays, gate_scal


# ---------------------------------------------------------------- quantization and low-precision GEMMs


def test_fp8_quant_static_dynamic_and_group():
    c = cost("_C::static_scaled_fp8_quant", [(64, 128), (64, 128), (1,)], [FP8, BF16, F32])
    assert c.bytes == 64 * 128 * 2 + 4 + 64 * 128 and c.flops == 64 * 128 * 2  # read 16,384 + 4; write 8,192
    d = cost("_C::dynamic_per_token_scaled_fp8_quant", [(64, 128), (64, 128), (64, 1), ()], [FP8, BF16, F32, ""])
    assert d.bytes == 64 * 128 * 2 + 64 * 128 + 64 * 4 and d.flops == 64 * 128 * 3  # scales written
    g = cost("sgl_kernel::sgl_per_token_group_quant_fp8", [(64, 128), (64, 128), (64, 1)] + [()] * 5,
             [BF16, FP8, F32] + ["Scalar"] * 5)
    assert g.bytes == d.bytes and g.family == "quant"


def test_scaled_fp4_quant_both_schemas():
    c = cost("_C::scaled_fp4_quant", [(128, 32), (128, 64), (128, 4), (1,)], [U8, BF16, FP8, F32])
    assert c.bytes == 128 * 64 * 2 + 4 + 128 * 32 + 128 * 4  # input 16,384 + gs 4; packed 4,096 + scales 512
    f = cost("_C::scaled_fp4_quant", [(100, 64), (1,), ()], [BF16, F32, "Scalar"])
    # swizzled scales [ceil(100/128)*128, ceil(64/64)*4] = [128, 4] fp8 = 512 B; packed [100, 32] = 3,200 B
    assert f.bytes == 100 * 64 * 2 + 4 + 3200 + 512


def test_low_precision_gemms_take_their_dtype_and_roof():
    c = cost("_C::cutlass_scaled_mm", [(16, 4096), (16, 1024), (1024, 4096), (16, 1), (1, 4096), ()],
             [BF16, FP8, FP8, F32, F32, ""])
    assert c.flops == 2 * 16 * 4096 * 1024 and c.dtype == "fp8" and c.family == "gemm"  # 134,217,728
    assert c.bytes == 16 * 1024 + 1024 * 4096 + 16 * 4 + 4096 * 4 + 16 * 4096 * 2
    f = cost("_C::cutlass_scaled_fp4_mm", [(16, 4096), (16, 512), (4096, 512), (128, 64), (4096, 64), (1,)],
             [BF16, U8, U8, FP8, FP8, F32])
    assert f.flops == 2 * 16 * 4096 * 1024 and f.dtype == "fp4"  # K = 2 * 512
    peaks = {"fp4_tc": 9000.0, "fp8_tc": 4500.0, "bf16_tc": 2250.0, "fp32": 80.0}
    assert choose_peak(peaks, f).key == "fp4_tc" and choose_peak(peaks, c).key == "fp8_tc"


# ---------------------------------------------------------------- communication


def test_custom_all_reduce_and_symm_mem_are_comm_with_bus_bytes():
    c = cost("_C_custom_ar::all_reduce", [(), (1024, 4096), (1024, 4096), (), ()], ["Int", BF16, BF16, "Int", "Int"],
             extra=[("world_size", 8)])
    s = 1024 * 4096 * 2  # 8,388,608 B
    assert c.family == "comm" and c.bytes == pytest.approx(s * 2 * 7 / 8) and c.estimated  # ring bus bytes
    assert dict(c.detail)["group_size"] == 8
    g = cost("vllm::all_gather", [(16, 512), (), (), ()], [BF16, "Int", "Int", "String"], ["", "0", "4", "tp:0"])
    assert g.bytes == pytest.approx(16 * 512 * 2 * 4 * 3 / 4) and not g.estimated  # S = in x 4; (n-1)/n
    m = cost("symm_mem::multimem_all_reduce_", [(4096,), (), ()], [F32, "String", "String"], extra=[("world_size", 4)])
    assert m.bytes == pytest.approx(4096 * 4 * 2 * 3 / 4)
    r = op_cost(call("symm_mem::two_shot_all_reduce_", [(4096,), (), ()], [F32, "String", "String"]))
    assert isinstance(r, Unmodelled) and "group size" in r.reason


@pytest.mark.parametrize("name", [
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*)",
    "void deep_ep::intranode::cached_notify_combine<8>(void**, int*, int, int, int, int**, int, int)",
    "void deep_ep::internode_ll::combine<false>(void*, void*, int*, void*)",
    "void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)",
    "void c10d::symmetric_memory::two_shot_all_reduce_kernel<float, 16, 8>(float**, unsigned long)",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int)",
    "void quickreduce::allreduce_prototype_twoshot<quickreduce::CodecQ4<__hip_bfloat16>, false>(int)",
    "nvshmemi_proxy_progress_kernel",
    "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
])
def test_communication_kernel_classes(name):
    assert classify(name) == "communication"


def test_deep_ep_layout_is_not_communication():
    assert classify("void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*)") == "other"


# ---------------------------------------------------------------- the shared traces


def test_vllm_capture_trace_serving_ops_are_modelled():
    from traceana.load import load_trace
    from traceana.link.signatures import make_call

    tr = load_trace(shared_trace("tracelens/vllm_decode_full/capture_traces/"
                                 "graph_capture_rank_0.1773709742341309550.pt.trace.json.gz"))
    seen = {}
    for i in range(len(tr.ops)):
        name = tr.names[tr.ops.name[i]]
        if name in ("aiter::rms_norm", "aiter::rmsnorm2d_fwd_with_add_ck", "TopK", "SortTokens",
                    "vllm::unified_kv_cache_update") and name not in seen:
            seen[name] = op_cost(make_call(name, tr.ops.dims[i], tr.ops.types[i], tr.ops.strides[i],
                                           tr.ops.concrete[i], ()))
    assert len(seen) == 5 and all(isinstance(c, Cost) for c in seen.values()), seen
    # gpt-oss decode batch: 32 tokens of hidden 2880 (bf16), 32 experts, top-4
    assert seen["aiter::rms_norm"].bytes == 32 * 2880 * 2 * 2 + 2880 * 2
    assert seen["aiter::rmsnorm2d_fwd_with_add_ck"].bytes == 4 * 32 * 2880 * 2 + 2880 * 2
    assert seen["TopK"].bytes == 32 * 32 * 2 + 32 * 4 * 2 + 32 * 4 * 2 + 32 * 1 * 4
