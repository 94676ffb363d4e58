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


def test_kernel_names():
    assert gs.kernel_tile([{"name": XMMA}]) == (128, 128)
    assert gs.kernel_tile([{"name": S1688}]) == (256, 64)
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


@pytest.mark.parametrize("name,tile", [
    # Tensile / hipBLASLt (MI300X, shared/traces/tracelens/mi300): MT = macro tile M x N x depthU; MI16x16x1
    # is the matrix instruction and must not be read as the tile
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT128x224x64_MI16x16x1_SN_LDSB1_AFC1", (128, 224)),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT320x224x64_MI16x16x1_SN_LDSB0", (320, 224)),
    ("Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1", (64, 16)),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute", (128, 128)),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NNT", (128, 256)),
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized", (128, 256)),
    ("cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align1", (256, 128)),
    ("ampere_sgemm_128x64_nn", (128, 64)),
    ("volta_h884gemm_256x128_ldg8_nn", (256, 128)),
    ("triton_tem_fused_addmm_0", None),  # an Inductor template: no tile in the name
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false>", None),
])
def test_tile_from_each_librarys_kernel_names(name, tile):
    assert gs.tile_of(name) == tile


def test_unknown_tile_is_said_not_guessed():
    row = {"id": "op1", "name": "aten::mm", "input_dims": [[4096, 4095], [4095, 4096]], "dtype": "bf16",
           "family": "gemm", "flops": 2 * 4096 * 4096 * 4095, "bytes": 1e8, "count": 1, "device_time_us": 1000.0,
           "bound": "compute", "kernels": [{"name": "triton_tem_fused_mm_0", "time_us": 1000.0, "count": 1}]}
    a = gs.analyse(row, 132)
    assert a["quant"] == [] and a["misaligned"] == {"K": 4095}
    f = gs.shape_findings([row], {"peak_tflops": {"bf16_tc": 989.4}, "sms": 132, "dram_gbps": 3350.0}, 1000.0)
    assert len(f) == 1 and "Tile unknown" in f[0]["text"] and "128x128" not in f[0]["text"]


def test_wave_quantization_on_a_tensile_tile():
    # M=N=4096 on MT256x256 tiles: 16 x 16 = 256 workgroups on 304 CUs (MI300X) = 1 wave,
    # 256 / 304 = 84.2% wave efficiency; tile efficiency 100%
    q = gs.quantization(1, 4096, 4096, gs.tile_of("Cijk_Alik_Bljk_BBS_BH_MT256x256x64_MI16x16x1_SN"), 304)
    assert (q["tiles_m"], q["tiles_n"], q["ctas"], q["waves"]) == (16, 16, 256, 1)
    assert q["wave_eff"] == pytest.approx(256 / 304) and q["tile_eff"] == 1.0


def test_tensile_tile_on_a_real_lm_head_is_read_in_blas_order():
    """SGLang Qwen3-8B on MI300X: the lm_head [15, 4096] x [4096, 151936] ran MT256x16. torch calls
    column-major BLAS with the operands swapped, so the 256 runs along torch's N, the 16 along M."""
    from tests.analyses import analysis

    a = analysis("tracelens/sglang/sglang_Qwen3-8B_prefilldecode.json.gz")
    row = next(o for o in a["ops"] if o["name"] == "aten::mm" and o["input_dims"][:2] == [[15, 4096], [4096, 151936]])
    q = gs.analyse(row, a["device"]["sms"])["quant"][0]
    # N: ceil(151936 / 256) = 594 tiles; M: ceil(15 / 16) = 1 tile
    assert (q["tile"], q["tiles_m"], q["tiles_n"]) == ("256x16", 594, 1)
    # 151936*15 / (594*256 * 1*16) = 2,279,040 / 2,433,024 = 93.7%
    assert q["tile_eff"] == pytest.approx(2_279_040 / 2_433_024)
    # 594 workgroups on 304 CUs: 2 waves, 594 / 608 = 97.7%
    assert q["waves"] == 2 and q["wave_eff"] == pytest.approx(594 / 608)
