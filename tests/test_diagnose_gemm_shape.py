"""GEMM shapes: dims from the recorded inputs, alignment, tile and wave quantization."""

from __future__ import annotations

import pytest

from traceana.diagnose import gemm_shape as gs

XMMA = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
S1688 = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>(Params)"


def _row(name, dims, dtype="bf16", kernel=XMMA, **kw):
    r = {"id": "op1", "name": name, "input_dims": dims, "input_types": ["c10::BFloat16"] * len(dims),
         "dtype": dtype, "kernels": [{"name": kernel, "time_us": 1.0, "count": 1}], "family": "gemm",
         "peak_dtype": "bf16_tc", "count": 1}
    r.update(kw)
    return r


def test_gemm_dims():
    assert gs.gemm_dims(_row("aten::mm", [[64, 4096], [4096, 2798]])) == (1, 64, 2798, 4096)
    assert gs.gemm_dims(_row("aten::addmm", [[1024], [5185, 1024], [1024, 1024], [], []])) == (1, 5185, 1024, 1024)
    assert gs.gemm_dims(_row("aten::bmm", [[16, 5185, 64], [16, 64, 5185]])) == (16, 5185, 5185, 64)
    assert gs.gemm_dims(_row("aten::linear", [[8, 128, 512], [256, 512], [256]])) == (1, 1024, 256, 512)
    assert gs.gemm_dims(_row("aten::mm", [[64, 32], [16, 8]])) is None  # K does not match


# real kernel names, one per naming convention (from ../shared/traces and the libraries' public names)
TILE_NAMES = [
    # Tensile (rocBLAS / hipBLASLt on MI300X, tracelens/mi300 Qwen): MT = macro tile MT0 x MT1 x DepthU
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_"
     "CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB", (256, 128, "Tensile / hipBLASLt")),
    # hipBLASLt's newer Tensile names (tracelens/mi300 bert): MI16x16x16x1 is the matrix instruction, not the tile
    ("Cijk_Ailk_Bljk_BBS_BH_MT32x32x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS0_ASE_ASGT_ASLT",
     (32, 32, "Tensile / hipBLASLt")),
    # cuBLAS on H100 (tracelens/h100 Qwen)
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_warpgroupsize2x1x1_execute_segment_k_off_"
     "kernel__5x_cublas", (256, 128, "cuBLAS xmma")),
    # cuBLASLt nvjet on Hopper / Blackwell: tile M x N, then K x stages, then the cluster
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", (128, 256, "cuBLASLt nvjet")),
    ("nvjet_tst_256x8_64x6_2x1_v_bz_TNT", (256, 8, "cuBLASLt nvjet")),
    # CUTLASS 3: s64x128x16 is the warpgroup MMA; the tile 128x128x64 comes before the 2x1x1 cluster
    ("cutlass3x_sm90_tensorop_s64x128x16gemm_f16_f16_f32_f16_f16_128x128x64_2x1x1_0_ttt_align8_warpspecialized_"
     "pingpong_epi_tma", (128, 128, "CUTLASS 3")),
    ("cutlass3x_sm90_tensorop_gemm_f16_f16_f16_f16_f16_128x256x64_1x2x1_0_tnn_align8_warpspecialized_pingpong_epi_tma",
     (128, 256, "CUTLASS 3")),
    # CUTLASS 2 and cuBLAS's SIMT kernels (hta/control, hta/rank0 on A100)
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_"
     "256x128_32x3_nn_align4::Params)", (256, 128, "CUTLASS 2 / cuBLAS")),
    ("ampere_sgemm_128x64_nn", (128, 64, "CUTLASS 2 / cuBLAS")),
    ("void cutlass::Kernel2<cutlass_75_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_nn_align1>("
     "cutlass_75_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_nn_align1::Params)", (32, 32, "CUTLASS 2 / cuBLAS")),
]
NO_TILE = [
    "_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weightINS_47GridwiseGemm_bk0mk1_bk0nk1_mn_",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(float)",
    "void cublasLt::splitKreduce_kernel<32, 16, int, __nv_bfloat16, __nv_bfloat16, float, __nv_bfloat16, true>()",
]


@pytest.mark.parametrize("name,tile", TILE_NAMES)
def test_tile_from_each_naming_convention(name, tile):
    assert gs.parse_tile(name) == tile


@pytest.mark.parametrize("name", NO_TILE)
def test_names_without_a_tile(name):
    assert gs.parse_tile(name) is None


def test_kernel_names():
    assert gs.kernel_tile([{"name": "Memset (Device)"}, {"name": XMMA}]) == (128, 128, "cuBLAS xmma")
    assert gs.kernel_align([{"name": S1688}]) == 1
    assert gs.tensor_dtype(_row("aten::mm", [], dtype="fp32", kernel=S1688, peak_dtype="fp32")) == "tf32"
    assert gs.tensor_dtype(_row("aten::mm", [], dtype="fp32", kernel="volta_sgemm_128x64_nn",
                                peak_dtype="fp32")) is None  # CUDA cores: no alignment rule


def test_tile_and_wave_quantization():
    q = gs.quantization(1, 5185, 1024, (128, 128), 132)
    # ceil(5185/128) = 41 x ceil(1024/128) = 8 tiles = 328 CTAs; ceil(328/132) = 3 waves
    assert (q["tiles_m"], q["tiles_n"], q["ctas"], q["waves"]) == (41, 8, 328, 3)
    assert q["tile_eff"] == pytest.approx(5185 / 5248)  # 5185*1024 / (41*128 * 8*128) = 98.8%
    assert q["wave_eff"] == pytest.approx(328 / 396)  # 328 CTAs / (3 waves x 132 SMs) = 82.8%
    # M = N = 4096 with 256x128 tiles on an A100's 108 SMs: 16 x 32 = 512 tiles,
    # 512 / 108 = 4.74 waves -> 5, efficiency 4.74 / 5 = 512 / 540 = 94.8%
    w = gs.quantization(1, 4096, 4096, (256, 128), 108)
    assert (w["tiles_m"], w["tiles_n"], w["ctas"], w["waves"]) == (16, 32, 512, 5)
    assert w["wave_eff"] == pytest.approx(512 / 540) and round(w["wave_eff"] * 100, 1) == 94.8
    assert w["tile_eff"] == 1.0 and w["tile"] == "128x256"  # named as a kernel writes it: N x M


def test_name_tile_runs_along_n_then_m():
    # PyTorch's row-major C[M, N] = A @ B runs as the column-major C^T = B^T A^T: the name's BLAS m
    # is N. nvjet 128x256 on mm [5185, 4096] @ [4096, 4096]: 128 along N = 4096 -> 32 tiles,
    # 256 along M = 5185 -> ceil(5185/256) = 21 tiles (5,376 rows); 21 x 32 = 672 tiles on 132 SMs
    # = ceil(672/132) = 6 waves; wave efficiency 672 / 792 = 84.8%, tile efficiency 5185 / 5376 = 96.4%
    a = gs.analyse(_row("aten::mm", [[5185, 4096], [4096, 4096]], kernel="nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT"),
                   132)
    q = a["quant"]
    assert (q["tiles_m"], q["tiles_n"], q["ctas"], q["waves"]) == (21, 32, 672, 6)
    assert q["wave_eff"] == pytest.approx(672 / 792) and q["tile_eff"] == pytest.approx(5185 / 5376)
    assert a["tile_library"] == "cuBLASLt nvjet"


def test_unknown_tile_does_no_tile_arithmetic():
    ck = NO_TILE[0]
    a = gs.analyse(_row("aten::mm", [[64, 4096], [4096, 2798]], kernel=ck), 304)
    assert a["quant"] is None and "wave_M" not in a["better"] and a["misaligned"] == {"N": 2798}
    device = {"peak_tflops": {"bf16_tc": 1307.4}, "dram_gbps": 5300.0, "sms": 304}
    # aligned but compute-bound with an unreadable tile: no finding (nothing is guessed)
    ok = _row("aten::mm", [[8192, 8192], [8192, 8192]], kernel=ck, flops=2 * 8192**3, bytes=3 * 8192 * 8192 * 2,
              device_time_us=1000.0, bound="compute", id="op2")
    bad = _row("aten::mm", [[64, 4096], [4096, 2798]], kernel=ck, flops=2 * 64 * 4096 * 2798,
               bytes=2 * (64 * 4096 + 4096 * 2798 + 64 * 2798), device_time_us=500.0, bound="memory", id="op1")
    (f,) = gs.shape_findings([bad, ok], device, total_us=2000.0)
    assert f["ops"] == ["op1"] and "Tile unknown" in f["text"] and "wave efficiency" not in f["text"]


def test_analyse_alignment_and_better_shapes():
    a = gs.analyse(_row("aten::mm", [[64, 4096], [4096, 2798]], dtype="fp32", kernel=S1688, peak_dtype="fp32"), 108)
    assert a["dtype"] == "tf32" and a["align"] == 4  # 16 bytes of tf32
    assert a["misaligned"] == {"N": 2798}  # 2798 = 4 x 699.5; K = 4096 is fine; M does not matter
    assert a["better"]["pad_N"] == 2800
    assert a["kernel_align"] == 1
    b = gs.analyse(_row("aten::addmm", [[1024], [5185, 1024], [1024, 1024], [], []]), 132)
    assert b["misaligned"] == {}
    # whole waves need a multiple of 132 / gcd(132, 8 N-tiles) = 33 M-tiles: 33 or 66 x 128
    assert b["better"]["wave_M"] == [4224, 8448]


def test_misaligned_gemm_finding_uses_the_aligned_reference():
    device = {"peak_tflops": {"bf16_tc": 989.4}, "dram_gbps": 3350.0, "sms": 132}
    # aligned: 2*5185*1024*1024 = 10,873,733,120 FLOP / 989.4 TFLOP/s = 10.99 µs; at 60% = 18.32 µs
    ok = _row("aten::addmm", [[1024], [5185, 1024], [1024, 1024], [], []], flops=10_873_733_120,
              bytes=2 * (5185 * 1024 * 2 + 1024 * 1024 + 1024), device_time_us=10_873_733_120 / 989.4e6 / 0.6,
              bound="compute", id="op2")
    # misaligned bmm, memory-bound: bytes 2*(16*5185*64*2 + 16*5185*5185) = 881,532,160 B / 3350 GB/s
    # = 263.14 µs floor; measured 1,083.5 µs: 24.3% of its roof
    bad = _row("aten::bmm", [[16, 5185, 64], [16, 64, 5185]], kernel="cutlass_75_tensorop_bf16_s1688gemm_bf16_"
               "256x128_tn_align1", flops=2 * 16 * 5185 * 5185 * 64, bytes=881_532_160, device_time_us=1083.5,
               bound="memory", id="op1")
    fs = gs.shape_findings([bad, ok], device, total_us=2000.0)
    (f,) = [f for f in fs if f["ops"] == ["op1"]]
    assert f["kind"] == "gemm_shape"
    assert "N=5,185 is not a multiple of 8" in f["text"] and "align1" in f["text"] and "N=5,192" in f["text"]
    frac = 881_532_160 / 3350e3 / 1083.5  # 0.2429
    # at the aligned GEMMs' 60% it would take 1083.5 x 0.2429 / 0.6 = 438.6 µs: saving 644.9 µs
    assert f["saving_us"] == pytest.approx(1083.5 * (1 - frac / 0.6))
    assert f["saving_us"] == pytest.approx(644.9, abs=0.1)
