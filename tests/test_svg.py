"""The roofline chart as SVG (pure Python) and PNG (cairosvg when importable)."""

from __future__ import annotations

import re
import sys
import types
import xml.etree.ElementTree as ET

import pytest

from tests.analyses import analysis
from tests.conftest import SAMPLES
from tests.test_markdown import HOSTILE, hostile_analysis
from traceana.cli import main
from traceana.cli.ci import tag_png
from traceana.render.svg import roofline_svg

NS = "{http://www.w3.org/2000/svg}"
T4 = str(SAMPLES / "t4_seed_pow_mul.json")


def _plottable(a):
    return [o for o in a["ops"] if all(isinstance(o.get(k), (int, float)) and o.get(k) > 0
                                       for k in ("flops", "intensity", "achieved_tflops"))]


def _op_circles(root):
    return [c for c in root.iter(NS + "circle") if c.find(NS + "title") is not None]


def test_one_circle_per_op_with_flops_and_a_roof_per_dtype():
    a = analysis("hta/control.json.gz")
    svg = roofline_svg(a)
    root = ET.fromstring(svg)
    assert root.tag == NS + "svg"
    assert len([c for c in _op_circles(root) if "pt" in c.get("class").split()]) == len(_plottable(a)) > 10
    labels = [t.text for t in root.iter(NS + "text")]
    for dtype in a["device"]["peak_tflops"]:  # dtypes sharing a peak share its label: "bf16_tc · fp16_tc 312 ..."
        assert any(lbl and dtype in lbl.split(" ")[:-2] and lbl.endswith("TFLOP/s") for lbl in labels), dtype
    assert any(lbl and lbl.startswith("DRAM ") for lbl in labels)


def test_log_log_axes_place_a_point_where_it_belongs():
    a = hostile_analysis(1)
    a["ops"][0].update(intensity=10.0, achieved_tflops=1.0)
    a["device"]["peak_tflops"] = {"fp32": 100.0}
    a["device"]["dram_gbps"] = 1000.0
    root = ET.fromstring(roofline_svg(a))
    ticks = {t.text for t in root.iter(NS + "text") if t.get("class") == "tick"}
    assert {"10⁻¹", "10⁰", "10¹", "10²"} <= ticks  # decades: powers of ten only, one notation
    assert all(re.fullmatch("10⁻?[⁰¹²³⁴⁵⁶⁷⁸⁹]+", t) for t in ticks), ticks
    # the x tick 10⁰ and 10¹ are one decade apart; the point at x = 10 sits on the 10¹ tick
    xs = {t.text: float(t.get("x")) for t in root.iter(NS + "text") if t.get("text-anchor") == "middle"
          and t.text in ("10⁰", "10¹", "10²")}
    (c,) = _op_circles(root)
    assert float(c.get("cx")) == pytest.approx(xs["10¹"], abs=0.01)
    assert xs["10²"] - xs["10¹"] == pytest.approx(xs["10¹"] - xs["10⁰"], abs=0.01)  # log scale: equal decades


def test_hostile_names_are_escaped_and_nothing_external_is_referenced():
    a = hostile_analysis(len(HOSTILE))
    svg = roofline_svg(a)
    root = ET.fromstring(svg)  # well-formed XML whatever the names
    titles = [c.find(NS + "title").text for c in _op_circles(root)]
    assert any("<script>alert(1)</script>" in t for t in titles)  # shown as text, after unescaping
    assert "<script" not in svg and "&lt;script&gt;" in svg
    assert not re.search(r"href|url\(|@import|<image|<foreignObject", svg)
    assert re.findall(r"https?://[^\s\"']+", svg) == ["http://www.w3.org/2000/svg"]
    assert "traceana" in svg[:300]


def test_empty_analysis_and_determinism():
    svg = roofline_svg({})
    assert "Nothing to plot" in svg
    ET.fromstring(svg)
    a = hostile_analysis(20)
    assert roofline_svg(a) == roofline_svg(hostile_analysis(20))


def test_report_writes_svg_and_markdown_links_it(tmp_path, capsys):
    md, svg = tmp_path / "r.md", tmp_path / "chart.svg"
    assert main(["report", T4, "-o", str(md), "--svg", str(svg), "--md-image", "chart.svg"]) == 0
    assert "chart written to" in capsys.readouterr().out
    root = ET.fromstring(svg.read_text())
    assert len(_op_circles(root)) >= 1
    assert "![roofline chart](<chart.svg>)" in md.read_text()
    # a second run overwrites its own SVG without --force; --svg must not be the report itself
    assert main(["report", T4, "-o", str(md), "-q", "--svg", str(svg)]) == 0
    assert main(["report", T4, "-o", str(md), "-q", "--svg", str(md)]) == 2


def test_png_with_and_without_a_renderer(tmp_path, capsys, monkeypatch):
    png = tmp_path / "chart.png"
    monkeypatch.setitem(sys.modules, "cairosvg", None)  # import fails
    assert main(["report", T4, "-o", str(tmp_path / "r.json"), "-q", "--png", str(png)]) == 0
    assert "skipped" in capsys.readouterr().err and not png.exists()

    fake_png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + bytes(13) + b"CRC!" + b"\x00\x00\x00\x00IEND\xaeB`\x82"
    calls = []

    def svg2png(bytestring):
        calls.append(bytestring)
        return fake_png

    monkeypatch.setitem(sys.modules, "cairosvg", types.SimpleNamespace(svg2png=svg2png))
    assert main(["report", T4, "-o", str(tmp_path / "r.json"), "-q", "--png", str(png)]) == 0
    data = png.read_bytes()
    assert calls and calls[0].startswith(b"<?xml")
    assert data == tag_png(fake_png) and b"tEXtSoftware\x00traceana" in data[:100]
    # the chunk is valid: its CRC covers type + data
    import struct
    import zlib

    n = struct.unpack(">I", data[33:37])[0]
    body = data[37:41 + n]
    assert struct.unpack(">I", data[41 + n:45 + n])[0] == zlib.crc32(body)
    # our own PNG is recognised and overwritten without --force
    assert main(["report", T4, "-o", str(tmp_path / "r.json"), "-q", "--png", str(png)]) == 0


def test_real_png_when_cairosvg_is_installed(tmp_path):
    try:
        import cairosvg  # noqa: F401
    except Exception:
        pytest.skip("cairosvg (or the cairo library) is not installed")
    png = tmp_path / "chart.png"
    assert main(["report", T4, "-o", str(tmp_path / "r.json"), "-q", "--png", str(png)]) == 0
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big"))
    assert (width, height) == (960, 540 + 150)  # the chart and the bandwidth strip (fill_ has no FLOPs)


def _label_box(t):
    """The box svg.py reserves for a label: its estimated width, from baseline - 10 to + 3."""
    from traceana.render.svg import CHAR_W

    x, y, w = float(t.get("x")), float(t.get("y")), len(t.text) * CHAR_W
    left = {"start": x, "end": x - w, "middle": x - w / 2}[t.get("text-anchor", "start")]
    return left, y - 10, left + w, y + 3


def _disjoint(boxes):
    return all(not (a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5)
               for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_the_slowest_ops_are_labelled_and_no_labels_overlap():
    from traceana.render.svg import LABELLED, MR, W

    a = analysis("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    root = ET.fromstring(roofline_svg(a))
    labels = [t for t in root.iter(NS + "text") if t.get("class") == "pt-label"]
    slowest = sorted(_plottable(a), key=lambda o: -o["device_time_us"])[:LABELLED]
    named = [t.text for t in labels]
    placed = [o for o in slowest if any(n.startswith(o["name"]) for n in named)]
    assert len(placed) >= LABELLED - 1, named  # at most one left out for want of room
    assert _disjoint([_label_box(t) for t in labels])
    # roof labels in the right margin: 13 px apart at least, and inside the chart
    margin = sorted(float(t.get("y")) for t in root.iter(NS + "text")
                    if (t.get("class") or "").startswith("roof-label") and float(t.get("x")) == W - MR + 6)
    assert len(margin) == len(set(a["device"]["peak_tflops"].values()))  # one per distinct peak
    assert all(b - a_ >= 13 - 1e-6 for a_, b in zip(margin, margin[1:]))
    assert all(0 < y < 540 for y in margin)


def test_crowded_points_keep_their_labels_apart():
    a = hostile_analysis(12)
    for op in a["ops"]:  # twelve ops on one spot: labels go further out, or are left out, never on top
        op.update(flops=1e9, intensity=1.0, achieved_tflops=1.0, device_time_us=100.0, name="aten::mm")
    root = ET.fromstring(roofline_svg(a))
    labels = [t for t in root.iter(NS + "text") if t.get("class") == "pt-label"]
    assert len(labels) >= 4
    assert _disjoint([_label_box(t) for t in labels])
    assert any(line.get("class") == "leader" for line in root.iter(NS + "line"))


def _strip_analysis(profile=None):
    ops = [
        {"id": "op1", "name": "aten::mm", "flops": 2e9, "intensity": 50.0, "achieved_tflops": 20.0,
         "device_time_us": 300.0, "bound": "compute", "roof_pct": 20.0},
        {"id": "op2", "name": "aten::copy_", "flops": 0.0, "bytes": 2e6, "achieved_gbps": 500.0,
         "device_time_us": 200.0, "bound": "memory", "roof_pct": 50.0},
        {"id": "op3", "name": "aten::fill_", "flops": 0.0, "bytes": 1e3, "achieved_gbps": 10.0,
         "device_time_us": 20.0, "bound": "latency"},
        {"id": "op4", "name": "nccl:all_reduce", "flops": 0.0, "achieved_gbps": 80.0, "device_time_us": 90.0,
         "bound": "communication"},
        {"id": "op5", "name": "aten::cat", "flops": 0.0, "bytes": 0.0, "achieved_gbps": 0.0,
         "device_time_us": 5.0, "bound": "memory"},
    ]
    dev = {"name": "Test GPU", "peak_tflops": {"fp32": 100.0, "bf16_tc": 400.0, "fp16_tc": 400.0},
           "dram_gbps": 1000.0, "host_link": "PCIe 4.0 x16", "host_link_gbps": 32.0}
    if profile:
        dev["profile"] = profile
    return {"device": dev, "ops": ops, "trace": {"file": "t.json"}}


def test_ops_without_flops_sit_on_the_bandwidth_strip():
    root = ET.fromstring(roofline_svg(_strip_analysis()))
    circles = [c for c in root.iter(NS + "circle") if "bw" in (c.get("class") or "").split()]
    # copy_ (500 GB/s) and fill_ (10 GB/s); not the collective (no DRAM roof) nor cat (0 bytes moved)
    assert [c.find(NS + "title").text.split(" | ")[0] for c in circles] == ["aten::copy_", "aten::fill_"]
    ticks = {t.text: float(t.get("x")) for t in root.iter(NS + "text")
             if t.get("class") == "tick" and float(t.get("y")) > 540}
    lines = {line.get("class"): float(line.get("x1")) for line in root.iter(NS + "line")
             if float(line.get("y1") or 0) > 540 and line.get("class", "").startswith("roof")}
    # the DRAM roof at 1000 GB/s = the 10³ tick, the host link at 32 GB/s: log10(32) = 1.505 decades
    assert lines["roof"] == pytest.approx(ticks["10³"], abs=0.01)
    decade = ticks["10²"] - ticks["10¹"]
    assert lines["roof link"] == pytest.approx(ticks["10¹"] + 0.50515 * decade, abs=0.05)
    copy_x = next(float(c.get("cx")) for c in circles if "copy_" in c.find(NS + "title").text)
    assert copy_x == pytest.approx(ticks["10²"] + 0.69897 * decade, abs=0.05)  # log10(500) = 2.699
    labels = {t.text for t in root.iter(NS + "text")}
    assert "bf16_tc · fp16_tc 400 TFLOP/s" in labels  # one line and one label for a shared peak
    assert any(t and t.startswith("2 op signatures with no FLOPs") for t in labels)
    assert int(root.get("height")) == 540 + 150


def test_measured_roofs_are_dashed_only_with_a_profile():
    plain = ET.fromstring(roofline_svg(_strip_analysis()))
    assert not [x for x in plain.iter(NS + "line") if "achievable" in (x.get("class") or "")]
    prof = ET.fromstring(roofline_svg(_strip_analysis({"dram_gbps": 800.0, "peak_tflops": {"fp32": 80.0}})))
    dashed = [x for x in prof.iter(NS + "line") if "achievable" in (x.get("class") or "")]
    assert len(dashed) == 3  # the measured DRAM slope, the measured fp32 ceiling, the strip's DRAM line
    assert all(x.get("stroke-dasharray") == "6 4" for x in dashed)
    labels = {t.text for t in prof.iter(NS + "text")}
    assert {"measured fp32 80.0", "measured DRAM 800 GB/s"} <= labels


def test_html_chart_carries_anchors_and_no_titles():
    a = _strip_analysis()
    svg = roofline_svg(a, ids=["a1", "a2", "a3", "a4", "a5"], html=True)
    root = ET.fromstring(svg)
    assert root.get("id") == "chart" and not svg.startswith("<?xml")
    circles = list(root.iter("circle"))  # inline in HTML: no namespace declared, nor needed
    assert [c.get("data-op") for c in circles] == ["a1", "a2", "a3"]  # mm on the chart; copy_, fill_ on the strip
    assert all(c.find("title") is None and c.get("tabindex") == "0" for c in circles)
    assert {t.get("data-op") for t in root.iter("text") if t.get("class") == "pt-label"} == {"a1", "a2", "a3"}
    assert "http" not in svg
