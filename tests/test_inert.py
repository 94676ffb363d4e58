"""Strings from a trace or a file name are inert in every output (issue 24.2): markdown (the PR
comment, the long form, the diff, the cross-rank report) rendered the way GitHub renders it
makes no link, image, HTML tag, mention, issue reference or autolink and keeps every table's
columns; the terminal gets no control sequence; the HTML page no markup.

Markdown goes through GitHub's own renderer (cmark-gfm, via the `cmarkgfm` package, with the
autolink, table and tag-filter extensions GitHub uses); mentions and issue references are made
by GitHub after that, from the text, so the test reads the text nodes for them.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from tests import synth as s
from tests.mdlint import problems
from tests.rank_traces import make_rank_dir
from traceana.cli import main
from traceana.render.md import md_text
from traceana.render.terminal import report_summary, term_text

# Names an attacker would put in a trace or a file name.
HOSTILE = [
    "[click for details](https://attacker.example/phish)",
    "![x](https://attacker.example/pixel.png)",
    "@someone please look",
    "<img src=x onerror=alert(1)>",
    "see #123 and org/repo#7",
    "www.attacker.example/x and mail me at user@attacker.example",
    "`tick` | pipe\nnew line",
    "<https://attacker.example/auto>",
    "$\\href{https://attacker.example}{math}$",
]
RANK_FILES = ["[evil](https:attacker.example).json", "esc\x1b[31mred@someone #9.json"]
# an ANSI/OSC sequence in a name that reaches the terminal from a saved analysis
ESC_NAME = "\x1b]0;pwned\x07\x1b[2J\x9b31m@root"


def hostile_trace() -> dict:
    ev = []
    for i, name in enumerate(HOSTILE):
        t = 100.0 * i
        ev.append(s.op(name, t, 50, ext=i + 1, dims=[[64, 64], [64, 64]], types=["float", "float"]))
        ev.append(s.launch(t + 1, 100 + i, i + 1))
        ev.append(s.kernel(name + " kernel", t + 5, 20 + i, 100 + i, i + 1))
    return s.trace(ev)


class Tags(HTMLParser):
    """Every tag of an HTML fragment, and its text nodes outside code (where GitHub links nothing)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.texts: list[str] = []
        self.code = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self.code += tag in ("code", "pre")

    def handle_endtag(self, tag):
        self.code -= tag in ("code", "pre")

    def handle_data(self, data):
        if not self.code:
            self.texts.append(data)


# what GitHub's markdown may make from our own markup; anything else came from a name
ALLOWED = {"p", "h1", "h2", "h3", "h4", "table", "thead", "tbody", "tr", "th", "td", "ul", "ol", "li", "strong",
           "em", "code", "pre", "details", "summary", "sub", "br", "blockquote", "hr"}
LIVE_TEXT = re.compile(r"@[A-Za-z0-9]|#\d|[A-Za-z]+://|\bwww\.|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def assert_inert_markdown(md: str) -> None:
    assert problems(md) == []  # tables keep their columns, fences and <details> close
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", md)
    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    html = cmarkgfm.github_flavored_markdown_to_html(md, options=Options.CMARK_OPT_UNSAFE)
    page = Tags()
    page.feed(html)
    tags = {t for t, _ in page.tags}
    assert tags <= ALLOWED, tags - ALLOWED  # no <a>, <img>, <script>, <input>…
    assert not [a for t, a in page.tags if set(a) - {"align"} and (t, a) != ("pre", {"lang": "text"})]  # no href, src…
    live = [t for t in page.texts if LIVE_TEXT.search(t)]
    assert not live, live[:5]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("inert")
    trace = d / RANK_FILES[0]
    trace.write_text(json.dumps(hostile_trace()))
    out: dict[str, str] = {}
    for name, args in (("md", []), ("md_long", ["--long"])):
        target = d / f"{name}.md"
        assert main(["report", str(trace), "-o", str(target), "-q", *args]) == 0
        out[name] = target.read_text(encoding="utf-8")
    html = d / "r.html"
    assert main(["report", str(trace), "-o", str(html), "-q"]) == 0
    out["html"] = html.read_text(encoding="utf-8")
    other = d / RANK_FILES[1]
    other.write_text(json.dumps(hostile_trace()))
    for name, args in (("diff", []), ("diff_long", ["--long"])):
        target = d / f"{name}.md"
        assert main(["diff", str(trace), str(other), "-o", str(target), "-q", *args]) == 0
        out[name] = target.read_text(encoding="utf-8")
    ranks = d / "ranks"
    make_rank_dir(ranks, n=2)
    for i, name in enumerate(RANK_FILES):
        (ranks / f"rank{i}.json.gz").rename(ranks / (name + ".gz"))
    target = d / "ranks.md"
    assert main(["report", str(ranks), "-o", str(target), "-q", "--jobs", "1"]) == 0
    out["ranks"] = target.read_text(encoding="utf-8")
    return out


@pytest.mark.parametrize("key", ["md", "md_long", "diff", "diff_long", "ranks"])
def test_markdown_of_a_hostile_trace_makes_nothing_live(outputs, key):
    md = outputs[key]
    assert_inert_markdown(md)
    if key in ("md_long", "ranks"):
        assert "attacker.example" in md  # the names are there, as text


def test_cross_rank_markdown_names_the_hostile_files_as_text(outputs):
    md = outputs["ranks"]
    assert "\\[evil\\](https:attacker.example).json" in md
    assert "esc\ufffd\\[31mred@\u200bsomeone #\u200b9.json" in md  # ESC shown as U+FFFD, @ and # inert


def test_html_of_a_hostile_trace_has_no_markup_from_it(outputs):
    page = Tags()
    page.feed(outputs["html"])
    assert not [a for t, a in page.tags if t in ("img", "a") and "attacker" in json.dumps(a)]
    assert "<img src=x" not in outputs["html"] and "&lt;img src=x onerror=alert(1)&gt;" in outputs["html"]


def test_terminal_gets_no_control_sequence(tmp_path, capsys):
    trace = tmp_path / "esc\x1b[2Jname.json"
    trace.write_text(json.dumps(hostile_trace()))
    assert main(["report", str(trace), "-o", str(tmp_path / "r.json")]) == 0
    printed = capsys.readouterr()
    # the analysis names the file with the control character as U+FFFD (the loader's cleaning)
    assert "\x1b" not in printed.out + printed.err and "esc\ufffd[2Jname.json" in printed.out
    # a saved analysis can hold anything: ESC, OSC, CSI (0x9b) and BEL in an op name and the file name
    a = json.loads((tmp_path / "r.json").read_text())
    a["ops"][0]["name"] = ESC_NAME
    a["trace"]["file"] = ESC_NAME
    a["ledger"]["sentence"] = ESC_NAME
    lines = report_summary(a, "out.md")
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f]", lines)
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m@root" in lines


def test_the_escaping_functions():
    # markdown: brackets and pipes escaped, the URL, mention, issue and address broken by a zero-width space
    assert md_text("[a](https://x.example) @me #1 a@b.c www.x.example |`") == (
        "\\[a\\](https:\u200b//x.example) @\u200bme #\u200b1 a@\u200bb.c www\u200b.x.example \\|\\`")
    assert md_text("<b>&amp;</b>\x1b") == "&lt;b&gt;&amp;amp;&lt;/b&gt;\ufffd"
    # terminal: every control character visible, one line
    assert term_text("a\x1b[31mb\nc\u202ed") == "a\\x1b[31mb\\x0ac\\u202ed"


def test_md_text_leaves_plain_names_alone():
    for name in ("aten::mm", "sm90_xmma_gemm_bf16bf16_tn", "8192×8192, ()", "50.0%", "fp32 → bf16"):
        assert md_text(name) == name.replace("_", "\\_")
