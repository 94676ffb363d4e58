"""Split-K and stream-K GEMMs, read from kernel names before any tile/wave arithmetic.

A split-K GEMM launches tiles x splits workgroups and a stream-K one a persistent grid: neither runs
in waves of its tile count, so gemm_shape takes their waves from the recorded grid (GpuEvents.blocks,
in workgroups whatever the launch API) or does no wave arithmetic at all.
"""

from __future__ import annotations

import pytest

from tests.analyses import analysis
from traceana.diagnose import gemm_shape as gs

# hipBLASLt on MI300X (tracelens/mi300 Qwen): a UserArgs kernel, GlobalSplitU left to the launch
HIPBLASLT = ("Cijk_Ailk_Bljk_S_B_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_"
             "CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA2_GRVWB2_GSUAMB_GLS0_ISA942_IU1_K1_LBSPPA256_LBSPPB512_LBSPPM0_"
             "LPA16_LPB8_LPM0_LRVW4_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA4_NTB0_NTC0_NTD4_NTM0_NEPBS16_NLCA1_NLCB1_ONLL1_"
             "PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_SK0_SKXCCM0_TLDS1_ULSGRO0_USL1_UIOFGRO0_USFGROn1_VSn1_VWA1_"
             "VWB1_WSGRA0_WSGRB0_WS64_WG16_4_4")
# Tensile with the factor in the name (tracelens/mi300 resnet): GSU1, no split; MKFGSU256 is MinKForGSU
TENSILE_GSU1 = ("Cijk_Ailk_Bljk_BBS_BH_MT32x32x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS0_ASE_ASGT_"
                "ASLT_ASM_ASAE01_ASCE01_ASEM1_AAC0_BL1_BS1_CLR0_DTLA0_DTLB0_DTVA0_DTVB0_DVO0_ETSP_EPS1_ELFLR0_EMLL0_"
                "FSSC10_FL0_GLVWA2_GLVWB2_GRCGA1_GRCGB1_GRPM1_GRVWn1_GSU1_GSUASB_GLS0_ISA942_IU1_K1_KLA_LBSPPA512_"
                "LBSPPB128_LPA16_LPB16_LDL1_LRVW8_LWPMn1_LDW0_FMA_MIAV1_MDA2_MO40_MMFSC_MKFGSU256_NTA0_NTB0_NTC2_NTD2_"
                "NEPBS8_NLCA1_NLCB1_ONLL1_OPLV0_PK0_PAP0_PGR2_PLR5_PKA0_SIA3_SLW1_SS1_SU64_SUM0_SUS128_SCIUI1_SPO1_SRVW0_"
                "SSO1_SVW1_SNLL0_TSGRA0_TSGRB0_TT1_16_TLDS1_UMLDSA0_UMLDSB1_U64SL1_USFGROn1_VAW1_VSn1_VW1_VWB1_VFLRP1_"
                "WSGRA0_WSGRB0_WS64_WG32_8_1_WGMn16")
CUTLASS_BF16 = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)"
SPLITK_REDUCE = "void cublasLt::splitKreduce_kernel<32, 16, int, __nv_bfloat16, __nv_bfloat16, float, __nv_bfloat16>()"


def test_split_read_from_tensile_fields():
    s = gs.split_k([{"name": HIPBLASLT}])
    assert s["mode"] == "split at launch" and s["factor"] is None  # GSUAMB and no GSU<n>
    assert "separate buffers summed by a second kernel" in s["evidence"]
    assert gs.split_k([{"name": TENSILE_GSU1}]) is None  # GSU1: K not split (MKFGSU256 is not a GSU field)
    # the same grammar with other values: GSU4 a factor of 4, GSUM more than one set at launch, SK3 stream-K
    assert gs.split_k([TENSILE_GSU1.replace("_GSU1_", "_GSU4_")])["factor"] == 4
    assert gs.split_k([TENSILE_GSU1.replace("_GSU1_", "_GSUM_")])["mode"] == "split-K"
    assert gs.split_k([HIPBLASLT.replace("_SK0_", "_SK3_")])["mode"] == "stream-K"
    assert gs.split_k([{"name": CUTLASS_BF16}, {"name": SPLITK_REDUCE}])["mode"] == "split-K"
    assert gs.split_k([{"name": CUTLASS_BF16}]) is None


def _row(kernels, grid, dims, **kw):
    r = {"id": "op1", "name": "aten::mm", "input_dims": dims, "dtype": "bf16", "family": "gemm", "count": 1,
         "peak_dtype": "bf16_tc", "grid_blocks": grid,
         "kernels": [{"name": k, "time_us": 1.0, "count": 1} for k in kernels]}
    r.update(kw)
    return r


def test_stream_k_has_no_tile_count_waves():
    # MT16x16 on mm [4096, 4096] @ [4096, 100]: 256 x 7 = 1,792 tiles; on 304 CUs the tile count would
    # give ceil(1792/304) = 6 waves at 1792 / 1824 = 98.2%; stream-K shares the K loops: no waves
    a = gs.analyse(_row([HIPBLASLT.replace("_SK0_", "_SK3_")], 304.0, [[4096, 4096], [4096, 100]]), 304)
    q = a["quant"]
    assert q["ctas"] == 1792 and q["waves"] is None and q["wave_eff"] == 1.0
    assert "no wave quantization to recover" in gs._tile_text(a, 304)


def test_split_k_without_a_grid_does_no_wave_arithmetic():
    # fixed GSU4 but no recorded grid: 1,792 tiles x 4 splits would be 7,168 workgroups, but nothing is assumed
    a = gs.analyse(_row([TENSILE_GSU1.replace("_GSU1_", "_GSU4_")], None, [[4096, 4096], [4096, 100]]), 304)
    assert a["quant"]["waves"] is None and a["quant"]["eff"] == a["quant"]["tile_eff"]
    assert "records no grid" in gs._tile_text(a, 304)
    assert "wave_M" not in a["better"]


def test_compute_bound_split_gemm_claims_only_tile_padding():
    # mm [65, 8192] @ [8192, 96] on MT16x16 (GSUM): ceil(65/16) x 96/16 = 5 x 6 = 30 tiles; tile efficiency
    # 65*96 / (80*96) = 81.25%; the tile count alone would add 30 / 304 = 9.9% wave efficiency (90% "padding")
    dims = [[65, 8192], [8192, 96]]
    row = _row([TENSILE_GSU1.replace("_GSU1_", "_GSUM_").replace("MT32x32x64", "MT16x16x64")], None, dims,
               flops=2 * 65 * 8192 * 96, bytes=2 * (65 * 8192 + 8192 * 96 + 65 * 96), device_time_us=100.0,
               bound="compute")
    (f,) = gs.shape_findings([row], {"peak_tflops": {"bf16_tc": 1307.4}, "dram_gbps": 5300.0, "sms": 304}, 100.0)
    assert f["saving_us"] == pytest.approx(100.0 * (1 - 65 / 80))  # 18.75 µs: tile padding only
    assert "19% tile/wave padding" in f["title"]
    assert "split-K" in f["text"] and "records no grid" in f["text"]


def test_runtime_split_read_from_the_grid_on_mi300_resnet():
    """ResNet on MI300X, the final fc layer's weight gradient: mm [10, 1000] @ [1000, 512] in bf16 on a
    hipBLASLt MT16x16x256 kernel that takes its split factor at launch (GSUAMBSK, no GSU field). Tiles:
    ceil(10/16) x 512/16 = 1 x 32 = 32; the recorded grid (32768 work-items / 256 per workgroup) ran
    128 workgroups = 32 tiles x 4 splits of K; waves from the grid: 128 / 304 = 42.1%, not 32 / 304 = 10.5%."""
    a = analysis("tracelens/mi300/resnet_act_checkpoint.json.gz")
    row = next(r for r in a["ops"] if r["name"] == "aten::mm" and r["input_dims"] == [[10, 1000], [1000, 512]])
    x = gs.analyse(row, a["device"]["sms"])
    q = x["quant"]
    assert (q["tiles_m"], q["tiles_n"], q["ctas"], q["waves"]) == (1, 32, 128, 1)
    assert q["split"]["factor"] == 4 and q["wave_from"] == "grid"
    assert q["wave_eff"] == pytest.approx(128 / 304)
    assert "128 workgroups (4 splits of K per tile)" in gs._tile_text(x, 304)


def test_cublas_split_k_on_h100_owlv2():
    """OWLv2 on H100: an addmm [5, 3072] @ [3072, 768] in bf16 runs a CUTLASS 64x64 kernel and cuBLASLt's
    splitKreduce_kernel: 12 tiles by the tile count (1 x 768/64), but split-K, with two kernels behind
    the op's median grid: no wave arithmetic (it used to claim 12 / 132 = 9.1% wave efficiency)."""
    a = analysis("tracelens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz")
    row = next(r for r in a["ops"] if any("splitKreduce" in k["name"] for k in r["kernels"])
               and r["name"] == "aten::addmm")
    x = gs.analyse(row, a["device"]["sms"])
    assert x["split"]["mode"] == "split-K" and x["quant"]["ctas"] == 12  # 1 x 12 tiles
    assert x["quant"]["waves"] is None and x["quant"]["wave_eff"] == 1.0
