"""Renderers: HTML, markdown and JSON from a hand-built analysis dict (no trace needed).

The fixture is the seed case (T4, 8192x8192 fp32): aten::pow reads 256 MiB and writes
256 MiB = 536870912 B; 67108864 FLOPs (one per element); 2167 µs; memory-bound at 77.4%
of the 320 GB/s roof (536870912 B / 320e9 B/s = 1678 µs; 1678 / 2167 = 77.4%).
"""

from __future__ import annotations

import copy
import html.parser
import json
import math
import re

import pytest

from traceana.units import kernel_name
from traceana.errors import BadInput
from traceana.render import format_for_path, render
from traceana.render.html import build_view, render_html
from traceana.render.json_out import render_json
from traceana.render.markdown import MAX_CHARS, md_text, render_markdown
from traceana.render.templates import environment, include_file, template_dir

HOSTILE = '<script>alert(1)</script>|`a`\n"x"'


def _op(i, name, **kw):
    base = {
        "id": f"op{i}", "name": name, "input_dims": [[8192, 8192], []],
        "input_types": ["float", "Scalar"], "count": 1, "device_time_us": 100.0,
        "mean_time_us": 100.0, "flops": None, "bytes": None, "intensity": None,
        "achieved_tflops": None, "achieved_gbps": None, "roofline_time_us": None,
        "roof_pct": None, "bound": "opaque", "peak_dtype": None, "peak_tflops": None,
    }
    base.update(kw)
    if "mean_time_us" not in kw:
        base["mean_time_us"] = base["device_time_us"]
    return base


def make_analysis():
    ops = [
        _op(0, "aten::mm", input_dims=[[8192, 8192], [8192, 8192]], input_types=["float", "float"],
            device_time_us=230000.0, mean_time_us=230000.0,
            flops=1099511627776, bytes=805306368, intensity=1365.33,
            achieved_tflops=4.78, achieved_gbps=3.5, roofline_time_us=135742.0,
            roof_pct=59.0, bound="compute", peak_dtype="fp32", peak_tflops=8.1,
            peak_why="fp32 inputs, no tensor-core kernel name"),
        _op(1, "aten::pow", device_time_us=2167.0, mean_time_us=2167.0, flops=67108864,
            bytes=536870912, intensity=0.125, achieved_tflops=0.031, achieved_gbps=247.7,
            roofline_time_us=1677.7, roof_pct=77.4, bound="memory", peak_dtype="fp32",
            peak_tflops=8.1, kernels=["vectorized_elementwise_kernel<4, pow_tensor_scalar>"]),
        _op(2, HOSTILE, device_time_us=50.0, flops=1000, bytes=8000, intensity=0.125,
            achieved_tflops=0.00002, achieved_gbps=0.16, roofline_time_us=0.025,
            roof_pct=0.05, bound="latency", input_types=[HOSTILE], peak_dtype=HOSTILE,
            reason=HOSTILE),
        _op(3, "aten::_foreach_add_", device_time_us=40.0, reason="no shapes recorded",
            opaque=True, input_dims=[]),
        _op(4, "aten::nan_op", device_time_us=float("nan"), flops=float("inf"), bound="unmodelled"),
    ]
    return {
        "schema": "traceana.analysis/1",
        "tool": {"name": "traceana", "version": "0.1.0"},
        "trace": {"file": "t4_pow_" + HOSTILE + ".json", "format": "kineto", "events": 1234,
                  "span_us": 250000.0, "gpu_events": 12, "record_shapes": True,
                  "distributed": None},
        "device": {"name": "Tesla T4", "key": "t4", "peak_tflops": {"fp32": 8.1, "fp16": 65.0,
                                                                    HOSTILE: 1.0},
                   "dram_gbps": 320.0, "source": "table", "sms": 40, "vendor": "NVIDIA",
                   "arch": "sm_75", "notes": ["clocks may be lower under load " + HOSTILE]},
        "coverage": {"device_time_us": 232357.0, "attributed_time_us": 232357.0,
                     "modeled_time_us": 232217.0, "opaque_time_us": 40.0,
                     "unmodeled_time_us": 100.0, "unattributed_time_us": 0.0,
                     "opaque_by_cause": {"no shapes recorded": 40.0},
                     "unmodeled_by_op": {HOSTILE: 100.0}},
        "breakdown": {"by_bound": {"compute": 230000.0, "memory": 2167.0, "latency": 50.0,
                                   "unmodelled": 100.0, "opaque": 40.0},
                      "total_us": 232357.0},
        "ops": ops,
        "explanations": [
            {"op": "op1", "title": "aten::pow is memory-bound",
             "lines": ["bytes = 8192*8192*4 read + 8192*8192*4 written = 536870912 B",
                       "536870912 B / 320 GB/s = 1677.7 µs", "1677.7 / 2167 = 77.4% of roof"]},
            {"op": "op2", "title": HOSTILE, "lines": [HOSTILE, "````` fence"]},
        ],
        "findings": [
            {"kind": "fusion", "title": "Fuse the elementwise chain " + HOSTILE,
             "text": "pow and mul_ each round-trip 512 MiB " + HOSTILE,
             "ops": ["op1", "op2", "nope"],
             "saving_us": 1677.7},
        ],
        "warnings": ["record_shapes was off for one rank " + HOSTILE],
    }


def n_flops_ops(a):
    return sum(1 for o in a["ops"] if isinstance(o.get("flops"), (int, float))
               and math.isfinite(o["flops"]) and o["flops"] > 0)


# ------------------------------------------------------------------------ HTML


def _data_block(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
    assert m, "data block missing"
    return json.loads(m.group(1))


def test_html_escapes_hostile_strings():
    page = render_html(make_analysis())
    assert "<script>alert" not in page
    assert "alert(1)" in page  # the name is shown, just escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # only our own two script elements, each closed exactly once
    assert page.count("<script") == 2
    assert page.count("</script>") == 2


def test_html_is_offline_and_has_csp():
    page = render_html(make_analysis())
    assert ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; base-uri \'none\'; '
            "form-action 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">") in page
    assert "http://" not in page and "https://" not in page
    assert not re.search(r"<(link|img|iframe|object|embed)\b", page)
    assert "src=" not in page
    assert "innerHTML" not in page and "insertAdjacentHTML" not in page


def test_html_chart_has_one_point_per_op_with_flops():
    a = make_analysis()
    data = _data_block(render_html(a))
    points = data["points"]
    assert len(points) == n_flops_ops(a) == 3
    assert {p["id"] for p in points} == {"op0", "op1", "op2"}
    pow_pt = next(p for p in points if p["id"] == "op1")
    assert pow_pt["x"] == 0.125 and pow_pt["bound"] == "memory" and pow_pt["pct"] == "77.4%"
    assert data["dram_gbps"] == 320.0
    assert [r["tflops"] for r in data["roofs"]] == [1.0, 8.1, 65.0]
    # round-trips intact through JSON (as the readable name: its newline folded to a space)
    assert any(p["name"] == kernel_name(HOSTILE) == '<script>alert(1)</script>|`a` "x"' for p in points)
    view = build_view(a)
    assert view["chart"]["left_out"] == 2


def test_html_table_rows_and_links():
    page = render_html(make_analysis())
    for i in range(5):
        assert f'<tr id="op-op{i}" data-bound=' in page
    assert 'href="#op-op1"' in page  # finding and explanation link to the pow row
    assert "2.167 ms" in page and "512 MiB" in page and "77.4%" in page
    assert "Tesla T4" in page and "320 GB/s" in page


def _lazy_block(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="ops-rows">(.*?)</script>', page, re.S)
    assert m, "ops-rows block missing"
    assert "<" not in m.group(1)  # |tojson writes < as \\u003c: no text can close the block
    return json.loads(m.group(1))


def _unpack(block: dict) -> list[dict]:
    """The lazy table's rows as report.js reads them (strings by index, titles joined by lines)."""
    strings, classes = block["strings"], block["classes"]

    def s(x):
        return strings[x] if isinstance(x, int) else x

    rows = []
    for rid, bound, family, full, cells in block["rows"]:
        out = []
        for i, c in enumerate(cells):
            c = c if isinstance(c, list) else [c]
            c = c + [None, "", ""][len(c) - 1:]
            title = "\n".join(s(x) for x in c[2]) if isinstance(c[2], list) else s(c[2])
            out.append({"t": s(c[0]), "v": c[1], "title": title, "cls": s(c[3]) or classes[i]})
        rows.append({"id": rid, "bound": s(bound), "family": s(family), "full": s(full), "cells": out})
    return rows


def _many_ops(n):
    """n op signatures, each its own shape; op 2001 has the hostile name."""
    return [_op(i, HOSTILE if i == 2001 else f"aten::op{i % 7}", input_dims=[[i + 1, 64]], input_types=["float"],
                device_time_us=10000.0 - i, flops=64 * (i + 1), bytes=512 * (i + 1), intensity=0.125,
                achieved_tflops=0.01, achieved_gbps=80.0 + i / 3, roofline_time_us=1.5, roof_pct=15.0,
                bound="memory" if i % 3 else "latency", peak_dtype="fp32", peak_tflops=8.1,
                estimated=i % 5 == 0, over_roof={"text": "faster than DRAM"} if i % 11 == 0 else None)
            for i in range(n)]


def test_html_lazy_table():
    """Over LAZY_ROWS rows: the first STATIC_ROWS as HTML, every row in the ops-rows block, which
    unpacks to the same cells (text, title, class) the HTML rows have, sort keys to 7 digits."""
    from traceana.render.html import _row
    from traceana.render.ops_table import LAZY_ROWS, STATIC_ROWS

    a = make_analysis()
    a["ops"] = _many_ops(LAZY_ROWS + 3)
    page = render_html(a)
    assert '<table id="ops-table" class="ops lazy" aria-rowcount="2004">' in page  # 2003 rows + the header
    assert page.count('<tr id="op-') == STATIC_ROWS == 100
    assert "shows the first 100 of 2,003 op signatures" in page  # the <noscript> note
    assert '<tfoot class="sizer" aria-hidden="true">' in page
    assert "<script>alert" not in page
    block = _lazy_block(page)
    rows = _unpack(block)
    assert len(rows) == 2003 and rows[0]["id"] == "op0" and rows[-1]["id"] == "op2002"
    # a repeated text is written once: "aten::op1" names the 286 ops i % 7 == 1 below 2003 (1, 8, …, 1996)
    assert block["strings"].count("aten::op1") == 1
    ref = block["strings"].index("aten::op1")
    assert sum(1 for r in block["rows"] if r[4][0][0] == ref) == 286
    for i in (0, 1, 5, 11, 2001, 2002):
        want = _row(a["ops"][i], f"op{i}")
        got = rows[i]
        assert (got["bound"], got["family"]) == (want["bound"], want["family"])
        assert (got["full"] or got["cells"][0]["t"]) == want["full"]
        for g, w in zip(got["cells"], want["cells"], strict=True):
            assert (g["t"], g["title"], g["cls"]) == (w["t"], w["title"], w["cls"])
            assert g["v"] == (None if not w["v"] else pytest.approx(float(w["v"]), rel=5e-7))
    hostile = rows[2001]
    assert hostile["full"] == HOSTILE  # decoded intact, shown through textContent
    assert hostile["cells"][0]["title"].startswith(HOSTILE)
    assert rows[0]["cells"][12]["cls"] == "num over" and "↑" in rows[0]["cells"][12]["t"]  # op 0: i % 11 == 0
    assert rows[5]["cells"][6]["t"].startswith("≈ ")  # op 5 is estimated: 64 * 6 = 384 FLOPs, "≈ 384"


def test_html_small_table_is_plain_html():
    page = render_html(make_analysis())
    assert 'class="ops"' in page and 'id="ops-rows"' not in page and "<tfoot" not in page


def test_html_table_body_is_the_templates_rows():
    """The ops table's <tbody> is written by ops_table.table_body, not a template loop: each row and cell
    exactly as jinja's autoescaped loop wrote them (markupsafe's escapes, attribute order, indentation)."""
    from markupsafe import escape

    from traceana.render.html import _row
    from traceana.render.ops_table import _escape, table_body

    for s in (HOSTILE, "&amp; a<b>c 'q' \"d\"", "", "plain", "x\u00e9\u2192\u00a0×", 7, 2.5):
        assert _escape(s) == str(escape(s))
    a = make_analysis()
    a["ops"] = _many_ops(12)
    a["ops"][3]["name"] = HOSTILE
    rows = [_row(op, f"op{i}") for i, op in enumerate(a["ops"])]
    loop = environment().from_string(
        "{% for row in rows %}\n"
        "      {% set first = loop.first %}\n"
        '      <tr id="op-{{ row.id }}" data-bound="{{ row.bound }}" data-family="{{ row.family }}"'
        ' data-search="{{ row.search }}">\n'
        "        {% for c in row.cells %}\n"
        '        <td{% if first and loop.first %} elementtiming="ops-table"{% endif %}{% if c.cls %} class="{{ c.cls }}"'
        '{% endif %}{% if c.v %} data-v="{{ c.v }}"{% endif %}{% if c.title %} title="{{ c.title }}"{% endif %}>'
        "{{ c.t }}</td>\n"
        "        {% endfor %}\n"
        "      </tr>\n"
        "    {% endfor %}\n")
    body = str(table_body(rows))
    assert body == loop.render(rows=rows)
    assert body.count("<tr ") == 12 and body.count("<td") == 12 * 16  # 16 columns
    assert body.count('elementtiming="ops-table"') == 1
    assert "<script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    page = render_html(a)
    assert body in page  # the page's rows are these

def test_html_caps_table_rows(monkeypatch):
    import traceana.render.html as html_mod

    monkeypatch.setattr(html_mod, "MAX_TABLE_ROWS", 2100)
    a = make_analysis()
    a["ops"] = _many_ops(2105)
    page = render_html(a)
    assert len(_lazy_block(page)["rows"]) == 2100
    assert "Showing the first 2,100 of 2,105" in page


def test_html_survives_missing_and_malformed_fields():
    for a in ({}, {"ops": None, "device": None, "coverage": "x", "breakdown": []},
              {"ops": [None, 3, {"name": None, "bound": "weird", "id": "a b\"<"}],
               "device": {"peak_tflops": {"fp32": None}, "dram_gbps": float("nan")},
               "findings": [{"ops": None}], "explanations": [{"lines": None}]}):
        page = render_html(a)
        assert "</html>" in page
        _data_block(page)


def test_static_assets_cannot_close_their_elements():
    css, js = str(include_file("report.css")), str(include_file("report.js"))
    assert "</style" not in css.lower() and "</" not in js
    assert "http" not in js + css
    assert template_dir().joinpath("report.html.j2").is_file()
    assert environment().autoescape is True


def test_tojson_escapes_script_close():
    out = str(environment().from_string("{{ x|tojson }}").render(x={"s": "</script><!--&'"}))
    assert "<" not in out and ">" not in out and "&" not in out and "'" not in out
    assert json.loads(out) == {"s": "</script><!--&'"}
    # the escapes are made on the UTF-8 bytes: a multi-byte character and a backslash before < stay whole
    tricky = {"é<\\": "\\</script>", "ü": ["<>", "\u2028"]}
    out = str(environment().from_string("{{ x|tojson }}").render(x=tricky))
    assert "<" not in out and json.loads(out) == tricky


# -------------------------------------------------------------------- markdown


def _unescaped_pipes(line: str) -> int:
    count, i = 0, 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] == "|":
            count += 1
        i += 1
    return count


def test_markdown_table_cells_are_stable():
    md = render_markdown(make_analysis())
    table = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert table
    blocks, current = [], []
    for ln in md.splitlines() + [""]:
        if ln.startswith("|"):
            current.append(ln)
        elif current:
            blocks.append(current)
            current = []
    for block in blocks:
        counts = {_unescaped_pipes(ln) for ln in block}
        assert len(counts) == 1, block
    ops_block = next(b for b in blocks if b[0].startswith("| op "))
    assert len(ops_block) == 2 + 5 and _unescaped_pipes(ops_block[0]) == 7
    # outside code fences (where text is literal) no raw tag survives
    prose = re.sub(r"^(`{3,})text\n.*?^\1$", "", md, flags=re.S | re.M)
    assert "```" not in prose
    assert "<script" not in prose and "&lt;script&gt;" in prose
    assert "<script>alert(1)</script>" in md  # shown literally inside the fenced block


def test_markdown_content():
    md = render_markdown(make_analysis(), long=True)
    assert md.startswith("# traceana: ")
    assert "**Where the time went:**" in md and "compute throughput" in md
    assert "Tesla T4" in md and "320 GB/s" in md and "fp32 8.10" in md
    # dtypes as people write them: 'float' is fp32, the Scalar argument is not a tensor
    assert "| aten::pow | 8192×8192, () | fp32 | 2.167 ms | 77.4% | memory |" in md
    assert "536870912 B / 320 GB/s = 1677.7 µs" in md
    assert "``````text" in md  # fence longer than the 5-backtick run in the explanation
    assert "## Coverage" in md and "## Warnings" in md


def test_md_text_escapes():
    assert md_text("a|b`c<d>\n# e") == "a\\|b\\`c&lt;d&gt; # e"
    assert md_text("# title") == "# title"  # mid-line: harmless
    assert md_text("# title", line_start=True) == "\\# title"
    assert md_text("12. item", line_start=True) == "12\\. item"
    assert md_text("99.0% of", line_start=False) == "99.0% of"
    assert md_text("[x](javascript:y)") == "\\[x\\](javascript:y)"


def test_markdown_stays_short():
    a = make_analysis()
    a["ops"] = [_op(i, "aten::" + "x" * 5000, input_dims=[[1] * 500]) for i in range(500)]
    a["explanations"] = [{"op": "op1", "title": "t" * 5000, "lines": ["y" * 5000] * 500}] * 50
    a["warnings"] = ["w" * 5000] * 500
    md = render_markdown(a)
    assert len(md) < MAX_CHARS


# ------------------------------------------------------------------------ JSON


def test_json_round_trips_and_nan_is_null():
    a = make_analysis()
    out = render_json(a)
    back = json.loads(out)
    assert back["ops"][4]["device_time_us"] is None and back["ops"][4]["flops"] is None
    assert back["ops"][1] == a["ops"][1]
    assert back["trace"]["file"] == a["trace"]["file"]
    assert "NaN" not in out and "Infinity" not in out
    assert render_json(back) == out


# ---------------------------------------------------------------- all formats


@pytest.mark.parametrize("fmt", ["html", "md", "json"])
def test_render_is_deterministic(fmt):
    a = make_analysis()
    first = render(a, fmt)
    assert render(copy.deepcopy(a), fmt) == first
    # key order of the input does not matter
    shuffled = json.loads(json.dumps(a), object_pairs_hook=lambda kv: dict(reversed(kv)))
    assert render(shuffled, fmt) == first


@pytest.mark.parametrize("fmt", ["html", "md", "json"])
def test_render_empty_analysis(fmt):
    assert render({}, fmt)


def test_html_is_well_formed_enough():
    class Checker(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.ids = []

        def handle_starttag(self, tag, attrs):
            self.ids += [v for k, v in attrs if k == "id"]

    c = Checker()
    c.feed(render_html(make_analysis()))
    assert len(c.ids) == len(set(c.ids))


def test_format_for_path():
    assert format_for_path("r.html") == "html"
    assert format_for_path("r.HTM") == "html"
    assert format_for_path("out/r.md") == "md"
    assert format_for_path("r.markdown") == "md"
    assert format_for_path("a.json") == "json"
    with pytest.raises(BadInput, match=r"\.txt"):
        format_for_path("r.txt")
    with pytest.raises(BadInput):
        format_for_path("noext")
    with pytest.raises(BadInput):
        render({}, "pdf")


def test_kernel_tooltip_names_calls_and_time_and_huge_numbers_are_not_numbers():
    from traceana.units import num

    a = make_analysis()
    a["ops"][0]["kernels"] = [{"name": "pow_kernel", "time_us": 12.5, "count": 3}]
    page = render_html(a)
    assert "pow_kernel (3 calls, 12.5 µs)" in page and "{&#39;name&#39;" not in page
    assert num(10**400) is None  # beyond float: not a number, never an OverflowError


def test_template_cache_folder_and_a_cache_that_cannot_be_written(tmp_path, monkeypatch):
    import subprocess
    import sys

    from tests.conftest import REPO
    from traceana.render.templates import cache_dir

    assert cache_dir({"TRACEANA_CACHE_DIR": "off"}) is None
    assert cache_dir({"XDG_CACHE_HOME": "relative/dir"}) is None  # never a folder under the cwd
    assert cache_dir({"XDG_CACHE_HOME": "/c"}).startswith("/c/traceana/templates-")
    assert cache_dir({"TRACEANA_CACHE_DIR": str(tmp_path)}).startswith(str(tmp_path))
    # a file where the cache folder should be: the report still renders, byte for byte the same
    blocked = tmp_path / "blocked"
    blocked.write_text("not a folder")
    code = ("import sys; from tests.test_render import make_analysis; from traceana.render.html import "
            "render_html; sys.stdout.write(render_html(make_analysis()))")
    outs = []
    for root in (str(blocked), str(tmp_path / "cache"), str(tmp_path / "cache")):  # blocked, cold, warm
        env = {**__import__("os").environ, "TRACEANA_CACHE_DIR": root}
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        outs.append(p.stdout)
    assert outs[0] == outs[1] == outs[2] and "<html" in outs[0]
    assert list((tmp_path / "cache").glob("templates-*/*.cache"))  # the compiled template was kept
