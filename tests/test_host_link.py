"""Each kind of traffic against its own roof: host<->device copies against the host link, peer
copies against the peer link, device-to-device copies against DRAM (issue 12 item 1)."""

from __future__ import annotations

import pytest

from tests.analyses import analysis
from tests.conftest import all_shared_traces
from traceana.link.copies import classify, dominant_host_copy
from traceana.roofline.devices.links import links_for, load_links
from traceana.roofline.devices.table import load_rows


def test_every_table_row_has_a_sourced_host_link():
    links = load_links()
    keys = {r.key for r in load_rows()}
    assert set(links) == keys
    for key, row in links.items():
        assert row["host_link"] and row["host_link_gbps"] and row["links_source"], key
    # PCIe x16 per direction: 3.0 15.75 GB/s (8 GT/s x 16 lanes x 128/130), 4.0 31.5, 5.0 63
    assert links["t4"]["host_link_gbps"] == 15.75 and links["a100_sxm4_80gb"]["host_link_gbps"] == 31.5
    assert links["h100_sxm"]["host_link_gbps"] == 63.0
    # NVLink 3 on A100 SXM: 600 GB/s bidirectional = 300 per direction; GB200's host link is NVLink-C2C
    assert links["a100_sxm4_80gb"]["peer_link_gbps"] == 300.0 and links["gb200"]["host_link"] == "NVLink-C2C"
    assert links["a100_sxm4_80gb"]["l2_bytes"] == 40 * 2**20
    assert links_for("t4", 12.0)["host_link_gbps"] == 12.0  # --host-link-gbps
    assert links_for(None)["host_link_gbps"] is None


@pytest.mark.parametrize("name,expected", [
    ("Memcpy HtoD (Pageable -> Device)", ("HtoD", "Pageable")),
    ("Memcpy DtoH (Device -> Pinned)", ("DtoH", "Pinned")),
    ("Memcpy DtoD (Device -> Device)", ("DtoD", None)),
    ("Memcpy PtoP (Device -> Device)", ("PtoP", None)),
    ("Memcpy HtoD (Host -> Device)", ("HtoD", None)),  # ROCm: the host memory kind is not said
    ("CopyDeviceToHost", ("DtoH", None)),  # roctracer's names
    ("Memset (Device)", (None, None)),
])
def test_copy_names(name, expected):
    assert classify(name) == expected


def test_a_mostly_device_to_device_copy_stays_on_dram():
    split = {"DtoD": {"direction": "DtoD", "memory": None, "time_us": 900.0, "bytes": 9e8, "events": 9,
                      "bytes_known": True},
             "HtoD (Pinned)": {"direction": "HtoD", "memory": "Pinned", "time_us": 100.0, "bytes": 1e6,
                               "events": 1, "bytes_known": True}}
    assert dominant_host_copy(split, 1000.0) is None  # 100 of 1000 µs crossed the host link
    split["HtoD (Pinned)"]["time_us"] = 600.0
    assert dominant_host_copy(split, 1000.0)["direction"] == "HtoD"  # 600 of 1000 µs


def test_rank0_host_to_device_copy_is_held_to_pcie_not_hbm():
    a = analysis("hta/rank0.json.gz")
    row = next(r for r in a["ops"] if r["name"] == "aten::copy_" and r.get("copy"))
    c = row["copy"]
    assert row["bound"] == "host_link" and row["roof_kind"] == "host_link"
    assert c["direction"] == "HtoD" and c["memory"] == "Pinned" and c["link"] == "PCIe 4.0 x16"
    # 5 pinned HtoD copies, 229,212,160 B in 19,133 µs = 11.98 GB/s (the op's 20 DtoD copies,
    # 916,848,640 B in 1,184 µs, are not mixed in: they ran on HBM)
    assert c["bytes"] * row["count"] == 229_212_160 and c["time_us"] == 19133.0
    assert c["gbps"] == pytest.approx(229_212_160 / 19133e3)
    assert row["copies"]["DtoD"]["bytes"] == 916_848_640
    # per call: 229,212,160 / 25 calls = 9,168,486 B; at 31.5 GB/s 291.06 µs of 812.68 µs = 35.8%
    assert row["roof_pct"] == pytest.approx(9_168_486.4 / 31.5e3 / (20317 / 25) * 100, rel=1e-6)
    f = next(f for f in a["findings"] if f["kind"] == "host_copy" and row["id"] in f["ops"])
    assert "12.0 GB/s (38% of the 31.5 GB/s PCIe 4.0 x16)" in f["title"]
    assert "2039" not in f["text"] and "fuse" not in f["text"].lower()
    # saving: 19,133 µs - 229,212,160 B / 31.5 GB/s (7,276.6 µs) = 11,856.4 µs
    assert f["saving_us"] == pytest.approx(19133 - 229_212_160 / 31.5e3)


def test_no_host_copy_is_held_to_dram_on_any_shared_trace():
    for rel in all_shared_traces():
        for r in analysis(rel)["ops"]:
            assert r["roof_kind"] in ("compute", "dram", "host_link", "peer_link", "network", "none"), rel
            host = [k for k, v in (r.get("copies") or {}).items() if not k.startswith(("DtoD", "PtoP"))]
            host_us = sum(r["copies"][k]["time_us"] for k in host)
            if host_us > 0 and host_us >= 0.5 * r["device_time_us"] and r["flops"] is not None:
                assert r["roof_kind"] == "host_link", (rel, r["name"], r["copies"])


def test_rocm_copies_without_recorded_bytes_are_estimated_from_the_shapes():
    a = analysis("hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    rows = [r for r in a["ops"] if r.get("copy")]
    assert rows and all(r["roof_kind"] == "host_link" and r["estimated"] for r in rows)
    for r in rows:  # the formula's read + write of one tensor, halved: the tensor crosses once
        assert any("no bytes" in n for n in r["notes"])
