"""Device table, name matcher and `traceana devices`.

Every verbatim name in shared/reference/README.md has a deliberate answer here, and the numbers
peers get wrong (L4 bandwidth, L40S vs L4/L40, H100 NVL per-card, sparsity) are pinned.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tests.conftest import REPO, SHARED, shared_trace
from traceana.roofline.devices import DTYPES, Device, device_rows, match_device
from traceana.roofline.devices.table import UNKNOWN_TARGET, load_aliases, rows_by_key
from traceana.errors import BadInput

GIB = 2**30
REFERENCE = SHARED / "reference"

# name -> (expected key or None, keywords that must appear in the notes). Name only, as
# `traceana devices --match NAME` would see it; conditions on SMs / memory are tested below.
NAME_CASES: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "Tesla T4": ("t4", ()),
    "Tesla V100-SXM2-16GB": ("v100_sxm2_16gb", ()),
    "Tesla V100-SXM2-32GB": ("v100_sxm2_32gb", ()),
    "Tesla V100-PCIE-16GB": ("v100_pcie_16gb", ()),
    "Tesla V100-PCIE-32GB": ("v100_pcie_32gb", ()),
    "Tesla V100-DGXS-32GB": ("v100_sxm2_32gb", ("DGX Station", "SXM2")),
    "NVIDIA A10": ("a10", ()),
    "NVIDIA A10G": ("a10g", ()),
    "NVIDIA A30": ("a30", ()),
    "NVIDIA A40": ("a40", ()),
    "NVIDIA A100-SXM4-40GB": ("a100_sxm4_40gb", ()),
    "A100-SXM4-40GB": ("a100_sxm4_40gb", ()),
    "NVIDIA A100-SXM4-80GB": ("a100_sxm4_80gb", ()),
    "A100-SXM-80GB": ("a100_sxm4_80gb", ()),
    "NVIDIA A100-PCIE-40GB": ("a100_pcie_40gb", ()),
    "NVIDIA A100 80GB PCIe": ("a100_pcie_80gb", ()),
    "NVIDIA A100-PG509-200": ("a100_sxm4_80gb", ("PG509", "memory size is not in the trace", "--bandwidth-gbps")),
    "NVIDIA L4": ("l4", ()),
    "NVIDIA L40": ("l40", ()),
    "NVIDIA L40S": ("l40s", ()),
    "NVIDIA H100 80GB HBM3": ("h100_sxm", ()),
    "NVIDIA H100 PCIe": ("h100_pcie", ()),
    "NVIDIA H100 NVL": ("h100_nvl", ()),
    "NVIDIA H100": (None, ("h100_sxm", "h100_pcie", "--device")),
    "NVIDIA H800": ("h100_sxm", ("same GH100 compute", "fp64")),
    "NVIDIA H200": ("h200_sxm", ()),
    "NVIDIA H200 NVL": ("h200_nvl", ()),
    "NVIDIA H20": ("h20", ()),
    "NVIDIA H20-3e": ("h20", ("141 GB", "bandwidth", "--bandwidth-gbps")),
    "NVIDIA B200": ("b200", ()),
    "NVIDIA GB200": ("gb200", ()),
    "NVIDIA GeForce RTX 2080 Ti": ("rtx2080ti", ()),
    "NVIDIA GeForce RTX 3090": ("rtx3090", ()),
    "NVIDIA GeForce RTX 4090": ("rtx4090", ()),
    "NVIDIA GeForce RTX 5090": ("rtx5090", ()),
    "NVIDIA RTX A6000": ("rtx_a6000", ()),
    "NVIDIA RTX 6000 Ada Generation": ("rtx6000_ada", ()),
    "AMD Instinct MI100": ("mi100", ()),
    "AMD Instinct MI210": ("mi210", ()),
    "AMD Instinct MI250X": ("mi250x_gcd", ()),
    "AMD Instinct MI250X / MI250": ("mi250x_gcd", ()),
    "AMD Instinct MI300X": ("mi300x", ()),
    "AMD Instinct MI300X VF": ("mi300x", ()),
    "AMD Instinct MI325X": ("mi325x", ()),
    "AMD Instinct MI355X": ("mi355x", ()),
    # Generic names say nothing without the hardware fields: unknown, and say why.
    "AMD Radeon Graphics": (None, ("generic name", "--peak-tflops")),
    "": (None, ("empty", "--peak-tflops")),
}


def _notes(device: Device) -> str:
    return " ".join(device.notes).lower()


def _props(name: str, cc: tuple[int, int] | None = None, sms: int | None = None,
           mem_gib: float | None = None, warp: int | None = None) -> dict:
    props: dict = {"name": name}
    if cc is not None:
        props["computeMajor"], props["computeMinor"] = cc
    if sms is not None:
        props["numSms"] = sms
    if mem_gib is not None:
        props["totalGlobalMem"] = int(mem_gib * GIB)
    if warp is not None:
        props["warpSize"] = warp
    return props


def _trace_props(rel: str) -> dict:
    with gzip.open(shared_trace(rel), "rt") as fh:
        return json.load(fh)["deviceProperties"][0]


# ---------------------------------------------------------------------------------------------
# every verbatim name


@pytest.mark.parametrize("name", list(NAME_CASES))
def test_verbatim_name(name: str) -> None:
    key, keywords = NAME_CASES[name]
    device = match_device({"name": name})
    assert device.key == key, device.source
    assert device.name == name
    for word in keywords:
        assert word.lower() in _notes(device), (word, device.notes)
    if key is None:
        assert device.peak_tflops == {} and device.dram_gbps is None
    else:
        assert device.source.startswith(f"table row {key}")
        # Nothing invented: every peak is the row's own value.
        row = rows_by_key()[key]
        assert all(row.peak_tflops[d] == v for d, v in device.peak_tflops.items())


def test_readme_names_all_have_an_answer() -> None:
    readme = REFERENCE / "README.md"
    if not readme.exists():
        pytest.skip(f"{readme} not present")
    text = readme.read_text(encoding="utf-8")
    block = text[text.index("Verbatim names seen in the wild"):text.index("Some of these")]
    names = {"" if n == '""' else n for n in re.findall(r"`([^`]*)`", block)}
    assert len(names) >= 45
    assert names == set(NAME_CASES)


def test_names_match_at_most_one_row_and_aliases_are_reachable() -> None:
    for name in NAME_CASES:
        hits = [row.key for row in device_rows() if row.pattern.search(name)]
        assert len(hits) <= 1, (name, hits)
        aliased = [a for a in load_aliases() if a.pattern.search(name)]
        assert not (hits and aliased), f"alias for {name!r} is shadowed by row {hits}"


def test_aliases_point_at_real_rows_and_fields() -> None:
    for alias in load_aliases():
        assert alias.target == UNKNOWN_TARGET or alias.target in rows_by_key(), alias
        assert set(alias.blank) <= set(DTYPES) | {"dram_gbps"}, alias
        assert alias.note


# ---------------------------------------------------------------------------------------------
# numbers peers get wrong


def test_t4() -> None:
    d = match_device({"name": "Tesla T4", "numSms": 40, "totalGlobalMem": 15843721216})
    assert d.peak_tflops["fp32"] == 8.1
    assert d.peak_tflops["fp16_tc"] == 65  # mixed fp16/fp32, dense
    assert d.dram_gbps == 320
    assert "tf32_tc" not in d.peak_tflops and "bf16_tc" not in d.peak_tflops  # Turing has none
    assert d.notes == ()
    assert d.source == "table row t4 (name 'Tesla T4' matched ^(Tesla |NVIDIA )?T4$)"


def test_h100_sxm_dense_peaks() -> None:
    d = _trace_or_name("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
                       "NVIDIA H100 80GB HBM3")
    assert d.key == "h100_sxm"
    assert d.peak_tflops["bf16_tc"] == 989.4  # not the 1979 sparse figure
    assert d.peak_tflops["fp8_tc"] == 1978.9
    assert d.dram_gbps == 3350
    assert d.notes == ()


def _trace_or_name(rel: str, name: str) -> Device:
    p = SHARED / "traces" / rel
    return match_device(_trace_props(rel) if p.exists() else {"name": name})


def test_l4_bandwidth_is_300_not_3350() -> None:
    d = match_device({"name": "NVIDIA L4"})
    assert d.dram_gbps == 300
    assert d.peak_tflops["bf16_tc"] == 121  # 242 is with sparsity


@pytest.mark.parametrize("name,key", [("NVIDIA L4", "l4"), ("NVIDIA L40", "l40"), ("NVIDIA L40S", "l40s")])
def test_l4_l40_l40s_are_distinct(name: str, key: str) -> None:
    assert match_device({"name": name}).key == key
    assert match_device({"name": name.lower()}).key == key  # torchtitan's lowercase miss


def test_l40s_figures() -> None:
    d = match_device({"name": "NVIDIA L40S"})
    assert (d.peak_tflops["bf16_tc"], d.peak_tflops["fp8_tc"], d.dram_gbps) == (362.05, 733, 864)


def test_h100_nvl_is_one_card() -> None:
    d = match_device({"name": "NVIDIA H100 NVL"})
    assert d.peak_tflops["fp32"] == 60
    assert d.peak_tflops["bf16_tc"] == 835.5
    assert d.dram_gbps == 3900  # not the two-card 7.8 TB/s
    assert d.mem_gb == 94


def test_a10g_has_its_own_peaks_not_the_a10s() -> None:
    d = match_device({"name": "NVIDIA A10G", "numSms": 80})
    assert d.key == "a10g" and d.dram_gbps == 600
    # 80 SMs x 1710 MHz x 256 FLOP/clk = 35.0 TFLOP/s FP32 and TF32; x 512 = 70.0 FP16/BF16 (FP32 accumulate)
    assert d.peak_tflops["fp32"] == 35.0 and d.peak_tflops["tf32_tc"] == 35.0
    assert d.peak_tflops["bf16_tc"] == d.peak_tflops["fp16_tc"] == 70.0  # not the A10's 125
    assert "fills" not in rows_by_key()["a10g"].source and "DERIVED for the A10G" in rows_by_key()["a10g"].source


# ---------------------------------------------------------------------------------------------
# names without a row: conditions on SMs and memory


@pytest.mark.parametrize(
    "sms,mem,key,dram,word",
    [
        (132, 79.2, "h100_sxm", 3350, "SXM5"),
        (132, 95.0, "h100_sxm", None, "--bandwidth-gbps"),
        (114, 79.2, "h100_pcie", 2000, "PCIe"),
        (None, 79.2, None, None, "cannot be told apart"),
        (100, 79.2, None, None, "cannot be told apart"),
    ],
)
def test_plain_h100(sms, mem, key, dram, word) -> None:
    d = match_device(_props("NVIDIA H100", (9, 0), sms, mem))
    assert d.key == key and d.dram_gbps == dram
    assert word.lower() in _notes(d)


def test_h800_is_h100_sxm_without_fp64() -> None:
    d = match_device(_props("NVIDIA H800", (9, 0), 132, 79.2))
    assert d.key == "h100_sxm"
    assert d.peak_tflops["bf16_tc"] == 989.4 and d.dram_gbps == 3350
    assert "fp64" not in d.peak_tflops and "fp64_tc" not in d.peak_tflops
    assert "via aliases.csv" in d.source


def test_h20_3e_keeps_compute_not_bandwidth() -> None:
    d = match_device(_props("NVIDIA H20-3e", (9, 0), 78, 140.0))
    assert d.key == "h20" and d.dram_gbps is None
    assert d.peak_tflops["bf16_tc"] == 148
    assert d.mem_gb == 140.0  # what the trace reports, not the h20 row's 96


def test_a100_pg509_200_from_real_traces() -> None:
    d = match_device(_trace_props("hta/control.json.gz"))  # reports 40536 MiB
    assert d.key == "a100_sxm4_40gb" and d.dram_gbps == 1555
    assert "memory < 60 GiB" in d.source


def test_a100_pg509_200_80gb() -> None:
    d = match_device(_props("NVIDIA A100-PG509-200", (8, 0), 108, 79.2))
    assert d.key == "a100_sxm4_80gb" and d.dram_gbps == 2039


def test_v100_dgxs_from_real_trace() -> None:
    d = match_device(_trace_props("kineto/worker0.1623143089861.pt.trace.json.gz"))
    assert d.key == "v100_sxm2_32gb" and d.peak_tflops["fp16_tc"] == 125
    assert "dgx station" in _notes(d)


# ---------------------------------------------------------------------------------------------
# hardware fallback: ROCm's "" / "AMD Radeon Graphics", unknown NVIDIA names


def test_mi250_radeon_graphics_from_real_trace() -> None:
    props = _trace_props("hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert props["name"] == "AMD Radeon Graphics"
    d = match_device(props)
    assert d.key == "mi210" and d.vendor == "AMD" and d.sms == 104
    assert d.dram_gbps == 1638.4
    assert "mi210 or one mi250 gcd" in _notes(d)
    assert "by hardware" in d.source


def test_empty_name_mi300x_from_real_trace() -> None:
    props = _trace_props("tracelens/vllm_piecewise/graph_execution.json.gz")
    assert props["name"] == ""
    d = match_device(props)
    assert d.key == "mi300x" and d.dram_gbps == 5300 and d.peak_tflops["bf16_tc"] == 1307.4
    assert "empty" in _notes(d)


@pytest.mark.parametrize(
    "name,cc,sms,mem,key",
    [
        ("", (9, 0), 104, 64, "mi210"),
        ("AMD Radeon Graphics", (9, 0), 110, 64, "mi250x_gcd"),
        ("", (9, 4), 304, 192, "mi300x"),
        ("", (9, 4), 304, 256, "mi325x"),
        ("AMD Radeon Graphics", (9, 5), 256, 288, "mi355x"),
        ("", (9, 0), 120, 32, "mi100"),
        # MI300X or MI325X: memory decides, and it is missing: their shared figures (the peaks), the
        # bandwidth (5.3 vs 6 TB/s) blank
        ("", (9, 4), 304, None, "mi300x"),
        ("", (9, 4), 80, 192, "mi300a"),  # no such row: the nearest gfx942 row by CUs, scaled to 80 CUs
        ("AMD Radeon Graphics", None, None, 64, None),
    ],
)
def test_rocm_generic_names(name, cc, sms, mem, key) -> None:
    d = match_device(_props(name, cc, sms, mem, warp=64))
    assert d.key == key, d.notes
    if key is None:
        assert "--peak-tflops" in " ".join(d.notes)


def test_ambiguous_hardware_lists_candidates() -> None:
    d = match_device(_props("", (9, 4), 304, None, warp=64))
    assert "mi300x, mi325x" in _notes(d) and d.dram_gbps is None and d.peak_tflops["bf16_tc"] == 1307.4
    assert "dram_gbps 5300 (mi300x) / 6000 (mi325x)" in " ".join(d.notes)


def test_mi350_class_without_a_name_borrows_only_what_mi350x_and_mi355x_share() -> None:
    # gfx950, 256 CUs, 288 GB: MI350X (2.2 GHz) and MI355X (2.4 GHz) alike; only the 8 TB/s is theirs both
    d = match_device(_props("", (9, 5), 256, 288, warp=64))
    assert d.key == "mi355x" and d.dram_gbps == 8000 and d.peak_tflops == {}
    notes = " ".join(d.notes)
    assert "Borrowed from row mi355x, the figures they share: dram_gbps 8000" in notes
    assert "bf16_tc 2500 (mi355x) / 2310 (mi350x)" in notes and "--device mi350x" in notes
    assert match_device(_props("AMD Instinct MI350X", (9, 5), 256, 288, warp=64)).peak_tflops["bf16_tc"] == 2310


@pytest.mark.parametrize("name, mem, key, dram, bf16", [
    ("NVIDIA GH200 480GB", 95.0, "gh200_96gb", 4000, 989.4),  # not the H100 NVL row (3.9 TB/s, 835.5)
    ("NVIDIA GH200 144G HBM3e", 139.8, "gh200_144gb", 5000, 989.4),
    ("NVIDIA GH200", 95.0, "gh200_96gb", 4000, 989.4),  # the alias decides by memory
    ("NVIDIA GH200", 139.8, "gh200_144gb", 5000, 989.4),
    ("NVIDIA GH200", None, "gh200_96gb", None, 989.4),  # no memory size: the shared peaks, no bandwidth
    ("NVIDIA B300 SXM6 AC", 268.0, "b300", 7700, 2250),
    ("NVIDIA GB300", 277.0, "gb300", 8000, 2500),
    # 188 SMs x 1024 FLOP/clk x 2597 MHz = 500 (full-rate FP32 accumulate, filled in gpu_specs_fills.csv)
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 95.0, "rtx_pro_6000_blackwell", 1792, 500.0),
])
def test_devices_people_run_today(name, mem, key, dram, bf16) -> None:
    cc = {"gh200_96gb": (9, 0), "gh200_144gb": (9, 0), "b300": (10, 3), "gb300": (10, 3)}.get(key, (12, 0))
    d = match_device(_props(name, cc, None, mem, warp=32))
    assert d.key == key and d.dram_gbps == dram and d.peak_tflops.get("bf16_tc") == bf16


def test_new_rows_carry_links_and_sources() -> None:
    from traceana.roofline.devices.links import links_for

    assert links_for("gh200_96gb")["host_link"] == "NVLink-C2C" and links_for("gh200_96gb")["host_link_gbps"] == 450
    assert links_for("mi350x")["l2_bytes"] == 32 << 20 and links_for("rtx_pro_6000_blackwell")["l2_bytes"] == 128 << 20
    rows = rows_by_key()
    for key in ("gh200_96gb", "gh200_144gb", "b300", "gb300", "rtx_pro_6000_blackwell", "mi350x"):
        assert rows[key].source  # every added row names where its figures come from
    # figures not found stay blank: the RTX PRO 6000's fp8 tensor peak, GB300's FP64
    assert "fp8_tc" not in rows["rtx_pro_6000_blackwell"].peak_tflops and "fp64" not in rows["gb300"].peak_tflops
    assert "bf16_tc" in rows["rtx_pro_6000_blackwell"].source  # the filled columns are named in the source


def test_mi250_name_with_104_cus_is_mi210_figures() -> None:
    d = match_device(_props("AMD Instinct MI250X / MI250", (9, 0), 104, 64, warp=64))
    assert d.key == "mi210"
    assert "104 cus" in _notes(d) and "mi250 gcd" in _notes(d)


def test_unknown_nvidia_name_twins_one_row() -> None:
    d = match_device(_props("NVIDIA Tesla T4G", (7, 5), 40, 14.8, warp=32))
    assert d.key == "t4" and "fits row t4 only" in _notes(d)


def test_unknown_nvidia_name_with_shared_hardware_borrows_the_first_and_names_the_others() -> None:
    # L40, L40S and RTX 6000 Ada share cc 8.9, 142 SMs, 48 GB, with different peaks: the first
    # (table order) lends its figures unscaled, and the note names all three and --device
    d = match_device(_props("NVIDIA L20X", (8, 9), 142, 44.5, warp=32))
    assert d.key == "l40" and d.peak_tflops["bf16_tc"] == 181.05
    assert "l40, l40s, rtx6000_ada" in _notes(d) and "--device l40s" in _notes(d)
    assert d.borrowed == "peaks borrowed from NVIDIA L40"


def test_sm_count_mismatch_warns() -> None:
    d = match_device(_props("NVIDIA A100-SXM4-40GB", (8, 0), 14, 9.5))  # a MIG slice
    assert d.key == "a100_sxm4_40gb"
    assert "mig" in _notes(d) and "14 sms" in _notes(d)


def test_no_device_properties() -> None:
    d = match_device(None)
    assert d.key is None and d.name == "" and d.peak_tflops == {} and d.dram_gbps is None
    assert "deviceproperties" in _notes(d) and "--bandwidth-gbps" in _notes(d)


# ---------------------------------------------------------------------------------------------
# overrides


def test_peak_and_bandwidth_overrides_merge() -> None:
    d = match_device({"name": "Tesla T4"}, peak_tflops={"fp32": 7.0}, bandwidth_gbps=300)
    assert d.peak_tflops["fp32"] == 7.0 and d.peak_tflops["fp16_tc"] == 65
    assert d.dram_gbps == 300
    assert "overridden" in d.source and d.source.startswith("table row t4")


def test_all_override_then_specific() -> None:
    d = match_device(None, peak_tflops={"all": 100, "fp32": 20}, bandwidth_gbps=1000)
    assert set(d.peak_tflops) == set(DTYPES)
    assert d.peak_tflops["fp32"] == 20 and d.peak_tflops["bf16_tc"] == 100
    assert not any("unknown device" in n for n in d.notes)  # nothing left to pass


def test_unknown_with_only_bandwidth_still_asks_for_peaks() -> None:
    d = match_device({"name": "NVIDIA TITAN Xp"}, bandwidth_gbps=548)
    assert d.dram_gbps == 548 and d.peak_tflops == {}
    assert "--peak-tflops" in " ".join(d.notes)


@pytest.mark.parametrize("peaks,bw", [({"fp17": 1.0}, None), ({"fp32": -1.0}, None),
                                      ({"fp32": float("nan")}, None), (None, 0), (None, -5.0)])
def test_bad_overrides_raise(peaks, bw) -> None:
    with pytest.raises(BadInput):
        match_device({"name": "Tesla T4"}, peak_tflops=peaks, bandwidth_gbps=bw)


def test_key_override() -> None:
    d = match_device({"name": "Tesla T4"}, key="L4")
    assert d.key == "l4" and d.dram_gbps == 300
    assert "--device l4" in d.source
    assert any("would match row t4" in n for n in d.notes)
    d = match_device(None, key="h100_nvl")
    assert d.key == "h100_nvl" and d.notes == ()


def test_unknown_key_raises_with_hint() -> None:
    with pytest.raises(BadInput, match="traceana devices") as info:
        match_device({"name": "Tesla T4"}, key="h100")
    assert "h100_sxm" in str(info.value)  # close matches suggested


# ---------------------------------------------------------------------------------------------
# the table CSV is what the build script makes from the shared reference


def test_table_csv_equals_build_output(tmp_path) -> None:
    specs, notes = REFERENCE / "gpu_specs.csv", REFERENCE / "gpu_specs_notes.csv"
    if not specs.exists() or not notes.exists():
        pytest.skip("shared reference CSVs not present")
    out = tmp_path / "table.csv"
    subprocess.run([sys.executable, str(REPO / "scripts" / "build_device_table.py"),
                    "--specs", str(specs), "--notes", str(notes), "--out", str(out)],
                   check=True, capture_output=True)
    committed = REPO / "traceana" / "roofline" / "devices" / "table.csv"
    assert out.read_text(encoding="utf-8") == committed.read_text(encoding="utf-8")


def test_table_numbers_are_the_references() -> None:
    specs = REFERENCE / "gpu_specs.csv"
    if not specs.exists():
        pytest.skip(f"{specs} not present")
    with specs.open(newline="", encoding="utf-8") as fh:
        reference = {r["key"]: r for r in csv.DictReader(fh)}
    with (REPO / "scripts" / "gpu_specs_added.csv").open(newline="", encoding="utf-8") as fh:
        reference.update({r["key"]: r for r in csv.DictReader(fh)})  # the rows this repo adds, with sources
    with (REPO / "scripts" / "gpu_specs_fills.csv").open(newline="", encoding="utf-8") as fh:
        for fill in csv.DictReader(fh):  # blank shared cells filled, with sources
            assert reference[fill["key"]].get(fill["column"], "") == "", fill
            reference[fill["key"]][fill["column"]] = fill["value"]
    rows = rows_by_key()
    assert set(rows) == set(reference) and len(rows) == 36 + 6 + 66
    for key, ref in reference.items():
        row = rows[key]
        for dtype in DTYPES[:8]:
            assert row.peak_tflops.get(dtype) == (float(ref[dtype]) if ref[dtype] else None), (key, dtype)
        assert row.dram_gbps == (float(ref["dram_gbps"]) if ref["dram_gbps"] else None)


# ---------------------------------------------------------------------------------------------
# CLI


def _run(args: list[str]):
    from traceana.cli import cli

    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_cli_lists_table() -> None:
    result = _run(["devices"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split() == ["key", "name", "pattern", "SMs", "GB/s", "fp32", "tf32", "bf16", "fp16", "fp8"]
    t4 = next(line for line in lines if line.startswith("t4 "))
    assert t4.split() == ["t4", "^(Tesla", "|NVIDIA", ")?T4$", "40", "320", "8.1", "-", "-", "65", "-"]
    l4 = next(line for line in lines if line.startswith("l4 "))
    assert l4.split()[3:5] == ["58", "300"]
    assert "^NVIDIA H100$ -> unknown" in result.output
    ti = next(line for line in lines if line.startswith("rtx2080ti "))
    assert ti.split()[-7:] == ["68", "616", "13.4", "-", "-", "53.8", "-"]  # Turing: no TF32, BF16 or FP8


def test_cli_json() -> None:
    result = _run(["devices", "--json"])
    doc = json.loads(result.output)
    # the shared reference's 36, the 6 + 66 added (scripts/gpu_specs_added.csv)
    assert len(doc["devices"]) == 36 + 6 + 66
    h100 = next(r for r in doc["devices"] if r["key"] == "h100_sxm")
    assert h100["peak_tflops"]["bf16_tc"] == 989.4 and h100["dram_gbps"] == 3350
    assert any(a["target"] == "unknown" for a in doc["aliases"])


def test_cli_match() -> None:
    result = _run(["devices", "--match", "NVIDIA L40S"])
    assert result.exit_code == 0
    assert "row      l40s" in result.output and "matched  table row l40s" in result.output
    result = _run(["devices", "--match", "NVIDIA TITAN Xp"])
    assert "none (unknown device)" in result.output and "--peak-tflops" in result.output
    result = _run(["devices", "--match", "", "--cc", "9.4", "--sms", "304", "--mem-gb", "192", "--json"])
    assert json.loads(result.output)["key"] == "mi300x"
    result = _run(["devices", "--match", "NVIDIA H100", "--sms", "114", "--mem-gb", "79.2"])
    assert "row      h100_pcie" in result.output


def test_cli_usage_errors() -> None:
    from traceana.cli import main

    assert main(["devices", "--sms", "132"]) == 2
    assert main(["devices", "--match", "x", "--cc", "nine"]) == 2


def test_fp6_fp4_peaks_and_the_wider_roof_without_them():
    from traceana.cost.types import Cost
    from traceana.roofline.devices.table import load_rows
    from traceana.roofline.judge import choose_peak

    rows = {r.key: r for r in load_rows()}
    # HGX B200 per GPU: FP4 18 PFLOPS sparse -> 9,000 dense; FP6 = FP8 rate 4,500 dense
    assert rows["b200"].peak_tflops["fp4_tc"] == 9000.0 and rows["b200"].peak_tflops["fp6_tc"] == 4500.0
    # MI355X: MXFP4 and MXFP6 both 10.1 PFLOPS dense
    assert rows["mi355x"].peak_tflops["fp4_tc"] == rows["mi355x"].peak_tflops["fp6_tc"] == 10066.0
    assert "fp6/fp4:" in rows["b200"].source
    gemm = lambda dt: Cost(1e9, 1e6, "gemm", dt, True, "", "", False, (), ())  # noqa: E731
    assert choose_peak(dict(rows["b200"].peak_tflops), gemm("fp4")).key == "fp4_tc"
    # H100 has no fp4 tensor cores: widened to fp8 (1,978.9 TFLOP/s dense), never the fp32 roof
    assert choose_peak(dict(rows["h100_sxm"].peak_tflops), gemm("fp4")).tflops == 1978.9
    # A100 has no fp8: an fp8 GEMM (weights dequantized) is held to bf16 (312 TFLOP/s)
    p = choose_peak(dict(rows["a100_sxm4_80gb"].peak_tflops), gemm("fp8"))
    assert (p.key, p.tflops) == ("bf16_tc", 312.0)


@pytest.mark.parametrize("sms, mem, name", [(120, 80, ""), (104, 64, ""), (110, None, "GPU")])
def test_a_32_wide_warp_with_compute_major_9_is_nvidia(sms, mem, name) -> None:
    """AMD's gfx9 parts (MI100 / MI210 / MI250X, cc 9.0 in ROCm's numbering) run 64-wide wavefronts and RDNA's
    32-wide ones report computeMajor 10 and up: a nameless cc 9.0 device with a 32-wide warp is a Hopper. It
    borrowed MI100's / MI210's / MI250X's peaks when its SM count matched one of theirs (120 / 104 / 110)."""
    d = match_device(_props(name, (9, 0), sms, mem, warp=32))
    assert d.vendor == "NVIDIA" and d.key == "h100_pcie" and d.borrowed
    # H100 PCIe: 756 TFLOP/s bf16 dense at 114 SMs; scaled by SMs: 756 * sms / 114
    assert d.peak_tflops["bf16_tc"] == pytest.approx(756.0 * sms / 114, rel=1e-3)
    assert "rocm" not in _notes(d)  # an empty name is not put down to ROCm on an NVIDIA part


def test_warp_size_alone_decides_nothing_past_gfx9() -> None:
    # cc 11.0 with a 32-wide warp: RDNA 3 (gfx1100), AMD's; the warp cannot say so, the table's row can
    d = match_device(_props("", (11, 0), 96, 24, warp=32))
    assert d.key == "rx7900xtx" and d.vendor == "AMD" and "rocm <= 6.0" in _notes(d)
    d = match_device(_props("", (9, 0), 104, 64, warp=64))  # 64-wide: CDNA 2, as before
    assert d.key == "mi210" and d.vendor == "AMD"
