"""No thread outlives its command (issue 28): the reading started ahead of the load
(traceana.load.prefetch) is stopped and joined on every way out, success or error.

Before: every `traceana report` that failed after starting its read (a refused output name, a bad
option) left its scan thread blocked on the piece queue for the rest of the process; the next
command's start closed the queue under it. In the full test suite 10-15 such threads piled up."""

from __future__ import annotations

import gzip
import json
import threading

import pytest

from tests import synth as s
from tests.conftest import SAMPLES
from traceana.analysis import analyze
from traceana.cli import main
from traceana.load import prefetch

T4 = str(SAMPLES / "t4_seed_pow_mul.json")
MLP = str(SAMPLES / "cpu_mlp_train.json.gz")


@pytest.fixture(params=["c", "python"])
def loader(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setenv("TRACEANA_PURE_PYTHON", "1")
    return request.param


def _threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate())


def _same_threads(before: list[str]) -> None:
    assert threading.active_count() == len(before), (before, _threads())
    assert _threads() == before


def test_commands_leave_no_thread(tmp_path, capsys, loader):
    before = _threads()
    assert main(["report", T4, "-o", str(tmp_path / "r.md"), "-q"]) == 0
    _same_threads(before)
    assert main(["report", MLP, "-o", str(tmp_path / "m.json"), "-q"]) == 0
    _same_threads(before)
    analyze(T4)
    _same_threads(before)
    assert main(["diff", T4, T4, "-o", str(tmp_path / "d.md"), "-q"]) == 0
    _same_threads(before)
    assert main(["annotate", T4, "-o", str(tmp_path / "a.json.gz"), "-q"]) == 0
    _same_threads(before)


def test_error_paths_leave_no_thread(tmp_path, capsys, loader):
    """Each way a command fails after its read started: a refused output name (20 times over: each
    used to leave a scan thread blocked for good), a missing folder, a bad option, a file that is
    not JSON, a truncated gzip (the producer fails), an annotate output it will not overwrite."""
    before = _threads()
    for _ in range(20):
        assert main(["report", T4, "-o", str(tmp_path / "r.txt")]) == 2  # unknown extension
    _same_threads(before)
    assert main(["report", T4, "-o", str(tmp_path / "nodir" / "r.html")]) == 2
    assert main(["report", T4, "--bandwidth-gbps", "-1", "-o", str(tmp_path / "r.md")]) == 2
    assert main(["report", str(tmp_path / "missing.json"), "-o", str(tmp_path / "r.md")]) == 2
    _same_threads(before)
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": ')
    assert main(["report", str(bad), "-o", str(tmp_path / "b.md"), "-q"]) == 2
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(json.dumps(s.trace([s.kernel("k", 10, 5, 1)] * 2000)).encode())[:-200])
    assert main(["report", str(cut), "-o", str(tmp_path / "c.md"), "-q"]) == 2
    _same_threads(before)
    mine = tmp_path / "mine.json"
    mine.write_text("{}")
    assert main(["annotate", T4, "-o", str(mine)]) == 2  # a file traceana did not write
    assert main(["diff", T4, str(bad), "-o", str(tmp_path / "d.md")]) == 2
    _same_threads(before)
    assert "was not written by traceana" in capsys.readouterr().err


def test_an_unfinished_iteration_stops_its_producer(tmp_path, monkeypatch):
    """Pieces read a piece at a time; the consumer takes one and walks away: closing the generator
    (as its collection does) stops the producer, which ends instead of waiting on a full queue."""
    monkeypatch.setattr(prefetch, "PIECE", 1 << 10)
    monkeypatch.setattr(prefetch, "DEPTH", 2)
    p = tmp_path / "t.json"
    p.write_text(json.dumps(s.trace([s.kernel(f"k{i}", 10 + i, 5, i) for i in range(2000)])))
    before = _threads()
    pieces = prefetch.Pieces(str(p), p.stat())
    it = iter(pieces)
    assert len(next(it)) >= 1 << 10
    it.close()
    pieces._thread.join(5)
    assert not pieces._thread.is_alive() and not pieces.whole
    _same_threads(before)
    # and close() alone (nothing iterated) ends the producer too, waiting for it
    pieces = prefetch.Pieces(str(p), p.stat())
    pieces.close()
    _same_threads(before)


def test_a_started_read_is_stopped_by_discard(tmp_path, loader):
    """prefetch.start, then the command fails before it loads: discard (which the command line runs
    whatever the command did) stops and joins the reading, whichever way it was started."""
    before = _threads()
    for _ in range(5):
        prefetch.start(MLP)
    prefetch.discard()
    assert not prefetch._streams and not prefetch._jobs
    _same_threads(before)


def test_pieces_inflated_inline_until_the_main_thread_waits(tmp_path, monkeypatch):
    """With inline_until, the consumer inflates the pieces itself (no second reading thread while the main
    thread imports); once the event is set, the producer thread takes over the rest. The text is the same
    either way, every piece in order; an iteration left early or a close stops whichever is inflating."""
    monkeypatch.setattr(prefetch, "PIECE", 1 << 10)
    monkeypatch.setattr(prefetch, "DEPTH", 2)
    p = tmp_path / "t.json.gz"
    text = json.dumps(s.trace([s.kernel(f"k{i}", 10 + i, 5, i) for i in range(2000)])).encode()
    p.write_bytes(gzip.compress(text))
    before = _threads()
    whole = b"".join(prefetch.Pieces(str(p), p.stat()))  # the threaded way, for reference
    assert whole == text
    go = threading.Event()
    pieces = prefetch.Pieces(str(p), p.stat(), inline_until=go)
    got = []
    for k, piece in enumerate(pieces):
        got.append(piece)
        if k < 5:  # the first pieces: inflated by this thread, no producer yet
            assert pieces._thread.ident is None and _threads() == before
        if k == 5:
            go.set()  # "the main thread waits": the producer inflates the rest
    assert pieces._thread.ident is not None and pieces.whole and pieces.error is None
    assert b"".join(got) == text and len(got) > 10  # ~100 KB of text in 1 KB pieces
    pieces.close()
    _same_threads(before)
    # left after two inline pieces: stopped, the file closed, no thread ever started
    pieces = prefetch.Pieces(str(p), p.stat(), inline_until=threading.Event())
    it = iter(pieces)
    next(it), next(it)
    it.close()
    assert pieces._thread.ident is None and not pieces.whole
    pieces.close()
    _same_threads(before)


def test_inflated_parts_are_pieces_as_they_come(tmp_path, monkeypatch):
    """A gzip file's inflated parts (up to PIECE each, the rest of each compressed read smaller) are handed
    over as they are from a quarter piece on, never copied into a fuller piece; only parts below a quarter
    piece are joined (up to a quarter piece)."""
    monkeypatch.setattr(prefetch, "PIECE", 1 << 14)
    monkeypatch.setattr(prefetch, "_READ", 1 << 10)
    p = tmp_path / "t.json.gz"
    text = json.dumps(s.trace([s.kernel(f"k{i}", 10 + i, 5, i) for i in range(3000)])).encode()
    p.write_bytes(gzip.compress(text))
    with open(p, "rb") as fh:
        parts = list(prefetch._inflated(fh, prefetch._inflater()))  # what inflating gives, before the pieces
    got = list(prefetch.Pieces(str(p), p.stat()))
    assert b"".join(got) == text
    big = [x for x in parts if len(x) >= 4096]  # PIECE / 4 = 16384 / 4
    assert len(big) >= 10 and max(len(x) for x in parts) == 16384  # ~17x inflation of 1 KB reads
    # walking both in order: each piece is one big part, or consecutive small parts joined (under half a piece)
    k = 0
    for piece in got:
        if len(parts[k]) >= 4096:
            assert piece == parts[k]
            k += 1
            continue
        n = 0
        while k < len(parts) and len(parts[k]) < 4096 and n < len(piece):
            n += len(parts[k])
            k += 1
        assert n == len(piece) < 8192
    assert k == len(parts) and len(got) >= len(big)
