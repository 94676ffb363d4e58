"""Costs that need facts the op's own arguments do not hold, and ops whose inputs the trace lacks.

- vllm::moe_forward: its expert weights are read from the layer (a string argument); the load stage
  (load/layer_weights.py) gives it the [E, ., .] weight views and the top-k recorded inside it.
- ragged paged attention (aiter / SGLang): a formula exists, but the KV lengths are tensor contents:
  opaque, cause lengths_not_recorded, never "unmodelled".
- aten::index with unrecorded index tensors: opaque, cause shapes_not_recorded.
- Triton kernels: each pointer charged at the extent the kernel can touch (xnumel caps, gather
  sources, a lone in/out pointer read and written).
Worked numbers written with their arithmetic.
"""

from __future__ import annotations

from tests import synth
from tests.conftest import shared_trace
from tests.test_cost_serving import BF16, F32, I32, U8, call
from traceana.analysis import analyze
from traceana.cost import Cost, Unmodelled, op_cost
from traceana.load.reader import load_trace

VLLM_CAPTURE = "tracelens/vllm_decode_full/capture_traces/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz"
VLLM_REPLAY = "tracelens/vllm_decode_full/graph_execution.json.gz"
PIECEWISE = "tracelens/vllm_piecewise/graph_execution.json.gz"
SGLANG = "tracelens/sglang_decode/sglang_Qwen3-8B_decode.json.gz"

# GPT-OSS-style MoE as the vLLM traces record it: T tokens, H = 3072 (2880 padded), E = 32 experts,
# top-4, mxfp4 weights two to a byte in the Triton matmul_ogs layout (K-major):
# w13 [E, H/2, N1] = [32, 1536, 5888], w2 [E, I/2, H] = [32, 1472, 3072], so N1 = 5888 = 2*I, I = 2944
WEIGHTS = ((((32, 1536, 5888), U8), ((32, 1472, 3072), U8)))
OGS = ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1")


def _moe(tokens, extra, kernels=OGS):
    c = call("vllm::moe_forward", [(tokens, 3072), (tokens, 32), (), ()], [BF16, BF16, "", ""], extra=extra)
    return op_cost(c.__class__(c.name, c.dims, c.types, c.strides, c.concrete, kernels, c.extra))


def test_moe_forward_from_recorded_weights():
    c = _moe(32, (("expert_weights", WEIGHTS), ("top_k", 4)))
    assert isinstance(c, Cost)
    # 2*T*k*(N1*H + H*I) = 2*32*4*(5888*3072 + 3072*2944) = 256*27,131,904 = 6,945,767,424
    assert c.flops == 6_945_767_424
    # hidden 32*3072*2 = 196,608; w1 32*1536*5888 = 289,406,976; w2 32*1472*3072 = 144,703,488;
    # mxfp4 scales: 32 experts * (5888*3072 + 3072*2944) values / 32 = 27,131,904 B;
    # router_logits 32*32*2 = 2,048; out 32*3072*2 = 196,608  -> 461,637,632 B
    assert c.bytes == 196_608 + 289_406_976 + 144_703_488 + 27_131_904 + 2_048 + 196_608 == 461_637_632
    assert c.estimated and c.dtype == "bf16"  # 4-bit weights dequantized to bf16 activations' roof
    assert any("I = 2944, gated (N1 = 2I)" in n for n in c.notes)


def test_moe_forward_torch_layout_and_missing_pieces():
    # torch layout w1 [E, N1, H] = [8, 512, 256], w2 [E, H, I] = [8, 256, 256], bf16; T = 4, k = 2
    w = (((8, 512, 256), BF16), ((8, 256, 256), BF16))
    c = call("vllm::moe_forward", [(4, 256), (4, 8), (), ()], [BF16, BF16, "", ""],
             extra=(("expert_weights", w), ("top_k", 2)))
    got = op_cost(c)
    assert isinstance(got, Cost)
    assert got.flops == 2 * 4 * 2 * (512 * 256 + 256 * 256)  # = 16*196,608 = 3,145,728
    # experts used: min(E, T*k) = min(8, 8) = 8: w1 8*512*256*2 + w2 8*256*256*2 + hidden 4*256*2
    # + logits 4*8*2 + out 4*256*2 = 2,097,152 + 1,048,576 + 2,048 + 64 + 2,048 = 3,149,888 B
    assert got.bytes == 3_149_888
    # no top-k recorded: k = 1 assumed, said in a note
    no_k = op_cost(call("vllm::moe_forward", [(4, 256), (4, 8), (), ()], [BF16, BF16, "", ""],
                        extra=(("expert_weights", w),)))
    assert no_k.flops == 2 * 4 * 1 * (512 * 256 + 256 * 256) and any("k = 1 assumed" in n for n in no_k.notes)
    # no weights recorded inside: unmodelled, saying what to record
    none = op_cost(call("vllm::moe_forward", [(4, 256), (4, 8), (), ()], [BF16, BF16, "", ""]))
    assert isinstance(none, Unmodelled) and "record_shapes=True" in none.reason
    # weights that fit no (w1, w2) pair for H = 256
    bad = op_cost(call("vllm::moe_forward", [(4, 256), (4, 8), (), ()], [BF16, BF16, "", ""],
                       extra=(("expert_weights", (((8, 100, 3), BF16), ((8, 7, 9), BF16))),)))
    assert isinstance(bad, Unmodelled) and "do not fit" in bad.reason


def test_layer_weights_found_inside_moe_forward(tmp_path):
    """A synthetic eager trace: moe_forward with a topk op and two weight views nested inside."""
    ev = [synth.op("vllm::moe_forward", 100, 50, 1, [[4, 256], [4, 8], [], []], [BF16, BF16, "", ""]),
          synth.op("aten::topk", 101, 2, 2, [[4, 8], [], [], [], []], [BF16, "Scalar", "Scalar", "Scalar", "Scalar"],
                   concrete=["", "2", "-1", "True", "True"]),
          synth.op("aten::view", 105, 1, 3, [[8, 512, 256], []], [BF16, "ScalarList"]),
          synth.op("aten::view", 110, 1, 4, [[8, 256, 256], []], [BF16, "ScalarList"]),
          synth.op("aten::view", 200, 1, 5, [[8, 9, 9], []], [BF16, "ScalarList"])]  # after the op: not inside
    t = load_trace(synth.write(tmp_path, synth.trace(ev)))
    i = t.names.index("vllm::moe_forward")
    (k,) = [j for j in range(len(t.ops)) if t.ops.name[j] == i]
    extra = dict(t.ops.extra[k])
    assert extra["expert_weights"] == (((8, 512, 256), BF16), ((8, 256, 256), BF16))
    assert extra["top_k"] == 2  # aten::topk(self, k=2, ...)


def test_vllm_replays_cost_moe_forward():
    a = analyze(shared_trace(VLLM_REPLAY))
    (row,) = [r for r in a["ops"] if r["name"] == "vllm::moe_forward"]
    assert row["count"] == 24 and row["flops"] == 6_945_767_424  # 24 layers, one decode step of 32 tokens
    assert row["bytes"] == 461_637_632 and row["estimated"]
    assert row["bound"] == "memory"  # 6.95 GFLOP vs 461.6 MB per call: intensity 15 FLOP/B, a decode GEMV
    assert a["coverage"]["unmodeled_time_us"] == 0.0
    p = analyze(shared_trace(PIECEWISE))
    (row,) = [r for r in p["ops"] if r["name"] == "vllm::moe_forward"]
    # prefill of 8192 tokens: 2*8192*4*27,131,904 = 1,778,116,460,544 FLOPs per call, compute-bound
    assert row["flops"] == 1_778_116_460_544 and row["bound"] == "compute"


def test_capture_trace_carries_weights():
    t = load_trace(shared_trace(VLLM_CAPTURE))
    code = t.names.index("vllm::moe_forward")
    got = {t.ops.extra[i] for i in range(len(t.ops)) if t.ops.name[i] == code}
    assert len(got) == 1  # all 24 layers alike
    extra = dict(next(iter(got)))
    assert extra["expert_weights"] == WEIGHTS and extra["top_k"] == 4  # TopK(logits, 4, ...)


def test_ragged_paged_attention_is_opaque_for_its_lengths():
    # SGLang's profiler range around aiter's paged_attention_ragged, as recorded: out, workspace,
    # query [32, 32, 128], key/value cache [835874, 1, 8, 128], kv_indptr [33], kv_page_indices, ...
    c = op_cost(call("sglang_profiler::attention_paged_attention_ragged_100",
                     [(32, 32, 128), (10905190400,), (32, 32, 128), (835874, 1, 8, 128), (835874, 1, 8, 128),
                      (33,), (20971520,), (4096,), (), (1,), (1,), ()],
                     [BF16, U8, BF16, BF16, BF16, I32, I32, I32, "", F32, F32, ""]))
    assert isinstance(c, Unmodelled) and c.cause == "lengths_not_recorded"
    # per KV token: FLOPs 4*Hq*D = 4*32*128 = 16384; bytes 2*Hk*D*2 B = 2*8*128*2 = 4096
    assert "16384*sum(Sk)" in c.reason and "4096*sum(Sk)" in c.reason and "32 sequences" in c.reason
    a = analyze(shared_trace(SGLANG))
    cov = a["coverage"]
    assert cov["unmodeled_time_us"] == 0.0
    assert round(cov["opaque_by_cause"]["lengths_not_recorded"], 3) == 2127.869  # 36 calls, 21.8% of 9,779 µs
    assert "lengths_not_recorded" in cov["opaque_advice"]
    (row,) = [r for r in a["ops"] if r["name"].startswith("sglang_profiler::attention_paged_attention_ragged")]
    assert row["bound"] == "opaque" and row["cause"] == "lengths_not_recorded"


def test_index_without_index_sizes_is_opaque():
    c = op_cost(call("aten::index", [(32, 2880), ()], [BF16, ""]))
    assert isinstance(c, Unmodelled) and c.cause == "shapes_not_recorded"
    a = analyze(shared_trace(VLLM_CAPTURE))
    # 4.04 of 29 µs: the capture runs only the few kernels launched outside the graph
    assert round(a["coverage"]["opaque_by_cause"]["shapes_not_recorded"], 2) == 4.04


def test_triton_pointers_charged_at_the_extent_touched():
    # a pointwise kernel recording xnumel = 1024 that reads a [64, 4096] buffer: charged 1024 elements
    c = op_cost(call("triton_poi_fused_add_0", [(64, 4096), (1024,), (1024,), ()], [F32, F32, F32, "Scalar"],
                     concrete=["", "", "", "1024"]))
    assert c.bytes == (1024 + 1024 + 1024) * 4  # 12,288 B, not 64*4096*4 + 2*1024*4 = 1,056,768 B
    # a gather: no xnumel recorded, the embedding table is > 8x every other argument -> charged at the
    # largest other argument (32*2880 = 92,160 elements), not its 201,088*2880 rows
    g = op_cost(call("triton_poi_fused_0", [(32,), (201088, 2880), (32, 2880)], [I32, BF16, BF16]))
    assert g.bytes == 32 * 4 + 92_160 * 2 + 92_160 * 2  # 368,768 B
    assert any("gather or slice source" in n for n in g.notes)
    # one tensor argument: an in-place update (in_out_ptr0) read and written
    r = op_cost(call("triton_poi_fused_relu_0", [(1000,), ()], [F32, "Scalar"], concrete=["", "1000"]))
    assert r.bytes == 2 * 1000 * 4  # 8,000 B
    # a reduction: xnumel*rnumel caps its inputs (32768*2048 = the [8, 4096, 2048] input: nothing capped)
    red = op_cost(call("triton_red_fused_mean_0", [(8, 4096, 2048), (8, 4096, 1), (), ()],
                       [BF16, F32, "Scalar", "Scalar"], concrete=["", "", "32768", "2048"]))
    assert red.bytes == 8 * 4096 * 2048 * 2 + 8 * 4096 * 4  # 134,217,728 + 131,072 = 134,348,800 B


def test_upsample_sort_topk_and_qkv_bias():
    # upsample_nearest2d(input [2, 3, 8, 8], output_size [16, 16], scales_h, scales_w): an index copy
    n = op_cost(call("aten::upsample_nearest2d", [(2, 3, 8, 8), (), (), ()], [F32, "ScalarList", "", ""],
                     concrete=["", "[16, 16]", "", ""]))
    assert n.flops == 0 and n.bytes == 2 * 3 * 8 * 8 * 4 + 2 * 3 * 16 * 16 * 4  # 1,536 + 6,144 = 7,680 B
    # upsample_bilinear2d.vec(input, output_size=None, align_corners, scale_factors [2.0, 2.0])
    b = op_cost(call("aten::upsample_bilinear2d", [(2, 3, 8, 8), (), (), ()], [BF16, "", "Scalar", "ScalarList"],
                     concrete=["", "", "False", "[2.0, 2.0]"]))
    assert b.flops == 2 * 4 * (2 * 3 * 16 * 16)  # 2*P*out = 2*4*1,536 = 12,288
    assert b.bytes == 2 * 3 * 8 * 8 * 2 + 2 * 3 * 16 * 16 * 2  # 768 + 3,072 = 3,840 B
    # backward: grad_output [2, 3, 16, 16] scattered into input_size [2, 3, 8, 8] (zeroed, then written)
    g = op_cost(call("aten::upsample_bilinear2d_backward", [(2, 3, 16, 16), (), (), (), (), ()],
                     [F32, "ScalarList", "ScalarList", "Scalar", "", ""], concrete=["", "[16, 16]", "[2, 3, 8, 8]",
                                                                              "False", "", ""]))
    assert g.flops == 2 * 4 * 1536 and g.bytes == 1536 * 4 + 2 * 384 * 4  # 6,144 + 3,072 = 9,216 B
    # no sizes recorded (old trace): opaque for that cause, not unmodelled
    old = op_cost(call("aten::upsample_nearest2d", [(2, 3, 8, 8), (), (), ()], [F32, "", "", ""]))
    assert isinstance(old, Unmodelled) and old.cause == "scalars_not_recorded"
    # sort(self [4, 1024], dim=-1, descending=False): 4 rows * 1024 * log2(1024)=10 comparisons
    s = op_cost(call("aten::sort", [(4, 1024), (), ()], [F32, "Scalar", "Scalar"], concrete=["", "-1", "False"]))
    assert s.flops == 4 * 1024 * 10 and s.bytes == 4 * 1024 * (4 + 4 + 8)  # read, values, int64 indices
    st = op_cost(call("aten::sort", [(4, 1024), (), (), ()], [F32, "Scalar", "Scalar", "Scalar"],
                      concrete=["", "True", "0", "False"]))  # sort.stable(self, stable, dim=0, descending)
    assert st.flops == 1024 * 4 * 2  # 1,024 columns of n = 4: log2(4) = 2
    # topk(self [32, 32000], k=50, dim=-1): 32*32000 comparisons; read 4,096,000 B, write 32*50*(4 + 8)
    t = op_cost(call("aten::topk", [(32, 32000), (), (), (), ()], [F32, "Scalar", "Scalar", "Scalar", "Scalar"],
                     concrete=["", "50", "-1", "True", "True"]))
    assert t.flops == 32 * 32000 and t.bytes == 32 * 32000 * 4 + 32 * 50 * 12  # 4,096,000 + 19,200
    # _transform_bias_rescale_qkv(qkv [2, 128, 3*768], bias [2304], num_heads=12): 4*B*T*D FLOPs
    q = op_cost(call("aten::_transform_bias_rescale_qkv", [(2, 128, 2304), (2304,), ()], [BF16, BF16, "Scalar"],
                     concrete=["", "", "12"]))
    assert q.flops == 4 * 2 * 128 * 768  # 786,432
    assert q.bytes == 2 * 128 * 2304 * 2 * 2 + 2304 * 2  # qkv read + q,k,v written (1,179,648 each) + bias 4,608


def test_collectives_against_the_peer_link():
    a = analyze(shared_trace("hta/rank0.json.gz"))  # A100-SXM4-80GB: NVLink 3, 600 GB/s bidirectional
    rows = [r for r in a["ops"] if r["name"] == "c10d::_allgather_base_"]
    assert rows
    for r in rows:
        c = r["comm"]
        assert c["link"] == "NVLink 3" and c["link_gbps"] == 300.0  # per direction = 600 / 2
        assert c["link_pct"] == c["busbw_gbps"] / 300.0 * 100.0


def test_compiled_kernels_say_what_they_ran():
    from traceana.diagnose.compiled_regions import kernel_facts

    # Inductor joins the fused ops' names with "_": _unsafe_view and native_layer_norm are one op each
    assert kernel_facts("triton_red_fused__unsafe_view_add_mean_mul_pow_rsqrt_1") == (
        "a Triton reduction kernel from Inductor fusing _unsafe_view, add, mean, mul, pow, rsqrt")
    assert kernel_facts("triton_per_fused_native_layer_norm_0").endswith("fusing native_layer_norm")
    assert "torch 2.0 name" in kernel_facts("triton__0d1d2d")
    assert kernel_facts("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align4>(Params)") == (
        "a GEMM kernel, tile 256x128 (CUTLASS 2 / cuBLAS)")
    assert kernel_facts("ncclDevKernel_AllReduce_Sum_bf16_RING_LL") == "a collective: all-reduce"
    a = analyze(shared_trace("hta/rank0.json.gz"))
    # the CompiledFunction regions replay CUDA graphs (cudaGraphLaunch inside them): one row per kernel name
    rows = [r for r in a["ops"] if r["cause"] == "graph_replay"]
    assert rows and not [r for r in a["ops"] if r["name"] in ("CompiledFunction", "CompiledFunctionBackward")]
    top = max(rows, key=lambda r: r["device_time_us"])
    assert "tile 256x64 (CUTLASS 2 / cuBLAS)" in top["reason"]
