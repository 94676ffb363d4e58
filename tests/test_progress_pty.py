"""The progress bar under a real pseudo-terminal: drawn on stderr when it is a terminal and the run
is long enough, never when stderr is a pipe or --quiet is given (CI logs stay clean)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from tests.conftest import REPO, shared_trace

TRACE = "hta/rank0.json.gz"
pytestmark = pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals on this platform")


def _run_on_pty(args: list[str]) -> str:
    """Run traceana with stdin/stdout/stderr on a fresh pseudo-terminal; everything it drew. The bar's
    1 s delay (which keeps short runs clean) is set to 0 so the test does not depend on speed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    env = {**os.environ, "COLUMNS": "100", "TRACEANA_PROGRESS_DELAY": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "traceana", *args], stdin=follower, stdout=follower,
                            stderr=follower, cwd=REPO, env=env, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(leader)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


def test_bar_drawn_on_a_terminal(tmp_path):
    trace = shared_trace(TRACE)
    out = _run_on_pty(["report", trace, "-o", str(tmp_path / "r.html")])
    # the bar: "<file>: <bar> n/7 stages [elapsed], <stage>", redrawn in place with carriage returns
    assert "rank0.json.gz: " in out and "/7 stages" in out and "\r" in out, out[-2000:]
    assert any(stage in out for stage in ("link", "cost", "diagnose", "render"))
    assert "report written to" in out  # the summary follows the bar



def test_no_bar_when_quiet_or_piped(tmp_path):
    trace = shared_trace(TRACE)
    quiet = _run_on_pty(["report", trace, "-o", str(tmp_path / "q.html"), "-q"])
    assert "/7 stages" not in quiet
    piped = subprocess.run([sys.executable, "-m", "traceana", "report", trace, "-o", str(tmp_path / "p.html")],
                           capture_output=True, text=True, cwd=REPO, timeout=120,
                           env={**os.environ, "TRACEANA_PROGRESS_DELAY": "0"})
    assert piped.returncode == 0 and "/7 stages" not in piped.stderr and piped.stderr == ""


class _Bar:
    def __init__(self):
        self.postfix, self.n = [], 0

    def set_postfix_str(self, text, refresh=True):
        self.postfix.append(text)

    def update(self, n):
        self.n += n

    def close(self):
        pass


def test_long_load_shows_the_fraction_read():
    """A big file's load says how much of it has been read (traceana.load.stream calls
    `progress(fraction)` per piece, or every 0.1 s while the background scan runs)."""
    from traceana.cli.progress import Progress

    bar = _Bar()
    p = Progress(bar)
    p.fraction(0.5)  # before any stage: nothing to say yet
    p.stage("read")
    p.stage("decode")
    p.fraction(0.15)
    p.fraction(0.4321)
    p.stage("columns")
    assert bar.postfix == ["read", "decode", "decode 15%", "decode 43%", "columns"] and bar.n == 2
