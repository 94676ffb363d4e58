"""Real model code on a ROCm-shaped trace: hipBLASLt GEMMs launched by hipExtModuleLaunchKernel.

A transformers BERT (tiny config, a long feed-forward K) recorded on CPU by tests/recorded.py, then re-shaped
as ROCm's Kineto writes it on an MI300X (`as_rocm`): launches are HIP calls, and every GEMM runs a hipBLASLt
Tensile kernel (the MT16x16x128 UserArgs kernel of tracelens/mi300 bert-small, whose GlobalSplitU is a launch
argument) through hipExtModuleLaunchKernel, whose `grid` is the global work size in work-items: workgroups x
256. Each GEMM's split is this test's stand-in for hipBLASLt's choice: K split in DepthU (128) chunks when its
tiles fill under half the CUs, at most as many splits as fill them (SPLIT_RULE).

Checks: GpuEvents.blocks are workgroups, not work-items (launch grids), and gemm_shape reads the split from
the kernel name and takes the waves from the recorded grid, not from the tile count (split-K).
"""

from __future__ import annotations

import gzip
import json
from math import ceil

import numpy as np
import pytest

from traceana.diagnose import gemm_shape as gs

MI300X = {"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 205571227648, "computeMajor": 9,
          "computeMinor": 4, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
          "regsPerBlock": 65536, "warpSize": 64, "sharedMemPerBlock": 65536, "numSms": 304}
CUS, WG, TILE, DEPTH_U = 304, 256, 16, 128
TENSILE = ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_"
           "CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1_LBSPPA256_LBSPPB256_LBSPPM0_"
           "LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS16_NLCA1_NLCB1_ONLL1_"
           "PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_SK0_SKXCCM0_TLDS1_ULSGRO0_USL1_UIOFGRO0_USFGROn1_VSn1_VWA1_"
           "VWB1_WSGRA0_WSGRB0_WS64_WG16_4_4")
HIP = {"cudaLaunchKernel": "hipLaunchKernel", "cudaMemcpyAsync": "hipMemcpyAsync",
       "cudaStreamSynchronize": "hipStreamSynchronize"}


def SPLIT_RULE(tiles: int, k: int) -> int:
    """Splits of K for a GEMM of `tiles` output tiles (this test's stand-in for hipBLASLt's choice)."""
    if tiles >= CUS // 2 or k < 2 * DEPTH_U:
        return 1
    return max(1, min(k // DEPTH_U, CUS // tiles))


def as_rocm(doc: dict) -> tuple[dict, dict[int, tuple[int, int]]]:
    """The recorder's CUDA-shaped trace as ROCm's Kineto writes it on an MI300X; per GEMM op External id,
    (tiles, splits) of the launch it got."""
    ev = doc["traceEvents"]
    ops = {e["args"]["External id"]: e for e in ev if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    launches = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
    gemms: dict[int, tuple[int, int]] = {}
    for k in (e for e in ev if e.get("cat") == "kernel"):
        op = ops.get(k["args"]["External id"])
        la = launches[k["args"]["correlation"]]
        dims = gs.gemm_dims({"name": op["name"], "input_dims": op["args"].get("Input Dims")}) if op else None
        if dims is None:
            continue
        b, m, n, kk = dims
        tiles = b * ceil(m / TILE) * ceil(n / TILE)
        split = SPLIT_RULE(tiles, kk)
        work_items = [tiles * split * WG, 1, 1]  # hipExtModuleLaunchKernel's global work size
        k["name"] = TENSILE
        k["args"].update({"grid": work_items, "block": [WG, 1, 1]})
        la["name"] = "hipExtModuleLaunchKernel"
        la["args"].update({"kernel": TENSILE, "grid": work_items, "block": [WG, 1, 1], "shared memory": 0})
        gemms[op["args"]["External id"]] = (tiles, split)
    for la in launches.values():
        la["name"] = HIP.get(la["name"], la["name"])
    doc["deviceProperties"] = [dict(MI300X)]
    return doc, gemms


def _bert_long_ffn():
    import torch
    import transformers
    cfg = transformers.BertConfig(vocab_size=1000, max_position_embeddings=64, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=1024)
    model = transformers.BertModel(cfg).eval().to(torch.bfloat16)  # the Tensile kernel's B: bf16 in and out
    ids = torch.randint(0, 1000, (2, 32), generator=torch.Generator().manual_seed(0))

    def run():
        with torch.no_grad():
            model(input_ids=ids)
    return run


@pytest.fixture(scope="module")
def rocm_bert(recorded_trace, tmp_path_factory):
    path = recorded_trace.custom("bert_bf16_ffn1024", _bert_long_ffn)
    with gzip.open(path, "rt") as f:
        doc, gemms = as_rocm(json.load(f))
    out = tmp_path_factory.mktemp("rocm") / "bert_mi300x.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)
    return str(out), gemms


def test_work_item_grids_become_workgroups(rocm_bert):
    from traceana.load import load_trace
    path, gemms = rocm_bert
    t = load_trace(path)
    names = np.array([t.names[c] for c in t.gpu.name])
    blocks = t.gpu.blocks[names == TENSILE]
    want = sorted(tiles * split for tiles, split in gemms.values())
    assert sorted(blocks.tolist()) == want  # workgroups, not x 256 work-items
    # 2 layers x (Q, K, V, output, FFN up, FFN down) + the pooler = 13 GEMMs; the FFN down-projection,
    # [64, 1024] @ [1024, 64]: ceil(64/16) x ceil(64/16) = 16 tiles, K = 1024 = 8 x 128, 304 // 16 = 19
    # -> 8 splits = 128 workgroups (the pooler, [2, 64] @ [64, 64]: 1 x 4 = 4 tiles, K = 64: no split)
    assert len(want) == 13 and want.count(128) == 2 and want[0] == 4


def test_split_read_from_the_name_waves_from_the_grid(rocm_bert):
    from traceana.analysis import analyze
    path, _ = rocm_bert
    a = analyze(path)
    assert a["device"]["sms"] == CUS
    rows = [r for r in a["ops"] if r["kernels"] and r["kernels"][0]["name"] == TENSILE]
    down = [r for r in rows if gs.gemm_dims(r)[1:] == (64, 64, 1024)]
    assert down
    for r in down:  # the FFN down-projection: 16 tiles x 8 splits of K
        assert r["dtype"] == "bf16"
        x = gs.analyse(r, CUS)
        q = x["quant"]
        assert r["grid_blocks"] == 128.0
        assert x["split"]["mode"] == "split at launch" and q["split"]["factor"] == 8 and q["wave_from"] == "grid"
        assert (q["ctas"], q["waves"]) == (128, 1) and q["wave_eff"] == pytest.approx(128 / 304)
        # by the tile count alone it would have been 16 / 304 = 5.3%
    up = [r for r in rows if gs.gemm_dims(r)[1:] == (64, 1024, 64)]
    assert up
    for r in up:  # FFN up-projection: 4 x 64 = 256 tiles, K = 64: no split, the grid is the tile count
        q = gs.analyse(r, CUS)["quant"]
        assert r["grid_blocks"] == 256.0 and q["split"]["factor"] == 1 and q["ctas"] == 256
