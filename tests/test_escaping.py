"""Strings from a trace are data, never markup: op, kernel, annotation, device, dtype and file
names full of `<script>`, quotes, pipes, backticks, newlines and odd unicode go end to end
(synthetic trace file -> CLI -> report) and come out inert in HTML, markdown and JSON.

Also: the HTML page carries a Content-Security-Policy that forbids network loads and
references nothing outside itself.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from tests import synth as s
from tests.conftest import REPO, SAMPLES
from traceana.cli import main
from traceana.output.ownership import MD_MARKER

EVIL = [
    '<script>alert("op")</script>',
    "</script><script>alert(2)</script>",
    '"><img src=x onerror=alert(3)>',
    "it's `code` | pipe\nnew line\r\nCR",
    "rtl\u202eevil\u2066iso\u200bzw\ufeffbom",
    "nul\u0000byte\u0007bell\u001b[31mansi",
    "lone\ud800sur",
    "{{ 7*7 }} ${x} <!-- ]]> url(http://evil.example/x.png) @import 'x';",
    "[link](javascript:alert(1)) ![img](http://evil.example/i.png) *b* _i_ # h",
    "\u2028ls\u2029ps</style><style>body{display:none}</style>",
    "| --- | --- |",
    "````\n# heading\n````",
]
# What the loader makes of them: control and bidi-override characters become U+FFFD (with a
# warning); a lone surrogate too (the JSON parser cannot represent it).
ODD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
FILE_NAME = "<b onmouseover=alert(1)>x'\"|`\u202e<!--.json"  # no "/": it is a file name


def shown(name: str) -> str:
    return ODD.sub("\ufffd", name)


def hostile_trace() -> dict:
    ev = []
    t = 0
    for i, name in enumerate(EVIL):
        if i % 2 == 0:  # a costed op whose kernel, dtype-free concrete args and annotation are hostile
            ev.append(s.op("aten::mm", t, 50, ext=i + 1, dims=[[64 * (i + 1), 64], [64, 64]],
                           concrete=["", name]))
        else:  # a hostile op name with a hostile dtype
            ev.append(s.op(name, t, 50, ext=i + 1, dims=[[64, 64], [64, 64]], types=["float", name]))
        ev.append(s.launch(t + 1, 100 + i, i + 1, name=name if i % 3 == 0 else "cudaLaunchKernel"))
        ev.append(s.kernel(name, t + 5, 20 + i, 100 + i, i + 1))
        ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": t, "dur": 60})
        t += 100
    ev.append(s.kernel(EVIL[0], t, 5, 999))  # no launch: an opaque group named after the kernel
    props = [dict(s.T4, name=EVIL[2] + " Tesla T4 " + EVIL[4])]
    return s.trace(ev, props=props, distributedInfo={"backend": EVIL[1], "rank": 0, "world_size": 1})


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("escaping")
    trace = d / FILE_NAME
    # json.dumps writes the lone surrogate as the escape "\ud800" and NUL as "\u0000"
    trace.write_text(json.dumps(hostile_trace()), encoding="utf-8")
    out = {}
    for fmt in ("html", "md", "json"):
        target = d / f"report.{fmt}"
        assert main(["report", str(trace), "-o", str(target), "-q"]) == 0
        out[fmt] = target.read_text(encoding="utf-8")  # strict UTF-8: no surrogates written
    target = d / "report-long.md"
    assert main(["report", str(trace), "-o", str(target), "-q", "--long"]) == 0
    out["md_long"] = target.read_text(encoding="utf-8")
    return out


# ------------------------------------------------------------------ HTML


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.raw: dict[str, list[str]] = {"script": [], "style": []}
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in self.raw:
            self._in = tag
            self.raw[tag].append("")

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in:
            self.raw[self._in][-1] += data
        else:
            self.text.append(data)


def parse(page: str) -> Page:
    p = Page()
    p.feed(page)
    p.close()
    return p


def test_html_has_no_injected_markup(reports):
    page = parse(reports["html"])
    names = [t for t, _ in page.tags]
    assert names.count("script") == 2 and names.count("style") == 1
    for banned in ("img", "iframe", "object", "embed", "link", "base", "form", "style2", "b"):
        assert banned not in names, banned
    # the inputs are the timeline's search box and the ops table's own text filter
    assert [a.get("id") for t, a in page.tags if t == "input"] == ["tl-search", "ops-filter"]
    for tag, attrs in page.tags:
        for k, v in attrs.items():
            assert not k.startswith("on"), (tag, k)
            assert k not in ("src", "srcset", "action", "formaction", "xlink:href"), (tag, k)
            if k == "href":
                assert v and v.startswith("#"), (tag, v)
    # the hostile strings are shown as text, intact (after the loader's U+FFFD for odd characters)
    text = "".join(page.text)
    for name in (EVIL[0], EVIL[1], EVIL[2]):
        assert shown(name) in text, name
    assert "<b onmouseover=alert(1)>x" in text  # the file name


def test_html_script_blocks_are_only_ours(reports):
    page = parse(reports["html"])
    data, code = page.raw["script"]
    assets = REPO / "templates"

    def words(*files):  # the assets pasted one after the other (blank lines between them aside)
        return [w for f in files for w in (assets / f).read_text(encoding="utf-8").split()]

    assert code.split() == words("report.js", "timeline.js")
    assert page.raw["style"][0].split() == words("report.css", "timeline.css")
    # the JSON data block cannot end the script element or open a comment
    assert not re.search(r"</|<!--|<script", data, re.I)
    points = json.loads(data)["points"]
    assert points and all(p["name"] == "aten::mm" for p in points)
    tags = [(t, a) for t, a in page.tags if t == "script"]
    assert tags[0][1] == {"type": "application/json", "id": "data"} and tags[1][1] == {}


def test_html_has_no_odd_characters(reports):
    assert not ODD.search(reports["html"])
    assert "\x00" not in reports["html"]


def test_html_csp_forbids_network_and_nothing_is_external(reports):
    page = reports["html"]
    metas = [a for t, a in parse(page).tags if t == "meta" and (a.get("http-equiv") or "").lower()
             == "content-security-policy"]
    assert len(metas) == 1
    csp = {d.split()[0]: d.split()[1:] for d in metas[0]["content"].split(";") if d.strip()}
    assert csp["default-src"] == ["'none'"]
    for directive, sources in csp.items():
        for src in sources:  # only keywords, hashes and data: images; never a host or scheme
            assert src.startswith("'") or (directive == "img-src" and src == "data:"), (directive, src)
    assert "connect-src" not in csp or csp["connect-src"] == ["'none'"]
    # the CSP comes before anything it governs
    assert page.index("Content-Security-Policy") < min(page.index("<style"), page.index("<script"))
    assert not re.search(r"url\(", parse(page).raw["style"][0], re.I)
    assert not re.search(r"@import", parse(page).raw["style"][0], re.I)
    for m in re.finditer(r"href\s*=\s*[\"']?([^\"' >]*)", page, re.I):
        assert m.group(1).startswith("#"), m.group(0)


def test_sample_report_is_self_contained(tmp_path):
    out = tmp_path / "t4.html"
    assert main(["report", str(SAMPLES / "t4_seed_pow_mul.json"), "-o", str(out), "-q"]) == 0
    page = out.read_text(encoding="utf-8")
    assert "default-src 'none'" in page
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", parse(page).raw["script"][1])
    assert not re.search(r"\b(src|srcset)\s*=|url\(|@import", page, re.I)
    assert all(a["href"].startswith("#") for t, a in parse(page).tags if "href" in a)


# ------------------------------------------------------------------ markdown


FENCE = re.compile(r"^(`{3,}|~{3,})")


def md_outside_fences(md: str) -> list[str]:
    out, fence = [], None
    for line in md.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if line.strip() == fence[0] * len(line.strip()) and len(line.strip()) >= len(fence):
                fence = None
            continue
        out.append(line)
    assert fence is None, "unclosed code fence"
    return out


def unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_markdown_is_inert(reports):
    md = reports["md"]
    assert not ODD.search(md)
    lines = md_outside_fences(md)
    for line in lines:
        # no raw HTML outside code blocks but the renderer's own <details> folds and its marker line
        bare = re.sub(r"^<details><summary>[^<>]*</summary>$|^</details>$|^<sub>[^<>]*</sub>$", "", line)
        bare = "" if bare == MD_MARKER else bare
        assert "<" not in bare, line
        assert not re.search(r"(?<!\\)\]\(", line), line  # no link or image syntax
        if line.startswith("#"):  # only the renderer's own headings; a name never starts a line
            assert re.match(r"#{1,3} (traceana: |[A-Z][a-z])", line) and "heading" not in line, line
        assert not line.lstrip().startswith(("# heading", "new line", "CR", "ps", "| ---")), line
    # every table row has exactly the cells of its header
    table: int | None = None
    for line in lines:
        if line.startswith("|"):
            n = unescaped_pipes(line)
            table = n if table is None else table
            assert n == table, line
        else:
            table = None
    # the hostile names are still there, escaped (the long form has every op)
    md = reports["md_long"]
    assert "&lt;script&gt;alert(\"op\")&lt;/script&gt;" in md
    assert "it's \\`code\\` \\| pipe new line CR" in md


# ------------------------------------------------------------------ JSON


def test_json_round_trips_the_names(reports):
    a = json.loads(reports["json"])
    names = {o["name"] for o in a["ops"]}
    for i, name in enumerate(EVIL):
        if i % 2 == 1:
            assert shown(name) in names, name
    assert shown(EVIL[0]) in names  # the kernel without a launch
    kernels = {k["name"] for o in a["ops"] for k in o["kernels"]}
    assert {shown(n) for n in EVIL} <= kernels
    assert a["trace"]["file"] == shown(FILE_NAME)
    assert a["device"]["name"].startswith(shown(EVIL[2]))
    assert any("control or bidirectional-override" in w for w in a["warnings"])
    assert any("lone UTF-16 surrogates" in w for w in a["warnings"])
    # strict JSON: no NaN / Infinity, no raw control characters
    json.loads(reports["json"], parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert not re.search("[\x00-\x09\x0b-\x1f]", reports["json"])


def test_markdown_of_plain_names_is_unchanged():
    """Guard: ordinary names are not touched by the odd-character cleaning."""
    assert shown("aten::mm") == "aten::mm" and shown("void at::native::elementwise_kernel<128, 4>") \
        == "void at::native::elementwise_kernel<128, 4>"
