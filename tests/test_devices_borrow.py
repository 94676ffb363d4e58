"""Every GPU since Volta: the added rows' verbatim names, traces on parts the table lacked, the
nearest-row borrowing with its arithmetic, MIG slices, and --profile figures with physical sense."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.conftest import SAMPLES
from traceana.errors import BadInput
from traceana.roofline.device_profile import parse_profile, sheet_figures
from traceana.roofline.devices import device_rows, match_device
from traceana.roofline.devices.table import load_aliases, rows_by_key

GIB = 2**30

# key -> the names torch.cuda.get_device_name() / deviceProperties report for it: NVIDIA drivers
# before R465 leave out the "NVIDIA " prefix on GeForce / TITAN / Quadro names; ROCm reads
# amdgpu.ids (e.g. 66A1 "AMD Instinct MI60 / MI50", 7448 "AMD Radeon Pro W7900").
VERBATIM: dict[str, tuple[str, ...]] = {
    "titan_v": ("NVIDIA TITAN V", "TITAN V"),
    "quadro_gv100": ("Quadro GV100", "NVIDIA Quadro GV100"),
    "v100s_pcie_32gb": ("Tesla V100S-PCIE-32GB",),
    "rtx2060": ("NVIDIA GeForce RTX 2060", "GeForce RTX 2060"),
    "rtx2060_super": ("NVIDIA GeForce RTX 2060 SUPER",),
    "rtx2070": ("NVIDIA GeForce RTX 2070", "GeForce RTX 2070"),
    "rtx2070_super": ("NVIDIA GeForce RTX 2070 SUPER",),
    "rtx2080": ("NVIDIA GeForce RTX 2080", "GeForce RTX 2080"),
    "rtx2080_super": ("NVIDIA GeForce RTX 2080 SUPER",),
    "rtx2080ti": ("NVIDIA GeForce RTX 2080 Ti", "GeForce RTX 2080 Ti"),
    "titan_rtx": ("NVIDIA TITAN RTX", "TITAN RTX"),
    "quadro_rtx_8000": ("Quadro RTX 8000", "NVIDIA Quadro RTX 8000"),
    "quadro_rtx_6000": ("Quadro RTX 6000", "NVIDIA Quadro RTX 6000"),
    "quadro_rtx_5000": ("Quadro RTX 5000",),
    "quadro_rtx_4000": ("Quadro RTX 4000",),
    "rtx3060": ("NVIDIA GeForce RTX 3060",),
    "rtx3060ti": ("NVIDIA GeForce RTX 3060 Ti",),
    "rtx3070": ("NVIDIA GeForce RTX 3070",),
    "rtx3070ti": ("NVIDIA GeForce RTX 3070 Ti",),
    "rtx3080": ("NVIDIA GeForce RTX 3080",),
    "rtx3080ti": ("NVIDIA GeForce RTX 3080 Ti",),
    "rtx3090ti": ("NVIDIA GeForce RTX 3090 Ti",),
    "rtx_a2000": ("NVIDIA RTX A2000",),
    "rtx_a2000_12gb": ("NVIDIA RTX A2000 12GB",),
    "rtx_a4000": ("NVIDIA RTX A4000",),
    "rtx_a4500": ("NVIDIA RTX A4500",),
    "rtx_a5000": ("NVIDIA RTX A5000",),
    "rtx_a5500": ("NVIDIA RTX A5500",),
    "a2": ("NVIDIA A2",),
    "a16": ("NVIDIA A16",),
    "rtx4060": ("NVIDIA GeForce RTX 4060",),
    "rtx4060ti": ("NVIDIA GeForce RTX 4060 Ti",),
    "rtx4070": ("NVIDIA GeForce RTX 4070",),
    "rtx4070_super": ("NVIDIA GeForce RTX 4070 SUPER",),
    "rtx4070ti": ("NVIDIA GeForce RTX 4070 Ti",),
    "rtx4070ti_super": ("NVIDIA GeForce RTX 4070 Ti SUPER",),
    "rtx4080": ("NVIDIA GeForce RTX 4080",),
    "rtx4080_super": ("NVIDIA GeForce RTX 4080 SUPER",),
    "rtx2000_ada": ("NVIDIA RTX 2000 Ada Generation",),
    "rtx4000_ada": ("NVIDIA RTX 4000 Ada Generation",),
    "rtx4000_sff_ada": ("NVIDIA RTX 4000 SFF Ada Generation",),
    "rtx4500_ada": ("NVIDIA RTX 4500 Ada Generation",),
    "rtx5000_ada": ("NVIDIA RTX 5000 Ada Generation",),
    "l20": ("NVIDIA L20",),
    "rtx5070": ("NVIDIA GeForce RTX 5070",),
    "rtx5070ti": ("NVIDIA GeForce RTX 5070 Ti",),
    "rtx5080": ("NVIDIA GeForce RTX 5080",),
    "mi50": ("AMD Instinct MI50", "AMD Radeon Instinct MI50"),
    "mi60": ("AMD Instinct MI60", "AMD Radeon Instinct MI60"),
    "mi300a": ("AMD Instinct MI300A",),
    "radeon_pro_w7900": ("AMD Radeon Pro W7900", "AMD Radeon PRO W7900", "AMD Radeon Pro W7900 Dual Slot"),
    "radeon_pro_w7800": ("AMD Radeon Pro W7800", "AMD Radeon PRO W7800"),
    "radeon_pro_w7800_48gb": ("AMD Radeon Pro W7800 48GB",),
    "rx7900xtx": ("AMD Radeon RX 7900 XTX",),
    "rx7900xt": ("AMD Radeon RX 7900 XT",),
    "p100_pcie_16gb": ("Tesla P100-PCIE-16GB",),
    "p100_pcie_12gb": ("Tesla P100-PCIE-12GB",),
    "p100_sxm2_16gb": ("Tesla P100-SXM2-16GB",),
    "p40": ("Tesla P40",),
    "p4": ("Tesla P4",),
    "gtx1660ti": ("NVIDIA GeForce GTX 1660 Ti",),
    "gtx1660": ("NVIDIA GeForce GTX 1660",),
    "gtx1660_super": ("NVIDIA GeForce GTX 1660 SUPER",),
    "t1000": ("NVIDIA T1000", "NVIDIA T1000 8GB"),
    "t600": ("NVIDIA T600",),
    "t400": ("NVIDIA T400", "NVIDIA T400 4GB"),
}


def _props(name, cc, sms, mem_gib, **extra):
    return {"name": name, "computeMajor": cc[0], "computeMinor": cc[1], "numSms": sms,
            "totalGlobalMem": int(mem_gib * GIB), "warpSize": 64 if name.startswith("AMD") else 32, **extra}


def test_every_added_row_has_its_verbatim_names_and_a_source():
    added = [r for r in device_rows() if r.key in VERBATIM]
    assert len(added) == len(VERBATIM) == 66
    for key, names in VERBATIM.items():
        row = rows_by_key()[key]
        assert row.source, key
        for name in names:
            hits = [r.key for r in device_rows() if r.pattern.search(name)]
            assert hits == [key], (name, hits)  # its row, and no other
            assert match_device({"name": name}).key == key


@pytest.mark.parametrize("key", sorted(VERBATIM))
def test_added_rows_follow_the_architecture_rules(key):
    """TF32 from Ampere on (none on Volta / Turing / AMD before CDNA3 / RDNA3), BF16 from Ampere on
    (none on Volta / Turing / gfx906), FP8 on Ada (and Hopper / Blackwell, AMD CDNA3+) only, dense
    figures only: no tensor figure above the Ampere-and-later fp16 rate."""
    row = rows_by_key()[key]
    p = row.peak_tflops
    arch = row.arch.split()[0]
    if arch == "Pascal":  # no tensor cores at all (P100's fp16 runs on the CUDA cores at 2x fp32)
        assert not any(k.endswith("_tc") for k in p), key
    if arch in ("Volta", "Turing", "GCN5", "RDNA3"):
        assert "tf32_tc" not in p and "fp8_tc" not in p, key
    if arch in ("Volta", "Turing", "GCN5"):
        assert "bf16_tc" not in p, key
    if arch in ("Ampere", "Ada", "Blackwell"):
        assert p["tf32_tc"] >= p["fp32"] and p["bf16_tc"] == p["fp16_tc"], key
        if not row.consumer:  # professional: TF32 at half the full FP16 rate (figures rounded to 0.1)
            assert p["fp16_tc"] == pytest.approx(2 * p["tf32_tc"], abs=0.15), key
    if arch == "Ampere":
        assert "fp8_tc" not in p, key
    if arch == "Ada":
        assert p["fp8_tc"] == pytest.approx(2 * p["fp16_tc"], abs=0.15), key
    if row.consumer and row.vendor == "NVIDIA" and arch != "Turing":
        # GeForce: FP32-accumulate tensor rate = 2x FP32 (half the FP16-accumulate rate), TF32 = FP32
        assert p["fp16_tc"] == pytest.approx(2 * p["fp32"], abs=0.15) and p["tf32_tc"] == p["fp32"], key


# name, cc, SMs, GiB -> key, fp32 roof, tf32 roof or None, dtype lever's words
TRACE_CASES = [
    ("NVIDIA GeForce RTX 2080 Ti", (7, 5), 68, 10.75, "rtx2080ti", 13.4, None, "no TF32 tensor cores"),
    ("Quadro RTX 6000", (7, 5), 72, 23.6, "quadro_rtx_6000", 16.3, None, "no TF32 tensor cores"),
    ("NVIDIA RTX A4000", (8, 6), 48, 15.7, "rtx_a4000", 19.2, 38.35, "has TF32 tensor cores at 38.35 TFLOP/s"),
    ("NVIDIA A10G", (8, 6), 80, 22.0, "a10g", 35.0, 35.0, "TF32 tensor cores run no faster than its fp32"),
    ("NVIDIA GeForce RTX 4090", (8, 9), 128, 23.6, "rtx4090", 82.6, 82.6, "TF32 tensor cores run no faster than its fp32"),
]


@pytest.mark.parametrize("name,cc,sms,mem,key,fp32,tf32,words", TRACE_CASES)
def test_trace_on_the_part_gets_its_row_and_the_right_tf32_answer(tmp_path, name, cc, sms, mem, key, fp32, tf32, words):
    from traceana.analysis import analyze

    doc = json.loads((SAMPLES / "t4_seed_pow_mul.json").read_text())
    doc["deviceProperties"] = [{**doc["deviceProperties"][0], **_props(name, cc, sms, mem)}]
    for e in doc["traceEvents"]:  # the T4's kernel times (fp32 8.1 TFLOP/s) scaled to this part's fp32 roof
        if e.get("cat") == "kernel":
            e["dur"] = e["dur"] * 8.1 / fp32
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    a = analyze(str(path))
    dev = a["device"]
    assert dev["key"] == key and dev["borrowed"] is None
    assert dev["peak_tflops"]["fp32"] == fp32 and dev["peak_tflops"].get("tf32_tc") == tf32
    lever = next(f for f in a["findings"] if f["kind"] == "tensor_core_dtype")  # the fp32 volta_sgemm mm
    assert words in lever["text"]
    if tf32 is not None:
        assert "has no TF32" not in lever["text"]


def test_unknown_ampere_geforce_borrows_the_3090_scaled_to_its_sms():
    # no row has 81 SMs at cc 8.6; the nearest GeForce row by SM count is the RTX 3090 (82 SMs; the
    # 3080 Ti has 80, 3090 Ti 84: |ln 81/82| = 0.0122 < |ln 81/80| = 0.0124)
    d = match_device(_props("NVIDIA GeForce RTX 3085", (8, 6), 81, 20.0))
    assert d.key == "rtx3090" and d.borrowed == "peaks borrowed from NVIDIA GeForce RTX 3090, scaled to 81 SMs"
    # per SM: 35.6 / 82 = 0.43415 TFLOP/s fp32; x 81 SMs = 35.166
    assert d.peak_tflops["fp32"] == pytest.approx(35.6 / 82 * 81, abs=1e-3) == 35.166
    assert d.peak_tflops["bf16_tc"] == pytest.approx(71 / 82 * 81, abs=1e-3)  # 70.134
    assert d.dram_gbps == 936  # borrowed unscaled, and said so
    notes = " ".join(d.notes)
    assert "x 81/82 SMs = 0.988" in notes and "borrowed unscaled" in notes


def test_borrowing_prefers_the_product_line_and_scales_by_clock_and_memory_bus_when_recorded():
    # a professional Ampere part with 48 SMs: the RTX A4000 (48 SMs, full-rate FP32 accumulate),
    # not the GeForce RTX 3070 Ti (48 SMs, half rate)
    pro = match_device(_props("NVIDIA RTX A4000 Mobile", (8, 6), 48, 8.0))
    assert pro.key == "rtx_a4000" and pro.peak_tflops["bf16_tc"] == 76.7
    geforce = match_device(_props("NVIDIA GeForce RTX 3070 Ti Laptop GPU", (8, 6), 46, 8.0,
                                  clockRate=1410000, memoryClockRate=7001000, memoryBusWidth=256))
    # nearest GeForce by SMs: RTX 3070 (46 SMs, 1725 MHz); x 1410/1725 MHz = 0.817
    assert geforce.key == "rtx3070"
    assert geforce.peak_tflops["fp32"] == pytest.approx(20.3 * 1410 / 1725, abs=1e-3)  # 16.593
    assert geforce.borrowed == "peaks borrowed from GeForce RTX 3070, scaled to 1410 MHz"
    # DRAM: 2 x 7001 MHz x 256 bit / 8 = 448.1 GB/s, from the trace's own memory fields
    assert geforce.dram_gbps == 448.1


def test_laptop_parts_say_their_borrowed_figures_are_upper_bounds():
    # "RTX 4090 Laptop GPU" is an AD103 (76 SMs, 16 GB): by hardware it fits the desktop RTX 4080 row
    # (76 SMs at 2505 MHz: 48.7 TFLOP/s fp32, 716.8 GB/s); a laptop holds ~1.5-2 GHz
    # under its power limit and its memory bus is 256 bit at a lower clock (576 GB/s, not 716.8)
    d = match_device(_props("NVIDIA GeForce RTX 4090 Laptop GPU", (8, 9), 76, 16.0))
    assert d.key == "rtx4080" and d.dram_gbps == 716.8
    assert "is a laptop part" in d.notes[-1] and "these peaks and this bandwidth are upper bounds" in d.notes[-1]
    # with the memory fields recorded, the bandwidth is the part's own (2 x 7001 MHz x 256 bit / 8 = 448.1):
    # only the peaks are upper bounds
    g = match_device(_props("NVIDIA GeForce RTX 3070 Ti Laptop GPU", (8, 6), 46, 8.0,
                            clockRate=1410000, memoryClockRate=7001000, memoryBusWidth=256))
    assert g.dram_gbps == 448.1 and "these peaks are upper bounds" in g.notes[-1]
    # a desktop part gets no such note
    assert not any("laptop" in n for n in match_device(_props("NVIDIA GeForce RTX 3085", (8, 6), 81, 20.0)).notes)


def test_pascal_tesla_parts_and_a_geforce_pascal_borrowing_from_them():
    # Kaggle's P100: 56 SMs, 16 GB HBM2 at 732 GB/s; fp32 9.3, fp16 18.7 TFLOP/s on the CUDA cores
    p100 = match_device(_props("Tesla P100-PCIE-16GB", (6, 0), 56, 15.9))
    assert p100.key == "p100_pcie_16gb" and p100.dram_gbps == 732
    assert p100.peak_tflops["fp32"] == 9.3 and p100.peak_tflops["fp16"] == 18.7
    assert not any(k.endswith("_tc") for k in p100.peak_tflops)
    # a GTX 1080 Ti (cc 6.1, 28 SMs) has no row: the Tesla P40 (cc 6.1, 30 SMs) lends its fp32,
    # 12 x 28/30 = 11.2 TFLOP/s (NVIDIA quotes 11.3 at its 1582 MHz boost), and no tensor-core peaks
    gtx = match_device(_props("NVIDIA GeForce GTX 1080 Ti", (6, 1), 28, 10.9))
    assert gtx.key == "p40" and gtx.peak_tflops["fp32"] == pytest.approx(12 * 28 / 30, abs=1e-3)
    assert not any(k.endswith("_tc") for k in gtx.peak_tflops)


def test_turing_parts_without_tensor_cores():
    """TU116 / TU117 (GeForce GTX 16xx and MX, NVIDIA T400-T2000) run Turing SMs built without tensor cores:
    their rows have none, and a part borrowing a row gets none lent."""
    d = match_device(_props("NVIDIA GeForce GTX 1660 Ti", (7, 5), 24, 5.8))
    assert d.key == "gtx1660ti" and d.dram_gbps == 288  # 12 Gbps x 192 bits / 8
    assert d.peak_tflops["fp32"] == 5.437 and d.peak_tflops["fp16"] == 10.874  # 1536 x 2 x 1770 MHz; fp16 2x
    assert not any(k.endswith("_tc") for k in d.peak_tflops)
    t = match_device(_props("NVIDIA T1000 8GB", (7, 5), 14, 7.8))
    assert t.key == "t1000" and t.dram_gbps == 160 and t.peak_tflops["fp32"] == 2.5  # 896 x 2 x 1395 MHz
    # the GTX 1650 (14 SMs, GDDR5 or GDDR6 under one name) has no row: the nearest GeForce Turing row by SMs,
    # the GTX 1660 (22 SMs), lends 5.027 x 14/22 = 3.199 TFLOP/s fp32 and its DRAM figure, said to be borrowed
    g = match_device(_props("NVIDIA GeForce GTX 1650", (7, 5), 14, 3.9))
    assert g.key == "gtx1660" and g.peak_tflops["fp32"] == pytest.approx(5.027 * 14 / 22, abs=1e-3)
    assert not any(k.endswith("_tc") for k in g.peak_tflops) and "no tensor cores" in " ".join(g.notes)
    assert "borrowed unscaled" in " ".join(g.notes)
    # a Quadro T2000 (TU117, 16 SMs): the T1000's row, 2.5 x 16/14 = 2.857, no tensor-core peaks, DRAM 160 borrowed
    q = match_device(_props("Quadro T2000", (7, 5), 16, 3.9))
    assert q.key == "t1000" and q.peak_tflops["fp32"] == pytest.approx(2.857, abs=1e-3) and q.dram_gbps == 160
    assert not any(k.endswith("_tc") for k in q.peak_tflops) and "no tensor cores" in " ".join(q.notes)
    # an RTX part of the same architecture keeps its tensor cores; the T4 is not a T400-T2000
    r = match_device(_props("Quadro RTX 3000", (7, 5), 30, 5.8))
    assert r.key == "quadro_rtx_4000" and "fp16_tc" in r.peak_tflops
    assert "fp16_tc" in match_device(_props("Tesla T4", (7, 5), 40, 14.7)).peak_tflops


def test_names_of_parts_without_tensor_cores():
    from traceana.roofline.devices.table import has_no_tensor_cores

    for name in ("NVIDIA GeForce GTX 1650", "NVIDIA GeForce GTX 1080 Ti", "NVIDIA GeForce MX450", "Quadro T1000",
                 "NVIDIA T1000 8GB", "NVIDIA T400 4GB", "NVIDIA T600 Laptop GPU", "NVIDIA T550 Laptop GPU"):
        assert has_no_tensor_cores(name), name
    for name in ("Tesla T4", "NVIDIA T4G", "NVIDIA GeForce RTX 2060", "NVIDIA RTX A1000", "Quadro RTX 4000",
                 "NVIDIA RTX 2000 Ada Generation", "NVIDIA TITAN RTX", "NVIDIA A100-SXM4-80GB"):
        assert not has_no_tensor_cores(name), name


def test_amd_part_without_a_row_borrows_by_gfx_target_or_compute_capability():
    # RX 7800 XT: gfx1101 (cc 11.0), 60 CUs; no gfx1101 row, so the cc 11.0 (RDNA3) rows: the nearest
    # Radeon RX by CUs is the RX 7900 XT (84 CUs): 51.6 x 60/84 = 36.857 TFLOP/s fp32
    d = match_device(_props("AMD Radeon RX 7800 XT", (11, 0), 60, 16.0, gcnArchName="gfx1101"))
    assert d.key == "rx7900xt" and d.peak_tflops["fp32"] == pytest.approx(36.857, abs=1e-3)
    # an unnamed gfx908 device with 100 CUs: the gfx target narrows cc 9.0 (gfx906/908/90a) to MI100
    d = match_device(_props("", (9, 0), 100, 32.0, gcnArchName="gfx908:sramecc+:xnack-"))
    assert d.key == "mi100" and d.peak_tflops["fp32"] == pytest.approx(23.1 * 100 / 120, abs=1e-3)


def test_mi50_mi60_shared_name_by_cu_count():
    assert match_device(_props("AMD Instinct MI60 / MI50", (9, 0), 60, 32.0)).key == "mi50"
    assert match_device(_props("AMD Instinct MI60 / MI50", (9, 0), 64, 32.0)).key == "mi60"
    assert match_device({"name": "AMD Instinct MI60 / MI50"}).key is None
    assert any(a.target == "mi50" for a in load_aliases())


def test_mig_slice_scales_compute_by_sms_and_bandwidth_by_memory():
    d = match_device(_props("NVIDIA A100-SXM4-80GB MIG 1g.10gb", (8, 0), 14, 9.5))
    assert d.key == "a100_sxm4_80gb"
    assert d.peak_tflops["bf16_tc"] == pytest.approx(312 * 14 / 108, abs=1e-3)  # 40.444
    # 9.5 GiB = 10.2 GB of 80 GB: 2039 x 0.1275 = 260.0 GB/s
    assert d.dram_gbps == pytest.approx(2039 * 9.5 * GIB / 1e9 / 80, abs=0.1)


def test_unknown_architecture_keeps_the_clear_message():
    d = match_device(_props("NVIDIA Jetson AGX Orin", (8, 7), 16, 30.0))
    assert d.key is None and d.peak_tflops == {} and d.borrowed is None
    assert "compute capability 8.7" in " ".join(d.notes) and "--peak-tflops" in " ".join(d.notes)


def test_device_line_names_the_borrowed_figures():
    from traceana.render.first import device_line

    d = match_device(_props("NVIDIA RTX A4500 Laptop GPU", (8, 6), 58, 16.0))
    line = device_line({"device": {"name": d.name, "key": d.key, "borrowed": d.borrowed,
                                   "peak_tflops": d.peak_tflops, "dram_gbps": d.dram_gbps}})
    assert line.startswith("NVIDIA RTX A4500 Laptop GPU (peaks borrowed from NVIDIA RTX A4500, scaled to 58 SMs)")


def test_cli_devices_lists_the_new_rows_and_borrows_with_cc_and_sms():
    from traceana.cli import cli

    out = CliRunner().invoke(cli, ["devices"], catch_exceptions=False).output
    a10g = next(line for line in out.splitlines() if line.startswith("a10g "))
    assert a10g.split()[-7:] == ["80", "600", "35", "35", "70", "70", "-"]
    assert any(line.startswith("rx7900xtx ") for line in out.splitlines())
    res = CliRunner().invoke(cli, ["devices", "--match", "NVIDIA GeForce RTX 3050", "--cc", "8.6", "--sms", "20",
                                   "--mem-gb", "8"], catch_exceptions=False)
    assert "row      rtx3060" in res.output and "scaled to 20 SMs" in res.output
    # 12.7 TFLOP/s x 20/28 SMs = 9.071
    assert "fp32 9.071" in res.output


# ---------------------------------------------------------------------------------------------
# --profile figures with physical sense


def _profile(figures: dict) -> dict:
    return {"schema": "traceana.profile/1", "device": {"name": "NVIDIA A10G", "kind": "cuda"}, "date": "2025-01-02",
            "figures": {k: {"value": v, "unit": u, "spread_pct": 1.0, "repeats": 3} for k, (v, u) in figures.items()}}


@pytest.mark.parametrize("key,value,unit", [("gemm.fp32", 1e30, "TFLOP/s"), ("gemm.fp32", 1e-300, "TFLOP/s"),
                                            ("dram.copy", 1e30, "GB/s"), ("dram.copy", 1e-300, "GB/s")])
def test_profile_with_absurd_figures_is_refused(key, value, unit):
    with pytest.raises(BadInput, match="any device") as info:
        parse_profile(_profile({key: (value, unit)}), "p.json")
    assert "\n" not in str(info.value) and "p.json" in str(info.value)


def test_profile_far_from_the_datasheet_is_marked_unusable():
    prof = parse_profile(_profile({"gemm.fp32": (80.0, "TFLOP/s"), "gemm.bf16_tc": (0.05, "TFLOP/s"),
                                   "gemm.tf32_tc": (30.0, "TFLOP/s"), "dram.copy": (520.0, "GB/s")}), "p.json")
    a10g = match_device({"name": "NVIDIA A10G"})
    judged, why = prof.judged_against(sheet_figures(a10g.peak_tflops, a10g.dram_gbps))
    # 80 > 2 x 35 (fp32); 0.05 < 70 / 1000 (bf16); 30 of 35 TF32 and 520 of 600 GB/s are plausible
    assert sorted(why) == ["gemm.bf16_tc", "gemm.fp32"]
    assert "2.29x" in why["gemm.fp32"] and "1/1000" in why["gemm.bf16_tc"]
    assert judged.peaks() == {"tf32_tc": 30.0} and judged.dram_gbps() == 520.0


def test_report_with_an_absurd_profile_exits_with_one_line(tmp_path, capsys):
    from traceana.cli import main

    p = tmp_path / "p.json"
    p.write_text(json.dumps(_profile({"gemm.fp32": (1e30, "TFLOP/s")})))
    assert main(["report", str(SAMPLES / "t4_seed_pow_mul.json"), "--profile", str(p), "-o",
                 str(tmp_path / "r.html")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "more than any device" in err[0]


def test_applied_profile_far_from_the_datasheet_warns_and_is_not_used(tmp_path):
    from traceana.analysis import Options, analyze

    prof = parse_profile(_profile({"gemm.fp32": (40.0, "TFLOP/s"), "gemm.fp16_tc": (50.0, "TFLOP/s")}), "p.json")
    # the T4 seed trace: fp32 8.1, fp16 tensor 65 TFLOP/s; 40 > 2 x 8.1 is refused, 50 of 65 is used
    a = analyze(str(SAMPLES / "t4_seed_pow_mul.json"), Options(profile=prof))
    assert a["device"]["profile"]["unusable"]["gemm.fp32"].startswith("40 TFLOP/s is 4.94x")
    assert a["device"]["profile"]["peak_tflops"] == {"fp16_tc": 50.0}
    assert any("gemm.fp32" in w and "not used as a roof" in w for w in a["warnings"])


def test_absurd_peak_override_is_refused():
    with pytest.raises(BadInput, match="more than any device"):
        match_device({"name": "Tesla T4"}, peak_tflops={"fp32": 1e30})
    with pytest.raises(BadInput, match="less than any device"):
        match_device({"name": "Tesla T4"}, bandwidth_gbps=1e-300)
