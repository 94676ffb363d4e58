"""What kernel names say of the GPU that ran them: the newest architecture any kernel was built for is a lower
bound on the GPU (a kernel built for sm_80 runs on sm_80 and later, never earlier), shown for a trace without
deviceProperties."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tests.conftest import all_shared_traces, shared_trace
from traceana.analysis import analyze
from traceana.link.kernel_names.arch import built_for, family, newest
from traceana.load import load_trace
from traceana.render.first import device_line

# (name, compute capability x 10 it is built for, or None when the name says nothing)
NAMES = [
    ("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", 70),  # cuBLAS family prefix
    ("turing_fp16_s1688cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1", 75),
    ("ampere_sgemm_128x64_nn", 80),
    ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", 80),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_cgasize1x2x1_warpgroupsize2x1x1", 90),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x128_32x3_nn_align8>(Params)", 80),
    ("cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8", 90),
    ("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNT", 90),
    ("void flash::FlashAttnFwdSm90<Flash_fwd_kernel_traits<128, 128, 64>>(Params)", 90),
    ("void cutlass::Kernel2<cutlass::gemm::kernel::GemmUniversal<cutlass::arch::Sm80, float>>(Params)", 80),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", None),  # cuBLASLt without an sm tag: nothing claimed
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int)", None),
    ("ncclKernel_AllReduce_RING_LL_Sum_bfloat16", None),
    ("smem_kernel_3", None),
    ("asm_90_kernel", None),  # "sm_90" inside another word is no tag
]


@pytest.mark.parametrize("name,cc", NAMES)
def test_the_architecture_a_kernel_name_says(name, cc):
    assert built_for(name) == cc


def test_newest_is_the_lower_bound_and_names_its_kernel():
    # an H100 runs sm_80 and sm_90 kernels side by side: it is at least sm_90
    got = newest(["ampere_sgemm_128x64_nn", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "x"])
    assert got == (90, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64")
    assert family(90) == "Hopper" and family(86) == "Ampere" and family(89) == "Ada" and family(120).startswith("Blackwell")


@pytest.mark.parametrize("rel", [r for r in all_shared_traces() if "capture_traces" not in r])
def test_never_above_the_recorded_device(rel):
    """On every shared trace that records its device: the bound never exceeds its compute capability."""
    trace = load_trace(shared_trace(rel))
    props = trace.device_properties or []
    if not len(trace.gpu) or not props or props[0].get("computeMajor") is None:
        pytest.skip("no GPU events or no recorded compute capability")
    found = newest(trace.names[c] for c in np.unique(trace.gpu.name).tolist())
    cc = 10 * int(props[0]["computeMajor"]) + int(props[0].get("computeMinor") or 0)
    assert found is None or found[0] <= cc, (found, cc)


def test_a_trace_without_device_properties_names_its_architecture(tmp_path):
    """hta/rank0 (an A100) with its deviceProperties removed: no roofline, but the device line and a
    warning say its kernels need sm_80 or newer (its cutlass_80_ / sm80_xmma / ampere_ kernels)."""
    doc = json.loads(gzip.open(shared_trace("hta/rank0.json.gz"), "rt").read())
    assert doc.pop("deviceProperties")
    path = tmp_path / "nodev.json"
    path.write_text(json.dumps(doc))
    a = analyze(str(path))
    assert a["device"]["key"] is None and a["device"]["built_for"]["cc"] == "8.0"
    assert a["device"]["built_for"]["family"] == "Ampere"
    assert device_line(a).startswith("unknown device (kernels built for sm_80: Ampere or later)")
    notes = [n for n in a["warnings"] if n.startswith("no deviceProperties")]
    assert len(notes) == 1 and "compute capability 8.0 or newer" in notes[0] and "--device KEY" in notes[0]
