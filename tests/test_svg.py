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
    assert len(_op_circles(root)) == len(_plottable(a)) > 10
    labels = [t.text for t in root.iter(NS + "text")]
    for dtype in a["device"]["peak_tflops"]:
        assert any(lbl and lbl.startswith(dtype + " ") and lbl.endswith("TFLOP/s") for lbl in labels), dtype
    assert any(lbl and lbl.startswith("DRAM ") for lbl in labels)


def test_log_log_axes_place_a_point_where_it_belongs():
    a = hostile_analysis(1)
    a["ops"][0].update(intensity=10.0, achieved_tflops=1.0)
    a["device"]["peak_tflops"] = {"fp32": 100.0}
    a["device"]["dram_gbps"] = 1000.0
    root = ET.fromstring(roofline_svg(a))
    ticks = {t.text for t in root.iter(NS + "text")}
    assert {"0.1", "1", "10", "100"} <= ticks  # decades: powers of ten only
    # the x tick "1" and "10" are one decade apart; the point at x = 10 sits on the "10" tick
    xs = {t.text: float(t.get("x")) for t in root.iter(NS + "text") if t.get("text-anchor") == "middle"
          and t.text in ("1", "10", "100")}
    (c,) = _op_circles(root)
    assert float(c.get("cx")) == pytest.approx(xs["10"], abs=0.01)
    assert xs["100"] - xs["10"] == pytest.approx(xs["10"] - xs["1"], abs=0.01)  # log scale: equal decades


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
    assert (width, height) == (960, 540)
