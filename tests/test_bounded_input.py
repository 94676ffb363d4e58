"""Memory bounded by what a trace holds, not by how far it inflates (issue 24): gzip streams of
GiBs of NUL bytes or whitespace padding are generated here (repeated gzip members of one 16 MB
block: cheap to write, 2 GiB to inflate) and run through `traceana report` as whole processes,
with the C scanner and with the Python loader, peak RSS measured by wait4."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests import synth as s

BLOCK = 16 << 20


def _padded(path, head: bytes, fill: bytes, gib: float, tail: bytes = b"") -> None:
    """head, then gib GiB of `fill` bytes, then tail, as gzip members (the fill: one member
    compressed once and written again and again, each inflating to 16 MB)."""
    member = gzip.compress(fill * BLOCK, 1)
    with open(path, "wb") as fh:
        if head:
            fh.write(gzip.compress(head))
        for _ in range(int(gib * (1 << 30)) // BLOCK):
            fh.write(member)
        if tail:
            fh.write(gzip.compress(tail))


#: runs traceana in the child and writes its peak RSS (VmHWM: this process's own, from exec on)
#: at exit. (wait4's ru_maxrss would not do: a child forked from a large pytest process starts
#: with the parent's high-water mark.)
_PEAK = """
import atexit, runpy, sys
def peak(out=sys.argv[1]):
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            open(out, "w").write(line.split()[1])
atexit.register(peak)
sys.argv = ["traceana", *sys.argv[2:]]
runpy.run_module("traceana", run_name="__main__")
"""


def _run(args, tmp_path, pure: bool = False) -> tuple[int, float, float, str]:
    """(exit code, peak RSS in MB, seconds, stderr) of `traceana ARGS` in its own process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRACEANA_PURE_PYTHON", None)
    if pure:
        env["TRACEANA_PURE_PYTHON"] = "1"
    peak = tmp_path / "peak.txt"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _PEAK, str(peak), *map(str, args)], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - t0
    return proc.returncode, int(peak.read_text()) / 1024, seconds, proc.stderr


def _report(path, tmp_path, pure: bool) -> tuple[int, float, float, str]:
    """(exit code, peak RSS in MB, seconds, stderr) of `traceana report path -o x.md`."""
    out = tmp_path / ("py.md" if pure else "c.md")
    return _run(["report", path, "-o", out, "--force", "-q"], tmp_path, pure)


def _trace_text() -> bytes:
    ev = [s.op("aten::mm", 10, 50, ext=1, dims=[[64, 32], [32, 128]]), s.launch(20, corr=1, ext=1),
          s.kernel("ampere_sgemm_64x64_nn", 30, 25, corr=1)]
    return json.dumps(s.trace(ev)).encode()


@pytest.mark.parametrize("pure", [False, True], ids=["scanner", "python"])
def test_gigabytes_of_nul_bytes_are_refused_at_once(tmp_path, pure):
    """2 GiB of NUL bytes gzip'd (~2 MB): no JSON text holds a NUL byte, so reading stops at
    the first one: one clear line, exit 2, in seconds and well under 300 MB (before: the
    Python loader inflated all of it, 2 GiB + its copy)."""
    path = tmp_path / "zeros.json.gz"
    _padded(path, b"", b"\0", 2)
    code, rss, seconds, err = _report(path, tmp_path, pure)
    assert code == 2 and "not valid JSON" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert rss < 300, rss
    assert seconds < 30, seconds


@pytest.mark.parametrize("pure", [False, True], ids=["scanner", "python"])
def test_valid_json_padded_with_gigabytes_of_whitespace_is_read(tmp_path, pure):
    """A trace followed by 2 GiB of newlines (gzip'd): both loaders read the trace, RSS stays
    bounded (the Python loader keeps 1 MB of a whitespace run: prefetch.MAX_BLANK)."""
    path = tmp_path / "padded.json.gz"
    _padded(path, _trace_text(), b"\n", 2)
    code, rss, seconds, err = _report(path, tmp_path, pure)
    assert code == 0, err
    assert "aten::mm" in (tmp_path / ("py.md" if pure else "c.md")).read_text()
    assert rss < 300, rss


@pytest.mark.parametrize("pure", [False, True], ids=["scanner", "python"])
def test_valid_json_then_nul_padding_is_refused(tmp_path, pure):
    """The trace, then 1 GiB of NUL bytes: not JSON (trailing characters), said in one line."""
    path = tmp_path / "nul_tail.json.gz"
    _padded(path, _trace_text(), b"\0", 1)
    code, rss, seconds, err = _report(path, tmp_path, pure)
    assert code == 2 and "not valid JSON" in err and len(err.strip().splitlines()) == 1, err
    assert rss < 300, rss


def test_reader_keeps_what_the_text_says(tmp_path, monkeypatch):
    """prefetch.read_text, in 64 KB pieces: a run of whitespace padding over whole pieces keeps
    MAX_BLANK of it; a run of spaces inside a string is kept whole; a BOM is dropped; a text that
    does not start like JSON stops at once."""
    from traceana.load import prefetch

    monkeypatch.setattr(prefetch, "PIECE", 1 << 16)
    monkeypatch.setattr(prefetch, "MAX_BLANK", 1 << 16)
    p = tmp_path / "a.json"
    run = b" " * (3 << 20)
    p.write_bytes(b"\xef\xbb\xbf{\"a\": \"q\\\"\", " + run + b"\"b\": \"x" + run + b"\"}\n" + run)
    text = prefetch.read_text(str(p))
    assert text.startswith(b'{"a": "q\\"",')
    # the string's 3 MiB of spaces kept (an escaped quote before it does not fool the check)
    assert json.loads(bytes(text)) == {"a": 'q"', "b": "x" + " " * (3 << 20)}
    # the two runs between tokens keep at most MAX_BLANK + a piece each: 3 MiB + 17 + < 4 * 64 KB
    assert len(text) < (3 << 20) + 17 + 4 * (1 << 16), len(text)
    p.write_bytes(b"  garbage" + b"x" * (64 << 20))
    assert len(prefetch.read_text(str(p))) < 1 << 16  # stopped at the first byte that starts no JSON


def test_a_syntax_error_is_refused_without_building_the_document(tmp_path, monkeypatch):
    """A trailing comma no normalising mends: said from msgspec's own error at once, the
    standard library's json.loads (the whole document as Python objects: 5.9 GB for a 790 MB
    trace) never runs; NaN literals still take that path (test_bad_input covers them)."""
    from traceana.errors import BadInput
    from traceana.load import decode
    from traceana.load.reader import load_trace

    def never(*args, **kwargs):
        raise AssertionError("normalised a text that no normalising can mend")

    monkeypatch.setattr(decode, "_normalize", never)
    monkeypatch.setenv("TRACEANA_PURE_PYTHON", "1")
    text = _trace_text().decode()
    path = tmp_path / "comma.json"
    path.write_text(text[:-2] + ",]}")  # ...}] } -> ...},]}
    with pytest.raises(BadInput, match=r"not valid JSON \(JSON is malformed: trailing comma in array"):
        load_trace(str(path))


def _big_trace(path, copies: int, tail: str) -> None:
    ev = json.loads(_trace_text())["traceEvents"]
    events = []
    for i in range(copies):
        for e in ev:
            e = dict(e, ts=e["ts"] + 100 * i, args=dict(e["args"]))
            for k in ("External id", "correlation"):
                if k in e["args"]:
                    e["args"][k] += 10 * i
            events.append(e)
    text = json.dumps(s.trace(events))
    path.write_text(text[:-2] + tail)


@pytest.mark.parametrize("pure", [False, True], ids=["scanner", "python"])
def test_refusing_a_bad_file_costs_no_more_than_reading_a_good_one(tmp_path, pure):
    """A 20 MB trace with one trailing comma at its end: refused with no more memory than the
    valid file takes to analyse with the same loader (before: json.loads of the whole text after
    msgspec failed, ~7x the text in RSS). With the scanner: it streams a valid file (70 MB here);
    a bad one it scans to the error (its columns so far), then the Python loader reads the text
    once whole to name the error: within twice the text's size more (measured: 101 vs 70 MB)."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    _big_trace(good, 40_000, "]}")
    _big_trace(bad, 40_000, ",]}")
    text_mb = bad.stat().st_size / 2**20
    code_g, rss_g, _, err_g = _report(good, tmp_path, pure)
    code_b, rss_b, _, err_b = _report(bad, tmp_path, pure)
    assert code_g == 0, err_g
    assert code_b == 2 and "trailing comma" in err_b and len(err_b.strip().splitlines()) == 1, err_b
    assert rss_b <= (rss_g * 1.1 if pure else rss_g + 2 * text_mb), (rss_b, rss_g, text_mb)


def _cli(args, tmp_path) -> tuple[int, float, str]:
    code, rss, _, err = _run(args, tmp_path)
    return code, rss, err


def test_render_of_a_saved_analysis_is_bounded_by_what_traceana_writes(tmp_path):
    """A saved analysis whose 100 findings each list 100,000 op ids (160 KB gzip'd, 66 MB of
    JSON): the findings keep their first saved.MAX_FINDING_OPS ids as they are decoded (before:
    10^7 strings, decoded and then copied through JSON again, 1.66 GB); the page is the same."""
    import gzip as gz

    trace = tmp_path / "t.json"
    trace.write_bytes(_trace_text())
    saved = tmp_path / "a.json"
    code, _, err = _cli(["report", str(trace), "-o", str(saved), "-q"], tmp_path)
    assert code == 0, err
    doc = json.loads(saved.read_text())
    ids = [o["id"] for o in doc["ops"]]
    doc["findings"] = [dict(doc["findings"][0] if doc["findings"] else {"kind": "x", "title": "t", "text": "t"},
                            ops=[ids[i % len(ids)]] * 100_000) for i in range(100)]
    big = tmp_path / "big.json.gz"
    big.write_bytes(gz.compress(json.dumps(doc).encode(), 6))
    code, rss, err = _cli(["render", str(big), "-o", str(tmp_path / "big.html"), "-q"], tmp_path)
    assert code == 0, err
    assert rss < 400, rss  # the 66 MB text and a finding's ids at a time, not 10^7 strings twice


def test_diff_does_not_keep_a_trace_text_alive_while_analysing(tmp_path, monkeypatch):
    """`diff A A` reads each side whole to see whether it is a saved analysis; a trace's text is
    dropped before the trace is analysed (before: kept alive by the caller meanwhile, so `diff`
    of a 790 MB trace took 1.5 GB vs 0.7 GB for `report`). Checked where analyze is called:
    no local of the caller holds the text; and api.analyze likewise."""
    import traceana.analysis as analysis_mod
    from traceana import api
    from traceana.cli import diff as diff_cli

    path = tmp_path / "a.json"
    path.write_bytes(_trace_text())
    size = path.stat().st_size
    real = analysis_mod.analyze
    calls = []

    def watched(p, *args, **kwargs):
        held = [k for k, v in sys._getframe(1).f_locals.items() if isinstance(v, (bytes, bytearray)) and len(v) >= size]
        calls.append(held)
        return real(p, *args, **kwargs)

    monkeypatch.setattr(analysis_mod, "analyze", watched)
    assert diff_cli._one(str(path))["ops"]
    assert api.analyze(str(path)).raw["ops"]
    assert calls == [[], []]  # two calls, neither with the text alive in its caller
