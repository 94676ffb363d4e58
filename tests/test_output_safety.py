"""The user's files are safe: traceana overwrites only what it wrote itself, writes through a
temporary file of its own (unique, created exclusively, never through a link) renamed into place,
and never opens the input for writing.

"Written by traceana" is a marker traceana alone writes, in a place only traceana puts it
(traceana/output/ownership.py): the HTML generator meta right after the fixed head, markdown's last
line, a JSON document's top-level "schema", the SVG comment after the root tag, the PNG tEXt chunk
right after IHDR. A file that merely mentions traceana, or is empty, is not traceana's.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLES
from tests.rank_traces import make_rank_dir
from traceana.cli import main
from traceana.output.ownership import written_by_traceana

T4 = str(SAMPLES / "t4_seed_pow_mul.json")


def sha(p) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def refused(args: list[str], capsys) -> str:
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "not written by traceana" in err and "--force" in err
    return err


# ------------------------------------------------------------------ a substring is not a marker

@pytest.mark.parametrize("name, content", [
    ("notes.md", "# my notes\n\nI profile with traceana; see `traceana report`.\n"),
    ("notes.md", "# traceana: notes on how we use it\n"),  # the report's own title line, but a user's file
    ("notes.html", '<html><body><meta name="generator" content="traceana 0.1">notes</body></html>\n'),
    ("deps.json", '{"deps": {"schema": "traceana.analysis/1"}, "name": "x"}\n'),  # nested, not top level
    ("deps.json", '{\n  "project": {\n    "dependencies": ["traceana"]\n  }\n}\n'),
])
def test_a_file_that_mentions_traceana_is_not_overwritten(tmp_path, capsys, name, content):
    out = tmp_path / name
    out.write_text(content)
    refused(["report", T4, "-o", str(out), "-q"], capsys)
    assert out.read_text() == content


def test_a_pyproject_is_not_overwritten_by_svg(tmp_path, capsys):
    """--svg takes any path: a pyproject.toml that depends on traceana is the user's."""
    py = tmp_path / "pyproject.toml"
    py.write_text('[project]\nname = "x"\ndependencies = ["traceana>=0.1"]\n')
    before = sha(py)
    refused(["report", T4, "-o", str(tmp_path / "r.json"), "-q", "--svg", str(py)], capsys)
    assert sha(py) == before


def test_a_whitespace_file_is_not_traceanas(tmp_path, capsys):
    out = tmp_path / "r.html"
    out.write_text("\n  \n")
    assert not written_by_traceana(str(out))
    refused(["report", T4, "-o", str(out), "-q"], capsys)
    assert out.read_text() == "\n  \n"
    assert main(["report", T4, "-o", str(out), "-q", "--force"]) == 0
    assert written_by_traceana(str(out))


def test_an_empty_file_holds_nothing_to_lose(tmp_path):
    """`out=$(mktemp --suffix=.json); traceana report T -o "$out"`: a file of 0 bytes is not traceana's,
    but writing over it loses nothing, so no --force is needed."""
    out = tmp_path / "r.json"
    out.write_text("")
    assert not written_by_traceana(str(out))
    assert main(["report", T4, "-o", str(out), "-q"]) == 0
    assert written_by_traceana(str(out)) and out.stat().st_size > 0


# ------------------------------------------------------------------ every format traceana writes is its own

def _all_outputs(tmp_path: Path) -> list[Path]:
    """One file of every kind traceana writes: report, diff and cross-rank report in html/md/json,
    the SVG chart and a calibrate profile."""
    outs = []
    for ext in ("html", "md", "json"):
        outs.append(tmp_path / f"r.{ext}")
        assert main(["report", T4, "-o", str(outs[-1]), "-q"]) == 0
        outs.append(tmp_path / f"d.{ext}")
        assert main(["diff", T4, T4, "-o", str(outs[-1])]) == 0
    svg = tmp_path / "c.svg"
    assert main(["report", T4, "-o", str(tmp_path / "r.json"), "-q", "--svg", str(svg)]) == 0
    outs.append(svg)
    ranks = tmp_path / "ranks"
    make_rank_dir(ranks, n=2)
    assert main(["report", str(ranks), "-o", str(tmp_path / "k.json"), "-q", "--jobs", "1"]) == 0
    outs.append(tmp_path / "k.json")
    for ext in ("html", "md"):
        outs.append(tmp_path / f"k.{ext}")
        assert main(["render", str(tmp_path / "k.json"), "-o", str(outs[-1]), "-q"]) == 0
    from traceana.measure.calibrate.run import SCHEMA

    prof = tmp_path / "p.json"  # the bytes `calibrate` writes (json.dumps indent=2, sorted keys)
    prof.write_text(json.dumps({"schema": SCHEMA, "device": {"kind": "cpu"}, "gemm": {}}, indent=2,
                               sort_keys=True) + "\n")
    outs.append(prof)
    return outs


def test_every_output_is_recognised_and_rewritten_without_force(tmp_path, capsys):
    outs = _all_outputs(tmp_path)
    for p in outs:
        assert written_by_traceana(str(p)), p
    capsys.readouterr()
    # and rewritten in turn: a report over a diff, markdown over html, ... (each is traceana's)
    for p in outs:
        target = tmp_path / ("again" + p.suffix)
        os.replace(p, target)
        args = ["report", T4, "-o", str(target), "-q"] if p.suffix != ".svg" else \
            ["report", T4, "-o", str(tmp_path / "r2.json"), "-q", "--svg", str(target)]
        assert main(args) == 0, (p, capsys.readouterr().err)


def test_a_marker_out_of_place_is_not_ours(tmp_path):
    """The markers count only where traceana puts them."""
    md = tmp_path / "r.md"
    assert main(["report", T4, "-o", str(md), "-q"]) == 0
    text = md.read_text()
    marker = text.rstrip("\n").splitlines()[-1]
    assert marker.startswith("<!-- ") and "traceana" in marker
    cases = {
        "md-marker-then-notes.md": text + "\nmy notes below the report\n",
        "md-marker-first.md": marker + "\n# notes\n",
        "html-late-generator.html": "<!DOCTYPE html><html><head><title>x</title>\n"
                                    '<meta name="generator" content="traceana 0.1.0">\n</head></html>\n',
        "svg-comment-late.svg": '<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg">\n'
                                "<title>mine</title>\n<!-- traceana roofline chart -->\n</svg>\n",
        "json-unterminated.json": '{\n "schema": "traceana.analysis/1"\n',
        "json-indent-mismatch.json": '{\n  "a": {\n "schema": "traceana.analysis/1"\n  }\n}\n',
        "png-text-late.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + bytes(13) + b"CRC!"
                             + b"\x00\x00\x00\x00IDAT\x00\x00\x00\x00"
                             + b"\x00\x00\x00\x11tEXtSoftware\x00traceana\x00\x00\x00\x00",
    }
    for name, content in cases.items():
        p = tmp_path / name
        (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
        assert not written_by_traceana(str(p)), name


# ------------------------------------------------------------------ the temporary file

def test_a_planted_link_at_the_old_temporary_name_is_not_followed(tmp_path, capsys):
    """Before: the report went to the fixed name OUT.tmp-traceana, opened with open(.., "wb"):
    a symlink there made traceana write through it, over the input trace."""
    trace = tmp_path / "trace.json"
    trace.write_bytes(Path(T4).read_bytes())
    before = sha(trace)
    out = tmp_path / "r.html"
    (tmp_path / "r.html.tmp-traceana").symlink_to(trace)
    assert main(["report", str(trace), "-o", str(out), "-q"]) == 0, capsys.readouterr().err
    assert sha(trace) == before
    assert os.path.islink(tmp_path / "r.html.tmp-traceana")  # not ours: left alone
    assert written_by_traceana(str(out)) and not out.is_symlink()
    # nothing else was left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.html.tmp-traceana", "trace.json"]


def test_temporary_files_are_unique_exclusive_and_in_the_target_directory(tmp_path, monkeypatch):
    from traceana.output import safe_write

    seen = []
    real_open = os.open

    def spy(path, flags, *a, **k):
        seen.append((os.fspath(path), flags))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(safe_write.os, "open", spy)
    safe_write.write_bytes(str(tmp_path / "a.html"), b"x")
    safe_write.write_bytes(str(tmp_path / "a.html"), b"y")
    assert len(seen) == 2 and seen[0][0] != seen[1][0]
    for path, flags in seen:
        assert os.path.dirname(path) == str(tmp_path)
        assert flags & os.O_CREAT and flags & os.O_EXCL and flags & os.O_NOFOLLOW
    assert (tmp_path / "a.html").read_bytes() == b"y"
    assert os.listdir(tmp_path) == ["a.html"]


def test_the_input_is_never_opened_for_writing(tmp_path):
    """Every open() of the run is audited (sys.addaudithook): none of them writes the input."""
    trace = tmp_path / "trace.json"
    trace.write_bytes(Path(T4).read_bytes())
    for fmt in ("html", "md", "json"):  # links planted at the names traceana once used for its temporary files
        (tmp_path / f"r.{fmt}.tmp-traceana").symlink_to(trace)
    code = f"""
import os, sys
from traceana.cli import main
bad = []
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
def hook(event, args):
    if event == "open" and args[0] is not None and not isinstance(args[0], int):
        path, mode, flags = args
        writes = (mode is not None and any(c in mode for c in "wax+")) or bool((flags or 0) & WRITE)
        if writes and os.path.exists(path) and os.path.samefile(path, {str(trace)!r}):
            bad.append((path, mode, flags))
sys.addaudithook(hook)
for fmt in ("html", "md", "json"):
    assert main(["report", {str(trace)!r}, "-o", {str(tmp_path)!r} + "/r." + fmt, "-q"]) == 0
assert main(["report", {str(trace)!r}, "-o", {str(trace)!r}, "-q", "--force"]) == 2
print("BAD", bad)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    assert "BAD []" in r.stdout, r.stdout


def test_the_temporary_file_is_removed_on_a_signal(tmp_path):
    """SIGTERM (or SIGHUP, SIGINT) while the report is being written: the process dies of the
    signal and leaves neither the temporary file nor a half-written report."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        out = tmp_path / f"r{int(sig)}.html"
        code = f"""
import os, signal
from traceana.output import safe_write
real = safe_write._write_all
def slow(fd, data):
    real(fd, data[:10])
    os.kill(os.getpid(), {int(sig)})  # the signal arrives halfway through the write
    real(fd, data[10:])
safe_write._write_all = slow
safe_write.write_bytes({str(out)!r}, b"<!DOCTYPE html>" * 1000)
print("survived")
"""
        # the child starts with the signal's default action: a suite run in the background (a shell's `&`)
        # has SIGINT ignored, which the child would inherit, and an ignored signal is rightly left alone
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(REPO)},
                           preexec_fn=lambda s=sig: signal.signal(s, signal.SIG_DFL))
        assert r.returncode == -sig, (sig, r.returncode, r.stderr)
        assert "survived" not in r.stdout
        assert os.listdir(tmp_path) == [], (sig, os.listdir(tmp_path))


def test_a_failed_write_leaves_the_old_report(tmp_path, monkeypatch):
    from traceana.output import safe_write
    from traceana.errors import BadInput

    out = tmp_path / "r.html"
    out.write_bytes(b"old")

    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safe_write, "_write_all", full)
    with pytest.raises(BadInput, match="No space left"):
        safe_write.write_bytes(str(out), b"new")
    assert out.read_bytes() == b"old" and os.listdir(tmp_path) == ["r.html"]


# ------------------------------------------------------------------ -o through a symlink

def test_output_through_a_symlink_writes_its_target(tmp_path, capsys):
    """A link to a report traceana wrote: the target is rewritten and the link stays a link."""
    real = tmp_path / "reports" / "latest.html"
    real.parent.mkdir()
    assert main(["report", T4, "-o", str(real), "-q"]) == 0
    link = tmp_path / "r.html"
    link.symlink_to(real)
    os.utime(real, (0, 0))
    assert main(["report", T4, "-o", str(link), "-q"]) == 0, capsys.readouterr().err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.stat().st_mtime > 0 and written_by_traceana(str(real))
    assert sorted(os.listdir(real.parent)) == ["latest.html"]


def test_output_through_a_symlink_to_a_users_file_is_refused(tmp_path, capsys):
    user = tmp_path / "notes.txt"
    user.write_text("mine\n")
    link = tmp_path / "r.md"
    link.symlink_to(user)
    refused(["report", T4, "-o", str(link), "-q"], capsys)
    assert link.is_symlink() and user.read_text() == "mine\n"
    # --force: the link's target is written, the link is not replaced
    assert main(["report", T4, "-o", str(link), "-q", "--force"]) == 0
    assert link.is_symlink() and written_by_traceana(str(user))


def test_pieces_are_written_as_they_come_and_an_error_keeps_the_old_file(tmp_path, capsys):
    """write_pieces (the JSON report's writer): the file holds the pieces joined, a lone surrogate as
    U+FFFD; a piece that fails leaves the old file untouched and no temporary file behind."""
    from traceana.output.safe_write import write_pieces

    out = tmp_path / "r.json"
    out.write_text("old")
    made = []

    def pieces():
        for i in range(5):
            made.append(i)
            yield f"[{i}]" * 300_000  # 900,000 characters a piece: one 1 MB batch holds two
    write_pieces(str(out), pieces())
    assert out.read_text() == "".join(f"[{i}]" * 300_000 for i in range(5)) and made == [0, 1, 2, 3, 4]

    def failing():
        yield "x\udcff"
        raise ValueError("boom")
    with pytest.raises(ValueError):
        write_pieces(str(out), failing())
    assert out.read_text().startswith("[0]") and sorted(os.listdir(tmp_path)) == ["r.json"]
    write_pieces("-", iter(["a\udcff", "b"]))
    assert capsys.readouterr().out == "a\ufffdb"


def test_the_streamed_json_report_is_the_rendered_one(tmp_path):
    """`report -o x.json` writes json_pieces as they come: the same text render_json makes whole."""
    from traceana.analysis import analyze
    from traceana.render.json_out import render_json

    trace = str(SAMPLES / "t4_seed_pow_mul.json")
    out = tmp_path / "r.json"
    assert main(["report", trace, "-o", str(out), "-q"]) == 0
    got = json.loads(out.read_text())
    want = json.loads(render_json(analyze(trace)))
    for doc in (got, want):  # the run's own clock readings differ between two runs
        doc.pop("timing", None)
        doc.pop("generated", None)
        # the CLI turns the meta fallback on when torch is already imported (another test file did), the API not
        doc["coverage"].pop("meta")
    assert got == want
