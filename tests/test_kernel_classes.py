"""Kernel classes from names (traces without shapes), the shapes_not_recorded cause, and the
record_param_comms args carried from the trace to the cost stage."""

from __future__ import annotations

import pytest

from tests import synth as s
from tests.analyses import analysis
from traceana.analysis import analyze
from traceana.diagnose.advice import OPAQUE_ADVICE
from traceana.link.kernel_classes import CLASSES, classify
from traceana.link.attribute import CAUSES


@pytest.mark.parametrize("name,cls", [
    ("volta_sgemm_128x32_nt", "gemm"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1_SN", "gemm"),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_tn_align1>(Params)", "gemm"),
    ("void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int)", "convolution"),
    ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int)", "convolution"),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128> >(Params)", "attention"),
    ("kernel_unified_attention_2d", "attention"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)", "elementwise"),
    ("triton_poi_fused_add_cos_sin_0", "elementwise"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >(at::native::ReduceOp<float>)", "reduction"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float>(float*, float const*, int)", "reduction"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float)", "normalization"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct)", "normalization"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "communication"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    ("Memcpy DtoD (Device -> Device)", "memcpy/memset"),
    ("void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16>(long const*)", "copy"),  # a KV-cache write
    ("void split_embedding_codegen_forward_unweighted_kernel<float, float, float, long>(at::Generic)", "other"),
    ("some_custom_kernel", "other"),
])
def test_classify(name, cls):
    assert classify(name) == cls and cls in CLASSES


def test_trace_without_shapes_gets_classes_and_no_flops():
    a = analysis("hta/df_index_resolver.json.gz")
    kc = a["kernel_classes"]
    assert sum(kc["by_class"].values()) == pytest.approx(kc["total_us"])
    assert kc["opaque_by_class"] == pytest.approx(kc["by_class"])  # nothing has shapes
    top = sorted(kc["by_class"], key=lambda k: -kc["by_class"][k])
    assert top[:2] == ["gemm", "communication"]  # 40% GEMM (fp32 volta_sgemm), 36% NCCL all_reduce
    assert all(op["flops"] is None and op["kernel_class"] in CLASSES for op in a["ops"])
    assert any("record_shapes=True" in w and "gemm" in w for w in a["warnings"])


def test_every_opaque_cause_has_advice():
    assert set(CAUSES) <= set(OPAQUE_ADVICE)


def test_tensorlists_without_sizes_are_opaque_and_collective_args_reach_the_cost(tmp_path):
    ev = [
        s.op("aten::cat", 10, 20, ext=1, dims=[[], []], types=["TensorList", "Scalar"]),
        s.launch(12, corr=100, ext=1),
        s.kernel("void at::native::CatArrayBatchedCopy<float>(float*)", 100, 5, corr=100, ext=1),
        {**s.op("record_param_comms", 40, 20, ext=2, dims=[[[1024]], []], types=["TensorList", ""]),
         "args": {"External id": 2, "Input Dims": [[[1024]], []], "Input type": ["TensorList", ""],
                  "Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,
                  "Group size": 4, "dtype": "Float", "Process Group Ranks": "[0, 1, 2, 3]"}},
        s.launch(42, corr=101, ext=2),
        s.kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 200, 10, corr=101, ext=2),
    ]
    a = analyze(s.write(tmp_path, s.trace(ev)))
    cat = next(o for o in a["ops"] if o["name"] == "aten::cat")
    assert cat["bound"] == "opaque" and cat["cause"] == "shapes_not_recorded"
    assert cat["kernel_class"] == "copy"
    comm = next(o for o in a["ops"] if o["name"] == "record_param_comms")
    assert comm["bound"] == "communication" and comm["family"] == "comm"
    assert comm["bytes"] == pytest.approx(1024 * 4 * 2 * 3 / 4)  # ring all_reduce: 2(n-1)/n * S
    assert comm["comm"]["algbw_gbps"] == pytest.approx(4096 / 10e3)  # S / 10 us
    assert comm["comm"]["busbw_gbps"] == pytest.approx(6144 / 10e3)
    assert a["breakdown"]["by_bound"]["communication"] == pytest.approx(10)
    assert any("Verdict: communication" in line for e in a["explanations"] for line in e["lines"])


def test_html_coverage_section_shows_the_class_table():
    from traceana.render import render

    html = render(analysis("hta/df_index_resolver.json.gz"), "html")
    cov = html.split('<section id="coverage">', 1)[1].split("</section>", 1)[0]
    assert "All kernels, by class" in cov and "communication" in cov and "meta tensors" in cov
